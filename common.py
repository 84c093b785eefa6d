"""
What every mixit script shares and the model does not need: the configurator, the device, dtype and
process set-up, the peak FLOP/s of the hardware, checkpoints, and the reports and plots of a comparison.
"""
import ast
import datetime
import functools
import gc
import hashlib
import json
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist

from mixit import ATTNS, LETTERS, MIXING, MixiT, MixiTConfig

# ----------------------------------------------------------------------------- errors and the command line


class ConfigError(Exception):
    """Bad input: reported in one line, exit status 2."""


class TrainingError(Exception):
    """A run that cannot go on (a non-finite loss, out of memory, ranks that disagree): one line, exit status 1."""


class Interrupted(Exception):
    """Stopped by a signal after writing a checkpoint; args[0] is the signal number."""


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


def cli(main, argv):
    """Run main(argv): bad input ends in one line on stderr and exit status 2, a run that cannot go on in one
    line and status 1, a SIGTERM or Ctrl-C (after its checkpoint) in 128 + the signal number; never a traceback."""
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


# ----------------------------------------------------------------------------- configuration


def defaults_of(namespace):
    """The plain values (int, float, str, bool) of a script's globals: its options."""
    return {k: v for k, v in namespace.items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}


def positive(value):
    return None if value > 0 else "must be positive"


def non_negative(value):
    return None if value >= 0 else "must be zero or positive"


def unit_interval(value):
    return None if 0 <= value < 1 else "must lie in [0, 1)"


class OneOf(tuple):
    """A rule: the value must be one of these (of any type: compile takes 'auto', True or False)."""

    def __call__(self, value):
        return None if value in self else "valid: " + ", ".join(repr(v) if v == "" else str(v) for v in self)


def parse_literal(key, text, default, rule):
    """A --key=value text as a value: a string option takes the text as it is (unless its choices hold other
    literals, like compile's True/False); anything else must be a Python literal (never evaluated as code)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if isinstance(default, str) and not (isinstance(rule, OneOf) and value in rule and value not in ("", None)):
        return text
    if value is None:
        raise ConfigError(f"--{key}={text}: expected a {type(default).__name__}, like --{key}={default!r}")
    return value


def check(key, value, defaults, rules, source):
    """value for option key, type-checked against its default and held to its rule."""
    if key not in defaults:
        raise ConfigError(f"unknown option {key!r} in {source}; valid: {', '.join(sorted(defaults))}")
    default, rule = defaults[key], rules.get(key)
    if isinstance(default, float) and type(value) is int:
        value = float(value)
    if not (isinstance(rule, OneOf) and value in rule) and type(value) is not type(default):
        raise ConfigError(f"{key}={value!r} in {source}: expected a {type(default).__name__}, like {default!r}")
    problem = rule(value) if rule else None
    if problem:
        raise ConfigError(f"{key}={value!r} in {source}: {problem}")
    return value


def configure(defaults, argv, rules=None, files=True):
    """The options: defaults, then config files (Python, run as code as in nanoGPT: use files you trust) and
    --key=value overrides, in the order given. Unknown keys, wrong types and broken rules are ConfigErrors."""
    rules, config = rules or {}, dict(defaults)
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if key not in defaults:
                raise ConfigError(f"unknown option --{key}; valid: {', '.join('--' + k for k in sorted(defaults))}")
            if not eq:
                raise ConfigError(f"--{key} needs a value: --{key}=...")
            config[key] = check(key, parse_literal(key, text, defaults[key], rules.get(key)), defaults, rules, f"--{key}")
        elif files and os.path.isfile(arg):
            namespace = {}
            try:
                exec(open(arg).read(), namespace)
            except Exception as e:
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
            for key, value in namespace.items():
                if not key.startswith("_") and not callable(value) and not hasattr(value, "__file__"):
                    config[key] = check(key, value, defaults, rules, arg)
        elif files:
            raise ConfigError(f"config file not found: {arg} (options are written --key=value)")
        else:
            raise ConfigError(f"unexpected argument {arg!r}; options are written --key=value")
    return config


# ----------------------------------------------------------------------------- device, dtype, processes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Env:
    """Where this process computes: its device and autocast dtype, and its place among torchrun's processes."""
    device: torch.device
    dtype: torch.dtype
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    ddp: bool = False
    control: object = None  # under nccl, a gloo group on the host: agreeing on a flag costs no GPU sync

    @property
    def device_type(self):
        return self.device.type

    @property
    def master(self):
        return self.rank == 0

    def autocast(self):
        return nullcontext() if self.dtype == torch.float32 else torch.autocast(self.device_type, dtype=self.dtype)

    def print(self, *args, **kwargs):
        if self.master:
            print(*args, **kwargs, flush=True)

    def describe(self):
        """The hardware behind a measurement: processes, device name, dtype, torch version."""
        name = torch.cuda.get_device_name(self.device) if self.device_type == "cuda" else \
            f"{self.device_type} ({torch.get_num_threads()} threads)"
        return f"{self.world_size} x {name}, {str(self.dtype).removeprefix('torch.')}, torch {torch.__version__}"

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

    def check_same(self, values, what):
        """Under DDP every process must hold rank 0's values (a digest of the fixed random parts)."""
        if not self.ddp:
            return
        mine = [int.from_bytes(hashlib.sha256(repr(values).encode()).digest()[:7], "little")]
        if self.agree_max(int(self.broadcast_host(mine) != mine)):
            raise TrainingError(f"rank {self.rank}: {what} differ between processes; every rank must run the same "
                                f"code with the same seed")


