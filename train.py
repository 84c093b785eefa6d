"""
Train the standard transformer and the paper's variants, side by side.

  python train.py                          # the main job: every variant on the headline tasks
  python train.py configs/arithmetic_cpu.py --attn=mixing  # a preset, with overrides
  python train.py --task=dyck_10,induction_16 --attn=all --seeds=3
  torchrun --standalone --nproc_per_node=8 train.py configs/lm_paper.py

A config file is Python and runs as code, like any script: use only files you trust. --key=value
values are Python literals (never evaluated) of the default's type; a bare --flag turns a bool
option on.
"""
import hashlib
import inspect
import json
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import NamedTuple

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (ConfigError, Interrupted, OneOf, Stop, TrainingError, check_writable, cli,
                    configure, defaults_of, fingerprint, format_time, load_checkpoint, load_weights,
                    lock_folder, non_negative, peak_flops, positive, rule_that, save_checkpoint,
                    setup, split_list, teardown, unit_interval, write_atomic)
from data import chance_metrics, eval_metrics, make_task
from mixit import (ATTNS, FREEZES, LETTERS, MixiT, MixiTConfig, flat_args, mixit_config,
                   param_groups)
from report import describe_model, write_report

# -----------------------------------------------------------------------------
# default config values: the main job, every variant on the paper's headline claims. MixiT
# matches the standard transformer on arithmetic (addition_3) and memorization (memorize_32) with
# many heads, and fails retrieval (retrieval_6), where Frozen-QK succeeds through an induction head
# (induction_score).
# I/O
out_dir = "out"
eval_interval = 250
log_interval = 250
# minutes: the latest checkpoint (ckpt.pt) is also written this often between evals (0: at evals)
checkpoint_interval = 10.0
# 'scratch' or 'resume' (from out_dir/ckpt.pt, the latest; best.pt holds the lowest val_loss)
init_from = "scratch"
# task
# a comma list of tasks (data.py), or corpora prepared by prepare.py
task = "addition_3,memorize_32,retrieval_6"
data_dir = "data"  # where prepare.py put the corpora
# corpora: the split behind val_* ('test' for language modeling: the whole stream)
eval_split = "val"
# language modeling: packed windows of the token stream, or lines: each WikiText line alone (paper)
lm_rows = "packed"
# language modeling: batches of the fixed validation sample
eval_iters = 20
# model init, frozen weights, mixing matrices and the data stream
seed = 0
# run seeds seed .. seed+seeds-1 and report mean ± std
seeds = 1
# model
# softmax | frozen_qk | mixing | learned_mixing | a letter a layer (mmsm); a list; all: the first 3
attn = "all"
# mixit | standard | auto: MixiT's (residual scaling, shaped MLP, multipliers, wpe) if mixing
parametrization = "auto"
# MixiT's parametrization with some parts standard: residual, activation, multipliers, positions
standard_parts = ""
freeze = ""  # '' | mlp | blocks, or a comma list
# when frozen parts start training: never, a step (2000) or a share of max_iters (50%); a list
unfreeze_at = "never"
n_layer = 2
n_head = 4
# attn=mixing's head counts, a list ('': n_head): MixiT needs many (configs/heads_cpu.py)
mixing_heads = "64"
n_embd = 128
block_size = 0  # 0: the task's sequence length
# MixiT residual scaling s (the reference LM trainer uses 0.5)
skip = math.sqrt(0.5)
# MixiT shaped activation slope 1 + cminus/sqrt(d)
cminus = -1.0
# the reference code's init of every trained linear weight
init_std = 0.02
# frozen_qk's frozen W_Q, W_K: paper N(0, 1/n_embd) | reference N(0, init_std^2)
qk_init = "paper"
# MixiT's multipliers sqrt(base_width / fan_in); 0: the reference's, 512 (1 for classifiers)
base_width = 0.0
# MixiT: the noise std's lowest value, 0: 1/sqrt(T d_h), rising with heads; fixed: the heads sweep
sigma_min = 0.0
# MixiT's head 1 beside the sink head 0: "" random (the paper), mean (prefix mean), previous (token)
fixed_head = ""
base_ffn = 1.0
# > 0: every model's residual h + (base_depth/n_layer)^alpha f(h), MixiT's A without its I
depth_alpha = 0.0
base_depth = 4.0
# classifiers: mean of the real tokens | last (the last real token, as the reference)
pool = "mean"
# classifiers: masked out of attention | attended (as the reference, their embedding held at 0)
pads = "masked"
# non-causal MixiT: rows centred on their mean | reference (row sum / (i+1): rows off 1)
centring = "mean"
# optimizer: AdamW, linear warmup then cosine decay to min_lr
batch_size = 64  # sequences per micro-batch
# micro-batches per optimizer step, over all processes together
gradient_accumulation_steps = 1
max_iters = 1000
learning_rate = 1e-3
min_lr = 0.0
warmup_iters = 50
lr_decay_iters = 0  # 0: max_iters
weight_decay = 1e-3
beta1 = 0.9
beta2 = 0.999
grad_clip = 1.0  # 0 disables clipping
# system
# auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps
device = "auto"
# auto (bfloat16 on a CUDA GPU that has it, else float32), float32, bfloat16 (no float16: overflow)
dtype = "auto"
compile = "auto"  # auto (on for CUDA), True, False
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
RULES = {"init_from": OneOf(("scratch", "resume")), "dtype": OneOf(("auto", "float32", "bfloat16")),
         "lm_rows": OneOf(("packed", "lines")), "compile": OneOf(("auto", True, False)),
         "beta1": unit_interval, "beta2": unit_interval,
         **dict.fromkeys(("batch_size", "gradient_accumulation_steps", "max_iters", "eval_interval",
                          "log_interval", "eval_iters", "seeds", "learning_rate", "init_std",
                          "base_ffn", "base_depth"), positive),
         **dict.fromkeys(("block_size", "warmup_iters", "lr_decay_iters", "min_lr", "weight_decay",
                          "grad_clip", "base_width", "depth_alpha", "sigma_min",
                          "checkpoint_interval"), non_negative)}
