"""
Sample from a model trained by train.py, and look inside it.

  python sample.py --out_dir=out                          # a task: answers beside the truth; a corpus: text
  python sample.py --out_dir=out --start="FILE:prompt.txt" --num_samples=3 --max_new_tokens=500
  python sample.py --out_dir=out --classify="a gripping, funny film"   # a classifier: label and probability
  python sample.py --out_dir=out --attn_maps --induction  # attn_maps.png, induction scores, induction.png

--key=value values are Python literals of the default's type; a bare --flag turns a bool option on.
"""
import ast
import functools
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

import data
from mixit import MixiT, MixiTConfig

# -----------------------------------------------------------------------------
out_dir = "out"  # holds ckpt.pt, written by train.py
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
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}


class ConfigError(Exception):
    """Bad input: reported in one line, exit status 2."""


def parse_args(argv):
    """The defaults with --key=value overrides, each a literal of its default's type."""
    config = dict(DEFAULTS)
    for arg in argv:
        key, eq, text = arg[2:].partition("=")
        if not arg.startswith("--") or key not in DEFAULTS:
            raise ConfigError(f"unknown option {arg.partition('=')[0]}; valid: {', '.join('--' + k for k in DEFAULTS)}")
        default = DEFAULTS[key]
        if isinstance(default, str) and eq:
            config[key] = text
            continue
        try:
            value = ast.literal_eval(text) if eq else True if isinstance(default, bool) else None
        except (ValueError, SyntaxError):
            value = None
        if isinstance(default, float) and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise ConfigError(f"{arg}: expected a {type(default).__name__}, like --{key}={default!r}")
        config[key] = value
    for key in ("num_samples", "temperature"):
        if config[key] <= 0:
            raise ConfigError(f"--{key}={config[key]} must be positive")
    for key in ("max_new_tokens", "top_k"):
        if config[key] < 0:
            raise ConfigError(f"--{key}={config[key]} must be at least 0")
    return config


def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N, mps")
    if not {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}[dev.type]:
        raise ConfigError(f"device={name} is not available here; valid: auto, cpu")
    return dev


def load_model(out, dev):
    """The model of out/ckpt.pt in eval mode, and the training config it was trained with."""
    path = os.path.join(out, "ckpt.pt")
    if not os.path.isfile(path):
        runs = sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "ckpt.pt"))) \
            if os.path.isdir(out) else []
        raise ConfigError(f"no checkpoint at {path}" + (f"; runs inside: {', '.join(runs)}" if runs else ""))
    try:
        ckpt = torch.load(path, map_location=dev, weights_only=True)  # tensors and plain values only
        model = MixiT(MixiTConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["model"])
        config = dict(ckpt["config"])
    except Exception as e:
        why = str(e).partition("\n")[0][:120]
        raise ConfigError(f"{path} is not a readable checkpoint ({type(e).__name__}: {why})") from None
    return model.to(dev).eval(), config


# ----------------------------------------------------------------------------- induction heads


def analysis(fn):
    """Run fn(model, ...) in eval mode without gradients, then give the model back its train/eval mode."""
    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return fn(model, *args, **kwargs)
        finally:
            model.train(was_training)
    return wrapper


