"""
What every mixit script shares and the model does not need: the command line and its errors,
the configurator, the device, dtype and process set-up, the peak FLOP/s of the hardware, and
checkpoints.
"""
import ast
import datetime
import errno
import fcntl
import functools
import gc
import hashlib
import io
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from contextlib import nullcontext, suppress
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

# --------------------------------------------------------------------- errors and the command line

class ConfigError(Exception):
    """Bad input: reported in one line, exit status 2."""


class TrainingError(Exception):
    """A run that cannot go on (a non-finite loss, out of memory, ranks that disagree): one line,
    exit status 1."""


# Bad input ends in exit status 2, a run that cannot go on in 1.
EXIT_STATUS = {ConfigError: 2, TrainingError: 1}


class Interrupted(BaseException):
    """Stopped by a signal; args[0] is the signal number, args[1] (if any) the line that says so. A
    BaseException, as KeyboardInterrupt: no handler of ordinary errors takes it for one."""


def early_stop_line(signum):
    return f"stopped by {signal.Signals(signum).name} before the first step: nothing was saved"


class Stop:
    """A request to stop: the run checkpoints after the step it reads it in, and exits; before the
    first step, it stops at once, as nothing is saved yet. It comes as SIGTERM, SIGUSR1 (SLURM's
    warning before a pre-emption), Ctrl-C, or another signal torchrun forwards (SIGHUP, SIGQUIT);
    under torchrun, a worker whose launcher died asks as at SIGHUP."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self):
        self.signum = 0
        self.asked_at = 0.0
        # train.py's loop sets it to False before the first step
        self.starting = True
        self.watching = True
        self.previous = {signum: signal.signal(signum, self.handle) for signum in self.SIGNALS}
        if "TORCHELASTIC_RUN_ID" in os.environ:
            self.launcher = os.getppid()
            threading.Thread(target=self.watch_launcher, daemon=True).start()

    def handle(self, signum, frame):
        # The first request counts, its copies do not (a worker gets its own and torchrun's), but a
        # Ctrl-C more than 2 s after the first stops at once.
        if not self.signum:
            self.signum = signum
            self.asked_at = time.monotonic()
            if self.starting:
                raise Interrupted(signum, early_stop_line(signum))
        elif signum == signal.SIGINT and time.monotonic() - self.asked_at > 2:
            raise KeyboardInterrupt

    def watch_launcher(self):
        # Under torchrun, this thread looks at the launcher every 0.5 s, from start-up (rendezvous,
        # model, data) on. A worker whose launcher died before it looked has init (pid 1) for
        # parent.
        while self.watching:
            time.sleep(0.5)
            if self.watching and (os.getppid() != self.launcher or self.launcher == 1):
                os.kill(os.getpid(), signal.SIGHUP)
                # Before the first step, the main thread may wait in a call that never returns to
                # Python (a rendezvous with the launcher's store gone): then the process ends here.
                time.sleep(5)
                if self.starting and not self.signum:
                    print_line(early_stop_line(signal.SIGHUP))
                    os._exit(128 + signal.SIGHUP)
                return

    def restore(self):
        self.watching = False
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def print_line(line):
    """Write one line to stderr in a single write: lines from processes sharing the stream never
    run together."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def cli(main, argv):
    """Run main(argv) and return its exit status: an error's one line on stderr (2, 1), or 128 + a
    signal; no traceback."""
    try:
        main(argv)
    except (ConfigError, TrainingError) as e:
        print_line(f"error: {e}")
        return EXIT_STATUS[type(e)]
    except Interrupted as e:
        if len(e.args) > 1:
            print_line(e.args[1])
        return 128 + e.args[0]
    except KeyboardInterrupt:
        print_line("stopped at once by Ctrl-C, without a checkpoint")
        return 128 + signal.SIGINT
    # a collective that lost another process of the job (which says why in its own line)
    except RuntimeError as e:
        if not isinstance(e, dist.DistError) and "gloo" not in str(e):
            raise
        print_line(f"error: rank {os.environ.get('RANK')}: lost another process ({str(e)[:150]})")
        return 1
    return 0


def format_time(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes}m{seconds:02d}s"


# ----------------------------------------------------------------------------------- configuration

def defaults_of(namespace):
    """The plain values (int, float, str, bool) of a script's globals: its options. Names in
    capitals are constants, imported or its own, never options."""
    return {k: v for k, v in namespace.items()
            if k.islower() and not k.startswith("_") and isinstance(v, (int, float, str, bool))}


