"""
Sample from a model trained by train.py, and look inside it:

  python sample.py --out_dir=out   # a task: answers beside the truth; a corpus: text
  python sample.py --out_dir=out --start="FILE:prompt.txt" --num_samples=3 --max_new_tokens=500
  python sample.py --out_dir=out --classify="a gripping, funny film"   # a label, its probability
  python sample.py --out_dir=out --attn_maps --induction   # attn_maps.png; induction scores, .png
  python sample.py --express=ckpt --out_dir=out   # the patterns each layer's heads form; at init

Or look at models at init, with no checkpoint:

  python sample.py --propagation=32 --out_dir=out/propagation   # signal propagation through depth
  python sample.py --express=init --out_dir=out/express   # the patterns each variant's heads form

--key=value values are Python literals of the default's type; a bare --flag turns a bool option on.
"""
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

from common import (ConfigError, Env, OneOf, check_writable, cli, configure, defaults_of,
                    load_checkpoint, load_weights, non_negative, pick_device, positive)
from data import (CORPUS_TASKS, TASKS, Tokenizer, encode_examples, evaluate, in_eval,
                  induction_scores, make_task, named_patterns, pattern_residuals, read_meta,
                  recall_scores, repeated_tokens)
from mixit import MixiT, MixiTConfig, mixit_config
from report import plot_attention_maps, plot_express, plot_induction, plot_propagation

# -----------------------------------------------------------------------------
# the folder of train.py's checkpoints
out_dir = "out"
# best: best.pt (the lowest val_loss), or ckpt.pt before any eval; latest: ckpt.pt
checkpoint = "best"
# language models: the prompt, or FILE:path to read it from a file
start = "\n"
# language models: the samples drawn; tasks and classifiers: the evaluation examples shown
num_samples = 10
max_new_tokens = 200
# 1.0 samples the model's distribution; lower is more conservative
temperature = 0.8
# sample among the top_k most likely tokens only; 0 keeps all, 1 is greedy
top_k = 200
seed = 1337
# auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps
device = "auto"
# generate with the KV cache (of values only, for mixing): the same tokens, faster
use_cache = True
# save out_dir/attn_maps.png: every layer's and head's attention on one input
attn_maps = False
# print induction-head and in-context-learning scores, save out_dir/induction.png
induction = False
# classifiers: the text to label
classify = ""
# the folder of prepared corpora; '' takes the checkpoint's
data_dir = ""
# a folder with gpt2.tiktoken (GPT-2 BPE offline); '' takes MIXIT_BPE_DIR
bpe_dir = ""
# > 0: with no checkpoint, how tokens' residual streams drift together at init, up to this depth
propagation = 0
# the width of those models (4 heads, 64 tokens), measured over seeds 0, 1 and 2
propagation_width = 128
# init: which patterns each variant's heads can form at init (no checkpoint); ckpt: the same for
# out_dir's model
express = ""
# -----------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
RULES = {"num_samples": positive, "temperature": positive, "max_new_tokens": non_negative,
         "top_k": non_negative, "propagation": non_negative, "propagation_width": positive,
         "express": OneOf(("", "init", "ckpt")), "checkpoint": OneOf(("best", "latest"))}


# ----------------------------------------------------------------------------- what sample.py shows

def first_rows(model, task, config, n):
    """(n, T): the task's first n evaluation rows, or n random segments each with its repeat."""
    if task:
        return next(task.eval_batches(task.val_split, n))[0]
    return repeated_tokens(model.config, n, seed=config["seed"])


def show_attention_maps(model, task, config, name, dev):
    """out_dir/attn_maps.png on the task's first evaluation example, else on a repeated random
    segment."""
    idx = first_rows(model, task, config, 1)
    what = "its first evaluation example" if task else "a random segment and its repeat"
    token_str = task.token_str if task else str
    words = [token_str(int(t)) for t in idx[0]]
    maps = model.attention_maps(idx.to(dev))[:, 0].float().cpu().numpy()  # (L, H, t, t)
    # a hybrid (mixing in some layers only) is titled attention
    kind = "fixed mixing matrices" if model.config.attn == "mixing" else "attention"
    plot_attention_maps(maps, words if len(words) <= 40 else None,
                        os.path.join(config["out_dir"], "attn_maps.png"),
                        f"{name} ({model.config.attn}): {kind} on {what}")


