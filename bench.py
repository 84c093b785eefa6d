"""
Speed of the three variants: training steps, the task generator and cached generation.

  python bench.py                               # preset algo: 2 layers, width 128, T=32, batch 256, vocab 64
  python bench.py --preset=lm                   # small LM: 4 layers, width 256, T=256, batch 8, vocab 4096
  python bench.py --preset=lm --data=wikitext2  # real tokens from data/wikitext2/train.bin (python data.py wikitext2)
  python bench.py --sweep=block_size            # tok/s as the context grows, at a fixed number of tokens per step
  python bench.py --sweep=n_embd                # ... as the width grows; both write bench_<sweep>.png
  python bench.py --device=cuda --preset=paper  # bf16 autocast, torch.compile, fused AdamW
  python bench.py --train=False --tasks=''      # generation alone, cached vs not (--gen_prompt=1: 1-token prompt)

A training step is forward, backward, gradient clipping and an AdamW step, as in train.py. MFU counts
the FLOPs each variant really computes (MixiT.flops_per_token) against the device's peak: a datasheet
table for GPUs, a large matmul measured on the spot for CPUs. The step's matmuls are then replayed alone
(mm columns): what share of the step runs at the matmul library's rate, and what that rate is at this size.
Time alone: on a shared CPU, run it under
flock /tmp/mixit_cpu.lock python bench.py
"""
import ast
import ctypes
import gc
import resource
import sys
import time
from collections import namedtuple
from contextlib import nullcontext

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from data import make_task
from mixit import ATTNS, COLORS, MixiT, MixiTConfig, peak_flops, tune_cpu_malloc

# -----------------------------------------------------------------------------
preset = ""  # '' (the values below) | algo | lm | paper; options given on the command line win
attn = "all"  # softmax | frozen_qk | mixing, a comma list, or all
n_layer = 2
n_head = 4
n_embd = 128
block_size = 32
batch_size = 256
vocab_size = 64  # random tokens; a corpus brings its own
data = "random"  # random tokens, or a task of data.make_task: a corpus prepared in data_dir (wikitext2, ...)
data_dir = "data"
device = "auto"  # auto (cuda if available), cpu, cuda, cuda:N
dtype = "auto"  # auto (bfloat16 on CUDA, else float32), float32, bfloat16
compile = "auto"  # auto (on for CUDA), True, False
threads = 0  # CPU threads (torch.set_num_threads); 0 keeps torch's choice
tune_malloc = True  # CPU: mixit.tune_cpu_malloc(), glibc keeps freed memory instead of page-faulting it back
warmup_iters = 3
iters = 10  # timed steps per repeat
repeats = 3  # the best repeat is reported
sweep = ""  # '' | block_size | n_embd
tasks = "addition_10,dyck_30,retrieval_30,induction_16"  # task generators to time ('' skips)
train = True  # time training steps (--train=False --tasks='' times generation alone)
matmuls = True  # also time the step's matmuls alone: how much of the step runs at the matmul library's rate
gen_block_size = 256  # generation with and without the KV cache: a prompt of gen_block_size - gen_new_tokens
gen_new_tokens = 200  # tokens, then gen_new_tokens greedy ones (0 skips)
gen_prompt = 0  # prompt tokens instead (1 .. gen_block_size); 0: gen_block_size - gen_new_tokens
gen_batch = 1  # prompts generated together
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, str, bool))}
PRESETS = {
    "algo": dict(n_layer=2, n_head=4, n_embd=128, block_size=32, batch_size=256, vocab_size=64),
    "lm": dict(n_layer=4, n_head=4, n_embd=256, block_size=256, batch_size=8, vocab_size=4096),
    "paper": dict(n_layer=12, n_head=8, n_embd=512, block_size=256, batch_size=64, vocab_size=50304),
}
CHOICES = {"preset": ("", *PRESETS), "dtype": ("auto", "float32", "bfloat16"), "compile": ("auto", True, False),
           "sweep": ("", "block_size", "n_embd")}
