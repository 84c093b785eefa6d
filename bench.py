"""
One benchmark command: the three variants' training speed, MFU and memory at the paper's LM shape and at
GPT-2 small, MixiT's build at long context, a context-length sweep, the attention op alone and kernel profiles.

  python bench.py --device=cuda --out_dir=out_bench   # the paper shapes (about 20 minutes on one H100)
  python bench.py --device=cpu                         # tiny shapes (about 1.5 minutes on a 2-core CPU)
  python bench.py --parts=calib,train --attn=mixing    # some parts, some variants
  python bench.py --parts=calib,op                     # the attention op alone, softmax against MixiT
  python bench.py --device=cuda --parts=calib,sweep,op --compile=False   # context 256 to 8,192 (2 min on one H200)

out_dir gets bench.md (every table, also printed), bench.json (the raw numbers), sweep.png and profile_<variant>.txt;
bench.md and bench.json are rewritten as each part ends.
A step is train.py's train_step on random tokens made on the device once, without the host's batches (train.py
makes them while the step before runs). MFU = flops_per_token x tokens/s / common.peak_flops (a datasheet for a GPU;
on a CPU a matmul measured on the spot).
"""
import datetime
import gc
import json
import os
import resource
import statistics
import sys
import time

import torch
from torch.nn import functional as F
from torch.utils import benchmark

import train
from common import (OneOf, TrainingError, check_writable, cli, configure, defaults_of, measure_matmul, non_negative,
                    peak_flops, positive, save_checkpoint, setup, split_list, synchronize, teardown, write_atomic)
from mixit import ATTNS, MixiT, MixiTConfig, mix, mixing_matrix
from report import plot_sweep, table

# -----------------------------------------------------------------------------
out_dir = "out_bench"
parts = "calib,build,train,sweep,op,profile"  # a comma list of these (all of them)
attn = "all"  # softmax | frozen_qk | mixing | learned_mixing, a comma list, or all (the paper's three)
size = "auto"  # auto (paper on CUDA, else tiny) | paper | tiny: the shapes, and what the 0s below mean
device = "auto"  # auto, cpu, cuda, cuda:N
dtype = "auto"  # auto (bfloat16 on CUDA, else float32), float32, bfloat16
compile = "auto"  # auto (on for CUDA), True, False
steps = 0  # timed optimizer steps per repeat (0: 50 paper, 5 tiny); the sweep times steps // 5
repeats = 0  # timed repeats, reported as their median and min (0: 5 paper, 2 tiny)
warmup = 0  # untimed steps first, compilation included (0: 3 paper, 1 tiny)
profile_steps = 3  # optimizer steps under torch.profiler, per variant, at the first shape
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
PARTS = tuple(parts.split(","))
RULES = {"size": OneOf(("auto", "paper", "tiny")), **{k: train.RULES[k] for k in ("dtype", "compile")},
         "profile_steps": positive,
         **dict.fromkeys(("steps", "repeats", "warmup"), non_negative)}
