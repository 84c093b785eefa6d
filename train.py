"""
Train the standard transformer and the paper's variants, side by side.

  python train.py                                          # the main job: every variant on the headline tasks
  python train.py configs/arithmetic_cpu.py --attn=mixing  # a preset, with overrides
  python train.py --task=dyck_10,induction_16 --attn=all --seeds=3
  torchrun --standalone --nproc_per_node=8 train.py configs/lm_paper.py

A config file is Python and runs as code, like any script: use only files you trust. --key=value values are
Python literals (never evaluated) of the default's type; a bare --flag turns a bool option on.
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

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (ConfigError, Interrupted, OneOf, Stop, TrainingError, check_writable, cli, configure, defaults_of,
                    fingerprint, format_time, load_checkpoint, load_weights, non_negative, peak_flops, positive,
                    rule_that, save_checkpoint, setup, split_list, teardown, unit_interval, write_atomic)
from data import chance_metrics, eval_metrics, make_task
from mixit import ATTNS, FREEZES, LETTERS, MixiT, MixiTConfig, param_groups
from report import describe_model, write_report

# -----------------------------------------------------------------------------
# default config values: the main job, every variant on the paper's headline claims: MixiT matches the standard
# transformer on arithmetic (addition_3) and memorization (memorize_32) with many heads, and fails retrieval
# (retrieval_6), where Frozen-QK succeeds through an induction head (induction_score)
# I/O
out_dir = "out"
eval_interval = 250
log_interval = 250
checkpoint_interval = 10.0  # minutes: the latest checkpoint (ckpt.pt) also this often between evals (0: at evals only)
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt, the latest; best.pt holds the lowest val_loss)
# task
task = "addition_3,memorize_32,retrieval_6"  # a comma list of tasks (data.py), or corpora prepared by prepare.py
data_dir = "data"  # where prepare.py put the corpora
eval_split = "val"  # corpora: the split behind val_* ('test' for language modeling: the whole stream)
lm_rows = "packed"  # language modeling: packed windows of the token stream, or lines: each WikiText line alone (paper)
eval_iters = 20  # language modeling: batches of the fixed validation sample
seed = 0  # model init, frozen weights, mixing matrices and the data stream
seeds = 1  # run seeds seed .. seed+seeds-1 and report mean ± std
# model
attn = "all"  # softmax | frozen_qk | mixing | learned_mixing | a letter per layer (mmsm); a list; all: the first 3
parametrization = "auto"  # mixit | standard | auto: MixiT's (residual scaling, shaped MLP, multipliers, wpe) if mixing
standard_parts = ""  # MixiT's parametrization with some parts standard: residual, activation, multipliers, positions
freeze = ""  # '' | mlp | blocks, or a comma list
unfreeze_at = "never"  # when frozen parts start training: never, a step (2000) or a share of max_iters (50%); a list
n_layer = 2
n_head = 4
mixing_heads = "64"  # attn=mixing's head counts, a list ('': n_head): MixiT needs many (configs/heads_cpu.py)
n_embd = 128
block_size = 0  # 0: the task's sequence length
skip = math.sqrt(0.5)  # MixiT residual scaling s (the reference LM trainer uses 0.5)
cminus = -1.0  # MixiT shaped activation slope 1 + cminus/sqrt(d)
init_std = 0.02  # the reference code's init of every trained linear weight
qk_init = "paper"  # frozen_qk's frozen W_Q, W_K: paper N(0, 1/n_embd) | reference N(0, init_std^2)
base_width = 0.0  # MixiT's multipliers sqrt(base_width / fan_in); 0: the reference's, 512 (1 for classifiers)
sigma_min = 0.0  # MixiT: the noise std's lowest value, 0: 1/sqrt(T d_h), rising with heads; fixed: the heads sweep
fixed_head = ""  # MixiT's head 1 beside the sink head 0: "" random (the paper), mean (prefix mean), previous (token)
base_ffn = 1.0
depth_alpha = 0.0  # > 0: every model's residual h + (base_depth/n_layer)^alpha f(h), MixiT's A without its I
base_depth = 4.0
pool = "mean"  # classifiers: mean of the real tokens | last (the last real token, as the reference)
pads = "masked"  # classifiers: masked out of attention | attended (as the reference, their embedding held at 0)
centring = "mean"  # non-causal MixiT: rows centred on their mean | reference (row sum / (i+1): rows off 1)
# optimizer: AdamW, linear warmup then cosine decay to min_lr
batch_size = 64  # sequences per micro-batch
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
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
device = "auto"  # auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps
dtype = "auto"  # auto (bfloat16 on a CUDA GPU that has it, else float32), float32, bfloat16 (no float16: overflow)
compile = "auto"  # auto (on for CUDA), True, False
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
RULES = {"init_from": OneOf(("scratch", "resume")), "dtype": OneOf(("auto", "float32", "bfloat16")),
         "lm_rows": OneOf(("packed", "lines")),
         "compile": OneOf(("auto", True, False)), "beta1": unit_interval, "beta2": unit_interval,
         **dict.fromkeys(("batch_size", "gradient_accumulation_steps", "max_iters", "eval_interval", "log_interval",
                          "eval_iters", "seeds", "learning_rate", "init_std", "base_ffn", "base_depth"), positive),
         **dict.fromkeys(("block_size", "warmup_iters", "lr_decay_iters", "min_lr", "weight_decay", "grad_clip",
                          "base_width", "depth_alpha", "sigma_min", "checkpoint_interval"), non_negative)}
ARCH_KEYS = [k for k in MixiTConfig.__dataclass_fields__]
PAPER_ATTNS = ATTNS[:3]  # attn=all: the paper's three variants
LIST_RULES = {  # the comma-list options' items
    "attn": rule_that(lambda a: a in ATTNS or a and set(a) <= set(LETTERS), f"valid: {', '.join(ATTNS)}, all, or one "
                      f"letter per layer (s softmax, f frozen_qk, m mixing, l learned_mixing)"),
    "freeze": OneOf(FREEZES), "mixing_heads": rule_that(lambda h: h.isdigit() and int(h) > 0, "valid: integers > 0"),
    "unfreeze_at": rule_that(lambda u: u == "never" or u.isdigit() or u[-1:] == "%" and u[:-1].isdigit() and
                             int(u[:-1]) <= 100, "valid: never, a step like 2000 or a share like 50% (0-100%)")}
FRESH = {"iter_num": 0, "loss_sum": 0.0, "loss_tokens": 0, "tokens": 0, "samples": 0, "flops": 0.0,
         "train_time": 0.0}  # a run's state at step 0: loss_* since the last eval, the rest since step 0
AHEAD = ThreadPoolExecutor(1)  # on a GPU, makes the next step's batches while a step runs (a CPU's cores run the step)


# ----------------------------------------------------------------------------- one training run

def model_config(config, task):
    block = config["block_size"] or task.block_size
    if block < task.block_size:
        raise ConfigError(f"block_size={block} is shorter than the {task.name} sequences ({task.block_size} tokens)")
    base = config["base_width"] or (1.0 if task.n_classes else 512.0)  # the reference's classifier never sets it
    try:  # a MixiTConfig is validated as it is made
        return MixiTConfig(vocab_size=task.vocab_size, block_size=block, causal=task.causal, n_classes=task.n_classes,
                           pad_id=task.pad_id, base_width=base,
                           **{k: config[k] for k in ARCH_KEYS if k in config and k not in ("block_size", "base_width")})
    except ValueError as e:
        raise ConfigError(str(e)) from None


def unfreeze_step(config, start=0):
    """The step at which the frozen parts start training, start if that is later (resumed), or None for never."""
    when = config["unfreeze_at"]
    if when == "never":
        return None
    return max(start, round(float(when[:-1]) / 100 * config["max_iters"]) if when.endswith("%") else int(when))


def get_lr(it, config):
    """Linear warmup, then cosine decay to min_lr at lr_decay_iters (max_iters when 0)."""
    lr, warmup, min_lr = config["learning_rate"], config["warmup_iters"], config["min_lr"]
    decay_iters = config["lr_decay_iters"] or config["max_iters"]
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup) / max(1, decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def step_shares(accum, batch_size, env):
    """This process's share of a step as (micro-batch, rows) pairs: the same sequences a step at any process count."""
    if accum % env.world_size == 0:
        return [(k, slice(None)) for k in range(env.rank, accum, env.world_size)]
    if batch_size % env.world_size == 0:
        return [(k, slice(env.rank, None, env.world_size)) for k in range(accum)]
    raise ConfigError(f"{env.world_size} processes can share neither gradient_accumulation_steps={accum} nor "
                      f"batch_size={batch_size}; make one of them a multiple of {env.world_size}")