SWEEPS = {("block_size", "cpu"): (64, 128, 256, 512), ("block_size", "cuda"): (128, 256, 512, 1024, 2048),
          ("n_embd", "cpu"): (64, 128, 256, 512), ("n_embd", "cuda"): (256, 512, 1024, 2048)}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ConfigError(Exception):
    """Bad input: one line on stderr, exit status 2."""


def parse_config(argv):
    """Defaults, then the preset, then the --key=value overrides (Python literals of the default's type)."""
    given = {}
    for arg in argv:
        key, eq, text = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or key not in DEFAULTS:
            raise ConfigError(f"unknown option {arg!r}; valid: {', '.join('--' + k for k in DEFAULTS)}")
        default = DEFAULTS[key]
        if not eq:
            raise ConfigError(f"--{key} needs a value: --{key}=...")
        if isinstance(default, str) and not (key in CHOICES and text in ("True", "False")):
            value = text
        else:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text
        if key in CHOICES and value not in CHOICES[key]:
            raise ConfigError(f"--{key}={text}; valid: {', '.join(map(str, CHOICES[key]))}")
        if key not in CHOICES and type(value) is not type(default):
            raise ConfigError(f"--{key}={text}: expected {type(default).__name__}, like --{key}={default!r}")
        given[key] = value
    config = {**DEFAULTS, **PRESETS.get(given.get("preset", ""), {}), **given}
    config["attn"] = list(ATTNS) if config["attn"] == "all" else config["attn"].split(",")
    for name in config["attn"]:
        if name not in ATTNS:
            raise ConfigError(f"unknown attn {name!r}; valid: {', '.join(ATTNS)}, all")
    for key in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "vocab_size", "iters", "repeats",
                "gen_batch"):
        if config[key] <= 0:
            raise ConfigError(f"--{key}={config[key]} must be positive")
    if config["gen_new_tokens"] >= config["gen_block_size"]:
        raise ConfigError(f"gen_new_tokens={config['gen_new_tokens']} must be below gen_block_size")
    if not 0 <= config["gen_prompt"] <= config["gen_block_size"]:
        raise ConfigError(f"--gen_prompt={config['gen_prompt']} must lie in [0, gen_block_size]")
    return config


class Env:
    def __init__(self, config):
        name = config["device"]
        try:
            self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)
        except RuntimeError:
            self.device = torch.device("meta")  # not a device name: refused below
        self.cuda = self.device.type == "cuda"
        if self.device.type not in ("cpu", "cuda") or (self.cuda and not torch.cuda.is_available()):
            raise ConfigError(f"device {name!r} is not available here; valid: auto, cpu"
                              + (", cuda" if torch.cuda.is_available() else ""))
        self.dtype = DTYPES[config["dtype"] if config["dtype"] != "auto" else "bfloat16" if self.cuda else "float32"]
        self.compile = config["compile"] if config["compile"] != "auto" else self.cuda
        if config["threads"]:
            torch.set_num_threads(config["threads"])
        self.malloc_tuned = not self.cuda and config["tune_malloc"] and tune_cpu_malloc()
        if self.cuda:
            torch.cuda.set_device(self.device)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        peak_flops(self.device, self.dtype)  # a CPU measures its peak now (about 2 s), and again as steps are timed

    @property
    def peak(self):
        """The device's peak FLOP/s: for a CPU the best rate of the matmuls measured so far in this run."""
        return peak_flops(self.device, self.dtype, seconds=0)

    def autocast(self):
        return nullcontext() if self.dtype == torch.float32 else torch.autocast(self.device.type, self.dtype)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def best_time(self, fn, n, repeats, warmup=0):
        """Seconds per call of fn, the best mean of `repeats` runs of n calls."""
        for _ in range(warmup):
            fn()
        best = float("inf")
        for _ in range(repeats):
            if not self.cuda:  # the CPU's matmul peak beside each repeat (a quarter second): a shared CPU's
                peak_flops(self.device, self.dtype, seconds=0.25)  # speed changes by the minute; the best counts
            self.sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            self.sync()
            best = min(best, (time.perf_counter() - t0) / n)
        return best

    def reset_memory(self):
        """Start a peak-memory window: CUDA allocator statistics, or the process's peak RSS on CPU."""
        gc.collect()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            return torch.cuda.memory_allocated()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc: hand freed heap memory back, so reuse shows again
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS
        except (OSError, AttributeError):
            pass  # elsewhere the window starts at the process's earlier peak
        return rss_peak()

    def peak_memory(self, start):
        return (torch.cuda.max_memory_allocated() if self.cuda else rss_peak()) - start


