"""
Sample from a model trained by train.py, and look inside it.

  python sample.py --out_dir=out                          # a task: answers beside the truth; a corpus: text
  python sample.py --out_dir=out --start="FILE:prompt.txt" --num_samples=3 --max_new_tokens=500
  python sample.py --out_dir=out --classify="a gripping, funny film"   # a classifier: label and probability
  python sample.py --out_dir=out --attn_maps --induction  # attn_maps.png, induction scores, induction.png
  python sample.py --propagation=32 --out_dir=out/propagation  # no checkpoint: signal propagation at init
  python sample.py --express=init --out_dir=out/express   # no checkpoint: the patterns each variant's heads can form
  python sample.py --express=ckpt --out_dir=out           # the same for each layer of a checkpoint, beside its init

--key=value values are Python literals of the default's type; a bare --flag turns a bool option on.
"""
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

from common import (ConfigError, Env, OneOf, check_writable, cli, configure, defaults_of, load_checkpoint,
                    load_weights, non_negative, pick_device, positive)
from data import (CORPUS_TASKS, TASKS, Tokenizer, encode_examples, evaluate, in_eval, induction_scores,
                  make_task, named_patterns, pattern_residuals, read_meta, recall_scores, repeated_tokens)
from mixit import MixiT, MixiTConfig
from report import plot_attention_maps, plot_express, plot_induction, plot_propagation

# -----------------------------------------------------------------------------
out_dir = "out"  # holds train.py's checkpoints
checkpoint = "best"  # best (best.pt, the lowest val_loss; ckpt.pt before any eval) | latest (ckpt.pt)
start = "\n"  # language models: the prompt, or FILE:path to read it from a file
num_samples = 10  # language models: samples drawn; tasks and classifiers: evaluation examples shown
max_new_tokens = 200
temperature = 0.8  # 1.0 samples the model's distribution, lower is more conservative
top_k = 200  # sample among the top_k most likely tokens only; 0 keeps all, 1 is greedy
seed = 1337
device = "auto"  # auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps
use_cache = True  # generate with the KV cache (values only for mixing): same tokens, faster
attn_maps = False  # save out_dir/attn_maps.png: every layer's and head's attention on one input
induction = False  # print induction-head and in-context-learning scores, save out_dir/induction.png
classify = ""  # classifiers: the text to label
data_dir = ""  # the folder of prepared corpora; '' takes the checkpoint's
bpe_dir = ""  # a folder with gpt2.tiktoken (GPT-2 BPE offline); '' takes MIXIT_BPE_DIR
propagation = 0  # > 0: no checkpoint; how tokens' residual streams drift together at init, up to this depth
propagation_width = 128  # the width of those models (4 heads, 64 tokens), measured over seeds 0, 1, 2
express = ""  # init: which patterns each variant's heads can form at init (no checkpoint); ckpt: out_dir's model's
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
RULES = {"num_samples": positive, "temperature": positive, "max_new_tokens": non_negative, "top_k": non_negative,
         "propagation": non_negative, "propagation_width": positive, "express": OneOf(("", "init", "ckpt")),
         "checkpoint": OneOf(("best", "latest"))}


# ----------------------------------------------------------------------------- what sample.py shows

def show_attention_maps(model, task, config, name, dev):
    """out_dir/attn_maps.png on the task's first evaluation example, else on a repeated random segment."""
    idx = next(task.eval_batches(task.val_split, 1))[0] if task else \
        repeated_tokens(model.config, 1, seed=config["seed"])
    what = "its first evaluation example" if task else "a random segment and its repeat"
    words = [(task.token_str if task else str)(int(t)) for t in idx[0]]
    maps = model.attention_maps(idx.to(dev))[:, 0].float().cpu().numpy()  # (L, H, t, t)
    kind = "fixed mixing matrices" if model.config.attn == "mixing" else "attention"  # a hybrid: per layer
    plot_attention_maps(maps, words if len(words) <= 40 else None, os.path.join(config["out_dir"], "attn_maps.png"),
                        f"{name} ({model.config.attn}): {kind} on {what}")