def repeated_tokens(config, n_seqs, seg_len=None, seed=0, device=None):
    """(n_seqs, 2*seg_len): a segment of distinct random tokens (never pad_id), then its exact repeat."""
    vocab = config.vocab_size - (0 <= config.pad_id < config.vocab_size)
    seg_len = seg_len or min(config.block_size // 2, 32, vocab)
    if not 1 <= seg_len <= min(config.block_size // 2, vocab):
        raise ValueError(f"seg_len={seg_len}: two copies must fit block_size={config.block_size} and "
                         f"the tokens must be distinct")
    noise = torch.rand(n_seqs, config.vocab_size, generator=torch.Generator().manual_seed(seed))  # (n, V)
    if config.pad_id >= 0:
        noise[:, config.pad_id] = -1.0
    segment = noise.topk(seg_len, dim=-1).indices  # (n, seg_len) distinct tokens
    return segment.repeat(1, 2).to(device)  # (n, 2*seg_len)


def prefix_matching_score(attn, seg_len):
    """Induction score of attention (..., T, T) on a segment repeated from position 0: the mean weight
    from each position i = seg_len + j of the repeat to j + 1, the token after its earlier copy."""
    stripe = attn.diagonal(offset=1 - seg_len, dim1=-2, dim2=-1)  # (..., T-seg_len+1): (i, i-seg_len+1)
    return stripe[..., 1:seg_len + 1].float().mean(-1)  # i = seg_len .. 2*seg_len-1


def _device_of(model, device):
    return device or next(model.parameters()).device


@analysis
def induction_scores(model, n_seqs=64, seg_len=None, seed=0, device=None):
    """(n_layer, n_head) prefix-matching score of every head on repeated random segments; device=None: the model's."""
    idx = repeated_tokens(model.config, n_seqs, seg_len, seed, _device_of(model, device))  # (n, 2s)
    maps = model.attention_maps(idx)  # (L, n, H, 2s, 2s)
    return prefix_matching_score(maps, idx.size(1) // 2).mean(1).cpu()  # (L, H)


@analysis
def icl_score(model, n_seqs=64, seg_len=None, seed=0, device=None):
    """In-context learning: mean loss on the repeated half minus on the first (negative: the context helps;
    nan for segments of one token, which leave nothing to predict)."""
    if model.config.n_classes:
        raise ValueError("icl_score needs a language model, not a classifier")
    idx = repeated_tokens(model.config, n_seqs, seg_len, seed, _device_of(model, device))  # (n, 2s)
    s = idx.size(1) // 2
    logits, _ = model(idx)  # (n, 2s, V)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), idx[:, 1:], reduction="none")  # (n, 2s-1)
    return (loss[:, s:].mean() - loss[:, :s - 1].mean()).item()  # targets s+1.. vs 1..s-1: s-1 tokens each


# ----------------------------------------------------------------------------- plots


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_attention_maps(maps, labels, path, title):
    """A layers x heads grid of heatmaps of maps (L, H, t, t), queries down and keys across, one colour bar."""
    plt = pyplot()
    L, H, t, _ = maps.shape
    signed = maps.min() < 0  # MixiT's fixed matrices are no probabilities: a diverging scale around 0
    vmax = float(np.abs(maps).max()) if signed else 1.0
    cell = 2.6 if labels is None else max(2.6, 0.17 * t + 0.9)
    fig, axes = plt.subplots(L, H, figsize=(cell * H + 1.5, cell * L + 0.8), squeeze=False, layout="constrained")
    for (l, h), ax in np.ndenumerate(axes):
        im = ax.imshow(maps[l, h], cmap="RdBu_r" if signed else "Blues", vmin=-vmax if signed else 0.0, vmax=vmax)
        ax.set_title(f"layer {l}, head {h}", fontsize=10)
        if labels is not None:
            ax.set_xticks(range(t), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(t), labels, fontsize=7)
        if l == L - 1:
            ax.set_xlabel("key (attended to)")
        if h == 0:
            ax.set_ylabel("query")
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_induction(scores, path, title):
    """A layers x heads heatmap of induction scores on a 0..1 colour scale, each cell annotated."""
    plt = pyplot()
    L, H = scores.shape
    fig, ax = plt.subplots(figsize=(1.0 * H + 2.5, 0.8 * L + 1.5), layout="constrained")
    im = ax.imshow(scores, cmap="viridis", vmin=0.0, vmax=1.0)
    for (l, h), v in np.ndenumerate(scores):
        ax.text(h, l, f"{v:.2f}", ha="center", va="center", color="black" if v > 0.6 else "white", fontsize=9)
    ax.set(xticks=range(H), yticks=range(L), xlabel="head", ylabel="layer", title=title)
    fig.colorbar(im, ax=ax, label="induction score")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- what sample.py does


def show_attention_maps(model, task, config, name, dev):
    """out_dir/attn_maps.png on the task's first evaluation example, else on a repeated random segment."""
    if task is not None:
        idx, _ = next(task.eval_batches(task.val_split, 1))
        what, words = "its first evaluation example", [task.token_str(int(t)) for t in idx[0]]
    else:
        idx = repeated_tokens(model.config, 1, seed=config["seed"])
        what, words = "a random segment and its repeat", [str(int(t)) for t in idx[0]]
    maps = model.attention_maps(idx.to(dev))[:, 0].float().cpu().numpy()  # (L, H, t, t)
    path = os.path.join(config["out_dir"], "attn_maps.png")
    kind = "fixed mixing matrices" if model.config.attn == "mixing" else "attention"
    plot_attention_maps(maps, words if len(words) <= 40 else None, path,
                        f"{name} ({model.config.attn}): {kind} on {what}")
    print(f"wrote {path}")


def show_induction(model, config, name, dev):
    """Per-head induction scores, the best head and the in-context-learning score; out_dir/induction.png."""
    scores = induction_scores(model, seed=config["seed"], device=dev)  # (L, H)
    L, H = scores.shape
    print("induction score per head (weight from each repeated token to the one after its first copy; 1 = ideal):")
    print("         " + "".join(f"{f'head {h}':>8}" for h in range(H)))
    for l in range(L):
        print(f"layer {l:<3}" + "".join(f"{v:8.3f}" for v in scores[l].tolist()))
    best = int(scores.argmax())
    print(f"best: layer {best // H}, head {best % H} ({scores.flatten()[best]:.3f})")
    title = f"{name} ({model.config.attn}): induction scores"
    if not model.config.n_classes:
        icl = icl_score(model, seed=config["seed"], device=dev)
        print(f"in-context learning score: {icl:+.3f} nats (loss on the repeat minus on the first copy)")
        title += f", ICL {icl:+.2f} nats"
    path = os.path.join(config["out_dir"], "induction.png")
    plot_induction(scores.numpy(), path, title)
    print(f"wrote {path}")


def show_answers(model, task, config, dev):
    """Greedy answers beside the truth for the first evaluation examples of an algorithmic task."""
    x, y = next(task.eval_batches(task.val_split, config["num_samples"]))
    right = total = exact = 0
    for xi, yi in zip(x.numpy(), y.numpy()):
        scored = np.flatnonzero(yi >= 0)
        if not len(scored):
            continue
        first, last = scored[0], scored[-1]
        prompt = torch.from_numpy(xi[:first + 1])[None].to(dev)  # (1, first+1)
        out = model.generate(prompt, last - first + 1, top_k=1, use_cache=config["use_cache"])
        pred = np.full_like(yi, -1)
        pred[first:last + 1] = out[0, first + 1:].cpu().numpy()  # pred[p]: the token after position p
        print(task.show(xi, yi, pred))
        hits = (pred[scored] == yi[scored]).sum()
        right, total, exact = right + hits, total + len(scored), exact + (hits == len(scored))
    print(f"greedy decoding from each prompt: {right}/{total} answer tokens right ({right / max(total, 1):.1%}), "
          f"{exact}/{len(x)} examples entirely right")


def load_corpus(name, config, train_config):
    """meta.json and the tokenizer of a prepared corpus."""
    folder = os.path.join(config["data_dir"] or train_config.get("data_dir", "data"), name)
    meta = data.read_meta(folder, name)
    return folder, meta, data.Tokenizer(meta["tokenizer"], config["bpe_dir"] or None)


def show_samples(model, tok, config, dev):
    """num_samples continuations of --start, as nanoGPT prints them."""
    text = config["start"]
    if text.startswith("FILE:"):
        try:
            with open(text[5:], encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"--start={text}: cannot read the file ({e.strerror})") from None
    x = torch.tensor(tok.encode(text) or [tok.eot], dtype=torch.long, device=dev)[None]  # (1, t)
    for _ in range(config["num_samples"]):
        y = model.generate(x, config["max_new_tokens"], config["temperature"], config["top_k"] or None,
                           config["use_cache"])
        print(tok.decode(y[0].tolist()))
        print("---------------")


def show_classes(model, task, tok, meta, config, dev):
    """The label of --classify, or predictions beside the truth for the first evaluation examples."""
    labels = meta["labels"]
    if config["classify"]:
        x, keep = data.encode_examples(tok, [config["classify"]], model.config.block_size)  # truncated, padded
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


@torch.no_grad()
def main(argv):
    config = parse_args(argv)
    dev = pick_device(config["device"])
    model, train_config = load_model(config["out_dir"], dev)
    torch.manual_seed(config["seed"])
    name = train_config["task"]
    corpus = name in data.CORPUS_TASKS or name.partition("_")[0] not in data.TASKS  # a prepared folder
    if config["classify"] and not model.config.n_classes:
        raise ConfigError(f"--classify needs a classifier; {config['out_dir']} holds a language model of {name}")
    if config["attn_maps"] or config["induction"]:
        if config["attn_maps"]:
            show_attention_maps(model, None if corpus else data.make_task(name), config, name, dev)
        if config["induction"]:
            show_induction(model, config, name, dev)
    elif not corpus:
        show_answers(model, data.make_task(name), config, dev)
    else:
        folder, meta, tok = load_corpus(name, config, train_config)
        if model.config.n_classes:
            task = data.make_task(name, model.config.block_size, os.path.dirname(folder), 1,
                                  train_config.get("eval_split", "val"))
            show_classes(model, task, tok, meta, config, dev)
        else:
            show_samples(model, tok, config, dev)


def cli(argv):
    """Run main; bad input ends in one line on stderr and exit status 2, never a traceback."""
    try:
        main(argv)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