def new_model(config, task, env):
    """The model at init (uncompiled: evaluated and saved) and its optimizer. The fixed random parts are checked once
    to be the same on every process; what unfreezes later waits frozen, learned mixing matrices included."""
    mconf = model_config(config, task)
    model = MixiT(mconf, env.device, env.dtype)
    if unfreeze_step(config):
        for name, p in model.named_parameters():
            p.requires_grad_(p.requires_grad and not name.endswith(".mixing"))
    if env.ddp:  # the frozen weights' digests: a copy to the host, only where processes must agree
        frozen = [hashlib.sha256(p.detach().cpu().numpy().tobytes()).hexdigest() for p in model.parameters()
                  if not p.requires_grad]
        env.check_same([fingerprint(model), frozen], "the fixed random parts (mixing matrices, frozen weights)")
    optimizer = model.configure_optimizers(config["weight_decay"], config["learning_rate"],
                                           (config["beta1"], config["beta2"]), env.device_type)
    return mconf, model, optimizer


def load_state(path, mconf, model, optimizer, config, env):
    """Load the checkpoint at path (of this very model and task only) into model and optimizer; return its state."""
    ckpt = load_checkpoint(path, env.device)
    diffs = [f"{k}={ckpt['model_args'].get(k)!r} (this run: {getattr(mconf, k)!r})" for k in ARCH_KEYS
             if ckpt["model_args"].get(k, getattr(MixiTConfig, k)) != getattr(mconf, k)]
    if ckpt["config"].get("task") != config["task"]:
        diffs.insert(0, f"task={ckpt['config'].get('task')!r} (this run: {config['task']!r})")
    if diffs:
        raise ConfigError(f"{path} holds another model: {'; '.join(diffs)}")
    changed = [f"{k}: {v!r} -> {config[k]!r}" for k, v in ckpt["config"].items()
               if k in config and v != config[k] and k != "init_from"]
    if changed:
        env.print(f"resuming with changed training options: {', '.join(changed)}")
    if len(ckpt.get("optimizer", {}).get("param_groups", ())) > len(optimizer.param_groups):
        unfreeze(model, optimizer, config["weight_decay"])  # its frozen parts had started training
    load_weights(ckpt, path, lambda: model, optimizer)
    return {k: type(v)(ckpt.get(k, v)) for k, v in FRESH.items()}