def pick_device(name, local_rank=0, ddp=False):
    """torch.device for 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'. A CUDA device always carries its index
    (torch.cuda.set_device needs one): 'cuda' is cuda:LOCAL_RANK, or cuda:0 where the process sees one GPU."""
    valid = "auto, cpu, cuda, cuda:N, mps"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; valid: {valid}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but CUDA is not available here; valid: cpu"
                              + (", mps" if torch.backends.mps.is_available() else ""))
        if device.index is None:  # one GPU visible (a launcher that gives each task its own): that one
            device = torch.device("cuda", local_rank if torch.cuda.device_count() > 1 else 0)
        elif ddp:
            raise ConfigError(f"device={name} under torchrun: every process needs its own GPU; use device=cuda "
                              f"(process k takes cuda:LOCAL_RANK)")
        count = torch.cuda.device_count()
        if device.index >= count:
            raise ConfigError(f"device={device} but this machine has {count} GPU(s); valid: cuda:0 .. cuda:{count - 1}")
        torch.cuda.set_device(device)
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={name} but MPS is not available here; valid: cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r}; valid: {valid}")
    return device


def pick_dtype(name, device):
    """The autocast dtype: 'auto' is bfloat16 on a CUDA GPU that has it, else float32."""
    if name == "auto":
        name = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype {name!r}; valid: auto, {', '.join(DTYPES)}")
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name(device)}; "
                          f"valid: float16, float32")
    return DTYPES[name]


def setup(device="auto", dtype="auto"):
    """The Env of this process: one process, or one of several under torchrun (RANK, LOCAL_RANK and
    WORLD_SIZE set), whose process group it joins (nccl on CUDA, gloo elsewhere)."""
    ddp = "RANK" in os.environ
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    dev = pick_device(device, local_rank, ddp)
    env = Env(dev, pick_dtype(dtype, dev), rank, local_rank, world_size, ddp)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 matmuls on the tensor cores
        torch.backends.cudnn.allow_tf32 = True
    if ddp:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        timeout = datetime.timedelta(minutes=10)  # a rank that dies ends the others' waits, not hangs them
        dist.init_process_group(backend, timeout=timeout, device_id=dev if dev.type == "cuda" else None)
        if backend == "nccl":
            env.control = dist.new_group(backend="gloo", timeout=timeout)
    return env


def teardown(env):
    """Destroy the process groups while Python is still alive: a gloo group whose last reference (a DDP wrapper in
    a reference cycle, env.control) is freed during interpreter shutdown can abort the process on exit."""
    if env.ddp and dist.is_initialized():
        env.control = None
        gc.collect()
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- peak FLOP/s