def show_induction(model, task, config, name, dev):
    """Per-head induction scores (recall tasks: recall_scores) and the best head, printed; out_dir/induction.png."""
    if task is not None and task.probe == "recall":
        scores, what = recall_scores(model, task), "weight from each question to the value after its key"
    else:
        scores, what = induction_scores(model, seed=config["seed"]), \
            "weight from each repeated token to the one after its first copy"
    L, H = scores.shape
    print(f"induction score per head ({what}; 1 = ideal):")
    print("         " + "".join(f"{f'head {h}':>8}" for h in range(H)))
    for l in range(L):
        print(f"layer {l:<3}" + "".join(f"{v:8.3f}" for v in scores[l].tolist()))
    best = int(scores.argmax())
    print(f"best: layer {best // H}, head {best % H} ({scores.flatten()[best]:.3f})")
    plot_induction(scores.numpy(), os.path.join(config["out_dir"], "induction.png"),
                   f"{name} ({model.config.attn}): induction scores")


def show_answers(model, task, config, dev):
    """Greedy answers beside the truth for the first evaluation examples of an algorithmic task, each run of consecutive
    scored positions decoded from the true tokens before it (MQAR's queries are given)."""
    x, y = next(task.eval_batches(task.val_split, config["num_samples"]))
    for xi, yi in zip(x.numpy(), y.numpy()):
        scored, pred = np.flatnonzero(yi >= 0), np.full_like(yi, -1)
        for first, last in zip(scored[np.r_[True, np.diff(scored) > 1]], scored[np.r_[np.diff(scored) > 1, True]]):
            prompt = torch.from_numpy(xi[:first + 1])[None].to(dev)  # (1, first+1)
            out = model.generate(prompt, last - first + 1, top_k=1, use_cache=config["use_cache"])
            pred[first:last + 1] = out[0, first + 1:].cpu().numpy()  # pred[p]: the token after position p
        print(task.show(xi, yi, pred))


def show_samples(model, tok, config, dev):
    """num_samples continuations of --start (FILE:path reads the file), as nanoGPT prints them."""
    start = config["start"]
    if start.startswith("FILE:"):
        try:
            with open(start[5:], encoding="utf-8") as f:
                start = f.read()
        except OSError as e:
            raise ConfigError(f"--start={start}: cannot read the file ({e.strerror})") from None
    x = torch.tensor(tok.encode(start) or [tok.eot], dtype=torch.long, device=dev)[None]
    for _ in range(config["num_samples"]):
        y = model.generate(x, config["max_new_tokens"], config["temperature"], config["top_k"] or None, config["use_cache"])
        print(tok.decode(y[0].tolist()))
        print("---------------")


def show_classes(model, task, tok, labels, config, dev):
    """The label of --classify, or predictions beside the truth for the first evaluation examples."""
    if config["classify"]:
        x, keep = encode_examples(tok, [config["classify"]], model.config.block_size)  # truncated, padded
        if not keep[0]:
            raise ConfigError("--classify: the text has no tokens")
        probs = F.softmax(model(torch.from_numpy(x.astype(np.int64)).to(dev))[0].float(), -1)[0]  # (n_classes,)
        print(f"{labels[int(probs.argmax())]} (p={probs.max().item():.3f})")
        return
    x, y = next(task.eval_batches(task.val_split, config["num_samples"]))
    probs = F.softmax(model(x.to(dev))[0].float(), -1).cpu()  # (n, n_classes)
    for xi, yi, p in zip(x, y, probs):
        text = tok.decode(xi.tolist()).replace("\n", " ")
        print(f"{text[:60]!r:<64} truth: {labels[int(yi)]:>9}   model: {labels[int(p.argmax())]:>9} (p={p.max():.2f})")
    print(f"accuracy: {(probs.argmax(-1) == y).float().mean():.1%} over {len(y)} examples")


def show_corpus(model, name, config, train_config, dev):
    """Text samples from a language model, labels from a classifier, of a prepared corpus."""
    data_dir = config["data_dir"] or train_config.get("data_dir", "data")
    meta = read_meta(os.path.join(data_dir, name), name)
    tok = Tokenizer(meta["tokenizer"], config["bpe_dir"] or None)
    if not model.config.n_classes:
        return show_samples(model, tok, config, dev)
    task = make_task(name, model.config.block_size, data_dir, 1, train_config.get("eval_split", "val"))
    show_classes(model, task, tok, meta["labels"], config, dev)