def start_run(config, task, env, ckpt_path, metrics_path):
    """A run's model, optimizer, state, eval history (resumed: up to the checkpoint) and chance levels (at init)."""
    mconf, model, optimizer = new_model(config, task, env)
    chance = chance_metrics(model, task, env, config["batch_size"])  # before a checkpoint is loaded
    state, history = dict(FRESH), []
    if config["init_from"] == "resume" and (os.path.isfile(ckpt_path) or not config.get("fresh_if_missing")):
        state = load_state(ckpt_path, mconf, model, optimizer, config, env)
        if os.path.isfile(metrics_path):  # its evals up to the checkpoint
            history = [m for m in read_metrics(metrics_path, env) if m["iter"] <= state["iter_num"]]
        env.print(f"resumed {ckpt_path} at iter {state['iter_num']}")
    if env.master:
        os.makedirs(config["out_dir"], exist_ok=True)
        write_atomic(metrics_path, lambda f: f.write("".join(json.dumps(m) + "\n" for m in history).encode()))
    env.print(f"[{config['task']} | {run_label(config)} | seed {config['seed']}] {describe_model(mconf)}; "
              f"{model.get_num_params() / 1e6:.2f}M non-embedding parameters, "
              f"{model.get_num_params(trainable=True) / 1e6:.2f}M trainable; out_dir {config['out_dir']}")
    return mconf, model, optimizer, state, history, chance