# the model's fields, the study's among them, at their defaults
ARCH_DEFAULTS = flat_args(asdict(MixiTConfig()))
PAPER_ATTNS = ATTNS[:3]  # attn=all: the paper's three variants
# the comma-list options' items
LIST_RULES = {
    "attn": rule_that(lambda a: a in ATTNS or a and set(a) <= set(LETTERS),
                      f"valid: {', '.join(ATTNS)}, all, or one letter per layer "
                      f"(s softmax, f frozen_qk, m mixing, l learned_mixing)"),
    "freeze": OneOf(FREEZES),
    "mixing_heads": rule_that(lambda h: h.isdigit() and int(h) > 0, "valid: integers > 0"),
    "unfreeze_at": rule_that(lambda u: u == "never" or u.isdigit()
                             or u[-1:] == "%" and u[:-1].isdigit() and int(u[:-1]) <= 100,
                             "valid: never, a step like 2000 or a share like 50% (0-100%)")}
# on a GPU, this thread makes the next step's batches while a step runs (a CPU's cores run the step)
AHEAD = ThreadPoolExecutor(1)


@dataclass
class RunState:
    """A run's counters, which its checkpoints save (these keys, in this order): loss_sum and
    loss_tokens since the last evaluation, the others since step 0."""
    iter_num: int = 0
    # the loss summed over every process's scored tokens (while training, each sums its own on the
    # device)
    loss_sum: float = 0.0
    loss_tokens: int = 0
    tokens: int = 0
    samples: int = 0
    flops: float = 0.0
    train_time: float = 0.0


class StepResult(NamedTuple):
    """train_step's result: this process's loss summed over its scored tokens and the gradient norm,
    on the device, and the integers every process summed during the step (agreed), its scored tokens
    first."""
    loss_sum: torch.Tensor
    grad_norm: torch.Tensor
    agreed: list


class StepOutcome(NamedTuple):
    """A step as train_run's loop reads it: this process's loss sum (on the device), and what the
    processes agreed on while it ran: its scored tokens, how many found the latest checkpoint due
    (the master's clock), and the stop signal one received (0 if none)."""
    loss_sum: torch.Tensor
    scored: int
    checkpoint_due: int
    stop_signal: int


# ----------------------------------------------------------------------------- one training run

def model_config(config, task):
    block = config["block_size"] or task.block_size
    if block < task.block_size:
        raise ConfigError(f"block_size={block} is shorter than the {task.name} sequences "
                          f"({task.block_size} tokens)")
    # the reference's classifier never sets base_width
    base = config["base_width"] or (1.0 if task.n_classes else 512.0)
    # block_size and base_width as worked out above
    options = {k: config[k] for k in ARCH_DEFAULTS if k in config}
    try:
        return mixit_config(dict(options, vocab_size=task.vocab_size, block_size=block,
                                 causal=task.causal, n_classes=task.n_classes, pad_id=task.pad_id,
                                 base_width=base))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def unfreeze_step(config, start=0):
    """The step at which the frozen parts start training, start if that is later (resumed), or None
    for never."""
    when = config["unfreeze_at"]
    if when == "never":
        return None
    if when.endswith("%"):
        return max(start, round(float(when[:-1]) / 100 * config["max_iters"]))
    return max(start, int(when))