def show_induction(model, task, config, name):
    """Per-head induction scores (recall tasks: recall_scores) and the best head, printed;
    out_dir/induction.png."""
    if task and task.probe == "recall":
        scores = recall_scores(model, task)
        what = "weight from each question to the value after its key"
    else:
        scores = induction_scores(model, seed=config["seed"])
        what = "weight from each repeated token to the one after its first copy"
    n_layer, n_head = scores.shape
    print(f"induction score per head ({what}; 1 = ideal):")
    print("         " + "".join(f"{f'head {head}':>8}" for head in range(n_head)))
    for layer in range(n_layer):
        print(f"layer {layer:<3}" + "".join(f"{v:8.3f}" for v in scores[layer].tolist()))
    best = int(scores.argmax())
    print(f"best: layer {best // n_head}, head {best % n_head} ({scores.flatten()[best]:.3f})")
    plot_induction(scores.numpy(), os.path.join(config["out_dir"], "induction.png"),
                   f"{name} ({model.config.attn}): induction scores")


def show_answers(model, task, config, dev):
    """Greedy answers beside the truth for the first evaluation examples of an algorithmic task,
    each run of consecutive scored positions decoded from the true tokens before it (MQAR's queries
    are given)."""
    x, y = next(task.eval_batches(task.val_split, config["num_samples"]))
    for xi, yi in zip(x.numpy(), y.numpy()):
        scored = np.flatnonzero(yi >= 0)
        # pred[p]: the token the model puts after position p
        pred = np.full_like(yi, -1)
        breaks = np.diff(scored) > 1
        for first, last in zip(scored[np.r_[True, breaks]], scored[np.r_[breaks, True]]):
            prompt = torch.from_numpy(xi[:first + 1])[None].to(dev)  # (1, first+1)
            out = model.generate(prompt, last - first + 1, top_k=1, use_cache=config["use_cache"])
            pred[first:last + 1] = out[0, first + 1:].cpu().numpy()
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
    prompt = tok.encode_batch([start])[0]
    # an empty prompt starts from the end-of-text token
    if not prompt:
        prompt = [tok.eot]
    x = torch.tensor(prompt, dtype=torch.long, device=dev)[None]
    for _ in range(config["num_samples"]):
        y = model.generate(x, config["max_new_tokens"], config["temperature"],
                           config["top_k"] or None, config["use_cache"])
        print(tok.decode(y[0].tolist()))
        print("---------------")


def show_classes(model, task, tok, labels, config, dev):
    """The label of --classify, or predictions beside the truth for the first evaluation
    examples."""
    if config["classify"]:
        # truncated to the block, padded
        x, keep = encode_examples(tok, [config["classify"]], model.config.block_size)
        if not keep[0]:
            raise ConfigError("--classify: the text has no tokens")
        logits = model(torch.from_numpy(x.astype(np.int64)).to(dev))[0]
        probs = F.softmax(logits.float(), -1)[0]  # (n_classes,)
        print(f"{labels[int(probs.argmax())]} (p={probs.max().item():.3f})")
        return
    x, y = next(task.eval_batches(task.val_split, config["num_samples"]))
    probs = F.softmax(model(x.to(dev))[0].float(), -1).cpu()  # (n, n_classes)
    for xi, yi, p in zip(x, y, probs):
        text = tok.decode(xi.tolist()).replace("\n", " ")
        print(f"{text[:60]!r:<64} truth: {labels[int(yi)]:>9}   "
              f"model: {labels[int(p.argmax())]:>9} (p={p.max():.2f})")
    print(f"accuracy: {(probs.argmax(-1) == y).float().mean():.1%} over {len(y)} examples")


def show_corpus(model, name, config, train_config, dev):
    """Text samples from a language model, labels from a classifier, of a prepared corpus."""
    data_dir = config["data_dir"] or train_config.get("data_dir", "data")
    meta = read_meta(os.path.join(data_dir, name), name)
    tok = Tokenizer(meta["tokenizer"], config["bpe_dir"] or None)
    if not model.config.n_classes:
        return show_samples(model, tok, config, dev)
    task = make_task(name, model.config.block_size, data_dir, 1,
                     train_config.get("eval_split", "val"))
    show_classes(model, task, tok, meta["labels"], config, dev)