def read_metrics(path, env):
    """metrics.jsonl's evals; a last line cut off (by a kill mid-write: a JSON object ends in }) is dropped, said so."""
    with open(path) as f:
        lines = f.read().splitlines()
    if lines and not lines[-1].endswith("}"):
        env.print(f"{path}: dropped its last line, cut off mid-write: {lines.pop()[:60]}")
    return [json.loads(line) for line in lines]


def unfreeze(model, optimizer, weight_decay):
    """Every frozen parameter starts training (fresh optimizer state, its kind's weight decay); returns how many."""
    params = [p for p in model.parameters() if not p.requires_grad]
    for p in params:
        p.requires_grad_(True)
    for group in param_groups(params, weight_decay):
        if group["params"]:
            optimizer.add_param_group(group)
    return sum(p.numel() for p in params)


def wrap(model, config, env):
    """The model that trains: compiled (afresh: each run of a multi-run job compiles, whatever dynamo's recompile
    limit) and, under torchrun, in DDP, which syncs no buffers: the fixed ones are identical by construction."""
    train_model = model
    if config["compile"] is True or (config["compile"] == "auto" and env.device_type == "cuda"):
        torch._dynamo.reset()
        train_model = torch.compile(model, dynamic=False)
    if env.ddp:
        no_sync = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP).parameters else \
            "broadcast_buffers"  # torch < 2.13's name, which also skips the buffers' broadcast at construction
        train_model = DDP(train_model, device_ids=[env.device.index] if env.device_type == "cuda" else None,
                          **{no_sync: False})
    return train_model


def step_batches(task, config, shares, iter_num):
    """This process's micro-batches (x, y) of a step, on the host: micro-batch k is the same at any process count."""
    return [[t[rows] for t in task.get_batch("train", config["batch_size"], seed=[config["seed"], iter_num, micro])]
            for micro, rows in shares]


def train_step(train_model, batches, counts, agreement, optimizer, params, grad_clip, env):
    """One optimizer step over this process's micro-batches (x, y) on the device, counts their scored tokens: each
    share's loss summed, its gradient scaled by world_size / the step's count (read from agreement while the backward
    ran; DDP averages the processes'): the gradient of the mean over every scored token of the step. A step that scores
    none leaves the weights and optimizer as they were. Returns this process's loss sum, the gradient norm, agreed."""
    step_loss = torch.zeros((), device=env.device)
    for i, ((x, y), count) in enumerate(zip(batches, counts)):
        if env.ddp:
            train_model.require_backward_grad_sync = i == len(batches) - 1
        with env.autocast():
            _, loss = train_model(x, y)  # the mean over this share's scored tokens, 0 where it has none
        loss = loss * count
        loss.backward()
        step_loss += loss.detach()
    agreed, norm = agreement.wait(), torch.zeros((), device=env.device)
    if agreed[0]:
        torch._foreach_mul_([p.grad for p in params if p.grad is not None], env.world_size / agreed[0])
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip) if grad_clip else norm
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return step_loss, norm, agreed


def out_of_memory(config, ckpt_path):
    b, a = config["batch_size"], config["gradient_accumulation_steps"]
    kept = f"the last checkpoint {ckpt_path} is untouched" if os.path.isfile(ckpt_path) else "no checkpoint written"
    hint = f"--batch_size={b // 2} --gradient_accumulation_steps={2 * a}" if b > 1 else "a smaller model"
    return TrainingError(f"out of memory at batch_size={b}: try {hint} (the same {a * b} sequences a step); {kept}")


def check_finite(first_bad, env, ckpt_path):
    """Stop, without writing a checkpoint, if a step had a non-finite loss or gradient norm."""
    step = env.agree_max(int(first_bad.item()))
    if step >= 0:
        kept = f"the last good checkpoint {ckpt_path} is untouched" if os.path.isfile(ckpt_path) else "no checkpoint written"
        raise TrainingError(f"non-finite loss or gradient norm at iter {step}; stopped, {kept}")