def get_lr(it, config):
    """Linear warmup, then cosine decay to min_lr at lr_decay_iters (max_iters when 0)."""
    lr = config["learning_rate"]
    warmup = config["warmup_iters"]
    min_lr = config["min_lr"]
    decay_iters = config["lr_decay_iters"] or config["max_iters"]
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup) / max(1, decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def step_shares(accum, batch_size, env):
    """This process's share of a step as (micro-batch, rows) pairs: the same sequences a step at any
    process count."""
    if accum % env.world_size == 0:
        return [(k, slice(None)) for k in range(env.rank, accum, env.world_size)]
    if batch_size % env.world_size == 0:
        return [(k, slice(env.rank, None, env.world_size)) for k in range(accum)]
    raise ConfigError(f"{env.world_size} processes can share neither "
                      f"gradient_accumulation_steps={accum} nor batch_size={batch_size}; "
                      f"make one of them a multiple of {env.world_size}")


def new_model(config, task, env):
    """The model at init (uncompiled: evaluated and saved) and its optimizer. The fixed random parts
    are checked once to be the same on every process; what unfreezes later waits frozen, learned
    mixing matrices included."""
    mconf = model_config(config, task)
    model = MixiT(mconf, env.device, env.dtype)
    if unfreeze_step(config):
        for name, p in model.named_parameters():
            p.requires_grad_(p.requires_grad and not name.endswith(".mixing"))
    # the frozen weights' digests need a copy to the host: only where processes must agree
    if env.ddp:
        frozen = [hashlib.sha256(p.detach().cpu().numpy().tobytes()).hexdigest()
                  for p in model.parameters() if not p.requires_grad]
        env.check_same([fingerprint(model), frozen],
                       "the fixed random parts (mixing matrices, frozen weights)")
    optimizer = model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                           (config["beta1"], config["beta2"]), env.device_type)
    return mconf, model, optimizer


def load_state(path, mconf, model, optimizer, config, env):
    """Load the checkpoint at path (of this very model and task only) into model and optimizer;
    return its RunState."""
    ckpt = load_checkpoint(path, env.device)
    saved_args = flat_args(ckpt["model_args"])
    diffs = [f"{k}={saved_args.get(k)!r} (this run: {v!r})"
             for k, v in flat_args(asdict(mconf)).items()
             if saved_args.get(k, ARCH_DEFAULTS[k]) != v]
    if ckpt["config"].get("task") != config["task"]:
        diffs.insert(0, f"task={ckpt['config'].get('task')!r} (this run: {config['task']!r})")
    if diffs:
        raise ConfigError(f"{path} holds another model: {'; '.join(diffs)}")
    changed = [f"{k}: {v!r} -> {config[k]!r}" for k, v in ckpt["config"].items()
               if k in config and v != config[k] and k != "init_from"]
    if changed:
        env.print(f"resuming with changed training options: {', '.join(changed)}")
    # its frozen parts had started training
    if len(ckpt.get("optimizer", {}).get("param_groups", ())) > len(optimizer.param_groups):
        unfreeze_parameters(model, optimizer, config["weight_decay"])
    load_weights(ckpt, path, lambda: model, optimizer)
    # each counter of the checkpoint's, as its type (an older checkpoint may lack some: 0)
    return RunState(**{f.name: type(f.default)(ckpt.get(f.name, f.default))
                       for f in fields(RunState)})