def show(config):
    """What the checkpoint in out_dir holds: answers, text or labels; or its attention maps and
    induction scores."""
    dev = pick_device(config["device"])
    path = os.path.join(config["out_dir"], "best.pt")
    # no best.pt before the first eval: ckpt.pt
    if config["checkpoint"] == "latest" or not os.path.isfile(path):
        path = os.path.join(config["out_dir"], "ckpt.pt")
    ckpt = load_checkpoint(path, dev)
    model = load_weights(ckpt, path, lambda: MixiT(mixit_config(ckpt["model_args"]), dev)).eval()
    torch.manual_seed(config["seed"])
    name = ckpt["config"]["task"]
    # a prepared folder: a corpus, or a name that is no algorithmic task's
    corpus = name in CORPUS_TASKS or name.partition("_")[0] not in TASKS
    if config["classify"] and not model.config.n_classes:
        raise ConfigError(f"--classify needs a classifier; {config['out_dir']} holds a language "
                          f"model of {name}")
    task = None if corpus else make_task(name)  # built once: its test set
    if config["attn_maps"]:
        show_attention_maps(model, task, config, name, dev)
    if config["induction"]:
        show_induction(model, task, config, name)
    if config["express"]:
        show_express(model, task, config, dev)
    if config["attn_maps"] or config["induction"] or config["express"]:
        return
    if corpus:
        return show_corpus(model, name, config, ckpt["config"], dev)
    show_answers(model, task, config, dev)
    # scored as train.py scores its evaluation split
    val = evaluate(model, task, task.val_split, 500, Env(dev))
    print(f"{path}, the {task.val_split} split, each answer token from the true ones before it "
          f"(train.py's val_acc, val_exact): {val['acc']:.4f} of the answer tokens right, "
          f"{val['exact']:.4f} of the examples entirely")


# ----------------------------------------------------------------------- signal propagation at init

def token_stats(x):
    """The mean covariance (x_i . x_j / C) and cosine similarity of distinct tokens' residual
    streams x (B, t, C)."""
    distinct = ~torch.eye(x.size(1), dtype=torch.bool)
    cov = (x @ x.mT / x.size(-1))[:, distinct]
    unit = F.normalize(x, dim=-1)
    return cov.mean().item(), (unit @ unit.mT)[:, distinct].mean().item()


def unshape(block, generator):
    """A MixiT block unshaped: its fixed matrix plain random attention (a softmax of random
    scores), plain residuals."""
    mixing = block.attn.mixing  # the stored matrix is A - I
    future = torch.ones(mixing.shape[1:]).triu(1).bool()
    scores = torch.randn(mixing.shape, generator=generator).masked_fill(future, -torch.inf)
    mixing.copy_(scores.softmax(-1) - torch.eye(mixing.size(-1)))
    block.skip_scale = block.branch_scale = 1.0


# Each network's attention, and an edit made to every block of it (or None).
NETWORKS = {
    "MixiT": ("mixing", None),
    "MixiT without shaping": ("mixing", unshape),
    # head 0, the sink, made the identity (the stored matrix is A - I)
    "MixiT without its sink head": ("mixing", lambda block, g: block.attn.mixing[0].zero_()),
    "random transformer": ("softmax", None)}


def propagation_curves(depth, width, seed):
    """{network: (depth+1, 2)} covariance and similarity after the embedding and after every layer,
    at init."""
    idx = torch.randint(64, (16, 64), generator=torch.Generator().manual_seed(seed))
    curves = {}
    for name, (attn, edit) in NETWORKS.items():
        model = MixiT(MixiTConfig(vocab_size=64, block_size=64, n_layer=depth, n_embd=width,
                                  attn=attn, seed=seed))
        # one random stream for the edits of all the blocks
        generator = torch.Generator().manual_seed(seed)
        x = model.embed(idx)
        stats = [token_stats(x)]
        for block in model.blocks:
            if edit:
                edit(block, generator)
            x = block(x)
            stats.append(token_stats(x))
        curves[name] = np.array(stats)
    return curves


