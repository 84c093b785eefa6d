"""
One benchmark command: the three variants' training speed, MFU and memory at the paper's LM shape and at
GPT-2 small, the LM head's memory and kernel profiles.

  python bench.py --device=cuda --out_dir=out_bench   # the paper shapes (about 20 minutes on one H100)
  python bench.py --device=cpu                         # tiny shapes (about 1.5 minutes on a 2-core CPU)
  python bench.py --parts=calib,train --attn=mixing    # some parts, some variants
  python bench.py --device=cpu --size=paper --parts=memory   # the LM head's memory at lm_gpu's shape, on a CPU

out_dir gets bench.md (every table, also printed), bench.json (the raw numbers) and profile_<variant>.txt;
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

import train
from common import (OneOf, TrainingError, check_writable, cli, configure, defaults_of, measure_matmul, non_negative,
                    peak_flops, positive, setup, split_list, synchronize, teardown, write_atomic)
from mixit import ATTNS, LOSS_CHUNK, MixiT, MixiTConfig
from report import table

# -----------------------------------------------------------------------------
out_dir = "out_bench"
parts = "calib,train,memory,profile"  # a comma list of these (all of them)
attn = "all"  # softmax | frozen_qk | mixing | learned_mixing, a comma list, or all (the paper's three)
size = "auto"  # auto (paper on CUDA, else tiny) | paper | tiny: the shapes, and what the 0s below mean
device = "auto"  # auto, cpu, cuda, cuda:N
dtype = "auto"  # auto (bfloat16 on CUDA, else float32), float32, bfloat16
compile = "auto"  # auto (on for CUDA), True, False
steps = 0  # timed optimizer steps per repeat (0: 50 paper, 5 tiny)
repeats = 0  # timed repeats, reported as their median and min (0: 5 paper, 2 tiny)
warmup = 0  # untimed steps first, compilation included (0: 3 paper, 1 tiny)
profile_steps = 3  # optimizer steps under torch.profiler, per variant, at the first shape
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
PARTS = tuple(parts.split(","))
RULES = {"size": OneOf(("auto", "paper", "tiny")), **{k: train.RULES[k] for k in ("dtype", "compile")},
         "profile_steps": positive, **dict.fromkeys(("steps", "repeats", "warmup"), non_negative)}
LM = dict(n_layer=12, n_embd=512, n_head=8, vocab_size=50304)  # the paper's language models
GPT2 = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50304)  # GPT-2 small
SMALL = dict(n_layer=2, n_embd=128, n_head=4, vocab_size=512)
LM_GPU = dict(n_layer=6, n_embd=384, n_head=6, vocab_size=50304, block_size=256, batch_size=32, accum=1)  # lm_gpu.py
SIZES = {  # shapes: MixiTConfig fields and batch_size x accum micro-batches a step; memory: a shape, the loss's chunk
    "paper": dict(steps=50, repeats=5, warmup=3, memory=(LM_GPU, LOSS_CHUNK),
                  shapes={"lm_paper": dict(LM, block_size=256, batch_size=64, accum=8),
                          "gpt2_small": dict(GPT2, block_size=1024, batch_size=16, accum=1)}),
    "tiny": dict(steps=5, repeats=2, warmup=1,
                 memory=(dict(LM_GPU, n_layer=1, n_embd=60, block_size=64, batch_size=8), 2 ** 22),
                 shapes={"lm_tiny": dict(SMALL, block_size=64, batch_size=8, accum=2),
                         "gpt2_tiny": dict(SMALL, block_size=128, batch_size=4, accum=1)}),
}
TRAIN = {"variant": "attn", "ms/step": "ms_median", "min ms/step": "ms_min", "tok/s": "tok_s_median",
         "MFU %": "mfu_pct", "GFLOP/token": lambda r: r["flops_per_token"] / 1e9, "peak MiB": "peak_mib",
         "params M": "params_m", "trainable M": "trainable_m", "warm-up s": "warmup_s"}


def peak_memory(env, reset=False):
    """Bytes: the CUDA allocator's peak, or the process's peak resident set (Linux: since the last reset)."""
    if env.device_type == "cuda":
        return torch.cuda.reset_peak_memory_stats(env.device) if reset else torch.cuda.max_memory_allocated(env.device)
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                return f.write("5")  # the peak RSS (VmHWM) starts again from the current RSS
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def calibrate(env, peak):
    """A large matmul's rate measured now, beside the peak MFU is counted against (on a CPU, the same measurement)."""
    cuda = env.device_type == "cuda"
    measured = measure_matmul(env.device, env.dtype, 8192) if cuda else peak  # a CPU's peak is measured (1024^3)
    return {"device": env.describe(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "dtype": str(env.dtype).removeprefix("torch."), "matmul": "8192^3" if cuda else "1024^3",
            "peak_tflops": peak and peak / 1e12, "measured_tflops": measured and measured / 1e12,
            "measured_over_peak": peak and measured / peak}


def time_training(env, shape, attn, steps, repeats, warmup, compile, profile_steps=0, profile_to=None,
                  chunk=LOSS_CHUNK):
    """A row of the table: one variant's optimizer steps at shape timed; with profile_to, more under torch.profiler;
    chunk: the loss's logits at a time (0: the whole logits at once)."""
    B, A, T, V = (shape[k] for k in ("batch_size", "accum", "block_size", "vocab_size"))
    torch._dynamo.reset()  # the last model's compiled graphs go: each compiles afresh, no recompile limit is met
    gc.collect()
    peak_memory(env, reset=True)
    t0 = time.perf_counter()
    model = MixiT(MixiTConfig(**{k: v for k, v in shape.items() if k not in ("batch_size", "accum")}, attn=attn),
                  env.device, env.dtype)
    synchronize(env.device)
    build_s = time.perf_counter() - t0
    model.loss_chunk = chunk
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), env.device_type)  # fused AdamW
    net = torch.compile(model, dynamic=False) if compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    seqs = [torch.randint(V, (B, T + 1), device=env.device) for _ in range(A)]  # made on the device once
    batches = [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in seqs]
    step = lambda: train.train_step(net, batches, [B * T] * A, env.agree([B * T * A]), optimizer, params, 1.0, env)[0]

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


