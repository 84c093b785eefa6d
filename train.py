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
import itertools
import json
import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict

import torch

from common import (ConfigError, Interrupted, OneOf, Stop, check_writable, cli, configure,
                    defaults_of, fingerprint, load_checkpoint, load_weights, lock_folder,
                    non_negative, positive, rule_that, setup, split_list, teardown, unit_interval,
                    write_failed)
from data import chance_metrics, make_task
from keeper import RunKeeper, RunState, step_shares, unfreeze_parameters, write_metrics
from mixit import ATTNS, FREEZES, LETTERS, MixiT, MixiTConfig, flat_args, mixit_config
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
    "attn": rule_that(lambda a: a in ATTNS or (a and set(a) <= set(LETTERS)),
                      f"valid: {', '.join(ATTNS)}, all, or one letter per layer "
                      f"(s softmax, f frozen_qk, m mixing, l learned_mixing)"),
    "freeze": OneOf(FREEZES),
    "mixing_heads": rule_that(lambda h: h.isdigit() and int(h) > 0, "valid: integers > 0"),
    "unfreeze_at": rule_that(lambda u: u == "never" or u.isdigit()
                             or (u[-1:] == "%" and u[:-1].isdigit() and int(u[:-1]) <= 100),
                             "valid: never, a step like 2000 or a share like 50% (0-100%)")}


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


def new_model(config, task, env):
    """The model at init (uncompiled: evaluated and saved) and its optimizer. The fixed random parts
    are checked once to be the same on every process; what unfreezes later waits frozen, learned
    mixing matrices included."""
    model = MixiT(model_config(config, task), env.device, env.dtype)
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
    return model, optimizer


def load_state(path, model, optimizer, config, env):
    """Load the checkpoint at path (of this very model and task only) into model and optimizer;
    return its RunState."""
    ckpt = load_checkpoint(path, env.device)
    saved_args = flat_args(ckpt["model_args"])
    diffs = [f"{k}={saved_args.get(k)!r} (this run: {v!r})"
             for k, v in flat_args(asdict(model.config)).items()
             if saved_args.get(k, ARCH_DEFAULTS[k]) != v]
    if ckpt["config"].get("task") != config["task"]:
        diffs.insert(0, f"task={ckpt['config'].get('task')!r} (this run: {config['task']!r})")
    if diffs:
        raise ConfigError(f"{path} holds another model: {'; '.join(diffs)}")
    changed = [f"{k}: {v!r} -> {config[k]!r}" for k, v in ckpt["config"].items()
               if k in config and v != config[k] and k != "init_from"]
    if changed:
        env.print(f"resuming with changed training options: {', '.join(changed)}")
    # A checkpoint with more parameter groups was saved after its frozen parts started training.
    if len(ckpt.get("optimizer", {}).get("param_groups", ())) > len(optimizer.param_groups):
        unfreeze_parameters(model, optimizer, config["weight_decay"])
    load_weights(ckpt, path, lambda: model, optimizer)
    # A counter an older checkpoint lacks counts from 0 (the best: none yet).
    return RunState(
        iter_num=ckpt.get("iter_num", 0),
        loss_sum=ckpt.get("loss_sum", 0.0),
        loss_tokens=ckpt.get("loss_tokens", 0),
        tokens=ckpt.get("tokens", 0),
        samples=ckpt.get("samples", 0),
        flops=ckpt.get("flops", 0.0),
        train_time=ckpt.get("train_time", 0.0),
        best_val_loss=ckpt.get("best_val_loss", math.inf),
    )


def start_run(config, task, env):
    """A run's keeper, holding its model, optimizer, counters, eval history (resumed: up to the
    checkpoint) and chance levels (at init)."""
    model, optimizer = new_model(config, task, env)
    ckpt_path = os.path.join(config["out_dir"], "ckpt.pt")
    metrics_path = os.path.join(config["out_dir"], "metrics.jsonl")
    # The chance levels are the model's at init, so they are measured before a checkpoint loads.
    chance = chance_metrics(model, task, env, config["batch_size"])
    state = RunState()
    history = []
    resumes = os.path.isfile(ckpt_path) or not config.get("fresh_if_missing")
    if config["init_from"] == "resume" and resumes:
        state = load_state(ckpt_path, model, optimizer, config, env)
        # The evaluations after the checkpoint will be done again.
        if os.path.isfile(metrics_path):
            history = [m for m in read_metrics(metrics_path, env) if m["iter"] <= state.iter_num]
        env.print(f"resumed {ckpt_path} at iter {state.iter_num}")
    if env.master:
        os.makedirs(config["out_dir"], exist_ok=True)
        write_metrics(metrics_path, history)
    env.print(f"[{config['task']} | {run_label(config)} | seed {config['seed']}] "
              f"{describe_model(model.config)}; "
              f"{model.get_num_params() / 1e6:.2f}M non-embedding parameters, "
              f"{model.get_num_params(trainable=True) / 1e6:.2f}M trainable; "
              f"out_dir {config['out_dir']}")
    return RunKeeper(config, task, env, model, optimizer, state, history, chance)