def show(config):
    """What the checkpoint in out_dir holds: answers, text or labels; or its attention maps and induction scores."""
    dev = pick_device(config["device"])
    best, latest = (os.path.join(config["out_dir"], file) for file in ("best.pt", "ckpt.pt"))
    path = best if config["checkpoint"] == "best" and os.path.isfile(best) else latest
    ckpt = load_checkpoint(path, dev)
    model = load_weights(ckpt, path, lambda: MixiT(MixiTConfig(**ckpt["model_args"]), dev)).eval()
    torch.manual_seed(config["seed"])
    name = ckpt["config"]["task"]
    corpus = name in CORPUS_TASKS or name.partition("_")[0] not in TASKS  # a prepared folder
    if config["classify"] and not model.config.n_classes:
        raise ConfigError(f"--classify needs a classifier; {config['out_dir']} holds a language model of {name}")
    task = None if corpus else make_task(name)  # built once: its test set
    if config["attn_maps"]:
        show_attention_maps(model, task, config, name, dev)
    if config["induction"]:
        show_induction(model, task, config, name, dev)
    if config["express"]:
        show_express(model, task, config, dev)
    if config["attn_maps"] or config["induction"] or config["express"]:
        return
    if corpus:
        return show_corpus(model, name, config, ckpt["config"], dev)
    show_answers(model, task, config, dev)
    val = evaluate(model, task, task.val_split, 500, Env(dev))  # as train.py scores its evaluation split
    print(f"{path}, the {task.val_split} split, each answer token from the true ones before it (train.py's val_acc, "
          f"val_exact): {val['acc']:.4f} of the answer tokens right, {val['exact']:.4f} of the examples entirely")


# ----------------------------------------------------------------------------- signal propagation at init

def token_stats(x):
    """The mean covariance (x_i . x_j / C) and cosine similarity of distinct tokens' residual streams x (B, t, C)."""
    off = ~torch.eye(x.size(1), dtype=torch.bool)
    cov = (x @ x.transpose(1, 2) / x.size(-1))[:, off]
    unit = F.normalize(x, dim=-1)
    return cov.mean().item(), (unit @ unit.transpose(1, 2))[:, off].mean().item()


def unshape(block, g):
    """A MixiT block unshaped: its fixed matrix plain random attention (a softmax of random scores), plain residuals."""
    P = block.attn.mixing  # the stored matrix is A - I
    scores = torch.randn(P.shape, generator=g).masked_fill(torch.ones(P.shape[1:]).triu(1).bool(), -torch.inf)
    P.copy_(scores.softmax(-1) - torch.eye(P.size(-1)))
    block.s = block.r = 1.0


NETWORKS = {"MixiT": ("mixing", None), "MixiT without shaping": ("mixing", unshape),  # an edit of every block
            "MixiT without its sink head": ("mixing", lambda block, g: block.attn.mixing[0].zero_()),  # head 0: I
            "random transformer": ("softmax", None)}


def propagation_curves(depth, width, seed):
    """{network: (depth+1, 2)} covariance and similarity after the embedding and after every layer, at init."""
    idx = torch.randint(0, 64, (16, 64), generator=torch.Generator().manual_seed(seed))
    curves = {}
    for name, (attn, edit) in NETWORKS.items():
        model = MixiT(MixiTConfig(vocab_size=64, block_size=64, n_layer=depth, n_embd=width, attn=attn, seed=seed))
        g = torch.Generator().manual_seed(seed)  # one stream through the blocks
        for block in model.blocks if edit else ():
            edit(block, g)
        x, stats = model.embed(idx), []
        for block in [None, *model.blocks]:
            x = x if block is None else block(x)
            stats.append(token_stats(x))
        curves[name] = np.array(stats)
    return curves


