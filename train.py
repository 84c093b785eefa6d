"""
Train the standard transformer and the paper's variants, side by side.

  python train.py                                        # the main job: every variant, memorization and retrieval
  python train.py configs/arithmetic_cpu.py --attn=mixing  # a preset, with overrides
  python train.py --task=dyck_10,induction_16 --attn=all --seeds=3
  torchrun --standalone --nproc_per_node=8 train.py configs/lm_paper.py

A config file is Python and runs as code, like any script: use only files you trust. --key=value
values are parsed as Python literals (never evaluated) and must match the type of the default.
"""
import ast
import datetime
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from data import TEST_SEED, Induction, make_task
from mixit import ATTNS, COLORS, FREEZES, MixiT, MixiTConfig, peak_flops
from sample import induction_scores

# -----------------------------------------------------------------------------
# default config values: the main job, every variant on memorization (all succeed) and retrieval (MixiT fails)
# I/O
out_dir = "out"
eval_interval = 100
log_interval = 25
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt)
# task
task = "memorize_32,retrieval_6"  # comma list of tasks (data.py), or prepared corpora
data_dir = "data"  # where `python data.py` put the corpora
eval_split = "val"  # corpora: the split behind val_* ('test' for language modeling: the whole stream)
eval_iters = 20  # language modeling: batches of the fixed validation sample
seed = 0  # model init, frozen weights, mixing matrices and the data stream
seeds = 1  # run seeds seed .. seed+seeds-1 and report mean ± std
# model
attn = "all"  # softmax | frozen_qk | mixing, a comma list, or all
freeze = ""  # '' | mlp | blocks, or a comma list
n_layer = 2
n_head = 4
n_embd = 128
block_size = 0  # 0: the task's sequence length
skip = math.sqrt(0.5)  # MixiT residual scaling s (the LM trainer of the reference uses 0.5)
cminus = -1.0  # MixiT shaped activation slope 1 + cminus/sqrt(d)
init_std = 0.02  # the reference's effective init (MODEL.md A.0.1)
base_width = 512.0
base_ffn = 1.0
# optimizer: AdamW, linear warmup then cosine decay to min_lr
batch_size = 128  # sequences per micro-batch per process
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
max_iters = 600
learning_rate = 3e-3
min_lr = 0.0
warmup_iters = 50
lr_decay_iters = 0  # 0: max_iters
weight_decay = 1e-3
beta1 = 0.9
beta2 = 0.999
grad_clip = 1.0  # 0 disables clipping
# system
device = "auto"  # auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps
dtype = "auto"  # auto (bfloat16 on CUDA where supported, else float32), float32, bfloat16, float16
compile = "auto"  # auto (on for CUDA), True, False
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}
CHOICES = {"init_from": ("scratch", "resume"), "dtype": ("auto", "float32", "bfloat16", "float16"),
           "compile": ("auto", True, False)}
POSITIVE = ("batch_size", "gradient_accumulation_steps", "max_iters", "eval_interval", "log_interval", "eval_iters",
            "seeds", "n_layer", "n_head", "n_embd", "learning_rate", "init_std", "base_width", "base_ffn")
NON_NEGATIVE = ("block_size", "warmup_iters", "lr_decay_iters", "min_lr", "weight_decay", "grad_clip", "seed")
UNIT_INTERVAL = ("beta1", "beta2")  # [0, 1)
ARCH_KEYS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "attn", "freeze", "causal", "n_classes",
             "pad_id", "seed", "bias", "rope_theta", "init_std", "base_width", "base_ffn", "skip", "cminus", "mix_beta")


class ConfigError(Exception):
    """Bad input: reported in one line, exit status 2."""