def read_metrics(path, env):
    """metrics.jsonl's evals; a last line cut off (by a kill mid-write: a JSON object ends in }) is
    dropped, said so. Any other line that is no eval record (a JSON object with an integer iter, in
    UTF-8) ends the run in one line naming it."""
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    if lines and not lines[-1].endswith(b"}"):
        env.print(f"{path}: dropped its last line, cut off mid-write: "
                  f"{lines.pop()[:60].decode(errors='replace')}")
    history = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or type(record.get("iter")) is not int:
            raise ConfigError(f"{path}, line {number}, is not an eval record (a JSON object with "
                              f"its iter): mend or delete that line, then resume (no file was "
                              f"changed)")
        history.append(record)
    return history


def train_step(model, batches, counts, wait_agreed, optimizer, params, grad_clip, env):
    """One optimizer step over this process's micro-batches (x, y) on the device, counts their
    scored tokens. wait_agreed() returns every process's scored tokens (first) and votes, summed
    while the step runs; it is called after the backward. Returns this process's loss summed over
    its scored tokens, the gradient norm and the agreed sums. A step that scores no token leaves
    the weights and the optimizer as they were."""
    # The gradient is that of the mean over every scored token of the step, on every process:
    # each micro-batch's mean (the model's, 0 where none is scored) times its count is its sum, and
    # after the backward the gradient is divided by the step's count. DDP averages the processes'
    # gradients, so it is multiplied by world_size too.
    loss_sum = torch.zeros((), device=env.device)
    for micro, ((x, y), count) in enumerate(zip(batches, counts)):
        if env.ddp:
            # DDP syncs the gradients in the backward of the last micro-batch only.
            model.require_backward_grad_sync = micro == len(batches) - 1
        with env.autocast():
            _, loss = model(x, y)
        loss = loss * count
        loss.backward()
        loss_sum += loss.detach()
    # The processes' sums were started before the forward: reading them now costs no extra sync.
    agreed = wait_agreed()
    scored = agreed[0]
    grad_norm = torch.zeros((), device=env.device)
    # A step that scores no token leaves the weights and the optimizer's moments as they were.
    if scored:
        grads = [p.grad for p in params if p.grad is not None]
        torch._foreach_mul_(grads, env.world_size / scored)
        if grad_clip:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, grad_norm, agreed