def start_run(config, task, env, ckpt_path, metrics_path):
    """A run's model, optimizer, state, eval history (resumed: up to the checkpoint) and chance
    levels (at init)."""
    mconf, model, optimizer = new_model(config, task, env)
    # before a checkpoint is loaded
    chance = chance_metrics(model, task, env, config["batch_size"])
    state = RunState()
    history = []
    resumes = os.path.isfile(ckpt_path) or not config.get("fresh_if_missing")
    if config["init_from"] == "resume" and resumes:
        state = load_state(ckpt_path, mconf, model, optimizer, config, env)
        # its evals up to the checkpoint
        if os.path.isfile(metrics_path):
            history = [m for m in read_metrics(metrics_path, env) if m["iter"] <= state.iter_num]
        env.print(f"resumed {ckpt_path} at iter {state.iter_num}")
    if env.master:
        os.makedirs(config["out_dir"], exist_ok=True)
        write_metrics(metrics_path, history)
    env.print(f"[{config['task']} | {run_label(config)} | seed {config['seed']}] "
              f"{describe_model(mconf)}; "
              f"{model.get_num_params() / 1e6:.2f}M non-embedding parameters, "
              f"{model.get_num_params(trainable=True) / 1e6:.2f}M trainable; "
              f"out_dir {config['out_dir']}")
    return mconf, model, optimizer, state, history, chance


def write_metrics(path, history):
    """metrics.jsonl: one JSON object a line, each eval's."""
    text = "".join(json.dumps(m) + "\n" for m in history)
    write_atomic(path, lambda f: f.write(text.encode()))


def read_metrics(path, env):
    """metrics.jsonl's evals; a last line cut off (by a kill mid-write: a JSON object ends in }) is
    dropped, said so. Any other line that is no JSON ends the run in one line naming it."""
    with open(path) as f:
        lines = f.read().splitlines()
    if lines and not lines[-1].endswith("}"):
        env.print(f"{path}: dropped its last line, cut off mid-write: {lines.pop()[:60]}")
    history = []
    for number, line in enumerate(lines, 1):
        try:
            history.append(json.loads(line))
        except ValueError:
            raise ConfigError(f"{path}, line {number}, is not JSON: mend or delete that line, then "
                              f"resume (no file was changed)") from None
    return history


def unfreeze_parameters(model, optimizer, weight_decay):
    """Every frozen parameter starts training (fresh optimizer state, its kind's weight decay);
    returns how many."""
    params = [p for p in model.parameters() if not p.requires_grad]
    for p in params:
        p.requires_grad_(True)
    for group in param_groups(params, weight_decay):
        if group["params"]:
            optimizer.add_param_group(group)
    return sum(p.numel() for p in params)


def wrap(model, config, env):
    """The model that trains: compiled (afresh: each run of a multi-run job compiles, whatever
    dynamo's recompile limit) and, under torchrun, in DDP, which syncs no buffers: the fixed ones
    are identical by construction."""
    train_model = model
    if config["compile"] is True or (config["compile"] == "auto" and env.device_type == "cuda"):
        torch._dynamo.reset()
        train_model = torch.compile(model, dynamic=False)
    if env.ddp:
        # torch < 2.13 names it broadcast_buffers, which also skips the buffers' first broadcast
        no_sync = "broadcast_buffers"
        if "forward_sync_buffers" in inspect.signature(DDP).parameters:
            no_sync = "forward_sync_buffers"
        device_ids = [env.device.index] if env.device_type == "cuda" else None
        train_model = DDP(train_model, device_ids=device_ids, **{no_sync: False})
    return train_model


def step_batches(task, config, shares, iter_num):
    """This process's micro-batches (x, y) of a step, on the host: micro-batch k is the same at any
    process count."""
    return [[t[rows] for t in task.get_batch("train", config["batch_size"],
                                             seed=[config["seed"], iter_num, micro])]
            for micro, rows in shares]


def train_step(train_model, batches, counts, agreement, optimizer, params, grad_clip, env):
    """One optimizer step over this process's micro-batches (x, y) on the device, counts their
    scored tokens: each share's loss summed, its gradient scaled by world_size / the step's count
    (read from agreement while the backward ran; DDP averages the processes'): the gradient of the
    mean over every scored token of the step. A step that scores none leaves the weights and
    optimizer as they were."""
    step_loss = torch.zeros((), device=env.device)
    for i, ((x, y), count) in enumerate(zip(batches, counts)):
        if env.ddp:
            train_model.require_backward_grad_sync = i == len(batches) - 1
        # the mean over this share's scored tokens, 0 where it has none
        with env.autocast():
            _, loss = train_model(x, y)
        loss = loss * count
        loss.backward()
        step_loss += loss.detach()
    agreed = agreement.wait()
    norm = torch.zeros((), device=env.device)
    # the step's scored tokens, over every process
    if agreed[0]:
        grads = [p.grad for p in params if p.grad is not None]
        torch._foreach_mul_(grads, env.world_size / agreed[0])
        if grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(step_loss, norm, agreed)


