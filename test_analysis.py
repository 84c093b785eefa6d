"""Tests for sample.py and the attention analysis: python -m pytest -q test_analysis.py (CPU only, no network)."""
import os
import subprocess
import sys

import pytest
import torch

import data
import sample
import train
from mixit import ATTNS, MixiT, MixiTConfig

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=4, n_embd=32)
FAST = ["--device=cpu", "--log_interval=1000", "--n_layer=2", "--n_head=2", "--n_embd=32", "--batch_size=16",
        "--warmup_iters=2", "--max_iters=4", "--eval_interval=4", "--eval_iters=2"]


def tiny_model(**kw):
    return MixiT(MixiTConfig(**{**TINY, **kw}))


def run_sample(out_dir, *args):
    """sample.py in this process; returns its exit status."""
    return sample.cli([f"--out_dir={out_dir}", "--device=cpu", *args])


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Tiny checkpoints trained for 4 steps: an induction task, a byte-level text corpus and a classifier."""
    root = tmp_path_factory.mktemp("ckpts")
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 30)
    data.prepare("text", src=str(text), tokenizer="bytes", out_dir=str(root / "data"))
    sst = root / "sst"
    sst.mkdir()
    rows = [f"a {w} film\t{y}" for w, y in (("great", 1), ("dull", 0), ("lovely", 1), ("awful", 0))] * 6
    for name in ("train.tsv", "dev.tsv"):
        (sst / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    data.prepare("sst2", src=str(sst), tokenizer="bytes", out_dir=str(root / "data"), max_len=16)
    runs = {"induction": ["--task=induction_8", "--attn=softmax"],
            "text": ["--task=text", "--attn=mixing", "--block_size=16"],
            "sst2": ["--task=sst2", "--attn=softmax", "--block_size=16"]}
    for name, args in runs.items():
        assert train.cli([f"--out_dir={root / name}", f"--data_dir={root / 'data'}", *FAST, *args]) == 0
    return root


# ----------------------------------------------------------------------------- attention maps and scores


@pytest.mark.parametrize("attn,classifier", [(a, False) for a in ATTNS] + [("softmax", True), ("mixing", True)])
def test_attention_maps_are_what_each_layer_applies(attn, classifier):
    """Each layer's attention output is o(maps @ v) of its own input; a classifier's padding gets no weight."""
    kw = dict(n_classes=3, pad_id=0, causal=False) if classifier else {}
    model = tiny_model(attn=attn, **kw).eval()
    idx = torch.randint(1, 32, (2, 10))
    if classifier:
        idx[0, 7:] = 0
    seen = []
    record = lambda mod, args, out: seen.append((mod, args[0], out))  # each layer's input and output
    hooks = [block.attn.register_forward_hook(record) for block in model.blocks]
    model(idx)
    for h in hooks:
        h.remove()
    maps = model.attention_maps(idx)  # (L, B, H, t, t)
    assert maps.shape == (2, 2, 4, 10, 10)
    for (mod, x, out), w in zip(seen, maps):
        v = mod.v(x).view(2, 10, 4, 8).transpose(1, 2)  # (B, H, t, hd)
        assert torch.allclose(mod.o((w @ v).transpose(1, 2).reshape(2, 10, 32)), out, atol=1e-5)
        if attn != "mixing":
            assert torch.allclose(w.sum(-1), torch.ones(2, 4, 10), atol=1e-5)
    if classifier:
        assert (maps[:, 0, :, :, 7:] == 0).all()
    else:
        assert (maps.triu(1) == 0).all()


def test_prefix_matching_score_on_hand_built_patterns():
    s = 16
    T = 2 * s
    induction = torch.eye(T)  # attend to yourself in the first copy
    for i in range(s, T):
        induction[i] = 0.0
        induction[i, i - s + 1] = 1.0  # the token after the earlier copy of token i
    uniform = torch.ones(T, T).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert sample.prefix_matching_score(induction, s).item() == pytest.approx(1.0)
    assert sample.prefix_matching_score(uniform, s).item() < 0.1
    batched = sample.prefix_matching_score(torch.stack([induction, uniform, torch.eye(T)]).view(3, 1, T, T), s)
    assert batched.shape == (3, 1) and batched[2].item() == 0.0  # attending to itself scores 0


@pytest.mark.parametrize("attn", ATTNS)
def test_induction_scores_shape_and_no_side_effects(attn):
    model = tiny_model(attn=attn, block_size=16).train()
    rng = torch.get_rng_state()
    scores = sample.induction_scores(model, n_seqs=8)
    assert scores.shape == (2, 4) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(scores, sample.induction_scores(model, n_seqs=8))  # seeded: the same sequences
    if attn == "mixing":  # input-independent: the score of the fixed matrices themselves
        direct = torch.stack([sample.prefix_matching_score(b.attn.mixing[:, :16, :16], 8) for b in model.blocks])
        assert torch.allclose(scores, direct, atol=1e-6)
    assert isinstance(sample.icl_score(model, n_seqs=8), float)


def test_repeated_tokens_are_distinct_repeats_without_padding():
    cfg = MixiTConfig(**{**TINY, "block_size": 40, "n_classes": 2, "pad_id": 5, "causal": False})
    idx = sample.repeated_tokens(cfg, 50, seed=3)
    assert idx.shape == (50, 40) and torch.equal(idx[:, :20], idx[:, 20:]) and (idx != 5).all()
    assert all(len(set(row[:20].tolist())) == 20 for row in idx)
    with pytest.raises(ValueError, match="seg_len"):
        sample.repeated_tokens(cfg, 1, seg_len=21)


# ----------------------------------------------------------------------------- generation


@pytest.mark.parametrize("attn", ATTNS)
def test_cached_generation_batches_and_long_prompts(attn):
    """Batched greedy rows equal their one-row runs; sampling past block_size and a prompt longer than
    block_size give the same tokens with and without the cache."""
    model = tiny_model(attn=attn, block_size=10).eval()
    prompt = torch.randint(0, 32, (3, 4))
    batched = model.generate(prompt, 15, top_k=1)
    for row in range(3):
        assert torch.equal(batched[row:row + 1], model.generate(prompt[row:row + 1], 15, top_k=1))
    for p in (prompt, torch.randint(0, 32, (2, 14))):  # the second is cropped to its last 10 tokens
        torch.manual_seed(3)
        a = model.generate(p, 25, temperature=1.5)
        torch.manual_seed(3)
        b = model.generate(p, 25, temperature=1.5, use_cache=False)
        assert a.shape == (len(p), p.size(1) + 25) and torch.equal(a, b)


# ----------------------------------------------------------------------------- sample.py


def is_png(path, min_size=10_000):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > min_size


def test_task_checkpoint_shows_answers_maps_and_induction(ckpts, capsys):
    out = ckpts / "induction"
    assert run_sample(out, "--num_samples=5") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all("truth:" in line and "model:" in line for line in lines[:5])
    assert "answer tokens right" in lines[-1]
    assert run_sample(out, "--attn_maps", "--induction=True") == 0
    printed = capsys.readouterr().out
    assert "head 1" in printed and "best: layer" in printed and "in-context learning score" in printed
    assert is_png(out / "attn_maps.png") and is_png(out / "induction.png")


def test_text_checkpoint_samples_from_a_prompt(ckpts, capsys, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("the lazy")
    for start, text in (("the quick", "the quick"), (f"FILE:{prompt}", "the lazy")):
        assert run_sample(ckpts / "text", f"--start={start}", "--num_samples=2", "--max_new_tokens=7") == 0
        printed = capsys.readouterr().out.split("---------------\n")
        assert len(printed) == 3 and all(s.startswith(text) and len(s) >= len(text) + 1 for s in printed[:2])
    assert run_sample(ckpts / "text", "--attn_maps") == 0
    assert is_png(ckpts / "text" / "attn_maps.png")


def test_classifier_checkpoint_labels_text(ckpts, capsys):
    assert run_sample(ckpts / "sst2", "--classify=a lovely film") == 0
    label, _, prob = capsys.readouterr().out.strip().partition(" (p=")
    assert label in ("negative", "positive") and 0.5 <= float(prob.rstrip(")")) <= 1.0
    assert run_sample(ckpts / "sst2", "--num_samples=4") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and "truth:" in lines[0] and lines[-1].startswith("accuracy:")


BAD_INPUTS = [
    (["--temprature=0.5"], "unknown option --temprature; valid:"),
    (["--top_k=many"], "expected a int"),
    (["--use_cache=yes"], "expected a bool"),
    (["--temperature=0"], "must be positive"),
    (["--device=tpu"], "unknown device"),
    (["--start=FILE:/nonexistent/prompt.txt"], "cannot read the file"),
    (["--classify=some text"], "--classify needs a classifier"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS)
def test_bad_input_is_one_clear_line(ckpts, capsys, args, message):
    assert run_sample(ckpts / "text", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_missing_or_corrupt_checkpoint(tmp_path, capsys):
    assert run_sample(tmp_path) == 2
    (tmp_path / "run-a").mkdir()
    (tmp_path / "run-a" / "ckpt.pt").write_bytes(b"not a checkpoint")
    assert run_sample(tmp_path) == 2
    assert run_sample(tmp_path / "run-a") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: no checkpoint at") and "runs inside: run-a" in err[1]
    assert "is not a readable checkpoint" in err[2] and len(err) == 3


def test_cli_exits_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "sample.py", f"--out_dir={tmp_path}"], cwd=HERE, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