def rss_peak():
    """The process's peak resident set size in bytes."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def make_model(config, env, attn_name, task=None, **overrides):
    fields = {k: config[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
    if task is not None:
        fields.update(vocab_size=task.vocab_size, block_size=task.block_size, causal=task.causal,
                      n_classes=task.n_classes, pad_id=task.pad_id)
    return MixiT(MixiTConfig(**{**fields, **overrides}, attn=attn_name)).to(env.device)


def bench_train(config, env, attn_name, task=None):
    """Time training steps of one variant; returns its row of the table."""
    mem0 = env.reset_memory()
    model = make_model(config, env, attn_name, task)
    B, T, V = config["batch_size"], model.config.block_size, model.config.vocab_size
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), env.device.type)  # fused AdamW
    train_model = torch.compile(model) if env.compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    batches = iter(range(sys.maxsize))

    def get_batch():
        if task is None:  # random tokens, drawn on the device: no host transfer
            seq = torch.randint(V, (B, T + 1), device=env.device)
            return seq[:, :-1], seq[:, 1:]
        x, y = task.get_batch("train", B, seed=[0, next(batches)])
        if env.cuda:
            return x.pin_memory().to(env.device, non_blocking=True), y.pin_memory().to(env.device, non_blocking=True)
        return x, y

    def forward_backward(net=train_model):
        x, y = get_batch()
        with env.autocast():
            _, loss = net(x, y)
        loss.backward()  # never read back: no host-device sync per step

    def step(net=train_model):
        forward_backward(net)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    dt = env.best_time(step, config["iters"], config["repeats"], warmup=config["warmup_iters"])
    forward_backward()  # once more, to count the gradients it leaves
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert all(p.grad is None and p not in optimizer.state for p in frozen), "a frozen parameter carries state"
    state = sum(t.nbytes for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t))
    grads = sum(p.grad.nbytes for p in params if p.grad is not None)
    flops = model.flops_per_token(T) * B * T / dt
    row = {"attn": attn_name, "T": T, "B": B, "C": model.config.n_embd, "ms": dt * 1e3, "tok/s": B * T / dt,
           "GFLOP/s": flops / 1e9, "mem": env.peak_memory(mem0), "state": state, "grads": grads,
           "frozen": sum(p.numel() for p in frozen)}
    if config["matmuls"]:  # after the memory window (the replay's operands are not the step's); recorded from
        # the eager model, whose matmuls are each visible: a compiled one runs the same shapes
        mm_seconds, mm_flops = matmuls_alone(lambda: step(model), env, config["iters"], config["repeats"])
        row.update({"mm ms": mm_seconds * 1e3, "mm GFLOP/s": mm_flops / mm_seconds / 1e9})
    return row


MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.baddbmm.default)
TensorSpec = namedtuple("TensorSpec", "shape stride dtype")


class MatmulRecorder(TorchDispatchMode):
    """Inside `with`: every matmul the step runs, as (op, its arguments with tensors as TensorSpec, keyword
    arguments, FLOPs)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in MATMULS:
            spec = lambda a: TensorSpec(tuple(a.shape), a.stride(), a.dtype) if torch.is_tensor(a) else a
            k = [a for a in args if torch.is_tensor(a)][-1].size(-2)  # mat2 is (.., K, N)
            self.calls.append((func, [spec(a) for a in args], kwargs, 2 * out.numel() * k))
        return out