def rule_that(holds, problem):
    """An option's rule: None where holds(value), else the problem."""
    return lambda value: None if holds(value) else problem


positive = rule_that(lambda v: v > 0, "must be positive")
non_negative = rule_that(lambda v: v >= 0, "must be zero or positive")
unit_interval = rule_that(lambda v: 0 <= v < 1, "must lie in [0, 1)")


class OneOf(tuple):
    """A rule: the value must be one of these (of any type: compile takes 'auto', True or False)."""

    def __call__(self, value):
        if value in self:
            return None
        return "valid: " + ", ".join(repr(v) if v == "" else str(v) for v in self)


def split_list(text, name, rule):
    """The items of a comma-list option, each held to rule (OneOf or rule_that): the first that
    breaks it is named."""
    items = [item.strip() for item in text.split(",")]
    for item in items:
        problem = rule(item)
        if problem:
            raise ConfigError(f"unknown {name} {item!r}; {problem}")
    return items


def parse_literal(key, text, default, rule):
    """--key=text's value: a string option keeps the text (unless it names a non-string choice),
    else a literal."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    names_a_choice = isinstance(rule, OneOf) and value in rule and value not in ("", None)
    if isinstance(default, str) and not names_a_choice:
        return text
    if value is None:
        raise ConfigError(f"--{key}={text}: expected a {type(default).__name__}, "
                          f"like --{key}={default!r}")
    return value


def check(key, value, defaults, rules, source):
    """value for option key, type-checked against its default and held to its rule."""
    if key not in defaults:
        raise ConfigError(f"unknown option {key!r} in {source}; "
                          f"valid: {', '.join(sorted(defaults))}")
    default = defaults[key]
    rule = rules.get(key)
    if isinstance(default, float) and type(value) is int:
        value = float(value)
    if not (isinstance(rule, OneOf) and value in rule) and type(value) is not type(default):
        raise ConfigError(f"{key}={value!r} in {source}: expected a {type(default).__name__}, "
                          f"like {default!r}")
    problem = rule and rule(value)
    if problem:
        raise ConfigError(f"{key}={value!r} in {source}: {problem}")
    return value


def configure(defaults, argv, rules=None, files=True):
    """The options: defaults, then config files (Python, run as code as in nanoGPT: use files you
    trust) and --key=value overrides (a bare --flag turns a bool on), in order. Unknown keys, wrong
    types, broken rules: ConfigErrors."""
    rules = rules or {}
    config = dict(defaults)
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if key not in defaults:
                raise ConfigError(f"unknown option --{key}; "
                                  f"valid: {', '.join('--' + k for k in sorted(defaults))}")
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
                # Options only: no private names, functions, classes or modules.
                if key.startswith("_") or callable(value) or hasattr(value, "__file__"):
                    continue
                config[key] = check(key, value, defaults, rules, arg)
        else:
            raise ConfigError(f"config file not found: {arg} (options are written --key=value)"
                              if files else
                              f"unexpected argument {arg!r}; options are written --key=value")
    return config


# ------------------------------------------------------------------------ device, dtype, processes

def cpu_model():
    """The CPU's model name, from Linux's /proc/cpuinfo; None where it gives none."""
    if os.path.isfile("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":")[1].strip()


# No float16: the residual stream could overflow it.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Env:
    """Where this process computes: its device and autocast dtype, and its place among torchrun's
    processes."""
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    rank: int = 0
    world_size: int = 1
    ddp: bool = False
    # Under nccl, a gloo group whose collectives run on the CPU: agreeing on a flag then costs no
    # GPU sync.
    control: object = None

    @property
    def device_type(self):
        return self.device.type

    @property
    def master(self):
        return self.rank == 0

    def autocast(self):
        if self.dtype == torch.float32:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def print(self, line):
        if self.master:
            print(line, flush=True)

    def describe(self):
        """The hardware behind a measurement: processes, device model, the matmul rate that mfu
        reads (a GPU's from its datasheet), a CPU's threads, dtype, torch version."""
        peak = peak_flops(self.device, self.dtype)
        rate = f"matmul {peak / 1e9:,.0f} GFLOP/s" if peak else "matmul rate unknown"
        threads = f"{torch.get_num_threads()} threads"
        if torch.get_num_threads() == 1:
            threads = "1 thread"
        name = f"{cpu_model() or self.device_type} ({threads}, {rate})"
        if self.device_type == "cuda":
            name = f"{torch.cuda.get_device_name(self.device)} (datasheet {rate})"
        return (f"{self.world_size} x {name}, {str(self.dtype).removeprefix('torch.')}, "
                f"torch {torch.__version__}")

    def to_device(self, *tensors):
        # From pinned memory, the copy to a GPU overlaps the GPU's work.
        cuda = self.device_type == "cuda"
        return [(t.pin_memory() if cuda else t).to(self.device, non_blocking=cuda) for t in tensors]

    def all_reduce(self, tensor):
        if self.ddp:
            dist.all_reduce(tensor)
        return tensor

    def agree(self, values):
        """Every process's integers summed by a collective on the CPU, started now: the returned
        function waits for them (a step later: the device runs on meanwhile), alike at every
        process."""
        summed = torch.tensor(values, dtype=torch.int64)
        work = dist.all_reduce(summed, group=self.control, async_op=True) if self.ddp else None

        def wait():
            if work:
                work.wait()
            return summed.tolist()
        return wait

    def from_master(self, value):
        """The master process's value (a float) at every process; the others' are not read."""
        if not self.ddp:
            return value
        sent = torch.tensor([float(value)], dtype=torch.float64)
        dist.broadcast(sent, 0, group=self.control)
        return sent.item()

    def master_does(self, action, what):
        """action() at the master, which returns its result; the others wait for it and return None.
        Where it fails (a ConfigError or TrainingError), the master raises that error and each other
        process one of the same kind (its exit status) that says what failed."""
        result = None
        if self.master:
            try:
                result = action()
            except (ConfigError, TrainingError) as e:
                self.from_master(EXIT_STATUS[type(e)])
                raise
        # The master's exit status, 0 where action() succeeded.
        status = self.from_master(0)
        if status:
            error = ConfigError if status == 2 else TrainingError
            raise error(f"rank {self.rank}: stopped as rank 0 failed to {what}")
        return result

    def agree_max(self, value):
        """The largest of every process's integer value (a collective on the CPU)."""
        if not self.ddp:
            return value
        largest = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=self.control)
        return int(largest.item())

    def check_same(self, values, what):
        """Under DDP every process must hold the same values: each one's digest of them must be the
        largest."""
        mine = int.from_bytes(hashlib.sha256(repr(values).encode()).digest()[:7], "little")
        if self.agree_max(int(self.agree_max(mine) != mine)):
            raise TrainingError(f"rank {self.rank}: {what} differ between processes; every rank "
                                f"must run the same code with the same seed")