def parse_value(key, text):
    """A --key=value override, as a literal of the default's type (never evaluated as code)."""
    default = DEFAULTS[key]
    if key in CHOICES and text in ("True", "False"):
        return text == "True"
    if isinstance(default, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ConfigError(f"--{key}={text}: expected a {type(default).__name__}, like --{key}={default!r}") from None


def check_value(key, value, source):
    if key not in DEFAULTS:
        raise ConfigError(f"unknown option {key!r} in {source}; valid: {', '.join(sorted(DEFAULTS))}")
    default = DEFAULTS[key]
    if key in CHOICES:
        if value not in CHOICES[key]:
            raise ConfigError(f"{key}={value!r} in {source}; valid: {', '.join(map(str, CHOICES[key]))}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not type(default):
        raise ConfigError(f"{key}={value!r} in {source}: expected a {type(default).__name__}, like {default!r}")
    if key in POSITIVE and not value > 0:
        raise ConfigError(f"{key}={value!r} in {source}: must be positive")
    if key in NON_NEGATIVE and not value >= 0:
        raise ConfigError(f"{key}={value!r} in {source}: must be zero or positive")
    if key in UNIT_INTERVAL and not 0 <= value < 1:
        raise ConfigError(f"{key}={value!r} in {source}: must lie in [0, 1)")
    return value


def parse_config(argv):
    """Defaults, then config files and --key=value overrides in the order given."""
    config = dict(DEFAULTS)
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if key not in DEFAULTS:
                raise ConfigError(f"unknown option --{key}; valid: {', '.join(sorted(DEFAULTS))}")
            if not eq:
                raise ConfigError(f"--{key} needs a value: --{key}=...")
            config[key] = check_value(key, parse_value(key, text), f"--{key}")
        else:
            if not os.path.isfile(arg):
                raise ConfigError(f"config file not found: {arg} (options are written --key=value)")
            namespace = {}
            try:
                exec(open(arg).read(), namespace)  # a config file is Python and runs as code, as in nanoGPT
            except Exception as e:
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
            for key, value in namespace.items():
                if not key.startswith("_") and not callable(value) and not hasattr(value, "__file__"):
                    config[key] = check_value(key, value, arg)
    return config


def split_list(text, valid, name):
    items = [s.strip() for s in text.split(",")]
    items = list(valid) if name == "attn" and items == ["all"] else items
    for item in items:
        if item not in valid:
            shown = ", ".join(repr(v) if v == "" else v for v in valid)
            raise ConfigError(f"unknown {name} {item!r}; valid: {shown}" + (", all" if name == "attn" else ""))
    return items


# -----------------------------------------------------------------------------
# processes and devices


class Env:
    """The process group and device of this process: one process, or one of several under torchrun."""

    def __init__(self, config):
        self.ddp = int(os.environ.get("RANK", -1)) != -1
        self.rank = int(os.environ.get("RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        self.master = self.rank == 0
        self.device = self._device(config["device"])
        self.device_type = self.device.type
        if config["gradient_accumulation_steps"] % self.world_size:
            raise ConfigError(f"gradient_accumulation_steps={config['gradient_accumulation_steps']} must be a multiple "
                              f"of the {self.world_size} processes")
        self.accum = config["gradient_accumulation_steps"] // self.world_size  # micro-steps of this process
        self.dtype = self._dtype(config["dtype"])
        self.compile = config["compile"] if config["compile"] != "auto" else self.device_type == "cuda"
        self.control = None  # a gloo group on the host: agreeing on a flag costs no GPU sync
        if self.ddp:
            backend = "nccl" if self.device_type == "cuda" else "gloo"
            timeout = datetime.timedelta(minutes=10)  # a rank that dies ends the others' waits, not hangs them
            dist.init_process_group(backend, timeout=timeout)
            self.control = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else dist.group.WORLD

    def describe(self):
        """The hardware behind a measurement, for results.md: device name, processes, dtype."""
        name = torch.cuda.get_device_name(self.device) if self.device_type == "cuda" else \
            f"{self.device_type} ({torch.get_num_threads()} threads)"
        return f"{self.world_size} x {name}, {str(self.dtype).removeprefix('torch.')}, torch {torch.__version__}"

    def _device(self, name):
        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
        if name == "cuda" and self.ddp:
            name = f"cuda:{self.local_rank}"
        try:
            device = torch.device(name)
        except RuntimeError:
            raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N, mps") from None
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ConfigError("device=cuda but CUDA is not available here; valid: cpu" +
                                  (", mps" if torch.backends.mps.is_available() else ""))
            torch.cuda.set_device(device)
        elif device.type == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("device=mps but MPS is not available here; valid: cpu")
        elif device.type not in ("cpu", "cuda", "mps"):
            raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N, mps")
        return device

    def _dtype(self, name):
        if name == "auto":
            bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
            name = "bfloat16" if bf16 else "float32"
        if name == "bfloat16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name()}; valid: float16, float32")
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]

    def autocast(self):
        if self.dtype == torch.float32:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def to_device(self, *tensors):
        if self.device_type == "cuda":
            return [t.pin_memory().to(self.device, non_blocking=True) for t in tensors]
        return [t.to(self.device) for t in tensors]

    def all_reduce(self, tensor):
        if self.ddp:
            dist.all_reduce(tensor)
        return tensor

    def agree_max(self, value):
        """The largest of every process's integer value (a host-side collective)."""
        if not self.ddp:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return int(t.item())

    def broadcast_host(self, values):
        """Rank 0's list of integers, on every process."""
        if not self.ddp:
            return values
        t = torch.tensor(values, dtype=torch.int64)
        dist.broadcast(t, 0, group=self.control)
        return t.tolist()

    def print(self, *args, **kwargs):
        if self.master:
            print(*args, **kwargs, flush=True)


# -----------------------------------------------------------------------------
# one training run


def model_config(config, task):
    block = config["block_size"] or task.block_size
    if block < task.block_size:
        raise ConfigError(f"block_size={block} is shorter than the {task.name} sequences ({task.block_size} tokens)")
    mc = MixiTConfig(vocab_size=task.vocab_size, block_size=block, n_layer=config["n_layer"], n_head=config["n_head"],
                     n_embd=config["n_embd"], attn=config["attn"], freeze=config["freeze"], causal=task.causal,
                     n_classes=task.n_classes, pad_id=task.pad_id, seed=config["seed"], init_std=config["init_std"],
                     base_width=config["base_width"], base_ffn=config["base_ffn"], skip=config["skip"],
                     cminus=config["cminus"])
    try:
        mc.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return mc


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


@torch.no_grad()
def evaluate(model, task, split, batch_size, env):
    """Loss, per-answer accuracy and whole-answer exact match over a fixed split, shared out over processes."""
    model.eval()
    sums = torch.zeros(5, dtype=torch.float64, device=env.device)  # loss, answers, right, answered rows, exact rows
    for x, y in task.eval_batches(split, batch_size, env.rank, env.world_size):
        x, y = env.to_device(x, y)
        with env.autocast():
            logits, _ = model(x)
        if y.dim() == 1:  # a classifier: one answer per row
            logits, y = logits.unsqueeze(1), y.unsqueeze(1)
        scored = y >= 0
        right = (logits.argmax(-1) == y) & scored
        answered = scored.any(-1)
        loss = F.cross_entropy(logits[scored].float(), y[scored], reduction="sum")
        sums += torch.stack([loss.double(), scored.sum().double(), right.sum().double(), answered.sum().double(),
                             ((right == scored).all(-1) & answered).sum().double()])
    loss, answers, right, rows, exact = env.all_reduce(sums).tolist()
    model.train()
    return {"loss": loss / max(answers, 1), "acc": right / max(answers, 1), "exact": exact / max(rows, 1)}


def eval_metrics(model, task, config, env):
    val = evaluate(model, task, task.val_split, config["batch_size"], env)
    metrics = {"val_loss": val["loss"], "val_acc": val["acc"]}
    if task.exact_match:
        metrics["val_exact"] = val["exact"]
    if task.train_eval:
        metrics["train_acc"] = evaluate(model, task, "train", config["batch_size"], env)["acc"]
    if task.perplexity:
        metrics["val_ppl"] = math.exp(min(val["loss"], 50.0))
    if isinstance(task, Induction):  # the best head's prefix-matching score: has an induction head formed?
        metrics["induction_score"] = induction_scores(model, seed=TEST_SEED, device=env.device).max().item()
    return metrics


def save_checkpoint(path, model, optimizer, mconf, config, state):
    """Write through a temporary file, fsync and a rename: a kill mid-write leaves the last checkpoint intact.
    It holds tensors and plain values only, so torch.load(weights_only=True) reads it and runs no code."""
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": asdict(mconf),
            "config": config, **state, "rng": {"torch": torch.get_rng_state()}}
    if torch.cuda.is_available():
        ckpt["rng"]["cuda"] = torch.cuda.get_rng_state_all()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(ckpt, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


CKPT_KEYS = ("model", "optimizer", "model_args", "config", "iter_num", "rng")


def load_checkpoint(path, mconf, config, env):
    """A checkpoint of this very model (architecture and task); changed training options are printed."""
    if not os.path.isfile(path):
        raise ConfigError(f"--init_from=resume: no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location=env.device, weights_only=True)  # tensors and plain values only
    except Exception as e:
        reason = (str(e).strip().splitlines() or [""])[0][:120]
        raise ConfigError(f"{path} is not a readable checkpoint ({type(e).__name__}: {reason})") from None
    missing = [k for k in CKPT_KEYS if k not in ckpt] if isinstance(ckpt, dict) else list(CKPT_KEYS)
    if missing:
        raise ConfigError(f"{path} is not a mixit checkpoint (missing {', '.join(missing)})")
    saved = ckpt["model_args"]
    diffs = [f"{k}={saved.get(k)!r} (this run: {getattr(mconf, k)!r})" for k in ARCH_KEYS if saved.get(k) != getattr(mconf, k)]
    if ckpt["config"].get("task") != config["task"]:
        diffs.insert(0, f"task={ckpt['config'].get('task')!r} (this run: {config['task']!r})")
    if diffs:
        raise ConfigError(f"{path} holds another model: {'; '.join(diffs)}")
    changed = [f"{k}: {ckpt['config'][k]!r} -> {config[k]!r}" for k in config
               if k in ckpt["config"] and ckpt["config"][k] != config[k] and k not in ("init_from",)]
    if changed:
        env.print(f"resuming with changed training options: {', '.join(changed)}")
    return ckpt


def restore(ckpt, path, model, optimizer, env):
    """Model, optimizer and RNG state from a checkpoint; a damaged one is refused in one line."""
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng"]["torch"].cpu())
        if "cuda" in ckpt["rng"] and env.device_type == "cuda":
            torch.cuda.set_rng_state_all([s.cpu() for s in ckpt["rng"]["cuda"]])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return {"iter_num": int(ckpt["iter_num"]), "loss_sum": float(ckpt.get("loss_sum", 0.0)),
            "loss_steps": int(ckpt.get("loss_steps", 0))}


def check_replicas(model, env):
    """Under DDP every process must hold rank 0's fixed random parts (mixing matrices, frozen weights)."""
    if not env.ddp:
        return
    digest = hashlib.sha256()
    fixed = [b for name, b in model.named_buffers() if name.endswith(".mixing")]
    for t in fixed + [p for p in model.parameters() if not p.requires_grad]:
        digest.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    mine = [int.from_bytes(digest.digest()[:7], "little")]
    if env.agree_max(int(env.broadcast_host(mine) != mine)):
        raise TrainingError(f"rank {env.rank}: the fixed random parts (mixing matrices, frozen weights) differ between "
                            f"processes; every rank must run the same code with the same seed")


def read_history(path, upto):
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [m for m in map(json.loads, f) if m["iter"] <= upto]


def write_lines(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, path)


class Stop:
    """SIGTERM and Ctrl-C set a flag: the run checkpoints after the current step and exits. A second Ctrl-C
    stops at once."""

    def __init__(self):
        self.signum = 0
        self.previous = {s: signal.signal(s, self.handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def handle(self, signum, frame):
        if self.signum == signal.SIGINT == signum:
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


class Interrupted(Exception):
    """Stopped by a signal after writing a checkpoint."""


class TrainingError(Exception):
    """A run that cannot go on (a non-finite loss, ranks that disagree): one line, exit status 1."""


def train_step(train_model, task, optimizer, scaler, params, config, env, iter_num):
    """One optimizer step over env.accum micro-batches; returns the mean loss and the gradient norm (tensors)."""
    step_loss = torch.zeros((), device=env.device)
    for micro in range(env.accum):  # micro-batch k of the step is the same whatever the process count
        x, y = task.get_batch("train", config["batch_size"], seed=[config["seed"], iter_num, micro * env.world_size + env.rank])
        x, y = env.to_device(x, y)
        if env.ddp:
            train_model.require_backward_grad_sync = micro == env.accum - 1
        with env.autocast():
            _, loss = train_model(x, y)
        scaler.scale(loss / env.accum).backward()
        step_loss += loss.detach() / env.accum
    norm = torch.zeros((), device=env.device)
    if config["grad_clip"]:
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(params, config["grad_clip"])
        if scaler.is_enabled():  # float16: overflowing steps are skipped by the scaler, not errors
            norm = torch.zeros((), device=env.device)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return step_loss, norm


def check_finite(first_bad, env, ckpt_path):
    """Stop, without writing a checkpoint, if a step had a non-finite loss or gradient norm."""
    step = env.agree_max(int(first_bad.item()))
    if step >= 0:
        kept = f"the last good checkpoint {ckpt_path} is untouched" if os.path.isfile(ckpt_path) else "no checkpoint written"
        raise TrainingError(f"non-finite loss or gradient norm at iter {step}; stopped, {kept}")


def train_run(config, task, env, stop):
    """Train one (task, attn, freeze, seed) run into config['out_dir']; return its eval history."""
    out = config["out_dir"]
    ckpt_path, metrics_path = os.path.join(out, "ckpt.pt"), os.path.join(out, "metrics.jsonl")
    mconf = model_config(config, task)
    model = MixiT(mconf).to(env.device)  # the uncompiled model: evaluated and saved
    check_replicas(model, env)
    betas = (config["beta1"], config["beta2"])
    optimizer = model.configure_optimizers(config["weight_decay"], config["learning_rate"], betas, env.device_type)
    state, history = {"iter_num": 0, "loss_sum": 0.0, "loss_steps": 0}, []
    if config["init_from"] == "resume" and (os.path.isfile(ckpt_path) or not config.get("fresh_if_missing")):
        state = restore(load_checkpoint(ckpt_path, mconf, config, env), ckpt_path, model, optimizer, env)
        history = read_history(metrics_path, state["iter_num"])
        env.print(f"resumed {ckpt_path} at iter {state['iter_num']}")
    if env.master:
        os.makedirs(out, exist_ok=True)
        write_lines(metrics_path, [json.dumps(m) + "\n" for m in history])  # drop evals made after the checkpoint
    n_params, n_train = model.get_num_params(), model.get_num_params(trainable=True)
    env.print(f"[{config['task']} | {run_label(config)} | seed {config['seed']}] {n_params / 1e6:.2f}M non-embedding "
              f"parameters, {n_train / 1e6:.2f}M trainable; out_dir {out}")

    train_model = torch.compile(model) if env.compile else model
    if env.ddp:
        train_model = DDP(train_model, device_ids=[env.local_rank] if env.device_type == "cuda" else None)
    scaler = torch.amp.GradScaler(env.device_type, enabled=env.dtype == torch.float16)
    params = [p for p in model.parameters() if p.requires_grad]
    iter_num, max_iters = state["iter_num"], config["max_iters"]
    tokens_per_iter = config["batch_size"] * mconf.block_size * config["gradient_accumulation_steps"]
    peak = peak_flops(env.device, env.dtype)
    loss_sum, loss_steps = torch.tensor(state["loss_sum"], device=env.device), state["loss_steps"]
    step_t = torch.tensor(iter_num, device=env.device)  # the step counter on the device: no sync to track it
    first_bad = torch.tensor(-1, device=env.device)  # the first step with a non-finite loss or gradient norm
    snapshot = lambda: {"iter_num": iter_num, "loss_sum": env.all_reduce(loss_sum.clone()).item() / env.world_size,
                        "loss_steps": loss_steps}
    t_start = t_log = time.time()
    log_iters = 0
    while iter_num < max_iters:
        signum = env.agree_max(stop.signum)
        if signum:
            check_finite(first_bad, env, ckpt_path)
            state = snapshot()
            if env.master:
                save_checkpoint(ckpt_path, model, optimizer, mconf, config, state)
            env.print(f"stopped by {signal.Signals(signum).name} at iter {iter_num}: wrote {ckpt_path}; "
                      f"continue with --init_from=resume")
            raise Interrupted(signum)
        lr = get_lr(iter_num, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss, norm = train_step(train_model, task, optimizer, scaler, params, config, env, iter_num)
        step_t += 1
        first_bad = torch.where((first_bad < 0) & ~(loss.isfinite() & norm.isfinite()), step_t, first_bad)
        loss_sum += loss
        iter_num += 1
        loss_steps += 1
        log_iters += 1

        if iter_num % config["log_interval"] == 0 or iter_num == max_iters:
            check_finite(first_bad, env, ckpt_path)  # the one host sync of a logging step
            dt = (time.time() - t_log) / log_iters
            mfu = model.estimate_mfu(tokens_per_iter, dt, peak)
            env.print(f"iter {iter_num}/{max_iters}: loss {loss.item():.4f}, lr {lr:.2e}, {dt * 1000:.1f} ms/iter, "
                      f"{tokens_per_iter / dt:,.0f} tok/s, mfu {'n/a' if mfu is None else f'{mfu * 100:.1f}%'}, "
                      f"eta {format_time((max_iters - iter_num) * dt)}")
            t_log, log_iters = time.time(), 0

        if iter_num % config["eval_interval"] == 0 or iter_num == max_iters:
            check_finite(first_bad, env, ckpt_path)  # never checkpoint a poisoned model
            train_loss = env.all_reduce(loss_sum.clone()).item() / loss_steps / env.world_size
            loss_sum.zero_()
            loss_steps = 0
            metrics = {"iter": iter_num, "train_loss": train_loss, **eval_metrics(model, task, config, env),
                       "lr": lr, "tokens": iter_num * tokens_per_iter, "time": round(time.time() - t_start, 2)}
            history.append(metrics)
            state = snapshot()
            if env.master:
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(metrics) + "\n")
                save_checkpoint(ckpt_path, model, optimizer, mconf, config, state)
            env.print("eval " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in metrics.items() if k not in ("lr", "tokens", "time")))
            t_log, log_iters = time.time(), 0
    return history


def format_time(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


# -----------------------------------------------------------------------------
# several runs side by side


def run_label(run):
    return run["attn"] + (f" freeze={run['freeze']}" if run["freeze"] else "")


def plan_runs(config):
    """Every (task, attn, freeze, seed) combination, each with its own out_dir when there are several."""
    if config["seeds"] < 1:
        raise ConfigError(f"seeds={config['seeds']} must be at least 1")
    tasks = [t.strip() for t in config["task"].split(",")]
    attns = split_list(config["attn"], ATTNS, "attn")
    freezes = split_list(config["freeze"], FREEZES, "freeze")
    seeds = range(config["seed"], config["seed"] + config["seeds"])
    runs = [dict(config, task=t, attn=a, freeze=f, seed=s, seeds=1)
            for t in tasks for a in attns for f in freezes for s in seeds]
    for run in runs:
        if len(runs) > 1:
            name = f"{run['task']}-{run['attn']}" + (f"-freeze_{run['freeze']}" if run["freeze"] else "")
            run["out_dir"] = os.path.join(config["out_dir"], name + (f"-s{run['seed']}" if len(seeds) > 1 else ""))
            run["fresh_if_missing"] = True  # resuming a comparison starts the runs that never began
    return runs


def summarize(runs, histories):
    """Final metrics per (task, variant): mean and std over seeds."""
    groups = {}
    for run, history in zip(runs, histories):
        groups.setdefault((run["task"], run_label(run)), []).append(history[-1])
    table = []
    for (task_name, label), finals in groups.items():
        keys = [k for k in finals[0] if k not in ("iter", "lr", "tokens", "time")]
        stats = {k: (float(np.mean([f[k] for f in finals])), float(np.std([f[k] for f in finals]))) for k in keys}
        table.append({"task": task_name, "variant": label, "seeds": len(finals), "iter": finals[0]["iter"], **stats})
    return table


def markdown_table(table):
    keys = [k for k in table[0] if isinstance(table[0][k], tuple)]
    for row in table[1:]:
        keys += [k for k in row if isinstance(row[k], tuple) and k not in keys]
    cell = lambda v: "" if v is None else f"{v[0]:.4f}" + (f" ± {v[1]:.4f}" if v[1] else "")
    lines = ["| task | variant | seeds | iters | " + " | ".join(keys) + " |", "|---" * (len(keys) + 4) + "|"]
    for row in table:
        lines.append(f"| {row['task']} | {row['variant']} | {row['seeds']} | {row['iter']} | "
                     + " | ".join(cell(row.get(k)) for k in keys) + " |")
    return "\n".join(lines)


PANELS = {"val_acc": ("accuracy on the evaluation split", "accuracy (fraction of answers)", (-0.02, 1.02)),
          "val_loss": ("evaluation loss", "cross-entropy (nats)", None),
          "induction_score": ("best head's induction score", "prefix-matching attention", (-0.02, 1.02))}


def plot_comparison(runs, histories, path):
    """Accuracy, validation loss (and the induction score where measured) against steps, one colour per
    variant, mean over seeds with a ± std band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(run["task"] for run in runs))
    ncols = 3 if any("induction_score" in h[-1] for h in histories) else 2
    fig, axes = plt.subplots(len(tasks), ncols, figsize=(5.5 * ncols, 3.6 * len(tasks)), squeeze=False)
    styles = {"": "-", "mlp": "--", "blocks": ":"}
    for row, task_name in zip(axes, tasks):
        curves = {}
        for run, history in zip(runs, histories):
            if run["task"] == task_name:
                curves.setdefault((run["attn"], run["freeze"]), []).append(history)
        keys = [k for k in PANELS if k in curves[next(iter(curves))][0][-1]]
        for (attn_name, frz), hs in curves.items():
            steps = [m["iter"] for m in hs[0]]
            for ax, key in zip(row, keys):
                values = np.array([[m[key] for m in h[:len(steps)]] for h in hs])
                mean, std = values.mean(0), values.std(0)
                label = attn_name + (f" freeze={frz}" if frz else "")
                ax.plot(steps, mean, styles[frz], color=COLORS[attn_name], label=label)
                if len(hs) > 1:
                    ax.fill_between(steps, mean - std, mean + std, color=COLORS[attn_name], alpha=0.2)
        for ax, key in zip(row, keys):
            title, ylabel, ylim = PANELS[key]
            ax.set(title=f"{task_name}: {title}", xlabel="optimizer step", ylabel=ylabel)
            if ylim:
                ax.set_ylim(*ylim)
            ax.grid(alpha=0.3)
            ax.legend()
        for ax in row[len(keys):]:
            ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(runs, histories, out_dir, env, seconds):
    table = summarize(runs, histories)
    text = markdown_table(table)
    env.print("\n" + text)
    if env.master:
        seeds = sorted({r["seed"] for r in runs})
        with open(os.path.join(out_dir, "results.md"), "w") as f:
            f.write(f"# {', '.join(dict.fromkeys(r['task'] for r in runs))}\n\nFinal metrics"
                    + (f", mean ± std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else "")
                    + f". {len(runs)} runs in {format_time(seconds)} on {env.describe()}.\n\n{text}\n")
        plot_comparison(runs, histories, os.path.join(out_dir, "compare.png"))
        env.print(f"wrote {os.path.join(out_dir, 'results.md')} and {os.path.join(out_dir, 'compare.png')}")
    return table


def build_tasks(runs):
    """The tasks of the runs; every model config and resume checkpoint is checked before anything is written."""
    tasks = {}
    for run in runs:
        if run["task"] not in tasks:
            try:
                tasks[run["task"]] = make_task(run["task"], run["block_size"], run["data_dir"], run["eval_iters"],
                                               run["eval_split"])
            except ValueError as e:
                raise ConfigError(str(e)) from None
        model_config(run, tasks[run["task"]])
    ckpts = [os.path.join(run["out_dir"], "ckpt.pt") for run in runs]
    if runs[0]["init_from"] == "resume" and not any(map(os.path.isfile, ckpts)):
        raise ConfigError(f"--init_from=resume: no checkpoint at {ckpts[0] if len(ckpts) == 1 else ' or '.join(ckpts[:2])}"
                          + (f" (or {len(ckpts) - 2} more)" if len(ckpts) > 2 else ""))
    return tasks


def check_writable(out_dir):
    try:
        os.makedirs(out_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as e:
        raise ConfigError(f"out_dir={out_dir} is not writable ({e.strerror}); choose another --out_dir") from None


def main(argv):
    config = parse_config(argv)
    runs = plan_runs(config)
    tasks = build_tasks(runs)
    env = Env(config)
    if env.device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    stop = Stop()
    try:
        check_writable(config["out_dir"])
        start = time.time()
        histories = [train_run(run, tasks[run["task"]], env, stop) for run in runs]
        if len(runs) > 1:
            report(runs, histories, config["out_dir"], env, time.time() - start)
    finally:
        stop.restore()
        if env.ddp:
            dist.destroy_process_group()


def cli(argv):
    """Run main: bad input ends in one line on stderr and exit status 2, a run that cannot go on in one line and
    status 1, a SIGTERM or Ctrl-C (after its checkpoint) in 128 + the signal number; never a traceback."""
    try:
        main(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        return 128 + e.args[0]
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