SHAPE = ("n_layer", "n_embd", "n_head", "block_size", "batch_size", "accum", "vocab_size")  # a training shape's keys
LM = dict(n_layer=12, n_embd=512, n_head=8, vocab_size=50304)  # the paper's language models
GPT2 = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50304)  # GPT-2 small
SMALL = dict(n_layer=2, n_embd=128, n_head=4, vocab_size=512)
SIZES = {  # shapes: a model's MixiTConfig fields and batch_size x accum micro-batches a step; sweep: a model at each
    # T in Ts, tokens per step (batch = tokens // T); build: MixiT at long context; op: the attention op alone
    "paper": dict(steps=50, repeats=5, warmup=3, build=dict(LM, block_size=4096),
                  shapes={"lm_paper": dict(LM, block_size=256, batch_size=64, accum=8),
                          "gpt2_small": dict(GPT2, block_size=1024, batch_size=16, accum=1)},
                  sweep=dict(model=GPT2, Ts=(256, 512, 1024, 2048, 4096), tokens=16384),
                  op=dict(batch=16, heads=12, head_size=64, Ts=(256, 512, 1024, 2048, 4096, 8192))),
    "tiny": dict(steps=5, repeats=2, warmup=1, sweep=dict(model=SMALL, Ts=(64, 128, 256), tokens=512),
                 shapes={"lm_tiny": dict(SMALL, block_size=64, batch_size=8, accum=2),
                         "gpt2_tiny": dict(SMALL, block_size=128, batch_size=4, accum=1)},
                 build=dict(n_layer=12, n_embd=256, n_head=8, block_size=4096, vocab_size=512),
                 op=dict(batch=4, heads=8, head_size=32, Ts=(64, 128, 256, 512, 1024, 2048, 4096))),
}
PRODUCTS = {"softmax": 6, "mixing": 2}  # the op part's variants: causal (T, T) x (T, hd) products fwd+bwd need
TRAIN = {"variant": "attn", "ms/step": "ms_median", "min ms/step": "ms_min", "tok/s": "tok_s_median",
         "MFU %": "mfu_pct", "GFLOP/token": lambda r: r["flops_per_token"] / 1e9, "peak MiB": "peak_mib",
         "params M": "params_m", "trainable M": "trainable_m", "warm-up s": "warmup_s"}


def peak_memory(env, reset=False):
    """Bytes: the CUDA allocator's peak, or the process's peak resident set (host_memory)."""
    if env.device_type == "cuda":
        return torch.cuda.reset_peak_memory_stats(env.device) if reset else torch.cuda.max_memory_allocated(env.device)
    return host_memory("VmHWM", reset)