def pick_device(name, local_rank=0, ddp=False):
    """torch.device for 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; a CUDA device always has an index
    (set_device's)."""
    has_cuda = torch.cuda.is_available()
    has_mps = torch.backends.mps.is_available()
    if name == "auto":
        name = "mps" if has_mps else "cpu"
        if has_cuda:
            name = "cuda"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N, mps")
    if device.type == "mps" and not has_mps:
        raise ConfigError(f"device={name} but MPS is not available here; valid: cpu")
    if device.type != "cuda":
        return device
    if not has_cuda:
        valid = "cpu, mps" if has_mps else "cpu"
        raise ConfigError(f"device={name} but CUDA is not available here; valid: {valid}")
    count = torch.cuda.device_count()
    if device.index is None:
        # cuda:LOCAL_RANK, or the one GPU visible (a launcher gave each task its own)
        device = torch.device("cuda", local_rank if count > 1 else 0)
    elif ddp:
        raise ConfigError(f"device={name} under torchrun: every process needs its own GPU; use "
                          f"device=cuda (process k takes cuda:LOCAL_RANK)")
    if device.index >= count:
        raise ConfigError(f"device={device} but this machine has {count} GPU(s); valid: cuda:0 .. "
                          f"cuda:{count - 1}")
    torch.cuda.set_device(device)
    return device


def pick_dtype(name, device):
    """The autocast dtype: 'auto' is bfloat16 on a CUDA GPU that has it, else float32."""
    cuda = device.type == "cuda"
    if name == "auto":
        name = "bfloat16" if cuda and torch.cuda.is_bf16_supported() else "float32"
    if name == "bfloat16" and cuda and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype=bfloat16 is not supported by "
                          f"{torch.cuda.get_device_name(device)}; valid: float32")
    return DTYPES[name]


