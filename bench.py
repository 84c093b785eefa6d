"""
One benchmark command: the three variants' training speed, MFU and memory at the paper's LM shape
and at GPT-2 small, their speed as the context grows, the LM head's memory and kernel profiles.

  python bench.py --device=cuda --out_dir=out_bench  # the paper shapes (about 20 minutes, an H100)
  python bench.py --device=cpu                        # tiny shapes (about 1.5 minutes, 2 CPU cores)
  python bench.py --parts=calib,train --attn=mixing   # some parts, some variants
  python bench.py --device=cpu --size=paper --parts=memory  # the LM head's memory, lm_gpu

RESULTS' table across context (GPT-2 small at T = 256 to 4,096, eager; leave out --compile=False to
compile each model):

  python bench.py --device=cuda --parts=calib,sweep --compile=False --steps=4 --repeats=3 --warmup=2

out_dir gets bench.md (every table, also printed), bench.json (the raw numbers) and
profile_<variant>.txt; bench.md and bench.json are rewritten as each part ends.
A step is train.py's train_step on random tokens made on the device once, without the host's batches
(train.py makes them while the step before runs). MFU = flops_per_token x tokens/s /
common.peak_flops (a datasheet for a GPU; on a CPU a matmul measured on the spot).
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
from common import (OneOf, TrainingError, check_writable, cli, configure, defaults_of,
                    measure_matmul, non_negative, peak_flops, positive, setup, split_list,
                    synchronize, teardown)
from mixit import ATTNS, LOSS_CHUNK, MixiT, MixiTConfig
from report import table, write_text

# -----------------------------------------------------------------------------
out_dir = "out_bench"
parts = "calib,train,sweep,memory,profile"  # a comma list of these (all of them)
# softmax | frozen_qk | mixing | learned_mixing, a comma list, or all (the paper's three)
attn = "all"
# auto (paper on CUDA, else tiny) | paper | tiny: the shapes, and what the 0s below mean
size = "auto"
device = "auto"  # auto, cpu, cuda, cuda:N
dtype = "auto"  # auto (bfloat16 on CUDA, else float32), float32, bfloat16
compile = "auto"  # auto (on for CUDA), True, False
steps = 0  # timed optimizer steps per repeat (0: 50 paper, 5 tiny)
repeats = 0  # timed repeats, reported as their median and min (0: 5 paper, 2 tiny)
warmup = 0  # untimed steps first, compilation included (0: 3 paper, 1 tiny)
profile_steps = 3  # optimizer steps under torch.profiler, per variant, at the first shape
# the sweep's context lengths, a comma list (auto: 256 to 4,096 paper, 64 to 256 tiny)
contexts = "auto"
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
PARTS = OneOf(parts.split(","))
RULES = {"size": OneOf(("auto", "paper", "tiny")), "dtype": train.RULES["dtype"],
         "compile": train.RULES["compile"], "profile_steps": positive,
         **dict.fromkeys(("steps", "repeats", "warmup"), non_negative)}
LM = dict(n_layer=12, n_embd=512, n_head=8, vocab_size=50304)  # the paper's language models
GPT2 = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50304)  # GPT-2 small
SMALL = dict(n_layer=2, n_embd=128, n_head=4, vocab_size=512)
# configs/lm_gpu.py's shape
LM_GPU = dict(n_layer=6, n_embd=384, n_head=6, vocab_size=50304, block_size=256, batch_size=32,
              accum=1)
# Each size's shapes are MixiTConfig fields plus batch_size x accum micro-batches a step. The memory
# part takes a shape and the loss's chunk; the sweep a model at each context T, batch = tokens // T.
SIZES = {
    "paper": dict(steps=50, repeats=5, warmup=3, memory=(LM_GPU, LOSS_CHUNK),
                  shapes={"lm_paper": dict(LM, block_size=256, batch_size=64, accum=8),
                          "gpt2_small": dict(GPT2, block_size=1024, batch_size=16, accum=1)},
                  sweep=dict(model=GPT2, contexts=(256, 512, 1024, 2048, 4096), tokens=16384)),
    "tiny": dict(steps=5, repeats=2, warmup=1,
                 memory=(dict(LM_GPU, n_layer=1, n_embd=60, block_size=64, batch_size=8), 2 ** 22),
                 shapes={"lm_tiny": dict(SMALL, block_size=64, batch_size=8, accum=2),
                         "gpt2_tiny": dict(SMALL, block_size=128, batch_size=4, accum=1)},
                 sweep=dict(model=SMALL, contexts=(64, 128, 256), tokens=512)),
}
# bench.md's tables: each heading's key in a row, or a function of the row
CALIBRATION = {"device": "device", "dtype": "dtype", "matmul": "matmul",
               "measured TFLOP/s": "measured_tflops", "peak TFLOP/s": "peak_tflops",
               "measured / peak": "measured_over_peak"}
TRAIN = {"variant": "attn", "ms/step": "ms_median", "min ms/step": "ms_min",
         "tok/s": "tok_s_median", "MFU %": "mfu_pct",
         "GFLOP/token": lambda row: row["flops_per_token"] / 1e9, "peak MiB": "peak_mib",
         "params M": "params_m", "trainable M": "trainable_m", "warm-up s": "warmup_s"}
MEMORY = {"loss": "loss", "chunk (logits)": "chunk", "peak MiB": "peak_mib", "ms/step": "ms_median"}
PROFILE = {"op": lambda top: f"`{top['name'][:70]}`", "ms/step": "ms_per_step",
           "share %": "share_pct"}
NAMES = {"softmax": "softmax (flash)", "frozen_qk": "Frozen-QK", "mixing": "MixiT",
         "learned_mixing": "learned mixing"}


def peak_memory(env, reset=False):
    """Bytes: the CUDA allocator's peak, or the process's peak resident set (Linux: since the last
    reset)."""
    if env.device_type == "cuda":
        if reset:
            return torch.cuda.reset_peak_memory_stats(env.device)
        return torch.cuda.max_memory_allocated(env.device)
    try:
        if reset:
            # the peak resident set (VmHWM) starts again from the current one
            with open("/proc/self/clear_refs", "w") as f:
                return f.write("5")
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        # where /proc is missing: the peak since the process began (in bytes on macOS, else in KiB)
        kib = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib


def calibrate(env, peak):
    """A large matmul's rate measured now, beside the peak MFU is counted against (on a CPU, the
    same measurement)."""
    cuda = env.device_type == "cuda"
    # a CPU's peak is itself a 1024^3 matmul measured in this run
    measured = measure_matmul(env.device, env.dtype, 8192) if cuda else peak
    return {"device": env.describe(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "dtype": str(env.dtype).removeprefix("torch."),
            "matmul": "8192^3" if cuda else "1024^3",
            "peak_tflops": peak and peak / 1e12, "measured_tflops": measured and measured / 1e12,
            "measured_over_peak": peak and measured / peak}


def time_training(env, shape, attn, steps, repeats, warmup, compile, profile_steps=0,
                  profile_to=None, chunk=LOSS_CHUNK):
    """A table row: one variant's optimizer steps at shape timed (chunk: the model's loss_chunk)."""
    B = shape["batch_size"]
    T = shape["block_size"]
    accum = shape["accum"]
    # the last model's compiled graphs go: each model compiles afresh, and no recompile limit is met
    torch._dynamo.reset()
    gc.collect()
    peak_memory(env, reset=True)
    arch = {k: v for k, v in shape.items() if k not in ("batch_size", "accum")}
    model = MixiT(MixiTConfig(**arch, attn=attn), env.device, env.dtype)
    model.loss_chunk = chunk
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), env.device_type)  # fused AdamW
    net = torch.compile(model, dynamic=False) if compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    # random inputs and targets made on the device once, a pair per micro-batch
    batches = [torch.randint(shape["vocab_size"], (2, B, T), device=env.device).unbind()
               for _ in range(accum)]
    tokens = B * accum * T

    def step():
        return train.train_step(net, batches, [B * T] * accum, env.agree([tokens]), optimizer,
                                params, 1.0, env)[0]

    # repeat 0 runs the warm-up steps, compilation included; a repeat reads its last loss back once
    times = []
    for repeat in range(1 + repeats):
        synchronize(env.device)
        t0 = time.perf_counter()
        for _ in range(steps if repeat else warmup):
            loss = step()
        last = loss.item()
        synchronize(env.device)
        times.append((time.perf_counter() - t0) / (steps if repeat else 1))
    warmup_s = times.pop(0)
    median = statistics.median(times)
    row = {"attn": attn, **shape, "tokens_per_step": tokens,
           "flops_per_token": model.flops_per_token(T), "step_s": times, "ms_median": median * 1e3,
           "ms_min": min(times) * 1e3, "tok_s_median": tokens / median,
           "tok_s_best": tokens / min(times), "peak_mib": peak_memory(env) / 2 ** 20,
           "warmup_s": warmup_s, "final_loss": last,
           "params_m": model.get_num_params(False) / 1e6,
           "trainable_m": model.get_num_params(False, trainable=True) / 1e6}
    if profile_to:
        row["profile"] = profile(env, step, profile_steps, profile_to, f"{attn}, {describe(shape)}")
    return row


def profile(env, step, steps, path, title):
    """torch.profiler over steps: the top 15 by device time (on a CPU: CPU time) into path; returns
    the top 5."""
    cuda = env.device_type == "cuda"
    kinds = torch.profiler.ProfilerActivity
    activities = [kinds.CPU] + [kinds.CUDA] * cuda
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronize(env.device)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = prof.key_averages()

    def time_of(event):
        return getattr(event, key)

    total = sum(map(time_of, events)) or 1
    with open(path, "w") as f:
        f.write(f"{title}\n{steps} optimizer steps by {key}; {env.describe()}\n\n")
        f.write(events.table(sort_by=key, row_limit=15, max_name_column_width=80) + "\n")
    top = sorted(events, key=time_of, reverse=True)[:5]
    return {"sort": key, "steps": steps,
            "top": [{"name": event.key, "ms_per_step": time_of(event) / 1e3 / steps,
                     "share_pct": 100 * time_of(event) / total} for event in top]}


def head_memory(env, config):
    """The peak memory of a training step at lm_gpu's shape (tiny: smaller), softmax, the loss
    over the whole logits at once (float32 logits for every position, as before chunks) and in
    chunks (the default)."""
    shape, chunk = SIZES[config["size"]]["memory"]
    rows = []
    for loss, loss_chunk in (("whole logits", 0), ("in chunks", chunk)):
        row = time_training(env, shape, "softmax", 1, 1, 1, config["compile"], chunk=loss_chunk)
        rows.append({"loss": loss, "chunk": loss_chunk, **row})
        print(f"  memory, {loss}: peak {row['peak_mib']:,.0f} MiB, {row['ms_median']:,.0f} ms/step",
              flush=True)
    return rows


# ----------------------------------------------------------------------------- the report

def describe(shape):
    batch = f"batch {shape['batch_size']}"
    if shape["accum"] > 1:
        batch += f" x {shape['accum']} micro-batches"
    tokens = shape["batch_size"] * shape["accum"] * shape["block_size"]
    return (f"{shape['n_layer']} layers, width {shape['n_embd']}, {shape['n_head']} heads, "
            f"T={shape['block_size']}, {batch}, vocab {shape['vocab_size']}: "
            f"{tokens:,} tokens a step")


def report(results, env):
    """bench.md: every table of the results so far."""
    config = results["config"]
    mfu = "no MFU: this device's peak is unknown"
    if results["peak_tflops"]:
        mfu = f"MFU against a peak of {results['peak_tflops']:.3g} TFLOP/s (common.peak_flops)"
    out = [f"# mixit benchmark, {results['date']}\n",
           f"{env.describe()}, CUDA {torch.version.cuda}, compile {config['compile']}, "
           f"size {config['size']}; {mfu}\n"]
    if "calib" in results:
        out += ["## Calibration\n", table([results["calib"]], CALIBRATION)]
    if "train" in results:
        memory = "max_memory_allocated" if env.device_type == "cuda" else "the process's peak RSS"
        out.append(f"## Training steps\n\n{config['steps']} timed optimizer steps x "
                   f"{config['repeats']} repeats after {config['warmup']} warm-up steps: the "
                   f"median (and min) of the repeats. Peak memory: {memory}.\n")
        for name, shape in results["shapes"].items():
            rows = [row for row in results["train"] if row["shape"] == name]
            out += [f"### {name}: {describe(shape)}\n", table(rows, TRAIN)]
    if "sweep" in results:
        out += sweep_report(results["sweep"], config)
    if "memory" in results:
        out += [f"## The LM head's memory\n\nOne optimizer step of softmax at "
                f"{describe(results['memory'][0])}: the loss over every position's float32 "
                "logits at once, and in chunks (float32 logits, `chunk` at a time, made again in "
                "the backward pass).\n", table(results["memory"], MEMORY)]
    for attn, prof in results.get("profile", {}).items():
        out += [f"## Profile: {attn}\n\n`profile_{attn}.txt`: {prof['steps']} steps by "
                f"{prof['sort']}; the top 5:\n", table(prof["top"], PROFILE)]
    return "\n".join(out)


def sweep_report(rows, config):
    """The sweep's section: a line per context T, each variant's tokens/s, MixiT's speed over
    softmax's and softmax's FLOPs a token over MixiT's (RESULTS' table across context)."""
    points = []
    for T in dict.fromkeys(row["block_size"] for row in rows):
        at_T = {row["attn"]: row for row in rows if row["block_size"] == T}
        point = {"T": f"{T:,}", **{attn: row["tok_s_median"] for attn, row in at_T.items()}}
        if "softmax" in at_T and "mixing" in at_T:
            softmax = at_T["softmax"]
            mixing = at_T["mixing"]
            point["speed"] = f"{mixing['tok_s_median'] / softmax['tok_s_median']:.2f}"
            point["flops"] = f"{softmax['flops_per_token'] / mixing['flops_per_token']:.2f}"
        points.append(point)
    columns = {"T": "T", **{NAMES[attn]: attn for attn in config["attns"]},
               "MixiT / softmax": "speed", "softmax / MixiT FLOPs": "flops"}
    model = rows[0]
    return [f"## Context sweep\n\n{model['n_layer']} layers, width {model['n_embd']}, "
            f"{model['n_head']} heads, vocab {model['vocab_size']}, "
            f"{model['tokens_per_step']:,} tokens a step (batch x T): tokens/s, the median of "
            f"{config['repeats']} repeats of {config['steps']} steps\n", table(points, columns)]


def write(results, env, out):
    """bench.md and bench.json, rewritten whole (atomically); returns bench.md's text."""
    text = report(results, env)
    write_text(os.path.join(out, "bench.md"), text)
    write_text(os.path.join(out, "bench.json"), json.dumps(results, indent=1))
    return text