def show_propagation(config):
    """Token covariance and similarity against depth, mean ± sample std over seeds 0-2: printed, propagation.png."""
    check_writable(config["out_dir"])  # before the work: out_dir holds no checkpoint that proved it
    depth, width = config["propagation"], config["propagation_width"]
    runs = [propagation_curves(depth, width, s) for s in range(3)]
    values = {name: np.stack([r[name] for r in runs]) for name in NETWORKS}  # (seeds, depth+1, 2)
    stats = {name: (v.mean(0), v.std(0, ddof=1)) for name, v in values.items()}
    layers = [l for l in (1, 2, 4, 8, 16, 32, 64) if l <= depth]
    print("layer " + "".join(f"{l:>16}" for l in layers) + "   (token covariance; similarity)")
    for name, (mean, _) in stats.items():
        print(f"{name}: " + "; ".join(f"{mean[l, 0]:.4f} {mean[l, 1]:.3f}" for l in layers))
    plot_propagation(stats, width, os.path.join(config["out_dir"], "propagation.png"))


# ----------------------------------------------------------------------------- what attention can express

VARIANTS = {"MixiT": dict(attn="mixing"), "MixiT, mean head": dict(attn="mixing", fixed_head="mean"),
            "softmax": dict(attn="softmax"), "Frozen-QK": dict(attn="frozen_qk")}  # at init, on random tokens
LENGTHS, HEAD_COUNTS = (16, 64), (4, 16, 64, 256)  # the probe at init: one layer of width 512


def layer_residuals(model, idx):
    """{pattern: (n_layer,)}: how well each layer's heads form the named patterns on idx (B, T), mean over the rows."""
    maps = in_eval(model, model.attention_maps, idx)  # (L, B, H, T, T)
    return {name: r.mean(1) for name, r in pattern_residuals(maps, named_patterns(idx.size(1), idx.device)).items()}


def print_residuals(rows, keys):
    """The probe's table: a row per model or layer, the residual of each pattern (0: formed exactly, 1: nothing)."""
    patterns = [k for k in rows[0] if k not in keys]
    print("relative least-squares residual of each pattern in the span of the heads (0: exactly; 1: nothing of it)")
    print("".join(f"{k:>18}" for k in keys + patterns))
    for row in rows:
        print("".join(f"{row[k]:>18}" if k in keys else f"{row[k]:18.3f}" for k in keys + patterns))


def residuals_at_init(seed):
    """A row per length, variant and head count: the probe on one layer at init, on 8 random sequences."""
    rows = []
    for T in LENGTHS:
        idx = torch.randint(0, 64, (8, T), generator=torch.Generator().manual_seed(seed))
        for name, kind in VARIANTS.items():
            for heads in HEAD_COUNTS:
                model = MixiT(MixiTConfig(vocab_size=64, block_size=T, n_layer=1, n_head=heads, n_embd=512, **kind))
                rows.append({"T": T, "heads": heads, "variant": name,
                             **{p: r[0].item() for p, r in layer_residuals(model, idx).items()}})
    return rows


def express_at_init(config):
    """The probe at init, printed and plotted (out_dir/express.png)."""
    check_writable(config["out_dir"])
    rows = residuals_at_init(config["seed"])
    print_residuals(rows, ["T", "heads", "variant"])
    plot_express(rows, os.path.join(config["out_dir"], "express.png"))


def show_express(model, task, config, dev):
    """The probe on each layer of a checkpoint and at init, on the task's first evaluation rows (a corpus: repeats)."""
    idx = next(task.eval_batches(task.val_split, 8))[0] if task else repeated_tokens(model.config, 8, seed=config["seed"])
    rows = []
    for when, m in (("trained", model), ("at init", MixiT(model.config, dev))):
        residuals = layer_residuals(m, idx.to(dev))
        rows += [{"layer": layer, "model": when, **{p: r[layer].item() for p, r in residuals.items()}}
                 for layer in range(model.config.n_layer)]
    print_residuals(sorted(rows, key=lambda r: r["layer"]), ["layer", "model"])


def main(argv):
    config = configure(DEFAULTS, argv, RULES, files=False)
    try:
        with torch.no_grad():
            if config["propagation"]:
                show_propagation(config)
            elif config["express"] == "init":
                express_at_init(config)
            else:
                show(config)
    except ValueError as e:  # data.py's bad input: an unprepared corpus, a missing tokenizer
        raise ConfigError(str(e)) from None


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