def progress(iter_num, config, loss, lr, dt, tokens_per_iter, flops_per_token, peak, env, scored=None):
    """A step's log line: loss, step size, time, throughput (scored: a language model's share scored), one MFU."""
    tok_s = tokens_per_iter / dt
    mfu = flops_per_token * tok_s / env.world_size / peak if peak else None
    return (f"iter {iter_num}/{config['max_iters']}: loss {loss:.4f}, lr {lr:.2e}, {dt * 1000:.1f} ms/iter, "
            f"{tok_s:,.0f} tok/s" + (f" over {env.world_size} processes" if env.ddp else "")
            + (f" ({scored:.0%} scored)" if scored is not None else "")
            + f", mfu {'n/a' if mfu is None else f'{mfu * 100:.1f}%'}{' per process' if env.ddp else ''}, "
            + (f"peak {torch.cuda.max_memory_allocated(env.device) / 2 ** 30:.2f} GiB, " if env.device_type == "cuda"
               else "")
            + f"eta {format_time((config['max_iters'] - iter_num) * dt)}")


def train_run(config, task, env, stop):
    """Train one (task, attn, freeze, unfreeze, seed) run into config['out_dir']; return its eval history."""
    ckpt_path, best_path, metrics_path = (os.path.join(config["out_dir"], f) for f in ("ckpt.pt", "best.pt",
                                                                                       "metrics.jsonl"))
    mconf, model, optimizer, state, history, chance = start_run(config, task, env, ckpt_path, metrics_path)
    iter_num, loss_sum, loss_tokens, tokens, samples, flops, train_time = state.values()  # in FRESH's order
    train_model, switch = wrap(model, config, env), unfreeze_step(config, iter_num)
    params = [p for p in model.parameters() if p.requires_grad]  # what trains: clipped together
    shares = step_shares(config["gradient_accumulation_steps"], config["batch_size"], env)
    step_rows = config["batch_size"] * config["gradient_accumulation_steps"]  # sequences a step, all processes
    tokens_per_iter = step_rows * task.block_size  # positions
    peak, flops_per_token = peak_flops(env.device, env.dtype), model.flops_per_token(task.block_size)
    loss_sum = torch.tensor(loss_sum, device=env.device)  # the loss summed over the scored tokens since the last eval
    step_t = torch.tensor(iter_num, device=env.device)  # the step counter on the device: no sync to track it
    first_bad = torch.tensor(-1, device=env.device)  # the first step with a non-finite loss or gradient norm
    ahead, saved = None, time.time()  # on a GPU, the future of the next step's batches; the latest checkpoint's time

    def save(metrics=(), best=False):  # a collective: the loss sum is all-reduced; never a poisoned checkpoint
        nonlocal saved
        check_finite(first_bad, env, ckpt_path)
        state = dict(zip(FRESH, (iter_num, env.all_reduce(loss_sum.clone()).item() / env.world_size, loss_tokens,
                                 tokens, samples, flops, train_time)))
        if env.master:
            with open(metrics_path, "a") as f:
                f.write("".join(json.dumps(m) + "\n" for m in metrics))
            save_checkpoint([ckpt_path] + [best_path] * best, model, optimizer, mconf, config, state)
        saved = time.time()

    t_log = t_mark = time.time()
    log_iters, log_scored, warming = 0, 0, True  # warming: a model's first step (its compilation) is not logged
    while iter_num < config["max_iters"]:
        if iter_num == switch and (count := unfreeze(model, optimizer, config["weight_decay"])):
            before, flops_per_token = flops_per_token, model.flops_per_token(task.block_size)
            params = [p for p in model.parameters() if p.requires_grad]
            train_model, warming = wrap(model, config, env), True  # DDP hooks the parameters that train when built
            env.print(f"iter {iter_num}: unfroze {count:,} parameters; training FLOPs per token "
                      f"{before / 1e6:.3f}M -> {flops_per_token / 1e6:.3f}M")
        lr = get_lr(iter_num, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        host = ahead.result() if ahead else step_batches(task, config, shares, iter_num)
        ahead = AHEAD.submit(step_batches, task, config, shares, iter_num + 1) if env.device_type == "cuda" else None
        counts = [int((y >= 0).sum()) for _, y in host]
        due = env.master and 0 < config["checkpoint_interval"] * 60 < time.time() - saved  # the latest, on time
        agreement = env.agree([sum(counts), due] + [stop.signum == s for s in Stop.SIGNALS])  # read after backward
        batches = [env.to_device(x, y) for x, y in host]
        try:
            loss, norm, (scored, due, *signals) = train_step(train_model, batches, counts, agreement, optimizer,
                                                              params, config["grad_clip"], env)
        except torch.OutOfMemoryError:
            raise out_of_memory(config, ckpt_path) from None
        step_t += 1
        first_bad = torch.where((first_bad < 0) & ~(loss.isfinite() & norm.isfinite()), step_t, first_bad)
        loss_sum += loss
        trained = scored if getattr(task, "counts_scored", False) else tokens_per_iter  # an LM's: what it predicted
        tokens, flops, samples = tokens + trained, flops + flops_per_token * trained, samples + step_rows
        loss_tokens, log_scored = loss_tokens + scored, log_scored + scored
        iter_num, log_iters = iter_num + 1, log_iters + 1
        last = iter_num == config["max_iters"]
        if logs := iter_num % config["log_interval"] == 0 or last:
            check_finite(first_bad, env, ckpt_path)  # the one host sync of a logging step
            dt, loss = (time.time() - t_log) / log_iters, env.all_reduce(loss.clone()).item() / (scored or math.nan)
            share = log_scored / log_iters / tokens_per_iter if getattr(task, "counts_scored", False) else None
            env.print(progress(iter_num, config, loss, lr, dt, tokens_per_iter, flops_per_token, peak, env, share)
                      + (", warm-up step included" if warming else ""))
        if logs or warming:  # a model's first step (compiling) is left out of the next line's rate
            t_log, log_iters, log_scored, warming = time.time(), 0, 0, False
        if evaluates := iter_num % config["eval_interval"] == 0 or last:
            train_time += time.time() - t_mark  # the loss read above waited for the device: the steps are done
            train_loss = env.all_reduce(loss_sum.clone()).item() / loss_tokens if loss_tokens else math.nan
            loss_sum.zero_()
            loss_tokens = 0
            history.append({"iter": iter_num, "train_loss": train_loss,
                            **eval_metrics(model, task, config["batch_size"], env, chance), "lr": lr,
                            "tokens": tokens, "samples": samples, "flops": flops, "time": round(train_time, 2)})
            best = min([m["val_loss"] for m in history[:-1]], default=math.inf)  # resumed: up to the checkpoint
            save(history[-1:], history[-1]["val_loss"] < best)
            env.print("eval " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in
                                          history[-1].items() if not isinstance(v, list) and k not in
                                          ("lr", "tokens", "samples", "flops", "time")))
            t_log, log_iters, log_scored, t_mark = time.time(), 0, 0, time.time()
        if any(signals) or due and not evaluates:  # the latest checkpoint (an evaluation wrote one)
            train_time, t_mark = train_time + time.time() - t_mark, time.time()
            save()
        if any(signals):
            signum = next(s for s, n in zip(Stop.SIGNALS, signals) if n)
            env.print(f"stopped by {signal.Signals(signum).name} at iter {iter_num}: wrote {ckpt_path}; "
                      f"continue with --init_from=resume")
            raise Interrupted(signum)
    return history