# dense tensor-core peak TFLOP/s (bf16/fp16, tf32) by device name; the first substring that matches wins
GPU_PEAK_TFLOPS = [
    ("H100 PCIe", 756, 378), ("H100 NVL", 835, 418), ("H100", 989, 494), ("GH200", 989, 494), ("H200 NVL", 835, 418),
    ("H200", 989, 494), ("H800", 989, 494), ("B200", 2250, 1100), ("A100", 312, 156), ("A800", 312, 156),
    ("L40S", 362, 183), ("L40", 181, 90.5), ("L4", 121, 60), ("A10", 125, 62.5), ("RTX 4090", 165, 82.6),
    ("RTX 3090", 71, 35.6), ("V100", 125, 15.7), ("T4", 65, 8.1),
]


@functools.cache  # once per process and dtype
def measure_cpu_peak(dtype, seconds=1.0, n=1024):
    """A CPU's matmul rate: the best mean over groups of back-to-back n^3 products of about 0.1 s each (a step
    is timed by a mean too), through the kernel the linear layers use."""
    a, b, out = torch.randn(3, n, n).to(dtype).unbind()
    matmul = lambda: torch.ops.aten.linear.out(a, b, None, out=out)
    matmul()
    t0 = time.perf_counter()
    matmul()
    calls = max(1, round(0.1 / (time.perf_counter() - t0)))
    best, start = float("inf"), time.perf_counter()
    while best == float("inf") or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        for _ in range(calls):
            matmul()
        best = min(best, (time.perf_counter() - t0) / calls)
    return 2 * n ** 3 / best