def setup(device="auto", dtype="auto"):
    """The Env of this process: alone, or one of torchrun's (RANK set) in their group (nccl on CUDA,
    else gloo)."""
    ddp = "RANK" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    dev = pick_device(device, int(os.environ.get("LOCAL_RANK", 0)), ddp)
    env = Env(dev, pick_dtype(dtype, dev), rank, world_size, ddp)
    cuda = dev.type == "cuda"
    if cuda:
        # float32 matmuls on the tensor cores (TF32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if ddp:
        # A rank that dies ends the others' waits after this, rather than hang them.
        timeout = datetime.timedelta(minutes=10)
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, timeout=timeout, device_id=dev if cuda else None)
        if cuda:
            env.control = dist.new_group(backend="gloo", timeout=timeout)
    return env


def teardown(env):
    """Destroy env's process groups (if any; env None: none) while Python is still alive: a gloo
    group whose last reference (a DDP wrapper in a reference cycle, env.control) is freed during
    interpreter shutdown can abort the process on exit."""
    if env and env.ddp and dist.is_initialized():
        env.control = None
        gc.collect()
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------- peak FLOP/s

# Dense tensor-core peak TFLOP/s (bf16/fp16, then tf32) by device name; the first substring that
# matches wins (a GH200 reads as an H200).
GPU_PEAK_TFLOPS = [
    ("H100 PCIe", 756, 378), ("H100 NVL", 835, 418), ("H100", 989, 494), ("H200 NVL", 835, 418),
    ("H200", 989, 494), ("H800", 989, 494), ("B200", 2250, 1100),
    ("A100", 312, 156), ("A800", 312, 156), ("L40S", 362, 183), ("L40", 181, 90.5), ("L4", 121, 60),
    ("A10", 125, 62.5), ("RTX 4090", 165, 82.6), ("RTX 3090", 71, 35.6), ("V100", 125, 15.7),
    ("T4", 65, 8.1)]


def synchronize(device):
    """Wait for the work queued on a GPU (a CPU's is done when a call returns)."""
    if device.type in ("cuda", "mps"):
        getattr(torch, device.type).synchronize()


# measured once per process, device and dtype
@functools.cache
def measure_matmul(device, dtype, n=1024, seconds=1.0):
    """A matmul's rate through the linear layers' kernel: the best mean over groups of n^3 products
    of ~0.1 s."""
    a, b, out = torch.randn(3, n, n, device=device).to(dtype).unbind()

    def mean_time(calls):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.ops.aten.linear.out(a, b, None, out=out)
        synchronize(device)
        return (time.perf_counter() - t0) / calls

    mean_time(1)  # warm-up
    calls = max(1, round(0.1 / mean_time(1)))
    start = time.perf_counter()
    best = mean_time(calls)
    while time.perf_counter() - start < seconds:
        best = min(best, mean_time(calls))
    return 2 * n ** 3 / best