def matmuls_alone(step, env, n, repeats):
    """The step's matmuls (mm, addmm, bmm, baddbmm) replayed alone at the same shapes, strides and dtypes:
    (seconds, FLOPs) per step. Everything else a step does is time spent outside the matmul peak."""
    recorder = MatmulRecorder()
    with recorder:
        step()
    operands = {}

    def operand(a):  # one random tensor per TensorSpec, shared by the calls that have it
        if not isinstance(a, TensorSpec):
            return a
        if a not in operands:
            size = 1 + sum((dim - 1) * stride for dim, stride in zip(a.shape, a.stride))  # elements it spans
            operands[a] = torch.randn(size, device=env.device).to(a.dtype).as_strided(a.shape, a.stride)
        return operands[a]

    calls = [(func, [operand(a) for a in args], kwargs) for func, args, kwargs, _ in recorder.calls]
    seconds = env.best_time(lambda: [func(*args, **kwargs) for func, args, kwargs in calls], n, repeats, warmup=1)
    return seconds, sum(flops for *_, flops in recorder.calls)


def mfu(gflops, env):
    """Utilization of a rate in GFLOP/s against the device's peak as it stands at the end: for a CPU the best
    matmul rate seen while every row was timed, as a row's time is its best repeat."""
    return gflops * 1e9 / env.peak if env.peak else None


def print_train(rows, env):
    mib = lambda n: f"{n / 2 ** 20:9.2f}"
    percent = lambda x: "n/a" if x is None else f"{x * 100:5.1f}%"
    matmuls = "mm ms" in rows[0]
    print(f"{'variant':<10} {'ms/iter':>9} {'tok/s':>11} {'GFLOP/s':>8} {'MFU':>6} {'peak MiB':>9} "
          f"{'Adam MiB':>9} {'grad MiB':>9} {'frozen':>9}" + (f" {'mm ms':>8} {'mm/step':>7} {'mm MFU':>6}" * matmuls))
    for r in rows:
        print(f"{r['attn']:<10} {r['ms']:9.2f} {r['tok/s']:11,.0f} {r['GFLOP/s']:8.1f} "
              f"{percent(mfu(r['GFLOP/s'], env)):>6} {mib(r['mem'])} {mib(r['state'])} {mib(r['grads'])} {r['frozen']:9,d}"
              + (f" {r['mm ms']:8.2f} {percent(r['mm ms'] / r['ms']):>7} "
                 f"{percent(mfu(r['mm GFLOP/s'], env)):>6}" if matmuls else ""))
    peak = "unknown" if env.peak is None else f"{env.peak / 1e9:,.1f} GFLOP/s"
    print(f"frozen parameters carry no gradient and no optimizer state (checked); MFU against a peak of {peak}"
          + ("" if env.cuda else ", the best rate of 1024^3 matmuls (0.1 s back to back) measured during the run"))
    if matmuls:
        print("mm: the step's matmuls replayed alone at the same shapes (mm/step: their share of the step; "
              "mm MFU: their own rate against the peak, the bound that the matmul library sets at this size)")