def checkpoint_kept(ckpt_path, which):
    """What a run that fails leaves behind, said in its error line."""
    if os.path.isfile(ckpt_path):
        return f"the {which} checkpoint {ckpt_path} is untouched"
    return "no checkpoint written"


def out_of_memory(config, ckpt_path):
    batch = config["batch_size"]
    accum = config["gradient_accumulation_steps"]
    hint = "a smaller model"
    if batch > 1:
        hint = f"--batch_size={batch // 2} --gradient_accumulation_steps={2 * accum}"
    return TrainingError(f"out of memory at batch_size={batch}: try {hint} (the same "
                         f"{accum * batch} sequences a step); {checkpoint_kept(ckpt_path, 'last')}")


def progress(iter_num, config, loss, lr, dt, tokens_per_iter, flops_per_token, peak, env,
             scored=None):
    """A step's log line: loss, step size, time, throughput (scored: a language model's share
    scored), one MFU."""
    tok_s = tokens_per_iter / dt
    line = (f"iter {iter_num}/{config['max_iters']}: loss {loss:.4f}, lr {lr:.2e}, "
            f"{dt * 1000:.1f} ms/iter, {tok_s:,.0f} tok/s")
    per_process = ""
    if env.ddp:
        line += f" over {env.world_size} processes"
        per_process = " per process"
    if scored is not None:
        line += f" ({scored:.0%} scored)"
    mfu = "n/a"
    if peak:
        mfu = f"{flops_per_token * tok_s / env.world_size / peak * 100:.1f}%"
    line += f", mfu {mfu}{per_process}, "
    if env.device_type == "cuda":
        line += f"peak {torch.cuda.max_memory_allocated(env.device) / 2 ** 30:.2f} GiB, "
    return line + f"eta {format_time((config['max_iters'] - iter_num) * dt)}"