def host_memory(what="VmHWM", reset=False):
    """Bytes of this process's peak (VmHWM; Linux: since the last reset) or current (VmRSS) resident set."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                return f.write("5")  # the peak RSS (VmHWM) starts again from the current RSS
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(what + ":"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def build_costs(env, config, out):
    """MixiT at long context: build time and host memory here and on the meta device (a GPU's stand-in), ckpt sizes."""
    shape = SIZES[config["size"]]["build"]
    L, C, H, T = (shape[k] for k in ("n_layer", "n_embd", "n_head", "block_size"))
    cfg = lambda attn: MixiTConfig(**shape, attn=attn)
    rows = []
    for device in dict.fromkeys((env.device, torch.device("meta"))):
        gc.collect()
        synchronize(env.device)
        before, _ = host_memory("VmRSS"), host_memory(reset=True)
        t0 = time.perf_counter()
        model = MixiT(cfg("mixing"), device, env.dtype)
        synchronize(env.device)
        build_s, peak = time.perf_counter() - t0, host_memory() - before
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        matrices = sum(b.attn.mixing.numel() * b.attn.mixing.element_size() for b in model.blocks)
        on_host = (params + matrices) * (device.type == "cpu")  # the finished model itself, where it lives on the host
        rows.append({"device": str(device), "layers": L, "width": C, "heads": H, "T": T, "build_s": build_s,
                     "matrices_mib": matrices / 2 ** 20, "layer_mib": matrices / L / 2 ** 20,
                     "params_mib": params / 2 ** 20, "host_peak_mib": peak / 2 ** 20,
                     "host_peak_over_model": (peak - on_host) / (matrices / L + params)})
        print(f"  build on {device}: {build_s:.1f} s, host peak +{peak / 2 ** 20:,.0f} MiB", flush=True)
        if device.type != "meta":
            for attn, m in (("mixing", model), ("softmax", MixiT(cfg("softmax"), device))):
                optimizer = m.configure_optimizers(0.1, 0.0, (0.9, 0.95), env.device_type)
                for p in m.parameters():
                    p.grad = torch.zeros_like(p)
                optimizer.step()  # AdamW's state as a trained checkpoint holds it (lr 0: the weights stay)
                path = os.path.join(out, f"ckpt_{attn}.pt")
                save_checkpoint(path, m, optimizer, m.config, {}, {"iter_num": 0})
                rows[-1][f"ckpt_{attn}_mib"] = os.path.getsize(path) / 2 ** 20
                os.remove(path)
        del model
    return rows


def calibrate(env, peak):
    """A large matmul's rate measured now, beside the peak MFU is counted against (on a CPU, the same measurement)."""
    cuda = env.device_type == "cuda"
    measured = measure_matmul(env.device, env.dtype, 8192) if cuda else peak  # a CPU's peak is measured (1024^3)
    return {"device": env.describe(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "dtype": str(env.dtype).removeprefix("torch."), "matmul": "8192^3" if cuda else "1024^3",
            "peak_tflops": peak and peak / 1e12, "measured_tflops": measured and measured / 1e12,
            "measured_over_peak": peak and measured / peak}


def time_training(env, shape, attn, steps, repeats, warmup, compile, profile_steps=0, profile_to=None):
    """A row of the table: one variant's optimizer steps at shape timed; with profile_to, more under torch.profiler."""
    B, A, T, V = (shape[k] for k in ("batch_size", "accum", "block_size", "vocab_size"))
    torch._dynamo.reset()  # the last model's compiled graphs go: each compiles afresh, no recompile limit is met
    gc.collect()
    peak_memory(env, reset=True)
    t0 = time.perf_counter()
    model = MixiT(MixiTConfig(**{k: v for k, v in shape.items() if k not in ("batch_size", "accum")}, attn=attn),
                  env.device, env.dtype)
    synchronize(env.device)
    build_s = time.perf_counter() - t0
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), env.device_type)  # fused AdamW
    net = torch.compile(model, dynamic=False) if compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    seqs = [torch.randint(V, (B, T + 1), device=env.device) for _ in range(A)]  # made on the device once
    batches = [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in seqs]
    step = lambda: train.train_step(net, batches, optimizer, params, 1.0, env)[0]

    times = []
    for r in range(1 + repeats):  # 0: the warm-up steps, compilation included
        synchronize(env.device)
        t0 = time.perf_counter()
        for _ in range(steps if r else warmup):
            loss = step()
        last = loss.item()  # the one read-back of a repeat
        synchronize(env.device)
        times.append((time.perf_counter() - t0) / (steps if r else 1))
    warmup_s, times = times[0], times[1:]
    tokens, med = B * A * T, statistics.median(times)
    row = {"attn": attn, **shape, "tokens_per_step": tokens, "flops_per_token": model.flops_per_token(T),
           "step_s": times, "ms_median": med * 1e3, "ms_min": min(times) * 1e3, "tok_s_median": tokens / med,
           "tok_s_best": tokens / min(times), "peak_mib": peak_memory(env) / 2 ** 20, "build_s": build_s,
           "warmup_s": warmup_s, "final_loss": last, "params_m": model.get_num_params(False) / 1e6,
           "trainable_m": model.get_num_params(False, trainable=True) / 1e6}
    if profile_to:
        row["profile"] = profile(env, step, profile_steps, profile_to, f"{attn}, {describe(shape)}")
    return row


def profile(env, step, n, path, title):
    """torch.profiler over n steps: the top 15 by device time (on a CPU: CPU time) into path; returns the top 5."""
    cuda = env.device_type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + [torch.profiler.ProfilerActivity.CUDA] * cuda
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(n):
            step()
        synchronize(env.device)
    key, events = "self_device_time_total" if cuda else "self_cpu_time_total", prof.key_averages()
    time_of = lambda e: getattr(e, key)
    total = sum(map(time_of, events)) or 1
    with open(path, "w") as f:
        f.write(f"{title}\n{n} optimizer steps by {key}; {env.describe()}\n\n"
                + events.table(sort_by=key, row_limit=15, max_name_column_width=80) + "\n")
    return {"sort": key, "steps": n,
            "top": [{"name": e.key, "ms_per_step": time_of(e) / 1e3 / n, "share_pct": 100 * time_of(e) / total}
                    for e in sorted(events, key=time_of, reverse=True)[:5]]}