def time_variants(env, config, wanted, results, peak, part, shapes):
    """The train or sweep part: every variant at every shape timed into results[part], the tables
    rewritten after each. The profile part goes with the train part: the first shape's models, after
    their timing. peak: the FLOP/s MFU is counted against (None: unknown)."""
    for index, (name, shape) in enumerate(shapes.items()):
        for attn in config["attns"]:
            profile_to = None
            if part == "train" and "profile" in wanted and index == 0:
                profile_to = os.path.join(config["out_dir"], f"profile_{attn}.txt")
            if part not in wanted and not profile_to:
                continue
            # the profile part alone times a single step
            steps, repeats = (config["steps"], config["repeats"]) if part in wanted else (1, 1)
            row = {"shape": name,
                   **time_training(env, shape, attn, steps, repeats, config["warmup"],
                                   config["compile"], config["profile_steps"], profile_to)}
            row["mfu_pct"] = peak and 100 * row["flops_per_token"] * row["tok_s_median"] / peak
            if profile_to:
                results.setdefault("profile", {})[attn] = row.pop("profile")
            if part in wanted:
                results.setdefault(part, []).append(row)
                print(f"  {name} {attn}: {row['ms_median']:.1f} ms/step, "
                      f"{row['tok_s_median']:,.0f} tok/s", flush=True)
            write(results, env, config["out_dir"])


