"""
What every mixit script shares and the model does not need: the command line and its errors, the configurator,
the device, dtype and process set-up, the peak FLOP/s of the hardware, and checkpoints.
"""
import ast
import datetime
import functools
import gc
import hashlib
import os
import signal
import sys
import tempfile
import time
import types
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

# ----------------------------------------------------------------------------- errors and the command line

class ConfigError(Exception):
    """Bad input: reported in one line, exit status 2."""


class TrainingError(Exception):
    """A run that cannot go on (a non-finite loss, out of memory, ranks that disagree): one line, exit status 1."""


class Interrupted(Exception):
    """Stopped by a signal after writing a checkpoint; args[0] is the signal number."""


class Stop:
    """SIGTERM, SIGUSR1 (SLURM's warning before a pre-emption) and Ctrl-C set a flag: the run checkpoints after the
    step it reads it in, and exits; a second Ctrl-C stops at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self):
        self.signum = 0
        self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}

    def handle(self, signum, frame):
        if self.signum == signal.SIGINT == signum:
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def cli(main, argv):
    """Run main(argv) and return its exit status: an error's one line on stderr (2, 1), 128 + a signal; no traceback."""
    try:
        main(argv)
    except (ConfigError, TrainingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
    except Interrupted as e:
        return 128 + e.args[0]
    return 0


def format_time(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


# ----------------------------------------------------------------------------- configuration

def defaults_of(namespace):
    """The plain values (int, float, str, bool) of a script's globals: its options."""
    return {k: v for k, v in namespace.items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}


def rule_that(holds, problem):
    """An option's rule: None where holds(value), else the problem."""
    return lambda value: None if holds(value) else problem


positive = rule_that(lambda v: v > 0, "must be positive")
non_negative = rule_that(lambda v: v >= 0, "must be zero or positive")
unit_interval = rule_that(lambda v: 0 <= v < 1, "must lie in [0, 1)")


class OneOf(tuple):
    """A rule: the value must be one of these (of any type: compile takes 'auto', True or False)."""

    def __call__(self, value):
        return None if value in self else "valid: " + ", ".join(repr(v) if v == "" else str(v) for v in self)


def split_list(text, name, rule):
    """The items of a comma-list option, each held to rule (OneOf or rule_that): the first that breaks it is named."""
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if problem := rule(item):
            raise ConfigError(f"unknown {name} {item!r}; {problem}")
    return items


def parse_literal(key, text, default, rule):
    """--key=text's value: a string option keeps the text (unless it names a non-string choice), else a literal."""
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
    if rule and (problem := rule(value)):
        raise ConfigError(f"{key}={value!r} in {source}: {problem}")
    return value


def configure(defaults, argv, rules=None, files=True):
    """The options: defaults, then config files (Python, run as code as in nanoGPT: use files you trust) and --key=value
    overrides (a bare --flag turns a bool on), in order. Unknown keys, wrong types, broken rules: ConfigErrors."""
    rules, config = rules or {}, dict(defaults)
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if key not in defaults:
                raise ConfigError(f"unknown option --{key}; valid: {', '.join('--' + k for k in sorted(defaults))}")
            if not eq and not isinstance(defaults[key], bool):
                raise ConfigError(f"--{key} needs a value: --{key}=...")
            value = parse_literal(key, text if eq else "True", defaults[key], rules.get(key))
            config[key] = check(key, value, defaults, rules, f"--{key}")
        elif files and os.path.isfile(arg):
            namespace = {}
            try:
                exec(open(arg).read(), namespace)
            except Exception as e:
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
            for key, value in namespace.items():
                if not key.startswith("_") and not callable(value) and not hasattr(value, "__file__"):
                    config[key] = check(key, value, defaults, rules, arg)
        else:
            raise ConfigError(f"config file not found: {arg} (options are written --key=value)" if files else
                              f"unexpected argument {arg!r}; options are written --key=value")
    return config


# ----------------------------------------------------------------------------- device, dtype, processes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # no float16: the residual stream could overflow


@dataclass
class Env:
    """Where this process computes: its device and autocast dtype, and its place among torchrun's processes."""
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    rank: int = 0
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
            f"{self.device_type} ({torch.get_num_threads()} thread{'s' * (torch.get_num_threads() > 1)})"
        return f"{self.world_size} x {name}, {str(self.dtype).removeprefix('torch.')}, torch {torch.__version__}"

    def to_device(self, *tensors):
        cuda = self.device_type == "cuda"  # from pinned memory, the copy overlaps the GPU's work
        return [(t.pin_memory() if cuda else t).to(self.device, non_blocking=cuda) for t in tensors]

    def all_reduce(self, tensor):
        if self.ddp:
            dist.all_reduce(tensor)
        return tensor

    def agree(self, values):
        """Every process's integers summed by a host-side collective started now: the returned wait() reads them (a
        step later: the device runs on meanwhile), alike at every process."""
        t = torch.tensor(values, dtype=torch.int64)
        work = dist.all_reduce(t, group=self.control, async_op=True) if self.ddp else None
        return types.SimpleNamespace(wait=lambda: (work and work.wait(), t.tolist())[1])

    def from_master(self, value):
        """The master process's value (a float) at every process; the others' are not read."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        return dist.broadcast(t, 0, group=self.control) or t.item() if self.ddp else value

    def agree_max(self, value):
        """The largest of every process's integer value (a host-side collective)."""
        if not self.ddp:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return int(t.item())

    def check_same(self, values, what):
        """Under DDP every process must hold the same values: each one's digest of them must be the largest."""
        mine = int.from_bytes(hashlib.sha256(repr(values).encode()).digest()[:7], "little")
        if self.agree_max(int(self.agree_max(mine) != mine)):
            raise TrainingError(f"rank {self.rank}: {what} differ between processes; every rank must run the same "
                                f"code with the same seed")


def pick_device(name, local_rank=0, ddp=False):
    """torch.device for 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; a CUDA device always has an index (set_device's)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N, mps")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but CUDA is not available here; valid: cpu"
                              + (", mps" if torch.backends.mps.is_available() else ""))
        if device.index is None:  # cuda:LOCAL_RANK, or the one GPU visible (a launcher gave each task its own)
            device = torch.device("cuda", local_rank if torch.cuda.device_count() > 1 else 0)
        elif ddp:
            raise ConfigError(f"device={name} under torchrun: every process needs its own GPU; use device=cuda "
                              f"(process k takes cuda:LOCAL_RANK)")
        if device.index >= (count := torch.cuda.device_count()):
            raise ConfigError(f"device={device} but this machine has {count} GPU(s); valid: cuda:0 .. cuda:{count - 1}")
        torch.cuda.set_device(device)
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={name} but MPS is not available here; valid: cpu")
    return device


def pick_dtype(name, device):
    """The autocast dtype: 'auto' is bfloat16 on a CUDA GPU that has it, else float32."""
    if name == "auto":
        name = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype {name!r}; valid: auto, {', '.join(DTYPES)}")
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name(device)}; valid: float32")
    return DTYPES[name]


def setup(device="auto", dtype="auto"):
    """The Env of this process: alone, or one of torchrun's (RANK set) in their group (nccl on CUDA, else gloo)."""
    ddp, rank, world_size = "RANK" in os.environ, int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dev = pick_device(device, int(os.environ.get("LOCAL_RANK", 0)), ddp)
    env = Env(dev, pick_dtype(dtype, dev), rank, world_size, ddp)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # float32 on the tensor cores
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
    ("RTX 3090", 71, 35.6), ("V100", 125, 15.7), ("T4", 65, 8.1)]


def synchronize(device):
    """Wait for the work queued on a GPU (a CPU's is done when a call returns)."""
    if device.type in ("cuda", "mps"):
        getattr(torch, device.type).synchronize()


@functools.cache  # once per process, device and dtype
def measure_matmul(device, dtype, n=1024, seconds=1.0):
    """A matmul's rate through the linear layers' kernel: the best mean over groups of n^3 products of ~0.1 s."""
    a, b, out = torch.randn(3, n, n, device=device).to(dtype).unbind()

    def mean_time(calls):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.ops.aten.linear.out(a, b, None, out=out)
        synchronize(device)
        return (time.perf_counter() - t0) / calls

    mean_time(1)  # warm-up
    calls, start = max(1, round(0.1 / mean_time(1))), time.perf_counter()
    best = mean_time(calls)
    while time.perf_counter() - start < seconds:
        best = min(best, mean_time(calls))
    return 2 * n ** 3 / best


def peak_flops(device, dtype=torch.float32):
    """Peak matmul FLOP/s in dtype: a known GPU's datasheet (float32 means TF32), measured on a CPU, else None."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, low, tf32 in GPU_PEAK_TFLOPS:
            if key in name:
                return 1e12 * (tf32 if dtype == torch.float32 else low)
    return measure_matmul(device, dtype) if device.type == "cpu" else None


# ----------------------------------------------------------------------------- checkpoints

CKPT_KEYS = ("model", "model_args", "config")


def load_checkpoint(path, device="cpu"):
    """A train.py checkpoint, read with weights_only (it runs no code); anything else is a one-line ConfigError."""
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
    if missing := [k for k in CKPT_KEYS if k not in ckpt] if isinstance(ckpt, dict) else list(CKPT_KEYS):
        raise ConfigError(f"{path} is not a mixit checkpoint (missing {', '.join(missing)})")
    return ckpt


def fingerprint(model):
    """Per layer, 16 entries of each head's fixed mixing matrix (or None): checkpoints keep these, not the matrices."""
    return [b.attn.mixing[:, -1, :16].float().tolist() if b.attn.kind == "mixing" else None for b in model.blocks]


def check_fingerprint(model, ckpt, path):
    """The mixing matrices rebuilt from the seed must be those the checkpoint trained with (to bfloat16's precision:
    another generator differs everywhere by the noise itself)."""
    saved = ckpt.get("fingerprint") or []  # a layer it has no entry for has nothing to compare: refused
    for layer, b in enumerate(fingerprint(model)):
        a = saved[layer] if layer < len(saved) else None
        if b is not None and not (a and torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-2, atol=1e-4)):
            raise ConfigError(f"{path}: the fixed mixing matrix of layer {layer} cannot be rebuilt here (its seed "
                              f"gives other values): the checkpoint comes from another version of mixit")


def load_weights(ckpt, path, build, optimizer=None):
    """The model build() makes with the weights of ckpt (read from path), and optimizer with its state."""
    try:
        model = build()
        check_fingerprint(model, ckpt, path)
        model.load_state_dict(ckpt["model"])
        if optimizer:
            optimizer.load_state_dict(ckpt["optimizer"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return model


def write_atomic(path, write):
    """write(f) into path.tmp, fsync, then rename it to path: a kill mid-write leaves the last file intact."""
    with open(path + ".tmp", "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def check_writable(out_dir):
    """Make out_dir and write a file there, or end in one line naming it."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as e:
        raise ConfigError(f"out_dir={out_dir} is not writable ({e.strerror}); choose another --out_dir") from None


def save_checkpoint(paths, model, optimizer, mconf, config, state):
    """A checkpoint at each path, written atomically: no fixed mixing matrices (their fingerprint), only what
    weights_only reads."""
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": asdict(mconf),
            "fingerprint": fingerprint(model), "config": config, **state}  # no RNG state: training draws none
    for path in paths:
        write_atomic(path, lambda f: torch.save(ckpt, f))