# ----------------------------------------------------------------------------- several runs side by side

def run_label(run):
    heads = f" h={run['n_head']}" if run["attn"] == "mixing" and run["mixing_heads"] else ""
    return (run["attn"] + heads + (f" freeze={run['freeze']}" if run["freeze"] else "")
            + (f" unfreeze@{run['unfreeze_at']}" if run["unfreeze_at"] != "never" else "")
            + (f" {run['parametrization']}" if run["parametrization"] != "auto" else ""))


def starts_frozen(attn, freeze):
    """Does a variant hold parts that can unfreeze: frozen W_Q, W_K, MLPs or blocks, or learned mixing matrices?"""
    kinds = MixiTConfig(attn=attn, n_layer=len(attn)).layer_attn  # as the model reads it
    return bool(freeze) or "frozen_qk" in kinds or "learned_mixing" in kinds


def plan_runs(config):
    """Every (task, attn and heads, freeze, unfreeze, seed) combination, each with its own out_dir when there are
    several. A schedule without frozen parts would repeat the run that never unfreezes: it is left out."""
    tasks = [t.strip() for t in config["task"].split(",")]
    attns = list(PAPER_ATTNS) if config["attn"] == "all" else split_list(config["attn"], "attn", LIST_RULES["attn"])
    freezes, schedules = (split_list(config[k], k, LIST_RULES[k]) for k in ("freeze", "unfreeze_at"))
    heads = [int(h) for h in split_list(config["mixing_heads"], "mixing_heads", LIST_RULES["mixing_heads"])] \
        if config["mixing_heads"] else [config["n_head"]]  # MixiT's head counts
    seeds = range(config["seed"], config["seed"] + config["seeds"])
    runs = [dict(config, task=t, attn=a, n_head=h, freeze=f, unfreeze_at=u, seed=s, seeds=1) for t in tasks
            for a in attns for h in (heads if a == "mixing" else [config["n_head"]]) for f in freezes
            for u in schedules for s in seeds if u == "never" or starts_frozen(a, f)]
    if not runs:
        raise ConfigError(f"unfreeze_at={config['unfreeze_at']!r}: attn={config['attn']!r} with freeze="
                          f"{config['freeze']!r} has nothing frozen to unfreeze; add never, or freeze=mlp, "
                          f"attn=frozen_qk or learned_mixing")
    for run in runs:
        if len(runs) > 1:
            name = f"{run['task']}-" + run_label(run).replace(" h=", "-h").replace(" freeze=", "-freeze_") \
                .replace(" unfreeze@", "-unfreeze_").replace("%", "pct").replace(" ", "-")
            run["out_dir"] = os.path.join(config["out_dir"], name + (f"-s{run['seed']}" if len(seeds) > 1 else ""))
            run["fresh_if_missing"] = True  # resuming a comparison starts the runs that never began
    return runs