class Run:
    """One run's training, taken step by step by train_run's loop: the model and optimizer, the
    counters (state), the evaluations (history), and what the steps keep on the device and the
    clock."""

    def __init__(self, config, task, env):
        self.config = config
        self.task = task
        self.env = env
        self.ckpt_path = os.path.join(config["out_dir"], "ckpt.pt")
        self.metrics_path = os.path.join(config["out_dir"], "metrics.jsonl")
        self.mconf, self.model, self.optimizer, self.state, self.history, self.chance = start_run(
            config, task, env, self.ckpt_path, self.metrics_path)
        self.unfreeze_at = unfreeze_step(config, self.state.iter_num)
        self.shares = step_shares(config["gradient_accumulation_steps"], config["batch_size"], env)
        # sequences a step over all processes, and their positions
        self.step_rows = config["batch_size"] * config["gradient_accumulation_steps"]
        self.tokens_per_iter = self.step_rows * task.block_size
        # a language model trains on the tokens it scores (predicts), a classifier on every position
        self.counts_scored = getattr(task, "counts_scored", False)
        self.peak = peak_flops(env.device, env.dtype)
        # this process's loss summed over its scored tokens since the last evaluation, on the device
        # (no sync): the processes' sums add up, so the saved total is the master's alone
        self.loss_sum = torch.tensor(self.state.loss_sum * env.master, device=env.device)
        # the first step with a non-finite loss or gradient norm, kept on the device too
        self.first_bad = torch.tensor(-1, device=env.device)
        self.wrap_model()
        # on a GPU, the future of the next step's batches
        self.batches_ahead = None
        self.saved_at = time.time()
        # train_time grows by the time since timed_from: the steps', not the evaluations'
        self.timed_from = time.time()
        self.start_log_window()

    def wrap_model(self):
        """The model that trains (wrapped again when parts unfreeze: DDP hooks the parameters that
        train as it is built), what trains (clipped together) and its training FLOPs per token."""
        self.train_model = wrap(self.model, self.config, self.env)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.flops_per_token = self.model.flops_per_token(self.task.block_size)
        # the model's first step (its compilation) is left out of the rate of the line that logs it
        self.warming = True

    def start_log_window(self):
        """The next log line's time and rate count the steps from now."""
        self.log_start = time.time()
        self.log_iters = 0
        self.log_scored = 0

    def check_finite(self):
        """Stop, without writing a checkpoint, if a step had a non-finite loss or gradient norm."""
        step = self.env.agree_max(int(self.first_bad.item()))
        if step >= 0:
            raise TrainingError(f"non-finite loss or gradient norm at iter {step}; stopped, "
                                f"{checkpoint_kept(self.ckpt_path, 'last good')}")

    def summed(self, tensor):
        """A device tensor summed over every process, read on the host."""
        return self.env.all_reduce(tensor.clone()).item()

    def unfreeze(self):
        """The frozen parts start training, in the model wrapped again."""
        count = unfreeze_parameters(self.model, self.optimizer, self.config["weight_decay"])
        if count:
            before = self.flops_per_token
            self.wrap_model()
            self.env.print(f"iter {self.state.iter_num}: unfroze {count:,} parameters; "
                           f"training FLOPs per token {before / 1e6:.3f}M -> "
                           f"{self.flops_per_token / 1e6:.3f}M")

    def step(self, stop):
        """One optimizer step at its iteration's learning rate, added to the counters."""
        config = self.config
        env = self.env
        state = self.state
        self.lr = get_lr(state.iter_num, config)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        # the step's batches, on the host: on a GPU, a thread made them while the step before ran
        ahead = self.batches_ahead
        batch_args = (self.task, config, self.shares)
        host_batches = ahead.result() if ahead else step_batches(*batch_args, state.iter_num)
        if env.device_type == "cuda":
            self.batches_ahead = AHEAD.submit(step_batches, *batch_args, state.iter_num + 1)
        counts = [int((y >= 0).sum()) for _, y in host_batches]
        # the master's clock says when the latest checkpoint is due
        interval = config["checkpoint_interval"] * 60
        checkpoint_due = env.master and 0 < interval < time.time() - self.saved_at
        # summed over the processes while the step runs, read after its backward: the step's scored
        # tokens (first, as train_step reads them), the checkpoint's flag and the stop signals'
        signum = stop.requested()
        stop_flags = [signum == s for s in Stop.SIGNALS]
        agreement = env.agree([sum(counts), checkpoint_due] + stop_flags)
        batches = [env.to_device(x, y) for x, y in host_batches]
        try:
            result = train_step(self.train_model, batches, counts, agreement, self.optimizer,
                                self.params, config["grad_clip"], env)
        except torch.OutOfMemoryError:
            raise out_of_memory(config, self.ckpt_path) from None
        scored, checkpoint_votes, *stop_votes = result.agreed
        state.iter_num += 1
        finite = result.loss_sum.isfinite() & result.grad_norm.isfinite()
        self.first_bad = torch.where((self.first_bad < 0) & ~finite, state.iter_num, self.first_bad)
        self.loss_sum += result.loss_sum
        trained = scored if self.counts_scored else self.tokens_per_iter
        state.tokens += trained
        state.flops += self.flops_per_token * trained
        state.samples += self.step_rows
        state.loss_tokens += scored
        self.log_scored += scored
        self.log_iters += 1
        stop_signal = next((s for s, n in zip(Stop.SIGNALS, stop_votes) if n), 0)
        return StepOutcome(result.loss_sum, scored, checkpoint_votes, stop_signal)

    def log(self, step):
        """The step's log line (the one host sync of a logging step): its loss is the mean over its
        scored tokens, the time and throughput are those since the last line."""
        self.check_finite()
        dt = (time.time() - self.log_start) / self.log_iters
        loss = self.summed(step.loss_sum) / (step.scored or math.nan)
        share = None
        if self.counts_scored:
            share = self.log_scored / self.log_iters / self.tokens_per_iter
        line = progress(self.state.iter_num, self.config, loss, self.lr, dt, self.tokens_per_iter,
                        self.flops_per_token, self.peak, self.env, share)
        self.env.print(line + (", warm-up step included" if self.warming else ""))

    def evaluate(self):
        """Evaluate, save the latest checkpoint (and the best, where val_loss is the lowest yet) and
        log."""
        state = self.state
        # the loss read above waited for the device: the steps are done (the evaluation's own time
        # is left out: the clock restarts after it)
        self.clock_steps()
        train_loss = math.nan
        if state.loss_tokens:
            train_loss = self.summed(self.loss_sum) / state.loss_tokens
        self.loss_sum.zero_()
        state.loss_tokens = 0
        evals = eval_metrics(self.model, self.task, self.config["batch_size"], self.env,
                             self.chance)
        scores = {"iter": state.iter_num, "train_loss": train_loss, **evals}
        metrics = {**scores, "lr": self.lr, "tokens": state.tokens, "samples": state.samples,
                   "flops": state.flops, "time": round(state.train_time, 2)}
        # resumed, the history holds the evaluations up to the checkpoint
        best = min([m["val_loss"] for m in self.history], default=math.inf)
        self.history.append(metrics)
        self.save(metrics["val_loss"] < best)
        shown = [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in scores.items()
                 if not isinstance(v, list)]
        self.env.print("eval " + ", ".join(shown))
        self.start_log_window()
        self.timed_from = time.time()

    def save(self, best=False):
        """metrics.jsonl, the best checkpoint, then the latest: a kill between them resumes from the
        latest, which redoes the evaluations after it. A collective (the loss sum is all-reduced)
        that never writes a poisoned checkpoint, and that every process leaves together, after the
        master's write (torchrun kills the rest 30 s after the first exits)."""
        self.check_finite()
        state = asdict(replace(self.state, loss_sum=self.summed(self.loss_sum)))
        failure = None
        if self.env.master:
            paths = [os.path.join(self.config["out_dir"], "best.pt")] * best + [self.ckpt_path]
            try:
                write_metrics(self.metrics_path, self.history)
                save_checkpoint(paths, self.model, self.optimizer, self.mconf, self.config, state)
            except TrainingError as e:
                failure = e
        if not self.env.from_master(failure is None):
            raise failure or TrainingError(f"rank {self.env.rank}: stopped as rank 0 failed to "
                                           f"write the checkpoint")
        self.saved_at = time.time()

    def clock_steps(self):
        """Add the steps' time since timed_from to train_time."""
        self.state.train_time += time.time() - self.timed_from
        self.timed_from = time.time()