def head_memory(env, config):
    """The peak memory of a training step at lm_gpu's shape (tiny: smaller), softmax, the loss over the whole logits
    at once (float32 logits for every position, as before chunks) and in chunks (the default)."""
    shape, chunk = SIZES[config["size"]]["memory"]
    rows = [{"loss": loss, "chunk": c, **time_training(env, shape, "softmax", 1, 1, 1, config["compile"], chunk=c)}
            for loss, c in (("whole logits", 0), ("in chunks", chunk))]
    for row in rows:
        print(f"  memory, {row['loss']}: peak {row['peak_mib']:,.0f} MiB, {row['ms_median']:,.0f} ms/step", flush=True)
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
    if "train" in results:
        out.append(f"## Training steps\n\n{cfg['steps']} timed optimizer steps x {cfg['repeats']} repeats after "
                   f"{cfg['warmup']} warm-up steps: the median (and min) of the repeats. Peak memory: "
                   + ("max_memory_allocated" if env.device_type == "cuda" else "the process's peak RSS") + ".\n")
        for name, shape in results["shapes"].items():
            rows = [r for r in results["train"] if r["shape"] == name]
            out += [f"### {name}: {describe(shape)}\n", table(rows, TRAIN)]
    if "memory" in results:
        out += [f"## The LM head's memory\n\nOne optimizer step of softmax at {describe(results['memory'][0])}: the "
                "loss over every position's float32 logits at once, and in chunks (float32 logits, `chunk` at "
                "a time, made again in the backward pass).\n",
                table(results["memory"], {"loss": "loss", "chunk (logits)": "chunk", "peak MiB": "peak_mib",
                                          "ms/step": "ms_median"})]
    for a, p in results.get("profile", {}).items():
        out += [f"## Profile: {a}\n\n`profile_{a}.txt`: {p['steps']} steps by {p['sort']}; the top 5:\n",
                table(p["top"], {"op": lambda t: f"`{t['name'][:70]}`", "ms/step": "ms_per_step",
                                 "share %": "share_pct"})]
    return "\n".join(out)


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
        if "train" in wanted or "profile" in wanted:
            train_and_profile(env, config, wanted, results, out)
        if "memory" in wanted:
            results["memory"] = head_memory(env, config)
            write(results, env, out)
        results["total_s"] = time.perf_counter() - t_start
        print("\n" + write(results, env, out) + f"\nwrote {out}/bench.md and bench.json in {results['total_s']:.0f} s")
    except torch.OutOfMemoryError as e:
        raise TrainingError(f"out of memory ({str(e).splitlines()[0][:100]}); results so far in {out}") from None
    finally:
        teardown(env)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