def main(argv):
    config = configure(DEFAULTS, argv, RULES, files=False)
    wanted = split_list(config["parts"], "part", PARTS)
    attns = train.PAPER_ATTNS
    if config["attn"] != "all":
        attns = split_list(config["attn"], "attn", OneOf(ATTNS))
    # train.py's rule for its list of head counts holds here too: integers above 0
    contexts = []
    if config["contexts"] != "auto":
        contexts = split_list(config["contexts"], "context length",
                              train.LIST_RULES["mixing_heads"])
    env = setup(config["device"], config["dtype"])
    if config["size"] == "auto":
        config["size"] = "paper" if env.device_type == "cuda" else "tiny"
    if config["compile"] == "auto":
        config["compile"] = env.device_type == "cuda"
    size = SIZES[config["size"]]
    sweep = size["sweep"]
    config.update({k: config[k] or size[k] for k in ("steps", "repeats", "warmup")}, attns=attns,
                  contexts=[int(T) for T in contexts or sweep["contexts"]])
    out = config["out_dir"]
    check_writable(out)
    peak = peak_flops(env.device, env.dtype)
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "env": env.describe(),
               "config": config, "peak_tflops": peak and peak / 1e12, "shapes": size["shapes"]}
    print(f"{env.describe()}, compile {config['compile']}, size {config['size']}: writing {out}",
          flush=True)
    t_start = time.perf_counter()
    try:
        if "calib" in wanted:
            results["calib"] = calibrate(env, peak)
        if "train" in wanted or "profile" in wanted:
            time_variants(env, config, wanted, results, peak, "train", size["shapes"])
        if "sweep" in wanted:
            shapes = {f"T={T}": dict(sweep["model"], block_size=T,
                                     batch_size=max(1, sweep["tokens"] // T), accum=1)
                      for T in config["contexts"]}
            time_variants(env, config, wanted, results, peak, "sweep", shapes)
        if "memory" in wanted:
            results["memory"] = head_memory(env, config)
        results["total_s"] = time.perf_counter() - t_start
        text = write(results, env, out)
        print(f"\n{text}\nwrote {out}/bench.md and bench.json in {results['total_s']:.0f} s")
    except torch.OutOfMemoryError as e:
        raise TrainingError(f"out of memory ({str(e).splitlines()[0][:100]}); "
                            f"results so far in {out}") from None
    finally:
        teardown(env)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