def train_run(config, task, env, stop):
    """Train one (task, attn, freeze, unfreeze, seed) run into config['out_dir']; return its eval
    history."""
    run = Run(config, task, env)
    while run.state.iter_num < config["max_iters"]:
        if run.state.iter_num == run.unfreeze_at:
            run.unfreeze()
        step = run.step(stop)
        iter_num = run.state.iter_num
        last = iter_num == config["max_iters"]
        logs = iter_num % config["log_interval"] == 0 or last
        if logs:
            run.log(step)
        # a model's first step (compiling) is left out of the next line's rate
        if logs or run.warming:
            run.start_log_window()
            run.warming = False
        evaluates = iter_num % config["eval_interval"] == 0 or last
        if evaluates:
            run.evaluate()
        # the latest checkpoint, on time or to stop (an evaluation has just written one)
        if step.stop_signal or step.checkpoint_due and not evaluates:
            run.clock_steps()
            run.save()
        if step.stop_signal:
            env.print(f"stopped by {signal.Signals(step.stop_signal).name} at iter {iter_num}: "
                      f"wrote {run.ckpt_path}; continue with --init_from=resume")
            raise Interrupted(step.stop_signal)
    return run.history


# ------------------------------------------------------------------------ several runs side by side

def run_label(run):
    label = run["attn"]
    if run["attn"] == "mixing" and run["mixing_heads"]:
        label += f" h={run['n_head']}"
    if run["freeze"]:
        label += f" freeze={run['freeze']}"
    if run["unfreeze_at"] != "never":
        label += f" unfreeze@{run['unfreeze_at']}"
    if run["parametrization"] != "auto":
        label += f" {run['parametrization']}"
    return label


def starts_frozen(attn, freeze):
    """Does a variant hold parts that can unfreeze: frozen W_Q, W_K, MLPs or blocks, or learned
    mixing matrices?"""
    # The model's own reading of attn: one kind a layer.
    kinds = MixiTConfig(attn=attn, n_layer=len(attn)).layer_attn
    return bool(freeze) or "frozen_qk" in kinds or "learned_mixing" in kinds


def list_option(config, key):
    """A comma-list option's items, each checked by its rule."""
    return split_list(config[key], key, LIST_RULES[key])