def run_sweep(config, env, task_for):
    """Tokens/s of every variant as block_size or n_embd grows; block_size keeps the tokens per step fixed."""
    key, tokens = config["sweep"], config["batch_size"] * config["block_size"]
    values = SWEEPS[key, env.device.type]
    table = {a: [] for a in config["attn"]}
    for v in values:
        point = {**config, key: v, "matmuls": False,
                 **({"batch_size": max(1, tokens // v)} if key == "block_size" else {})}
        for a in config["attn"]:
            table[a].append(bench_train(point, env, a, task_for(point["block_size"])))
    print(f"\n{key} sweep ({tokens:,} tokens per step{' over batch x T' if key == 'block_size' else ''}): tok/s, MFU")
    print(f"{key:>10} " + " ".join(f"{a:>20}" for a in table))
    for i, v in enumerate(values):
        cells = [f"{table[a][i]['tok/s']:11,.0f} {(mfu(table[a][i]['GFLOP/s'], env) or 0) * 100:6.1f}%" for a in table]
        print(f"{v:>10} " + " ".join(f"{c:>20}" for c in cells))
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for a, rows in table.items():
        ax.plot(values, [r["tok/s"] for r in rows], "o-", color=COLORS[a], label=a)
    label = "context length T (tokens)" if key == "block_size" else "model width n_embd (channels)"
    ax.set(xscale="log", xlabel=label, ylabel="training throughput (tokens/s)", ylim=(0, None),
           title=f"{config['n_layer']} layers, {tokens:,} tokens per step: {env.device.type}, "
                 f"{str(env.dtype).removeprefix('torch.')}")
    ax.set_xticks(values, [str(v) for v in values], minor=False)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = f"bench_{key}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def load_task(*args):
    try:
        return make_task(*args)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def bench_tasks(config, env, tasks):
    """Training batches per second of each task generator, against the cheapest step it feeds (mixing)."""
    print(f"\n{'task':<14} {'T':>4} {'batches/s':>10} {'step ms':>8} {'ratio':>7}   (batch {config['batch_size']})")
    for name, task in zip(config["tasks"].split(","), tasks):
        seeds = iter(range(sys.maxsize))
        dt = env.best_time(lambda: task.get_batch("train", config["batch_size"], seed=[0, next(seeds)]),
                           config["iters"], config["repeats"], warmup=1)
        feeds = {**config, "iters": max(2, config["iters"] // 2), "matmuls": False}
        step = bench_train(feeds, env, "mixing", task)["ms"] / 1e3
        print(f"{name:<14} {task.block_size:>4} {1 / dt:10.1f} {step * 1e3:8.2f} {step / dt:6.1f}x")


def bench_generate(config, env):
    """Tokens/s of greedy model.generate with and without the KV cache (values only for MixiT), timed in turns
    so that both meet the same machine (the best of `repeats` turns each), and whether their tokens agree."""
    T, new, B = config["gen_block_size"], config["gen_new_tokens"], config["gen_batch"]
    P = config["gen_prompt"] or T - new
    print(f"\ngenerate {new} tokens after a {P}-token prompt, block_size {T}, batch {B}, greedy")
    print(f"{'variant':<10} {'cached tok/s':>13} {'uncached tok/s':>15} {'speedup':>8} {'same tokens':>12}")
    for a in config["attn"]:
        model = make_model(config, env, a, block_size=T).eval()
        prompt = torch.randint(model.config.vocab_size, (B, P), device=env.device)
        best, out = [float("inf")] * 2, [None] * 2
        with env.autocast():
            for turn in range(1 + config["repeats"]):  # turn 0 warms up
                for i, use_cache in enumerate((True, False)):
                    env.sync()
                    t0 = time.perf_counter()
                    out[i] = model.generate(prompt, new, top_k=1, use_cache=use_cache)
                    env.sync()
                    if turn:
                        best[i] = min(best[i], time.perf_counter() - t0)
        speed = [B * new / dt for dt in best]
        print(f"{a:<10} {speed[0]:13,.0f} {speed[1]:15,.0f} {speed[0] / speed[1]:7.1f}x "
              f"{'yes' if torch.equal(out[0], out[1]) else 'NO':>12}")


def main(argv):
    config = parse_config(argv)
    task_for = lambda T: None if config["data"] == "random" else load_task(config["data"], T, config["data_dir"])
    task = task_for(config["block_size"])
    tasks = [load_task(name) for name in config["tasks"].split(",")] if config["tasks"] and not config["sweep"] else []
    env = Env(config)
    peak = "unknown" if env.peak is None else f"{env.peak / 1e9:,.1f} GFLOP/s"
    print(f"{env.device} {str(env.dtype).removeprefix('torch.')}, compile {env.compile}, {torch.get_num_threads()} "
          f"CPU threads{', malloc tuned' if env.malloc_tuned else ''}, peak {peak}; data {config['data']}")
    if config["sweep"]:
        return run_sweep(config, env, task_for)
    if config["train"]:
        rows = [bench_train(config, env, a, task) for a in config["attn"]]
        r = rows[0]
        print(f"\n{config['n_layer']} layers, width {r['C']}, {config['n_head']} heads, T={r['T']}, batch {r['B']}, "
              f"vocab {task.vocab_size if task else config['vocab_size']}: training steps")
        print_train(rows, env)
    if tasks:
        bench_tasks(config, env, tasks)
    if config["gen_new_tokens"]:
        bench_generate(config, env)


def cli(argv):
    try:
        main(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