def peak_flops(device, dtype=torch.float32):
    """Peak matmul FLOP/s of a device in dtype: the datasheet for known GPUs (float32 means TF32), measured on
    a CPU, None when unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, low, tf32 in GPU_PEAK_TFLOPS:
            if key in name:
                return 1e12 * (tf32 if dtype == torch.float32 else low)
        return None
    return measure_cpu_peak(dtype) if device.type == "cpu" else None


# ----------------------------------------------------------------------------- checkpoints

CKPT_KEYS = ("model", "model_args", "config")


def load_checkpoint(path, device="cpu"):
    """A train.py checkpoint as a dict, tensors and plain values only (torch.load with weights_only: it
    runs no code); anything else is a ConfigError in one line."""
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        runs = sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "ckpt.pt"))) \
            if os.path.isdir(folder) else []
        raise ConfigError(f"no checkpoint at {path}" + (f"; runs inside: {', '.join(runs)}" if runs else ""))
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        reason = (str(e).strip().splitlines() or [""])[0][:120]
        raise ConfigError(f"{path} is not a readable checkpoint ({type(e).__name__}: {reason})") from None
    missing = [k for k in CKPT_KEYS if k not in ckpt] if isinstance(ckpt, dict) else list(CKPT_KEYS)
    if missing:
        raise ConfigError(f"{path} is not a mixit checkpoint (missing {', '.join(missing)})")
    return ckpt


def fingerprint(model):
    """Per layer, the first 16 entries of the last row of each head's fixed mixing matrix (None where the layer has
    none): a checkpoint keeps these in place of the matrices, which are rebuilt from the seed."""
    return [b.attn.mixing[:, -1, :16].float().tolist() if b.attn.kind == "mixing" else None for b in model.blocks]


def check_fingerprint(model, ckpt, path):
    """The mixing matrices rebuilt from the seed must be those the checkpoint trained with (to bfloat16's precision:
    another generator differs everywhere by the noise itself)."""
    rebuilt = fingerprint(model)
    saved = ckpt.get("fingerprint", [[]] * len(rebuilt))
    for layer, (a, b) in enumerate(zip(saved, rebuilt)):
        if b is not None and not (a and torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-2, atol=1e-4)):
            raise ConfigError(f"{path}: the fixed mixing matrix of layer {layer} cannot be rebuilt here (its seed "
                              f"gives other values): the checkpoint comes from another version of mixit")


def load_model(path, device="cpu"):
    """The model of a checkpoint, in eval mode on device, and the checkpoint itself."""
    ckpt = load_checkpoint(path, device)
    try:
        model = MixiT(MixiTConfig(**ckpt["model_args"]), device)
        check_fingerprint(model, ckpt, path)
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return model.eval(), ckpt


def write_atomic(path, write):
    """write(f) into path.tmp, fsync, then rename it to path: a kill mid-write leaves the last file intact."""
    with open(path + ".tmp", "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def save_checkpoint(path, model, optimizer, mconf, config, state):
    """A checkpoint, written atomically: a clean state dict (no fixed mixing matrices: their fingerprint), tensors
    and plain values only, so torch.load(weights_only=True) reads it and runs no code."""
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": asdict(mconf),
            "fingerprint": fingerprint(model), "config": config, **state, "rng": {"torch": torch.get_rng_state()}}
    if torch.cuda.is_available():
        ckpt["rng"]["cuda"] = torch.cuda.get_rng_state_all()
    write_atomic(path, lambda f: torch.save(ckpt, f))


# ----------------------------------------------------------------------------- reports of a comparison


def describe_model(m):
    """What tells variants apart: shape, heads, each layer's attention, the parametrization, frozen W_Q, W_K's init."""
    parts = [f"{m.n_layer} layers x {m.n_embd}, {m.n_head} heads"]
    if m.attn not in ATTNS:
        parts.append("layers " + " ".join(m.layer_attn))
    parts.append(f"MixiT parametrization (multipliers base {m.base_width:g}, skip {m.skip:.3g}, c- {m.cminus:g})"
                 if m.mixit_param else "standard parametrization")
    if "frozen_qk" in m.layer_attn:
        parts.append("frozen W_Q, W_K ~ " + ("N(0, 1/n)" if m.qk_init == "paper" else f"N(0, {m.init_std:g}^2)"))
    if m.depth_alpha:
        parts.append(f"residual (base depth {m.base_depth:g} / layers)^{m.depth_alpha:g}")
    if m.n_classes:
        mixing = not m.causal and any(a in MIXING for a in m.layer_attn)
        parts.append(f"{m.pool} pooling, pads {m.pads}" + (f", {m.centring} centring" if mixing else ""))
    return ", ".join(parts)


def format_time(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


def summarize(runs, histories, label):
    """Final metrics per (task, variant label): mean and sample standard deviation (n - 1) over seeds."""
    groups = {}
    for run, history in zip(runs, histories):
        groups.setdefault((run["task"], label(run)), []).append((run, history[-1]))
    table = []
    for (task_name, variant), members in groups.items():
        finals = [f for _, f in members]
        keys = [k for k in finals[0] if not isinstance(finals[0][k], list) and k not in ("iter", "lr", "tokens")]
        stats = {k: (float(np.mean([f[k] for f in finals])), float(np.std([f[k] for f in finals], ddof=1))
                     if len(finals) > 1 else 0.0) for k in keys}
        table.append({"task": task_name, "variant": variant, "model": members[0][0]["model"], "seeds": len(finals),
                      "iter": finals[0]["iter"], **stats})
    return table


def markdown_table(table):
    keys = list(dict.fromkeys(k for row in table for k in row if isinstance(row[k], tuple)))
    cell = lambda v: "" if v is None else f"{v[0]:.4g}" + (f" ± {v[1]:.2g}" if v[1] else "")
    lines = ["| task | variant | seeds | iters | " + " | ".join(keys) + " | model |", "|---" * (len(keys) + 5) + "|"]
    lines += [f"| {row['task']} | {row['variant']} | {row['seeds']} | {row['iter']} | "
              + " | ".join(cell(row.get(k)) for k in keys) + f" | {row['model']} |" for row in table]
    return "\n".join(lines)


def write_report(runs, histories, label, out_dir, env, seconds):
    """Print the comparison's table; write results.md (the table), runs.json (every run's final metrics and cost),
    compare.png and cost.png into out_dir."""
    text = markdown_table(summarize(runs, histories, label))
    env.print("\n" + text)
    if not env.master:
        return
    seeds = sorted({r["seed"] for r in runs})
    spread = f", mean ± sample std (n - 1) over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else ""
    header = f"# {', '.join(dict.fromkeys(r['task'] for r in runs))}\n\nFinal metrics{spread}. {len(runs)} runs in " \
             f"{format_time(seconds)} on {env.describe()}.\n\n"
    write_atomic(os.path.join(out_dir, "results.md"), lambda f: f.write((header + text + "\n").encode()))
    finals = [{"task": r["task"], "variant": label(r), "attn": r["attn"], "freeze": r["freeze"], "seed": r["seed"],
               "model": r["model"], "samples": h[-1]["iter"] * r["batch_size"] * r["gradient_accumulation_steps"],
               **h[-1]} for r, h in zip(runs, histories)]
    write_atomic(os.path.join(out_dir, "runs.json"), lambda f: f.write(json.dumps(finals, indent=1).encode()))
    plot_comparison(runs, histories, label, os.path.join(out_dir, "compare.png"))
    plot_cost(finals, os.path.join(out_dir, "cost.png"))
    env.print(f"wrote {', '.join(os.path.join(out_dir, f) for f in ('results.md', 'compare.png', 'cost.png'))}")


# ----------------------------------------------------------------------------- plots

COLORS = {"softmax": "tab:blue", "frozen_qk": "tab:orange", "mixing": "tab:green", "learned_mixing": "tab:red"}
PATTERN_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray"]  # hybrids, in turn
FREEZE_STYLES = {"": "-", "mlp": "--", "blocks": ":"}


def pyplot():
    """matplotlib.pyplot drawing to files (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


PANELS = {  # a panel: the metric, what runs along x (iter, flops or time; final: the last eval's list), title, y label
    "val_acc": ("val_acc", "iter", "accuracy", "accuracy (fraction of answers)"),
    "val_loss": ("val_loss", "iter", "evaluation loss", "cross-entropy"),
    "induction_score": ("induction_score", "iter", "best head's induction score", "weight on the token after a match"),
    "acc_flops": ("val_acc", "flops", "accuracy against training FLOPs", "accuracy"),
    "acc_time": ("val_acc", "time", "accuracy against training time", "accuracy"),
    "val_acc_pos": ("val_acc_pos", "final", "final accuracy per answer position", "accuracy"),
    "val_acc_n": ("val_acc_n", "final", "final accuracy by number of pairs", "accuracy"),
    "val_acc_at": ("val_acc_at", "final", "final accuracy by the answer's place", "accuracy"),
    "induction_layers": ("induction_layers", "final", "final induction score per layer (best head)", "induction score")}
X_LABELS = {"iter": "optimizer step", "flops": "training FLOPs", "time": "training time (s)",
            "val_acc_pos": "answer position", "val_acc_n": "key-value pairs in the sequence", "induction_layers": "layer",
            "val_acc_at": "position of the query (the answer follows it)"}
LEVELS = {"val_acc": ("val_acc_chance", "dashed: chance"), "induction_score": ("induction_init", "dashed: at init")}


def variant_colors(runs, label):
    """A colour per variant label: its attention's (a hybrid's from a palette), shaded light to dark where several
    variants share it (MixiT's head counts, unfreezing schedules)."""
    import matplotlib.colors as mcolors
    kind = lambda run: LETTERS.get(run["attn"][0]) if len(set(run["attn"])) == 1 else run["attn"]  # mmmm: mixing
    patterns = list(dict.fromkeys(kind(r) for r in runs if kind(r) not in COLORS))
    base = lambda r: COLORS.get(kind(r)) or PATTERN_COLORS[patterns.index(kind(r)) % len(PATTERN_COLORS)]
    groups = {}
    for run in runs:
        groups.setdefault(base(run), {}).setdefault(label(run), run)
    colors = {}
    for color, members in groups.items():
        for k, name in enumerate(members):
            darkness = 1.0 if len(members) == 1 else 0.35 + 0.65 * k / (len(members) - 1)
            colors[name] = tuple(1 - darkness * (1 - c) for c in mcolors.to_rgb(color))  # blended with white
            if len(members) > 4:  # too many shades to tell apart: a colour map instead
                colors[name] = pyplot().cm.viridis(k / (len(members) - 1))
    return colors


def plot_comparison(runs, histories, label, path):
    """Per task: accuracy and loss against steps, the induction score, accuracy against training FLOPs and time
    (where runs unfreeze), the final accuracy per answer position, by number of pairs and by place and the induction
    score per layer (where measured); one colour per variant, mean over seeds with a band of ± the sample standard
    deviation (for up to 6 variants); dashed, each score's chance level (LEVELS)."""
    plt = pyplot()
    tasks = list(dict.fromkeys(run["task"] for run in runs))
    cost = any(run["unfreeze_at"] != "never" for run in runs)
    panels = {t: [p for p, (key, x, *_) in PANELS.items() if (x not in ("flops", "time") or cost)
                  and any(key in h[-1] for r, h in zip(runs, histories) if r["task"] == t)] for t in tasks}
    ncols, colors = max(map(len, panels.values())), variant_colors(runs, label)
    fig, axes = plt.subplots(len(tasks), ncols, figsize=(5.2 * ncols, 3.6 * len(tasks)), squeeze=False)
    for row, task_name in zip(axes, tasks):
        curves = {}
        for run, history in zip(runs, histories):
            if run["task"] == task_name:
                curves.setdefault(label(run), (run, []))[1].append(history)
        for ax, panel in zip(row, panels[task_name]):
            key, x, title, ylabel = PANELS[panel]
            for name, (run, hs) in curves.items():
                values = np.array([h[-1][key] for h in hs] if x == "final" else [[m[key] for m in h] for h in hs])
                xs = np.arange(values.shape[1]) + (key == "val_acc_n") if x == "final" else \
                    np.mean([[m[x] for m in h] for h in hs], 0)  # measured times differ by seed: their mean
                mean = values.mean(0)
                ax.plot(xs, mean, FREEZE_STYLES[run["freeze"]], color=colors[name], label=name,
                        marker="o" if x == "final" else None)
                if len(hs) > 1 and len(curves) <= 6:  # more bands than that hide the curves
                    std = values.std(0, ddof=1)
                    ax.fill_between(xs, mean - std, mean + std, color=colors[name], alpha=0.2)
                level, note = LEVELS.get(key, (None, ""))
                if level in hs[0][-1]:  # what the score reads with no skill
                    ax.axhline(np.mean([h[-1][level] for h in hs]), ls="--", lw=1,
                               color="gray" if level == "val_acc_chance" else colors[name])  # a task's, a variant's
                    title = f"{PANELS[panel][2]} ({note})"
            ax.set(title=f"{task_name}: {title}", ylabel=ylabel, xlabel=X_LABELS[key if x == "final" else x])
            if key != "val_loss":
                ax.set_ylim(-0.02, 1.02)
            if x == "final":
                ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in row[len(panels[task_name]):]:
            ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cost(finals, path):
    """Final accuracy against training cost, one point per run: the training FLOPs, and the measured training time
    per sample; a colour per variant, a marker per task, each task's chance level dashed."""
    plt = pyplot()
    colors, tasks = variant_colors(finals, lambda r: r["variant"]), list(dict.fromkeys(r["task"] for r in finals))
    markers = {task: "os^DvP*Xh<>p"[k % 12] for k, task in enumerate(tasks)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
    for ax, (what, cost) in zip(axes, (("training FLOPs", lambda r: r["flops"]),
                                       ("training time per sample (ms)", lambda r: 1e3 * r["time"] / r["samples"]))):
        for r in finals:
            ax.scatter(cost(r), r["val_acc"], color=colors[r["variant"]], marker=markers[r["task"]], s=28, alpha=0.85)
        for level in {r["val_acc_chance"] for r in finals if "val_acc_chance" in r}:  # each task's chance level
            ax.axhline(level, color="gray", ls="--", lw=1)
        ax.set(xscale="log", xlabel=what, ylabel="final accuracy", ylim=(-0.02, 1.02), title=f"accuracy against {what}")
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in colors.items()]
    handles += [plt.Line2D([], [], color="black", marker=m, ls="", label=t) for t, m in markers.items()]
    fig.legend(handles=handles, loc="outside right upper", fontsize=7, ncols=1 + len(handles) // 25)
    fig.savefig(path, dpi=110)
    plt.close(fig)