def show_propagation(config):
    """Token covariance and similarity against depth, mean ± sample std over seeds 0-2: printed,
    propagation.png."""
    # checked before the work: out_dir holds no checkpoint that proved it writable
    check_writable(config["out_dir"])
    depth = config["propagation"]
    width = config["propagation_width"]
    runs = [propagation_curves(depth, width, seed) for seed in range(3)]
    stats = {}
    for name in NETWORKS:
        # (seeds, depth+1, 2)
        values = np.stack([run[name] for run in runs])
        stats[name] = (values.mean(0), values.std(0, ddof=1))
    layers = [layer for layer in (1, 2, 4, 8, 16, 32, 64) if layer <= depth]
    print("layer " + "".join(f"{layer:>16}" for layer in layers)
          + "   (token covariance; similarity)")
    for name, (mean, _) in stats.items():
        print(f"{name}: "
              + "; ".join(f"{mean[layer, 0]:.4f} {mean[layer, 1]:.3f}" for layer in layers))
    plot_propagation(stats, width, os.path.join(config["out_dir"], "propagation.png"))


# ----------------------------------------------------------------------- what attention can express

# The attentions the probe compares at init, on random tokens.
VARIANTS = {"MixiT": dict(attn="mixing"),
            "MixiT, mean head": dict(attn="mixing", fixed_head="mean"),
            "softmax": dict(attn="softmax"),
            "Frozen-QK": dict(attn="frozen_qk")}
# The probe at init is on one layer of width 512, at these lengths and head counts.
LENGTHS = (16, 64)
HEAD_COUNTS = (4, 16, 64, 256)


def layer_residuals(model, idx):
    """{pattern: (n_layer,)}: how well each layer's heads form the named patterns on idx (B, T),
    mean over the rows."""
    maps = in_eval(model, model.attention_maps, idx)  # (L, B, H, T, T)
    patterns = named_patterns(idx.size(1), idx.device)
    return {name: r.mean(1) for name, r in pattern_residuals(maps, patterns).items()}


def print_residuals(rows):
    """The probe's table: a row per model or layer, its names first, then the residual of each
    pattern (0: formed exactly, 1: nothing)."""
    print("relative least-squares residual of each pattern in the span of the heads "
          "(0: exactly; 1: nothing of it)")
    print("".join(f"{k:>18}" for k in rows[0]))
    for row in rows:
        # the residuals are the floats, to 3 decimals
        print("".join(f"{v:18.3f}" if isinstance(v, float) else f"{v:>18}" for v in row.values()))


def residuals_at_init(seed):
    """A row per length, variant and head count: the probe on one layer at init, on 8 random
    sequences."""
    rows = []
    for T in LENGTHS:
        idx = torch.randint(64, (8, T), generator=torch.Generator().manual_seed(seed))
        for name, kind in VARIANTS.items():
            for heads in HEAD_COUNTS:
                model = MixiT(mixit_config(dict(kind, vocab_size=64, block_size=T, n_layer=1,
                                                n_head=heads, n_embd=512)))
                rows.append({"T": T, "heads": heads, "variant": name,
                             **{p: r[0].item() for p, r in layer_residuals(model, idx).items()}})
    return rows


def express_at_init(config):
    """The probe at init, printed and plotted (out_dir/express.png)."""
    check_writable(config["out_dir"])
    rows = residuals_at_init(config["seed"])
    print_residuals(rows)
    plot_express(rows, os.path.join(config["out_dir"], "express.png"))


def show_express(model, task, config, dev):
    """The probe on each layer of a checkpoint and at init, on the task's first evaluation rows (a
    corpus: repeats)."""
    idx = first_rows(model, task, config, 8).to(dev)
    probes = {"trained": layer_residuals(model, idx),
              "at init": layer_residuals(MixiT(model.config, dev), idx)}
    rows = []
    for layer in range(model.config.n_layer):
        for when, residuals in probes.items():
            rows.append({"layer": layer, "model": when,
                         **{p: r[layer].item() for p, r in residuals.items()}})
    print_residuals(rows)


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
    except ValueError as e:
        # data.py's bad input: an unprepared corpus, a missing tokenizer
        raise ConfigError(str(e)) from None


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