def train_run(config, task, env, stop):
    """Train one (task, attn, freeze, unfreeze, seed) run into config['out_dir']; return its eval
    history."""
    keeper = start_run(config, task, env)
    unfreeze_at = unfreeze_step(config, keeper.state.iter_num)
    # A stop asked for from now on is read at the next step, and checkpointed after it.
    stop.starting = False
    while keeper.state.iter_num < config["max_iters"]:
        iter_num = keeper.state.iter_num
        if iter_num == unfreeze_at:
            keeper.unfreeze()
        lr = get_lr(iter_num, config)
        for group in keeper.optimizer.param_groups:
            group["lr"] = lr
        # The step's batches, and the processes' sums of its scored tokens, the checkpoint clock's
        # vote and the stop requests, started now and read after the backward.
        batches, counts, wait_agreed = keeper.before_step(stop)
        try:
            loss_sum, grad_norm, agreed = train_step(keeper.train_model, batches, counts,
                                                     wait_agreed, keeper.optimizer, keeper.params,
                                                     config["grad_clip"], env)
        except torch.OutOfMemoryError:
            raise keeper.out_of_memory() from None
        # The counters, the non-finite check, and what the processes agreed on.
        keeper.after_step(loss_sum, grad_norm, agreed)
        iter_num += 1
        last = iter_num == config["max_iters"]
        logs = iter_num % config["log_interval"] == 0 or last
        if logs:
            keeper.log(loss_sum, lr)
        # A model's first step compiles: the next line's rate starts after it.
        if logs or keeper.warming:
            keeper.start_log_window()
        evaluates = iter_num % config["eval_interval"] == 0 or last
        if evaluates:
            keeper.evaluate(lr)
        # The latest checkpoint is written on time, or to stop. An evaluation has just written one.
        if keeper.stop_signal or (keeper.checkpoint_due and not evaluates):
            keeper.clock_steps()
            keeper.save()
        if keeper.stop_signal:
            env.print(f"stopped by {signal.Signals(keeper.stop_signal).name} at iter {iter_num}: "
                      f"wrote {keeper.ckpt_path}; continue with --init_from=resume")
            raise Interrupted(keeper.stop_signal)
    return keeper.history


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
    attns = PAPER_ATTNS if config["attn"] == "all" else list_option(config, "attn")
    freezes = list_option(config, "freeze")
    schedules = list_option(config, "unfreeze_at")
    # attn=mixing runs at each of MixiT's head counts, the other variants at n_head.
    heads = {attn: [config["n_head"]] for attn in attns}
    if config["mixing_heads"]:
        heads["mixing"] = [int(h) for h in list_option(config, "mixing_heads")]
    variants = [(attn, n_head) for attn in attns for n_head in heads[attn]]
    seeds = range(config["seed"], config["seed"] + config["seeds"])
    combinations = itertools.product(tasks, variants, freezes, schedules, seeds)
    runs = [dict(config, task=t, attn=a, n_head=h, freeze=f, unfreeze_at=u, seed=s, seeds=1)
            for t, (a, h), f, u, s in combinations if u == "never" or starts_frozen(a, f)]
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
    has_ckpt = any(map(os.path.isfile, ckpts))
    # A restarted attempt (torchrun --max_restarts) continues from the last one's checkpoints.
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and has_ckpt:
        for run in runs:
            run["init_from"] = "resume"
    if runs[0]["init_from"] == "resume" and not has_ckpt:
        where = " or ".join(ckpts[:2])
        if len(ckpts) > 2:
            where += f" (or {len(ckpts) - 2} more)"
        raise ConfigError(f"--init_from=resume: no checkpoint at {where}")
    return tasks


def take_out_dir(runs, out_dir, env):
    """out_dir's lock. A fresh job never overwrites an earlier one: where out_dir or the runs'
    folders hold a run or a comparison's report, everything in out_dir (but the lock and the
    previous jobs) moves to out_dir/previous-N first, said so."""
    lock = lock_folder(out_dir)
    # a run's files, or a comparison's report
    names = ("ckpt.pt", "metrics.jsonl", "results.md", "runs.json", "compare.png")
    folders = {out_dir} | {run["out_dir"] for run in runs}
    earlier = [os.path.join(folder, name) for folder in folders for name in names]
    if runs[0]["init_from"] == "resume" or not any(map(os.path.isfile, earlier)):
        return lock
    number = 1
    while os.path.exists(os.path.join(out_dir, f"previous-{number}")):
        number += 1
    previous = os.path.join(out_dir, f"previous-{number}")
    moved = [entry for entry in os.scandir(out_dir)
             if entry.name != ".lock" and not entry.name.startswith("previous-")]
    try:
        os.makedirs(previous)
        for entry in moved:
            os.replace(entry.path, os.path.join(previous, entry.name))
    except OSError as e:
        raise write_failed(previous, e) from None
    env.print(f"{out_dir} held an earlier run: moved its files to {previous} (--init_from=resume "
              f"continues a run instead)")
    return lock


def main(argv):
    # From here on a stop request ends the job in one line; before the first step, at once.
    stop = Stop()
    env = None
    try:
        config = configure(DEFAULTS, argv, RULES)
        runs = plan_runs(config)
        tasks = build_tasks(runs)
        env = setup(config["device"], config["dtype"])
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
        out_dir = config["out_dir"]
        check_writable(out_dir)
        # The master takes out_dir; under torchrun every process stops where it cannot.
        lock = env.master_does(lambda: take_out_dir(runs, out_dir, env), f"take {out_dir}")
        with lock or nullcontext():
            start = time.time()
            histories = [train_run(run, tasks[run["task"]], env, stop) for run in runs]
            if len(runs) > 1:
                write_report(runs, histories, run_label, out_dir, env, time.time() - start)
    finally:
        # The copies of a signal that arrive while the processes part still find the handlers.
        teardown(env)
        stop.restore()


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