def build_tasks(runs):
    """The tasks of the runs; every model config and resume checkpoint is checked before anything is written."""
    tasks = {}
    for run in runs:
        if run["task"] not in tasks:
            try:
                tasks[run["task"]] = make_task(run["task"], run["block_size"], run["data_dir"], run["eval_iters"],
                                               run["eval_split"], run["lm_rows"])
            except ValueError as e:
                raise ConfigError(str(e)) from None
        run["model"] = describe_model(model_config(run, tasks[run["task"]]))
    ckpts = [os.path.join(run["out_dir"], "ckpt.pt") for run in runs]
    if runs[0]["init_from"] == "resume" and not any(map(os.path.isfile, ckpts)):
        raise ConfigError(f"--init_from=resume: no checkpoint at {ckpts[0] if len(ckpts) == 1 else ' or '.join(ckpts[:2])}"
                          + (f" (or {len(ckpts) - 2} more)" if len(ckpts) > 2 else ""))
    return tasks


def main(argv):
    config = configure(DEFAULTS, argv, RULES)
    runs = plan_runs(config)
    tasks = build_tasks(runs)
    env = setup(config["device"], config["dtype"])
    stop = Stop()
    try:
        accum, rows = config["gradient_accumulation_steps"], config["batch_size"] // env.world_size
        step_shares(accum, config["batch_size"], env)
        env.print(env.describe())  # a CPU's thread count (OMP_NUM_THREADS=1 on a CPU other work keeps busy)
        if accum % env.world_size and rows < 8:  # micro-batches split by rows
            env.print(f"each process computes {rows} rows of each of {accum} micro-batches: correct, but slow; "
                      f"--batch_size={accum * config['batch_size']} --gradient_accumulation_steps=1 gives it "
                      f"{accum * rows} at once (as many sequences a step), if memory allows")
        check_writable(config["out_dir"])
        start = time.time()
        histories = [train_run(run, tasks[run["task"]], env, stop) for run in runs]
        if len(runs) > 1:
            write_report(runs, histories, run_label, config["out_dir"], env, time.time() - start)
    finally:
        stop.restore()
        teardown(env)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