def peak_flops(device, dtype=torch.float32):
    """Peak matmul FLOP/s in dtype: a known GPU's datasheet (float32 means TF32), measured on a CPU,
    else None."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, low, tf32 in GPU_PEAK_TFLOPS:
            if key in name:
                return 1e12 * (tf32 if dtype == torch.float32 else low)
    return measure_matmul(device, dtype) if device.type == "cpu" else None


# ------------------------------------------------------------------------------------- checkpoints

CKPT_KEYS = ("model", "model_args", "config")


def load_checkpoint(path, device):
    """A train.py checkpoint, read with weights_only (it runs no code); anything else is a one-line
    ConfigError."""
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        runs = []
        if os.path.isdir(folder):
            runs = sorted(run for run in os.listdir(folder)
                          if os.path.isfile(os.path.join(folder, run, "ckpt.pt")))
        listing = f"; runs inside: {', '.join(runs)}" if runs else ""
        raise ConfigError(f"no checkpoint at {path}{listing}")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        reason = (str(e).strip().splitlines() or [""])[0][:120]
        raise ConfigError(f"{path} is not a readable checkpoint "
                          f"({type(e).__name__}: {reason})") from None
    missing = [k for k in CKPT_KEYS if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise ConfigError(f"{path} is not a mixit checkpoint (missing {', '.join(missing)})")
    return ckpt


def fingerprint(model):
    """Per layer, 16 entries of each head's fixed mixing matrix (or None): checkpoints keep these,
    not the matrices."""
    return [block.attn.mixing[:, -1, :16].float().tolist() if block.attn.kind == "mixing" else None
            for block in model.blocks]


def check_fingerprint(model, ckpt, path):
    """The mixing matrices rebuilt from the seed must be those the checkpoint trained with (to
    bfloat16's precision: another generator differs everywhere by the noise itself)."""
    # A layer the checkpoint has no entry for has nothing to compare against: refused.
    saved = ckpt.get("fingerprint") or []
    for layer, rebuilt in enumerate(fingerprint(model)):
        kept = saved[layer] if layer < len(saved) else None
        if rebuilt is None:
            continue
        if kept and torch.allclose(torch.tensor(kept), torch.tensor(rebuilt), rtol=1e-2, atol=1e-4):
            continue
        raise ConfigError(f"{path}: the fixed mixing matrix of layer {layer} cannot be rebuilt "
                          f"here (its seed gives other values): the checkpoint comes from another "
                          f"version of mixit")


def load_weights(ckpt, path, build, optimizer=None):
    """The model build() makes with the weights of ckpt (read from path), and optimizer with its
    state."""
    try:
        model = build()
        check_fingerprint(model, ckpt, path)
        model.load_state_dict(ckpt["model"])
        if optimizer:
            optimizer.load_state_dict(ckpt["optimizer"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(f"{path} is damaged "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return model


def write_atomic(path, write, room=0):
    """write(f) into path.tmp, fsync, then rename it to path: a kill mid-write leaves the last file
    intact. A failed write (a full disk), or a Ctrl-C within it, leaves it too, and no path.tmp; a
    failed write ends in write_failed's one line, room the bytes the save needs (where known)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        # the rename itself survives a crash once the folder is synced
        folder_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        os.fsync(folder_fd)
        os.close(folder_fd)
    except BaseException as e:
        # at least the last file's size, or what was written before it failed
        room = max([room] + [os.path.getsize(p) for p in (path, tmp) if os.path.isfile(p)])
        with suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise write_failed(path, e, room) from None
        raise


def write_failed(path, error, room=0):
    """The one line (a TrainingError) a failed write of path ends in: its cause, and where the disk
    is full, the room it needs (room bytes, where known)."""
    line = f"could not write {path} ({error.strerror or error})"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        about = f"for about {max(room / 2 ** 20, 0.1):.1f} MB " if room else ""
        line += f": make room {about}in {os.path.dirname(path)} and run again"
    return TrainingError(line)


def check_writable(out_dir):
    """Make out_dir and write a file there, or end in one line naming it."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as e:
        raise ConfigError(f"out_dir={out_dir} is not writable ({e.strerror}); "
                          f"choose another --out_dir") from None


def lock_folder(folder):
    """An out_dir has one run at a time: its flock on folder/.lock (the kernel frees it when the
    process dies), for the with-block this opens; a second run ends in one line."""
    path = os.path.join(folder, ".lock")
    lock = None
    try:
        lock = open(path, "a+")
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # unbuffered: a full disk fails this write, not the close
        lock.truncate(0)
        os.write(lock.fileno(), f"the run of pid {os.getpid()} on {socket.gethostname()}, started "
                                f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read()
        lock.close()
        raise ConfigError(f"{folder} is in use by {holder}: wait for that run to end, or choose "
                          f"another --out_dir") from None
    except OSError as e:
        # a lock opened but not written to is closed
        if lock:
            lock.close()
        raise write_failed(path, e) from None
    return lock


def save_checkpoint(paths, model, optimizer, config, state):
    """A checkpoint at each path, written atomically: no fixed mixing matrices (their fingerprint),
    only what weights_only reads. No RNG state either: training draws none."""
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "model_args": asdict(model.config), "fingerprint": fingerprint(model), "config": config,
            **state}
    # serialized once, in memory: the files' writes are then plain writes, whose failure says why
    # (torch's zip writer on a full disk only says "unexpected pos")
    data = io.BytesIO()
    torch.save(ckpt, data)
    for number, path in enumerate(paths):
        # the files still to write, each as large
        room = data.tell() * (len(paths) - number)
        write_atomic(path, lambda f: f.write(data.getbuffer()), room)