def plan_runs(config):
    """Every (task, attn and heads, freeze, unfreeze, seed) combination, each with its own out_dir
    when there are several. A schedule without frozen parts would repeat the run that never
    unfreezes: it is left out."""
    tasks = [t.strip() for t in config["task"].split(",")]
    attns = list(PAPER_ATTNS) if config["attn"] == "all" else list_option(config, "attn")
    freezes = list_option(config, "freeze")
    schedules = list_option(config, "unfreeze_at")
    # MixiT's head counts
    heads = [config["n_head"]]
    if config["mixing_heads"]:
        heads = [int(h) for h in list_option(config, "mixing_heads")]
    seeds = range(config["seed"], config["seed"] + config["seeds"])
    runs = [dict(config, task=t, attn=a, n_head=h, freeze=f, unfreeze_at=u, seed=s, seeds=1)
            for t in tasks for a in attns for h in (heads if a == "mixing" else [config["n_head"]])
            for f in freezes for u in schedules for s in seeds
            if u == "never" or starts_frozen(a, f)]
    if not runs:
        raise ConfigError(f"unfreeze_at={config['unfreeze_at']!r}: attn={config['attn']!r} with "
                          f"freeze={config['freeze']!r} has nothing frozen to unfreeze; add never, "
                          f"or freeze=mlp, attn=frozen_qk or learned_mixing")
    for run in runs:
        if len(runs) > 1:
            label = (run_label(run).replace(" h=", "-h").replace(" freeze=", "-freeze_")
                     .replace(" unfreeze@", "-unfreeze_").replace("%", "pct").replace(" ", "-"))
            name = f"{run['task']}-{label}"
            if len(seeds) > 1:
                name += f"-s{run['seed']}"
            run["out_dir"] = os.path.join(config["out_dir"], name)
            # resuming a comparison starts the runs that never began
            run["fresh_if_missing"] = True
    return runs


def build_tasks(runs):
    """The tasks of the runs; every model config and resume checkpoint is checked before anything is
    written."""
    tasks = {}
    for run in runs:
        if run["task"] not in tasks:
            try:
                tasks[run["task"]] = make_task(run["task"], run["block_size"], run["data_dir"],
                                               run["eval_iters"], run["eval_split"], run["lm_rows"])
            except ValueError as e:
                raise ConfigError(str(e)) from None
        run["model"] = describe_model(model_config(run, tasks[run["task"]]))
    ckpts = [os.path.join(run["out_dir"], "ckpt.pt") for run in runs]
    if runs[0]["init_from"] == "resume" and not any(map(os.path.isfile, ckpts)):
        where = " or ".join(ckpts[:2])
        if len(ckpts) > 2:
            where += f" (or {len(ckpts) - 2} more)"
        raise ConfigError(f"--init_from=resume: no checkpoint at {where}")
    return tasks


def keep_earlier_run(runs, out_dir, env):
    """A fresh job never overwrites an earlier one: the earlier job's files (its runs' folders and
    the files in out_dir, but the lock) move to out_dir/previous-N, said so."""
    folders = [run["out_dir"] for run in runs]
    names = ("ckpt.pt", "metrics.jsonl")
    if not any(os.path.isfile(os.path.join(f, name)) for f in folders for name in names):
        return
    number = 1
    while os.path.exists(os.path.join(out_dir, f"previous-{number}")):
        number += 1
    previous = os.path.join(out_dir, f"previous-{number}")
    moved = [entry.path for entry in os.scandir(out_dir)
             if entry.is_file() and entry.name != ".lock"]
    moved += [f for f in folders if f != out_dir and os.path.isdir(f)]
    os.makedirs(previous)
    for path in moved:
        os.replace(path, os.path.join(previous, os.path.basename(path)))
    env.print(f"{out_dir} held an earlier run: moved its files to {previous} (--init_from=resume "
              f"continues a run instead)")


def main(argv):
    config = configure(DEFAULTS, argv, RULES)
    runs = plan_runs(config)
    tasks = build_tasks(runs)
    env = setup(config["device"], config["dtype"])
    stop = Stop()
    try:
        accum = config["gradient_accumulation_steps"]
        rows = config["batch_size"] // env.world_size
        step_shares(accum, config["batch_size"], env)
        # a CPU's thread count (OMP_NUM_THREADS=1 on a CPU other work keeps busy)
        env.print(env.describe())
        # micro-batches split by rows
        if accum % env.world_size and rows < 8:
            env.print(f"each process computes {rows} rows of each of {accum} micro-batches: "
                      f"correct, but slow; --batch_size={accum * config['batch_size']} "
                      f"--gradient_accumulation_steps=1 gives it {accum * rows} at once "
                      f"(as many sequences a step), if memory allows")
        check_writable(config["out_dir"])
        with lock_folder(config["out_dir"], env.master):
            if config["init_from"] == "scratch" and env.master:
                keep_earlier_run(runs, config["out_dir"], env)
            start = time.time()
            histories = [train_run(run, tasks[run["task"]], env, stop) for run in runs]
            if len(runs) > 1:
                write_report(runs, histories, run_label, config["out_dir"], env,
                             time.time() - start)
    finally:
        stop.restore()
        teardown(env)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