def sweep(env, config, timed):
    """Tokens/s of every variant as the context grows, tokens per step fixed; reuses rows timed at the same shape."""
    s, key = SIZES[config["size"]]["sweep"], lambda r: (r["attn"], *(r[k] for k in SHAPE))
    reuse, rows = {key(r): r for r in timed}, []
    for T in s["Ts"]:
        shape = dict(s["model"], block_size=T, batch_size=max(1, s["tokens"] // T), accum=1)
        for a in config["attns"]:
            rows.append(reuse.get(key({"attn": a, **shape})) or time_training(
                env, shape, a, max(1, config["steps"] // 5), config["repeats"], config["warmup"], config["compile"]))
            print(f"  sweep T={T} {a}: {rows[-1]['tok_s_median']:,.0f} tok/s (built in {rows[-1]['build_s']:.1f} s, "
                  f"warm-up {rows[-1]['warmup_s']:.1f} s)", flush=True)
    return rows


def mixing_op(env, config):
    """The attention op alone, forward and backward, as T grows: softmax (SDPA) and MixiT's product P V."""
    B, H, hd, Ts = (SIZES[config["size"]]["op"][k] for k in ("batch", "heads", "head_size", "Ts"))
    rows = []
    for T in Ts:
        make = lambda: torch.randn(B, H, T, hd, device=env.device, dtype=env.dtype, requires_grad=True)
        q, k, v, grad = make(), make(), make(), make().detach()
        P = mixing_matrix(T, H, hd, device=env.device).to(env.dtype)
        fns = {"softmax": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), "mixing": lambda: mix(P, v)}
        fns = {name: torch.compile(fn) if config["compile"] else fn for name, fn in fns.items()}
        times = {name: [] for name in PRODUCTS}
        for _ in range(config["repeats"]):  # each a median of back-to-back calls over 0.2 s (torch.utils.benchmark)
            for name in PRODUCTS:  # on the threads a training step uses (the timer's default is one)
                timer = benchmark.Timer("fn().backward(grad)", globals={"fn": fns[name], "grad": grad},
                                        num_threads=torch.get_num_threads())
                times[name].append(timer.blocked_autorange(min_run_time=0.2).median)
        row = {"T": T, "batch": B, "heads": H, "head_size": hd}
        for name in PRODUCTS:
            ms = 1e3 * statistics.median(times[name])
            row[name] = {"ms": ms, "gflops": PRODUCTS[name] * B * H * T * (T + 1) * hd / ms / 1e6,
                         "ms_all": [1e3 * t for t in times[name]]}
        row["mixing_over_softmax"] = row["softmax"]["ms"] / row["mixing"]["ms"]
        rows.append(row)
        print(f"  op T={T}: softmax {row['softmax']['ms']:.2f} ms, mixing {row['mixing']['ms']:.2f} ms", flush=True)
        del P, q, k, v
    return rows


# ----------------------------------------------------------------------------- the report

def describe(s):
    return (f"{s['n_layer']} layers, width {s['n_embd']}, {s['n_head']} heads, T={s['block_size']}, batch "
            f"{s['batch_size']}" + (f" x {s['accum']} micro-batches" if s["accum"] > 1 else "")
            + f", vocab {s['vocab_size']}: {s['batch_size'] * s['accum'] * s['block_size']:,} tokens a step")


def report(results, env):
    """bench.md: every table of the results so far."""
    c, cfg, out = results.get("calib"), results["config"], [f"# mixit benchmark, {results['date']}\n"]
    out.append(f"{env.describe()}, CUDA {torch.version.cuda}, compile {cfg['compile']}, size {cfg['size']}; "
               + (f"MFU against a peak of {results['peak_tflops']:.3g} TFLOP/s (common.peak_flops)\n"
                  if results["peak_tflops"] else "no MFU: this device's peak is unknown\n"))
    if c:
        out += ["## Calibration\n", table([c], {"device": "device", "dtype": "dtype", "matmul": "matmul", "measured "
                "TFLOP/s": "measured_tflops", "peak TFLOP/s": "peak_tflops", "measured / peak": "measured_over_peak"})]
    if "build" in results:
        out += ["## MixiT at long context\n\nThe build (fixed matrices made a layer at a time, where they are used) on "
                "each device, meta standing in for a GPU. Host peak over model: the build's host peak beyond the "
                "finished model, in one layer's matrices plus the parameters. Checkpoints: parameters and AdamW's "
                "state, no matrices.\n",
                table(results["build"], {"device": "device", "layers": "layers", "width": "width", "heads": "heads",
                      "T": "T", "build s": "build_s", "matrices MiB": "matrices_mib", "one layer MiB": "layer_mib",
                      "params MiB": "params_mib", "host peak MiB": "host_peak_mib", "host peak over model":
                      "host_peak_over_model", "ckpt MiB": "ckpt_mixing_mib", "softmax ckpt MiB": "ckpt_softmax_mib"})]
    if "train" in results:
        out.append(f"## Training steps\n\n{cfg['steps']} timed optimizer steps x {cfg['repeats']} repeats after "
                   f"{cfg['warmup']} warm-up steps: the median (and min) of the repeats. Peak memory: "
                   + ("max_memory_allocated" if env.device_type == "cuda" else "the process's peak RSS") + ".\n")
        for name, shape in results["shapes"].items():
            rows = [r for r in results["train"] if r["shape"] == name]
            out += [f"### {name}: {describe(shape)}\n", table(rows, TRAIN)]
    if "sweep" in results:
        s, attns = results["sweep"][0], list(dict.fromkeys(r["attn"] for r in results["sweep"]))
        out += [f"## Context sweep\n\n{s['n_layer']} layers, width {s['n_embd']}, {s['n_head']} heads, vocab "
                f"{s['vocab_size']}, {s['tokens_per_step']:,} tokens per step (batch x T): tokens/s (median)\n",
                table(sweep_points(results["sweep"]), {"T": "T", "batch": "batch", **{f"{a} tok/s": a for a in attns},
                      "mixing / softmax speed": "speed_ratio", "softmax / mixing FLOPs": "flop_ratio"}),
                "![sweep](sweep.png)\n"]
    if "op" in results:
        flops = lambda name: lambda r: f"{r[name]['ms']:.3g} ({r[name]['gflops']:.3g})"
        out += [f"## The attention op\n\nForward and backward alone, batch {results['op'][0]['batch']}, "
                f"{results['op'][0]['heads']} heads of {results['op'][0]['head_size']}: ms, the median of "
                f"{cfg['repeats']} interleaved repeats (achieved GFLOP/s of the work a causal op needs)\n",
                table(results["op"], {"T": "T", **{f"{n} ms (GFLOP/s)": flops(n) for n in PRODUCTS},
                                      "softmax / mixing": "mixing_over_softmax"})]
    for a, p in results.get("profile", {}).items():
        out += [f"## Profile: {a}\n\n`profile_{a}.txt`: {p['steps']} steps by {p['sort']}; the top 5:\n",
                table(p["top"], {"op": lambda t: f"`{t['name'][:70]}`", "ms/step": "ms_per_step",
                                 "share %": "share_pct"})]
    return "\n".join(out)


def sweep_points(rows):
    """One dict per T: each variant's tokens/s, mixing's speed over softmax's, and softmax's FLOPs over mixing's."""
    points = []
    for T in dict.fromkeys(r["block_size"] for r in rows):
        at = {r["attn"]: r for r in rows if r["block_size"] == T}
        point = {"T": T, "batch": next(iter(at.values()))["batch_size"]} | {a: r["tok_s_median"] for a, r in at.items()}
        if "softmax" in at and "mixing" in at:
            point.update(speed_ratio=at["mixing"]["tok_s_median"] / at["softmax"]["tok_s_median"],
                         flop_ratio=at["softmax"]["flops_per_token"] / at["mixing"]["flops_per_token"])
        points.append(point)
    return points


def write(results, env, out):
    """bench.md and bench.json, rewritten whole (atomically); returns bench.md's text."""
    text = report(results, env)
    write_atomic(os.path.join(out, "bench.md"), lambda f: f.write(text.encode()))
    write_atomic(os.path.join(out, "bench.json"), lambda f: f.write(json.dumps(results, indent=1).encode()))
    return text


def train_and_profile(env, config, wanted, results, out):
    """The train part (every variant at every shape) and the profile part (the first shape's models, after timing)."""
    for i, (name, shape) in enumerate(results["shapes"].items()):
        for a in config["attns"]:
            prof = os.path.join(out, f"profile_{a}.txt") if "profile" in wanted and i == 0 else None
            if "train" not in wanted and not prof:
                continue
            n = (config["steps"], config["repeats"]) if "train" in wanted else (1, 1)
            row = {"shape": name, **time_training(env, shape, a, *n, config["warmup"], config["compile"],
                                                  config["profile_steps"], prof)}
            peak = results["peak_tflops"] and results["peak_tflops"] * 1e12
            row["mfu_pct"] = peak and 100 * row["flops_per_token"] * row["tok_s_median"] / peak
            if prof:
                results.setdefault("profile", {})[a] = row.pop("profile")
            if "train" in wanted:
                results.setdefault("train", []).append(row)
                print(f"  {name} {a}: {row['ms_median']:.1f} ms/step, {row['tok_s_median']:,.0f} tok/s", flush=True)
            write(results, env, out)


def main(argv):
    config = configure(DEFAULTS, argv, RULES, files=False)
    wanted = split_list(config["parts"], "part", OneOf(PARTS))
    attns = list(train.PAPER_ATTNS) if config["attn"] == "all" else split_list(config["attn"], "attn", OneOf(ATTNS))
    env = setup(config["device"], config["dtype"])
    size = config["size"] if config["size"] != "auto" else "paper" if env.device_type == "cuda" else "tiny"
    config.update({k: config[k] or SIZES[size][k] for k in ("steps", "repeats", "warmup")}, size=size,
                  attns=attns, compile=env.device_type == "cuda" if config["compile"] == "auto" else config["compile"])
    out = config["out_dir"]
    check_writable(out)
    peak = peak_flops(env.device, env.dtype)
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "env": env.describe(), "config": config,
               "peak_tflops": peak and peak / 1e12, "shapes": SIZES[size]["shapes"]}
    print(f"{env.describe()}, compile {config['compile']}, size {size}: writing {out}", flush=True)
    t_start = time.perf_counter()
    try:
        if "calib" in wanted:
            results["calib"] = calibrate(env, peak)
        if "build" in wanted:
            results["build"] = build_costs(env, config, out)
            write(results, env, out)
        if "train" in wanted or "profile" in wanted:
            train_and_profile(env, config, wanted, results, out)
        if "sweep" in wanted:
            results["sweep"] = sweep(env, config, results.get("train", []))
            plot_sweep(sweep_points(results["sweep"]), results["sweep"][0], os.path.join(out, "sweep.png"))
            write(results, env, out)
        if "op" in wanted:
            results["op"] = mixing_op(env, config)
            write(results, env, out)
        results["total_s"] = time.perf_counter() - t_start
        print("\n" + write(results, env, out) + f"\nwrote {out}/bench.md and bench.json in {results['total_s']:.0f} s")
    except torch.OutOfMemoryError as e:
        raise TrainingError(f"out of memory ({str(e).splitlines()[0][:100]}); results so far in {out}") from None
    finally:
        teardown(env)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
