"""Tests for mixit: python -m pytest -q test_mixit.py (CPU only, no network). The real-data tests use
../shared/data and are skipped, with the reason, where it is absent."""
import hashlib
import math
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import zipfile

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import bench
import data
import sample
import train
from mixit import ATTNS, CausalMix, KVCache, MixiT, MixiTConfig, mixing_matrix

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=4, n_embd=32)


def tiny_model(**kw):
    return MixiT(MixiTConfig(**{**TINY, **kw}))


def run_train(out_dir, *args):
    """train.py in this process; returns its exit status."""
    return train.cli([f"--out_dir={out_dir}", "--device=cpu", "--log_interval=1000", *args])


def read_metrics(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(path):
    return torch.load(os.path.join(path, "ckpt.pt"), weights_only=True)


# ----------------------------------------------------------------------------- model


@pytest.mark.parametrize("attn", ATTNS)
def test_shapes_and_initial_loss(attn):
    model = tiny_model(attn=attn)
    idx = torch.randint(0, 32, (3, 12))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 12, 32)
    assert abs(loss.item() - np.log(32)) < 0.5  # near-uniform at init (mixing: width multiplier 4 on the head)
    targets = idx.clone()
    targets[:, :6] = -1
    _, partial = model(idx, targets)
    expected = torch.nn.functional.cross_entropy(logits[:, 6:].reshape(-1, 32), idx[:, 6:].reshape(-1))
    assert torch.allclose(partial, expected, atol=1e-6)  # -1 targets are ignored


@pytest.mark.parametrize("attn", ATTNS)
def test_causal_prefix_consistency(attn):
    """A prefix gives the prefix of the full output: no position sees the future, and MixiT's
    shorter inputs use the leading block of its matrices."""
    model = tiny_model(attn=attn)
    idx = torch.randint(0, 32, (2, 12))
    full, _ = model(idx)
    prefix, _ = model(idx[:, :7])
    assert torch.allclose(full[:, :7], prefix, atol=1e-5)


def test_classifier_pools_real_tokens_only():
    model = tiny_model(n_classes=3, pad_id=0, causal=False)
    idx = torch.randint(1, 32, (2, 12))
    padded = idx.clone()
    padded[:, 8:] = 0
    logits, loss = model(padded, torch.tensor([0, 2]))
    assert logits.shape == (2, 3) and loss.item() > 0
    other_padding = padded.clone()
    other_padding[:, 8:] = 0
    for attn in ("softmax", "mixing"):  # padding is invisible to attention and pooling
        m = tiny_model(n_classes=3, pad_id=0, causal=False, attn=attn)
        a, _ = m(padded)
        m.wte.weight.data[0] += 1.0  # change what a padding token looks like
        b, _ = m(padded)
        assert torch.allclose(a, b, atol=1e-5)


FROZEN_CASES = [("frozen_qk", "", ["attn.qk"]), ("softmax", "mlp", ["mlp."]), ("mixing", "mlp", ["mlp."]),
                ("softmax", "blocks", ["blocks."]), ("mixing", "blocks", ["blocks."])]


@pytest.mark.parametrize("attn,freeze,frozen_names", FROZEN_CASES)
def test_frozen_weights_stay_bit_identical(attn, freeze, frozen_names):
    model = tiny_model(attn=attn, freeze=freeze)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if any(f in n for f in frozen_names)}
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if n not in frozen}
    assert frozen and all(not p.requires_grad for n, p in model.named_parameters() if n in frozen)
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu")
    in_optimizer = {id(p) for group in opt.param_groups for p in group["params"]}
    assert not any(id(p) in in_optimizer for n, p in model.named_parameters() if n in frozen)
    for _ in range(5):
        idx = torch.randint(0, 32, (4, 12))
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad()
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], p) for n, p in frozen.items())
    assert all(params[n].grad is None for n in frozen)
    assert all(not torch.equal(params[n], p) for n, p in trained.items() if "norm" not in n or freeze != "blocks")
    assert "blocks.0.attn.qk.weight" in params or attn == "mixing"


def test_weight_decay_groups():
    model = tiny_model()
    groups = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and groups[0]["weight_decay"] == 0.1
    assert all(p.dim() < 2 for p in groups[1]["params"]) and groups[1]["weight_decay"] == 0.0


def test_mixing_has_no_query_key_or_rotary():
    names = [n for n, _ in tiny_model(attn="mixing").named_parameters()]
    assert not any(".qk." in n for n in names) and "wpe.weight" in names
    assert "wpe.weight" not in [n for n, _ in tiny_model().named_parameters()]


def test_mixing_matrix_properties():
    T, H, hd = 16, 4, 8
    A = mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0))
    assert A.shape == (H, T, T) and A.dtype == torch.float32
    assert torch.equal(A, A.tril())  # causal
    assert torch.allclose(A[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6)  # rows sum to 1
    sink = torch.eye(T) * 0.5
    sink[:, 0] = 0.5
    assert torch.equal(A[0], sink)  # the sink head; row 0 sums to 0.5, as the reference
    noise = (A[1:] - torch.eye(T)).tril(-1)
    for h in range(H - 1):  # per-head std between 1/sqrt(T d_h) and 1/sqrt(T) (loosely: finite sample)
        std = noise[h][torch.ones(T, T).tril(-1).bool()].std().item()
        assert 0.5 / np.sqrt(T * hd) < std < 1.5 / np.sqrt(T)
    assert torch.equal(A, mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0)))  # deterministic
    assert not torch.equal(A, mixing_matrix(T, H, hd, causal=True, seed=(4, 1, 0)))
    full = mixing_matrix(T, H, hd, causal=False, seed=0)
    assert torch.allclose(full[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6)  # our non-causal rows sum to 1 too
    assert (full[1:].triu(1) != 0).any()


def test_mixing_matrix_is_seeded_buffer_in_state_dict():
    torch.manual_seed(0)
    a = tiny_model(attn="mixing", seed=7)
    torch.manual_seed(1)  # the global RNG plays no part
    b = tiny_model(attn="mixing", seed=7)
    c = tiny_model(attn="mixing", seed=8)
    key = "blocks.1.attn.mixing"
    state = a.state_dict()
    assert key in state and torch.equal(state[key], b.state_dict()[key])
    assert not torch.equal(state["blocks.0.attn.mixing"], state[key])  # layers differ
    assert not torch.equal(state[key], c.state_dict()[key])
    c.load_state_dict(state)
    assert torch.equal(c.blocks[1].attn.mixing, state[key])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # all weights from the seed


def test_flops_count_what_each_variant_computes():
    flops = {attn: tiny_model(attn=attn).flops_per_token() for attn in ATTNS}
    assert flops["mixing"] < flops["frozen_qk"] < flops["softmax"]
    d, L, V, T = 32, 2, 32, 12
    seen = (T + 1) / 2
    matmuls = L * (4 * d * d + 8 * d * d + 4 * d * d) + d * V  # qk, v, o, mlp (up 8d^2, down 4d^2), head
    assert flops["softmax"] == 6 * matmuls + L * 12 * d * seen
    assert flops["frozen_qk"] == flops["softmax"] - L * 2 * (2 * d * d)  # no weight gradient for W_Q, W_K
    mixing_matmuls = matmuls - L * 2 * d * d
    assert flops["mixing"] == 6 * mixing_matmuls + L * 4 * d * seen
    assert tiny_model().flops_per_token(training=False) == 2 * matmuls + L * 4 * d * seen


@pytest.mark.parametrize("attn", ATTNS)
def test_cached_generation_matches_uncached(attn):
    model = tiny_model(attn=attn, block_size=16).eval()
    prompt = torch.randint(0, 32, (2, 5))
    for new in (8, 30):  # 30 runs past block_size: the window is cropped and the cache rebuilt
        torch.manual_seed(0)
        cached = model.generate(prompt, new, top_k=1, use_cache=True)
        uncached = model.generate(prompt, new, top_k=1, use_cache=False)
        assert cached.shape == (2, 5 + new) and torch.equal(cached, uncached)
    torch.manual_seed(1)
    a = model.generate(prompt, 10, temperature=0.8, top_k=5)
    torch.manual_seed(1)
    b = model.generate(prompt, 10, temperature=0.8, top_k=5, use_cache=False)
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------- tasks


def decode_number(digits):
    return int("".join(str(d % 10) for d in reversed(digits)))


def brute_addition(task, x, y):
    N = task.n
    assert x[N] == task.PLUS and x[2 * N + 1] == task.EQ
    a, b = decode_number(x[:N]), decode_number(x[N + 1:2 * N + 1])
    assert 10 ** (N - 1) <= a < 10 ** N and 10 ** (N - 1) <= b < 10 ** N
    return [task.ANS + int(c) for c in reversed(str(a + b))] + [task.STOP]


def brute_dyck(task, x, y):
    q = list(x).index(task.QUERY)
    depth, ok = 0, True
    for t in x[:q]:
        depth += 1 if t == task.OPEN else -1
        ok &= depth >= 0
    return [task.CLOSE if ok and depth == 0 else task.OPEN]


def brute_retrieval(task, x, y):
    H, N = task.half, task.n
    pairs, i = {}, 0
    while x[i] < H + N:
        pairs[x[i] - H] = x[i + 1]
        i += 2
    assert len(pairs) == i // 2  # distinct keys
    return [pairs[x[i] - H - N]]


def brute_induction(task, x, y):
    answers = []
    for p in np.flatnonzero(y >= 0):
        earlier = [j for j in range(p) if x[j] == x[p]]
        assert len(earlier) == 1
        answers.append(x[earlier[0] + 1])
    n = list(x[1:]).index(x[0]) + 1  # the segment length
    assert len(answers) == n - 1
    return answers


def brute_modadd(task, x, y):
    assert y[0] == -1
    return [(x[0] + x[1]) % task.vocab_size]


BRUTE = [("addition_3", brute_addition), ("addition_7", brute_addition), ("dyck_8", brute_dyck),
         ("dyck_20", brute_dyck), ("retrieval_5", brute_retrieval), ("retrieval_30", brute_retrieval),
         ("induction_6", brute_induction), ("induction_16", brute_induction), ("modadd_13", brute_modadd)]


@pytest.mark.parametrize("name,brute", BRUTE)
def test_task_labels_by_brute_force(name, brute):
    task = data.make_task(name)
    for split in ("train", "test"):
        x, y = task.get_batch(split, 300, seed=[1, 2, 3])
        assert x.shape == (300, task.block_size) == y.shape and x.dtype == torch.long
        assert 0 <= x.min() and x.max() < task.vocab_size
        for xr, yr in zip(x.numpy(), y.numpy()):
            assert list(yr[yr >= 0]) == brute(task, xr, yr)


def test_dyck_distribution_matches_reference():
    test = data.make_task("dyck_10").test
    assert 2150 < len(np.unique(test, axis=0)) < 2400  # the reference's test set has 2262 distinct rows
    answers = test[np.arange(len(test)), (test == 3).argmax(1) + 1]
    assert 0.49 < (answers == 2).mean() < 0.56  # P(balanced) ~ 0.52


def test_memorize_is_a_fixed_random_table():
    task = data.make_task("memorize_16")
    rows = task.split_rows("train")
    assert len(rows) == 256 and len({(a, b) for a, b, _ in rows}) == 256
    assert (rows[:, 1] >= 16).all() and rows[:, 2].max() < 16 and task.val_split == "train"
    x, y = task.get_batch("train", 64, seed=0)
    label = {(a, b): c for a, b, c in rows}
    assert all(label[(int(a), int(b))] == int(t) for (a, b), t in zip(x, y[:, 1]))


@pytest.mark.parametrize("name", ["addition_2", "dyck_8", "retrieval_2", "induction_4"])
def test_training_stream_never_repeats_the_test_set(name):
    task = data.make_task(name)
    test = {tuple(r) for r in task.test}
    for step in range(20):
        x, y = task.get_batch("train", 256, seed=[0, step, 0])
        seqs = np.concatenate([x.numpy(), np.where(y[:, -1:] >= 0, y[:, -1:], 0)], 1)
        full = task.train_rows(np.random.default_rng([0, step, 0]), 256)
        assert np.array_equal(full[:, :-1], x.numpy())  # get_batch is train_rows split into x, y
        assert not any(tuple(r) in test for r in full)


def test_modadd_split_is_a_disjoint_cover():
    task = data.make_task("modadd_23")
    train_rows, test_rows = task.split_rows("train"), task.split_rows("test")
    pairs = [tuple(r[:2]) for r in np.concatenate([train_rows, test_rows])]
    assert len(set(pairs)) == 23 * 23 and len(test_rows) == 23 * 23 - int(0.95 * 23 * 23)


def test_batches_depend_only_on_their_seed():
    task = data.make_task("addition_5")
    a, b = task.get_batch("train", 8, seed=[0, 5, 1]), task.get_batch("train", 8, seed=[0, 5, 1])
    c = task.get_batch("train", 8, seed=[0, 5, 2])
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


# ----------------------------------------------------------------------------- training

FAST = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--batch_size=16", "--warmup_iters=2"]


def test_short_run_learns_an_easy_task(tmp_path):
    assert run_train(tmp_path, "--task=retrieval_2", "--attn=softmax", "--max_iters=200", "--eval_interval=100",
                     "--n_embd=64", "--batch_size=128", "--learning_rate=1e-2") == 0
    metrics = read_metrics(tmp_path)
    assert [m["iter"] for m in metrics] == [100, 200]
    assert metrics[-1]["val_acc"] > 0.9 and metrics[-1]["val_loss"] < 0.1 * np.log(512)  # from log(V) at init
    ckpt = load_ckpt(tmp_path)
    assert ckpt["iter_num"] == 200 and ckpt["config"]["task"] == "retrieval_2"


def test_resume_matches_uninterrupted_run(tmp_path):
    common = ["--task=addition_3", "--attn=mixing", "--eval_interval=4", *FAST]
    assert run_train(tmp_path / "full", *common, "--max_iters=8") == 0
    assert run_train(tmp_path / "part", *common, "--max_iters=4", "--lr_decay_iters=8") == 0
    assert run_train(tmp_path / "part", *common, "--max_iters=8", "--lr_decay_iters=8", "--init_from=resume") == 0
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [m["iter"] for m in part] == [4, 8]
    for key in ("train_loss", "val_loss", "val_acc"):
        assert full[-1][key] == pytest.approx(part[-1][key], rel=1e-6, abs=1e-7)
    a, b = load_ckpt(tmp_path / "full")["model"], load_ckpt(tmp_path / "part")["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.parametrize("attn", ["softmax", "mixing"])
def test_bf16_autocast_training_runs_and_saves_fp32_weights(tmp_path, attn):
    """The CUDA default dtype, on CPU autocast: the loss stays finite and the checkpoint keeps fp32 weights."""
    assert run_train(tmp_path, "--task=memorize_4", f"--attn={attn}", "--dtype=bfloat16", "--max_iters=4",
                     "--eval_interval=4", *FAST) == 0
    assert math.isfinite(read_metrics(tmp_path)[-1]["val_loss"])
    assert all(v.dtype == torch.float32 for v in load_ckpt(tmp_path)["model"].values() if v.is_floating_point())


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")),
                    reason="torch.compile on CPU needs the C++ compiler TorchInductor looks for ($CXX, else g++)")
def test_compiled_training_matches_eager_and_saves_a_clean_state_dict(tmp_path):
    """--compile=True (TorchInductor's C++ kernels on CPU; the CUDA path's code) trains like the eager model, and
    the checkpoint holds the uncompiled module's keys. Fused AdamW runs in every training test (CPU and CUDA)."""
    for mode in ("False", "True"):
        assert run_train(tmp_path / mode, "--task=memorize_4", "--attn=frozen_qk", "--max_iters=3",
                         "--eval_interval=3", f"--compile={mode}", *FAST) == 0
    eager, compiled = read_metrics(tmp_path / "False")[-1], read_metrics(tmp_path / "True")[-1]
    for key in ("train_loss", "val_loss", "val_acc"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-5)
    a, b = load_ckpt(tmp_path / "False")["model"], load_ckpt(tmp_path / "True")["model"]
    assert list(a) == list(b) and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_comparison_writes_table_and_plot(tmp_path, capsys):
    assert run_train(tmp_path, "--task=modadd_7,retrieval_2", "--attn=all", "--max_iters=4", "--eval_interval=2",
                     "--seeds=2", *FAST) == 0
    out = capsys.readouterr().out
    assert "| retrieval_2 | mixing | 2 |" in out and "±" in out
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    results = (tmp_path / "results.md").read_text()
    assert "| modadd_7 | frozen_qk | 2 | 4 |" in results and "over seeds 0, 1. 12 runs in" in results
    assert (tmp_path / "retrieval_2-softmax-s1" / "ckpt.pt").exists()


def test_torchrun_two_processes_match_one_with_accumulation(tmp_path):
    common = ["train.py", "--task=addition_2", "--attn=all", "--max_iters=4", "--eval_interval=2", "--device=cpu",
              "--gradient_accumulation_steps=2", *FAST]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    for launcher, out in ((torchrun, "ddp"), ([sys.executable], "one")):
        proc = subprocess.run(launcher + common + [f"--out_dir={tmp_path / out}"], cwd=HERE, env=env,
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, f"{out} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    for attn in ATTNS:
        run = f"addition_2-{attn}"
        ddp, one = read_metrics(tmp_path / "ddp" / run), read_metrics(tmp_path / "one" / run)
        for m, n in zip(ddp, one):
            assert m["train_loss"] == pytest.approx(n["train_loss"], rel=1e-5)
            assert m["val_loss"] == pytest.approx(n["val_loss"], rel=1e-5)
        a, b = load_ckpt(tmp_path / "ddp" / run)["model"], load_ckpt(tmp_path / "one" / run)["model"]
        assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


# ----------------------------------------------------------------------------- bad input


def write_config(tmp_path, text):
    path = tmp_path / "cfg.py"
    path.write_text(text)
    return str(path)


BAD_INPUTS = [
    (["--attn=linear"], "valid: softmax, frozen_qk, mixing, all"),
    (["--freeze=attn"], "valid: '', mlp, blocks"),
    (["--task=sorting_5"], "valid: addition_N, dyck_N, retrieval_N, modadd_P, memorize_N, induction_N"),
    (["--task=addition_x"], "addition_N takes an integer N >= 1"),
    (["--learning_rte=1e-3"], "unknown option --learning_rte; valid:"),
    (["--n_layer=two"], "expected a int"),
    (["--n_layer=2.5"], "expected a int"),
    (["--compile=maybe"], "valid: auto, True, False"),
    (["--init_from=resume"], "no checkpoint at"),
    (["--max_iters"], "needs a value"),
    (["missing_config.py"], "config file not found"),
    (["CONFIG:learning_rte = 1e-3"], "unknown option 'learning_rte' in"),
    (["CONFIG:n_layer = '4'"], "expected a int"),
    (["CONFIG:n_layer = ("], "failed: SyntaxError"),
    (["--device=tpu"], "unknown device 'tpu'; valid: auto, cpu, cuda, cuda:N, mps"),
    (["--device=cuda"], "CUDA is not available here; valid: cpu"),
    (["--dtype=float64"], "valid: auto, float32, bfloat16, float16"),
    (["--n_layer=0"], "n_layer=0 in --n_layer: must be positive"),
    (["--batch_size=-4"], "must be positive"),
    (["--n_embd=100", "--n_head=3"], "n_embd=100 must be divisible by n_head=3"),
    (["--n_embd=24", "--n_head=8", "--attn=softmax"], "rotary embeddings need an even head size"),
    (["--task=addition_3", "--block_size=5"], "block_size=5 is shorter than the addition_3 sequences (12 tokens)"),
    (["--learning_rate=-1e-3"], "must be positive"),
    (["--learning_rate=nan"], "expected a float"),
    (["--eval_interval=0"], "must be positive"),
    (["--beta2=1.5"], "must lie in [0, 1)"),
    (["--weight_decay=-0.1"], "must be zero or positive"),
    (["--gradient_accumulation_steps=0"], "must be positive"),
    (["--seeds=0"], "must be positive"),
    (["--skip=1.5"], "skip must lie in [0, 1]"),
    (["--init_std=0.0"], "must be positive"),
    (["--attn=softmax,linear"], "unknown attn 'linear'"),
    (["--freeze=mlp,attn"], "unknown freeze 'attn'"),
    (["--task=retrieval_200"], "retrieval_N needs 2N <= 256"),
    (["--task=induction_1"], "induction_N takes an integer N >= 2"),
    (["--task=wikitext2", "--data_dir=/nonexistent"], "is not prepared: run `python data.py wikitext2`"),
    (["--task=sst2", "--data_dir=/nonexistent"], "is not prepared: run `python data.py sst2`"),
    (["--compile=yes"], "valid: auto, True, False"),
    (["--max_iters=1e3"], "expected a int"),
    (["--eval_interval=__import__('os')"], "expected a int"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS)
def test_bad_input_is_one_clear_line(tmp_path, capsys, args, message):
    args = [write_config(tmp_path, a[7:]) if a.startswith("CONFIG:") else a for a in args]
    out_dir = tmp_path / "out"
    assert run_train(out_dir, *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not out_dir.exists()


def test_resume_refuses_another_model(tmp_path, capsys):
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--max_iters=2", *FAST) == 0
    before = (tmp_path / "ckpt.pt").read_bytes()
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--max_iters=4", "--init_from=resume", *FAST) == 2
    assert run_train(tmp_path, "--task=addition_3", "--attn=mixing", "--max_iters=4", "--init_from=resume", *FAST) == 2
    err = capsys.readouterr().err.splitlines()
    assert "attn='mixing' (this run: 'softmax')" in err[-2] and "task='addition_2' (this run: 'addition_3')" in err[-1]
    assert (tmp_path / "ckpt.pt").read_bytes() == before


def test_cli_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, "train.py", "--attn=nope"], cwd=HERE, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_out_dir_not_writable(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert train.cli(["--task=addition_2", "--max_iters=1", f"--out_dir={blocker / 'out'}", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not writable" in err and blocker.read_text() == "not a folder"


def test_batch_must_divide_across_processes(tmp_path, capsys, monkeypatch):
    for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2").items():
        monkeypatch.setenv(key, value)
    assert run_train(tmp_path / "out", "--task=addition_2", "--attn=softmax", "--gradient_accumulation_steps=3",
                     *FAST) == 2
    assert "must be a multiple of the 2 processes" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- faults


class Evil:
    """Unpickling this would create a folder: a stand-in for arbitrary code in a shared checkpoint."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.makedirs, (self.path,)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_checkpoint_that_would_run_code_is_refused(tmp_path, capsys):
    import pickle
    for name, write in (("raw", lambda f, obj: pickle.dump(obj, f)), ("torch", lambda f, obj: torch.save(obj, f))):
        out, pwned = tmp_path / name, tmp_path / f"pwned_{name}"
        out.mkdir()
        with open(out / "ckpt.pt", "wb") as f:
            write(f, {"model": Evil(str(pwned))})
        assert run_train(out, "--task=addition_2", "--attn=softmax", "--init_from=resume", *FAST) == 2
        assert "is not a readable checkpoint" in capsys.readouterr().err
        assert not pwned.exists()


def test_damaged_checkpoints_give_one_line(tmp_path, capsys):
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--max_iters=2", *FAST) == 0
    good = (tmp_path / "ckpt.pt").read_bytes()
    damaged = {"truncated": good[:len(good) // 2], "garbage": os.urandom(2000)}
    for kind, blob in damaged.items():
        (tmp_path / "ckpt.pt").write_bytes(blob)
        assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--init_from=resume", *FAST) == 2, kind
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a readable checkpoint" in err, err
    torch.save({"model": {}}, tmp_path / "ckpt.pt")
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--init_from=resume", *FAST) == 2
    assert "is not a mixit checkpoint (missing optimizer, model_args" in capsys.readouterr().err


def test_resume_with_changed_training_options_is_allowed_and_printed(tmp_path, capsys):
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--max_iters=2", *FAST) == 0
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--max_iters=4", "--learning_rate=1e-3",
                     "--init_from=resume", *FAST) == 0
    out = capsys.readouterr().out
    assert "changed training options" in out and "max_iters: 2 -> 4" in out and "learning_rate: 0.003 -> 0.001" in out
    assert load_ckpt(tmp_path)["iter_num"] == 4


def test_nonfinite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, capsys):
    run = ["--task=addition_2", "--attn=softmax", *FAST]
    assert run_train(tmp_path, *run, "--max_iters=2") == 0
    before = (tmp_path / "ckpt.pt").read_bytes()
    assert run_train(tmp_path, *run, "--max_iters=6", "--eval_interval=2", "--init_std=1e30") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-finite loss or gradient norm at iter 1" in err and "untouched" in err
    assert (tmp_path / "ckpt.pt").read_bytes() == before


def start_run(out_dir, *args):
    """train.py as a real child process, its output to a file."""
    log = open(f"{out_dir}.log", "w")
    cmd = [sys.executable, "train.py", f"--out_dir={out_dir}", "--device=cpu", *args]
    return subprocess.Popen(cmd, cwd=HERE, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))


def wait_for(predicate, proc, timeout=120):
    t0 = time.time()
    while not predicate():
        assert proc.poll() is None, "the run ended early"
        assert time.time() - t0 < timeout
        time.sleep(0.01)


KILL_RUN = ["--task=addition_3", "--attn=frozen_qk", "--eval_interval=3", "--max_iters=30", "--log_interval=1", *FAST]


def test_sigkill_keeps_a_loadable_checkpoint_and_resume_matches(tmp_path):
    assert run_train(tmp_path / "full", *KILL_RUN) == 0
    killed = tmp_path / "killed"
    proc = start_run(killed, *KILL_RUN)
    wait_for(lambda: (killed / "ckpt.pt").exists(), proc)
    time.sleep(np.random.default_rng().uniform(0, 0.5))  # any moment, checkpoint writes included
    proc.kill()
    proc.wait()
    assert load_ckpt(killed)["iter_num"] % 3 == 0  # the last complete checkpoint loads
    (killed / "ckpt.pt.tmp").write_bytes(b"half a checkpoint")  # as a kill during a write leaves it
    assert run_train(killed, *KILL_RUN, "--init_from=resume") == 0
    full, resumed = read_metrics(tmp_path / "full"), read_metrics(killed)
    assert [m["iter"] for m in resumed] == [m["iter"] for m in full]
    for a, b in zip(full, resumed):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)


def test_sigterm_checkpoints_the_current_step(tmp_path):
    run = ["--task=addition_3", "--attn=mixing", "--eval_interval=1000", "--lr_decay_iters=1000", "--log_interval=1",
           *FAST]
    stopped = tmp_path / "stopped"
    proc = start_run(stopped, *run, "--max_iters=1000")
    log = tmp_path / "stopped.log"
    wait_for(lambda: log.read_text().count("\niter ") >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    text = log.read_text()
    assert "stopped by SIGTERM at iter" in text and "Traceback" not in text
    step = load_ckpt(stopped)["iter_num"]
    assert f"stopped by SIGTERM at iter {step}: wrote {stopped / 'ckpt.pt'}" in text
    assert run_train(stopped, *run, f"--max_iters={step + 3}", "--init_from=resume") == 0
    assert run_train(tmp_path / "full", *run, f"--max_iters={step + 3}") == 0
    a, b = read_metrics(stopped)[-1], read_metrics(tmp_path / "full")[-1]
    assert a["iter"] == b["iter"] == step + 3
    assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)  # the losses before the signal count too
    assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)


# ----------------------------------------------------------------------------- sample.py and the analysis

SAMPLE_RUN = ["--device=cpu", "--log_interval=1000", "--n_layer=2", "--n_head=2", "--n_embd=32", "--batch_size=16",
        "--warmup_iters=2", "--max_iters=4", "--eval_interval=4", "--eval_iters=2"]


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
        assert train.cli([f"--out_dir={root / name}", f"--data_dir={root / 'data'}", *SAMPLE_RUN, *args]) == 0
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


@pytest.mark.parametrize("attn", ATTNS)
def test_decode_step_matches_forward(attn):
    """generate's one-token step on its packed weights (the norm gains, multipliers, scales folded in; W_Q, W_K,
    W_V stacked) gives forward's logits at every position, with biases or without."""
    for bias in (True, False):
        model = tiny_model(attn=attn, bias=bias, init_std=0.2).eval()  # a larger init: every path contributes
        idx = torch.randint(0, 32, (2, 12))
        full, _ = model(idx)
        cache = KVCache(model.config.n_layer, 12, keys=attn != "mixing")
        with torch.inference_mode():
            model(idx[:, :3], cache=cache)
            weights = model._decode_weights()
            steps = torch.stack([model._decode(idx[:, p], cache, weights) for p in range(3, 12)], 1)
        assert cache.pos == 12 and torch.allclose(steps, full[:, 3:], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attn", ATTNS)
def test_cache_filled_in_chunks_matches_one_forward(attn):
    """forward with a cache, a few tokens at a time (a chunk after the first is causal within itself)."""
    model = tiny_model(attn=attn, init_std=0.2).eval()
    idx = torch.randint(0, 32, (2, 12))
    full, _ = model(idx)
    cache = KVCache(model.config.n_layer, 12, keys=attn != "mixing")
    with torch.no_grad():
        parts = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 5), (5, 6), (6, 12))]
    assert cache.pos == 12 and torch.allclose(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-4)


def test_generate_leaves_threads_and_returns_a_normal_tensor():
    """Decoding runs on one CPU thread: the caller's thread count comes back, also after an error; the tokens
    are no inference tensor, so they can feed a forward under autograd."""
    model, threads = tiny_model(attn="softmax"), torch.get_num_threads()
    out = model.generate(torch.randint(0, 32, (1, 3)), 4, top_k=1)
    assert torch.get_num_threads() == threads and not out.is_inference()
    model(out, out)[1].backward()

    def failing_step(*args):
        assert torch.get_num_threads() == 1
        raise RuntimeError("step failed")

    model._decode = failing_step
    with pytest.raises(RuntimeError, match="step failed"):
        model.generate(out, 4)
    assert torch.get_num_threads() == threads


# ----------------------------------------------------------------------------- speed paths and bench.py


def reference_forward(model, idx):
    """MixiT's forward written plainly, op by op (unfused, unfolded): the oracle for the fast paths."""
    cfg = model.config
    B, t = idx.shape
    H, hd, C = cfg.n_head, cfg.n_embd // cfg.n_head, cfg.n_embd
    lin = lambda m, z: F.linear(z, m.weight, m.bias) * m.mult
    norm = lambda m, z: z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + m.eps) * m.weight
    heads = lambda z: z.view(B, t, H, hd).transpose(1, 2)

    def rope(z):
        angles = torch.outer(torch.arange(t, dtype=torch.float32), cfg.rope_theta ** -(torch.arange(0, hd, 2) / hd))
        cos, sin, (z1, z2) = angles.cos(), angles.sin(), z.chunk(2, -1)
        return torch.cat((z1 * cos - z2 * sin, z2 * cos + z1 * sin), -1)

    x = model.wte(idx) + (model.wpe.weight[:t] if model.wpe is not None else 0)
    for block in model.blocks:
        attn, mlp, h = block.attn, block.mlp, norm(block.norm1, x)
        v = heads(lin(attn.v, h))
        if cfg.attn == "mixing":
            y = attn.mixing[:, :t, :t] @ v
        else:
            q, k = lin(attn.qk, h).split(C, -1)
            scores = rope(heads(q)) @ rope(heads(k)).transpose(-1, -2) / math.sqrt(hd)
            y = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf")).softmax(-1) @ v
        x = block.s * x + block.r * lin(attn.o, y.transpose(1, 2).reshape(B, t, C))
        gate, up = lin(mlp.up, norm(block.norm2, x)).chunk(2, -1)
        act = mlp.gain * F.leaky_relu(gate, mlp.slope) if mlp.shaped else F.silu(gate)
        x = block.s * x + block.r * lin(mlp.down, act * up)
    return lin(model.head, norm(model.norm, x))


@pytest.mark.parametrize("attn", ATTNS)
def test_fast_forward_and_gradients_match_the_plain_formulas(attn):
    torch.manual_seed(0)
    model = MixiT(MixiTConfig(**TINY, attn=attn, init_std=0.2))  # a larger init: every path contributes
    idx = torch.randint(0, 32, (3, 12))
    logits, _ = model(idx)
    expected = reference_forward(model, idx)
    assert torch.allclose(logits, expected, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # the paths without autograd (norms, folded weights) too
        assert torch.allclose(model(idx)[0], expected, atol=1e-5, rtol=1e-4)
    grads = torch.autograd.grad(logits.square().sum(), [p for p in model.parameters() if p.requires_grad])
    expected_grads = torch.autograd.grad(expected.square().sum(), [p for p in model.parameters() if p.requires_grad])
    assert all((g - e).abs().max() <= 1e-5 * e.abs().max() for g, e in zip(grads, expected_grads))


@pytest.mark.parametrize("t,block", [(300, 64), (256, 128), (37, 8), (5, 16)])
def test_block_triangular_mixing_equals_dense(t, block):
    A = mixing_matrix(t, 3, 8, seed=1).double()
    v = torch.randn(3, t, 10, dtype=torch.float64, requires_grad=True)
    y = CausalMix.apply(A, v, block)
    dy = torch.randn_like(y)
    (dv,) = torch.autograd.grad(y, v, dy)
    assert torch.allclose(y, torch.bmm(A, v), atol=1e-12)
    assert torch.allclose(dv, torch.bmm(A.transpose(1, 2), dy), atol=1e-12)


def test_long_context_mixing_model_uses_the_block_path_and_matches_dense(monkeypatch):
    model = MixiT(MixiTConfig(**{**TINY, "block_size": 40}, attn="mixing", init_std=0.2))
    idx = torch.randint(0, 32, (2, 40))
    dense, _ = model(idx, idx)
    calls, apply = [], CausalMix.apply
    monkeypatch.setattr(CausalMix, "apply", lambda *args: calls.append(1) or apply(*args))
    monkeypatch.setattr(type(model.blocks[0].attn), "mix_block", 8)
    blocked, _ = model(idx, idx)
    assert len(calls) == 2 and torch.allclose(dense, blocked, atol=1e-6)


def test_mixing_cast_is_cached_per_dtype_and_follows_the_buffer():
    attn = MixiT(MixiTConfig(**TINY, attn="mixing")).blocks[0].attn
    assert attn.mixing_as(torch.float32) is attn.mixing  # no copy in the buffer's own dtype
    a = attn.mixing_as(torch.bfloat16)
    assert a.dtype == torch.bfloat16 and attn.mixing_as(torch.bfloat16) is a  # cast once
    with torch.no_grad():
        attn.mixing.mul_(2)  # what load_state_dict does: an in-place copy into the buffer
    b = attn.mixing_as(torch.bfloat16)
    assert b is not a and torch.equal(b, attn.mixing.bfloat16())


def test_bf16_autocast_mixing_runs_and_stays_close():
    model = MixiT(MixiTConfig(**TINY, attn="mixing"))
    idx = torch.randint(0, 32, (2, 12))
    full, _ = model(idx)
    with torch.autocast("cpu", torch.bfloat16):
        low, loss = model(idx, idx)
    loss.backward()
    assert low.dtype == torch.bfloat16 and torch.allclose(low.float(), full, atol=0.1)


def test_bench_prints_every_column_and_checks_frozen_state(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny = ["--n_layer=1", "--n_embd=16", "--n_head=2", "--batch_size=2", "--block_size=16", "--vocab_size=16",
            "--warmup_iters=1", "--iters=1", "--repeats=1"]
    assert bench.cli(tiny + ["--tasks=addition_2", "--gen_block_size=24", "--gen_new_tokens=4"]) == 0
    out = capsys.readouterr().out
    for column in ("ms/iter", "tok/s", "GFLOP/s", "MFU", "peak MiB", "Adam MiB", "grad MiB", "frozen",
                   "batches/s", "cached tok/s", "uncached tok/s", "speedup", "same tokens", "mm ms", "mm MFU",
                   "no gradient and no optimizer state"):
        assert column in out
    assert all(a in out for a in ATTNS) and " NO" not in out
    assert bench.cli(tiny + ["--train=False", "--tasks=", "--gen_block_size=24", "--gen_new_tokens=4",
                             "--gen_prompt=1", "--attn=mixing"]) == 0
    out = capsys.readouterr().out
    assert "ms/iter" not in out and "after a 1-token prompt" in out and out.count(" yes") == 1
    assert bench.cli(tiny + ["--sweep=block_size", "--attn=softmax,mixing"]) == 0
    assert "block_size sweep" in capsys.readouterr().out and (tmp_path / "bench_block_size.png").stat().st_size > 0


def test_bench_bf16_on_cpu_measures_the_peak_of_the_kernel_its_matmuls_use(capsys):
    """On a CPU without bf16 units torch.mm in bf16 takes a path 20x slower than the linears' kernel: a peak
    measured with it put MFU at 250-390 %."""
    assert bench.cli(["--n_layer=1", "--n_embd=32", "--n_head=2", "--batch_size=2", "--block_size=32",
                      "--vocab_size=32", "--iters=1", "--repeats=1", "--tasks=", "--gen_new_tokens=0",
                      "--dtype=bfloat16"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.partition(" ")[0] in ATTNS]
    percents = [[float(cell.rstrip("%")) for cell in row if cell.endswith("%")] for row in rows]  # MFU, mm/step, mm MFU
    assert len(rows) == len(ATTNS) and all(0 < mfu < 100 and 0 < mm_mfu < 100 for mfu, _, mm_mfu in percents)


@pytest.mark.parametrize("attn", ATTNS)
def test_flop_count_matches_the_matmuls_autograd_runs(attn):
    """flops_per_token, which MFU divides by, against every matmul of a real forward and backward: the linears
    exactly (frozen W_Q/W_K without weight gradient), attention as computed (sdpa is not a matmul op; MixiT's
    bmm is dense below 2 mixing blocks, where the count takes the causal half)."""
    B, T = 3, 16
    model = MixiT(MixiTConfig(vocab_size=32, block_size=T, n_layer=2, n_head=2, n_embd=16, attn=attn))
    recorder = bench.MatmulRecorder()
    with recorder:
        model(torch.randint(32, (B, T)), torch.randint(32, (B, T)))[1].backward()
    cfg, seen = model.config, (T + 1) / 2
    attention = cfg.n_layer * cfg.n_embd * (4 * seen if attn == "mixing" else 12 * seen)  # per token, counted
    ran = cfg.n_layer * 4 * cfg.n_embd * T if attn == "mixing" else 0  # per token: A @ V and A^T @ dY, dense
    assert sum(flops for *_, flops in recorder.calls) == (model.flops_per_token() - attention + ran) * B * T


@pytest.mark.parametrize("arg,message", [("--colour=1", "unknown option"), ("--iters=x", "expected int"),
                                         ("--sweep=depth", "valid:"), ("--attn=linear", "unknown attn"),
                                         ("--gen_prompt=-1", "must lie in")])
def test_bench_bad_input_is_one_line(capsys, arg, message):
    assert bench.cli([arg]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_folded_weights_are_cached_without_autograd_only():
    lin = MixiT(MixiTConfig(**TINY, attn="mixing")).blocks[0].mlp.down
    x = torch.randn(3, 4 * 32)
    with torch.no_grad():
        w, b = lin.folded(2.0)
        assert lin.folded(2.0)[0] is w and torch.equal(w, lin.weight * (lin.mult * 2.0))
        y = lin(x, 2.0)
        lin.weight.add_(1.0)  # an optimizer step: the cached copy is stale
        assert not torch.equal(lin.folded(2.0)[0], w) and not torch.equal(lin(x, 2.0), y)
    w_grad, _ = lin.folded(2.0)
    assert w_grad.requires_grad and w_grad is not lin.folded(2.0)[0]  # with autograd: folded afresh, in the graph


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


SAMPLE_BAD_INPUTS = [
    (["--temprature=0.5"], "unknown option --temprature; valid:"),
    (["--top_k=many"], "expected a int"),
    (["--use_cache=yes"], "expected a bool"),
    (["--temperature=0"], "must be positive"),
    (["--device=tpu"], "unknown device"),
    (["--start=FILE:/nonexistent/prompt.txt"], "cannot read the file"),
    (["--classify=some text"], "--classify needs a classifier"),
]


@pytest.mark.parametrize("args,message", SAMPLE_BAD_INPUTS)
def test_sample_bad_input_is_one_clear_line(ckpts, capsys, args, message):
    assert run_sample(ckpts / "text", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_sample_missing_or_corrupt_checkpoint(tmp_path, capsys):
    assert run_sample(tmp_path) == 2
    (tmp_path / "run-a").mkdir()
    (tmp_path / "run-a" / "ckpt.pt").write_bytes(b"not a checkpoint")
    assert run_sample(tmp_path) == 2
    assert run_sample(tmp_path / "run-a") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: no checkpoint at") and "runs inside: run-a" in err[1]
    assert "is not a readable checkpoint" in err[2] and len(err) == 3


def test_sample_cli_exits_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "sample.py", f"--out_dir={tmp_path}"], cwd=HERE, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# ----------------------------------------------------------------------------- corpora (data.py)

SHARED = os.path.join(HERE, "..", "shared", "data")
BPE_DIR = os.path.join(SHARED, "gpt2_bpe")
DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens there: any download fails at once, network or not
needs_bpe = pytest.mark.skipif(not os.path.isfile(os.path.join(BPE_DIR, "gpt2.tiktoken")),
                               reason=f"no offline GPT-2 BPE at {BPE_DIR}")


def needs(*parts):
    path = os.path.join(SHARED, *parts)
    return pytest.mark.skipif(not os.path.exists(path), reason=f"no local copy at {path}")


def offline_env(tmp_path, **extra):
    """The environment of a subprocess that can reach no network and finds no GPT-2 BPE files."""
    env = {k: v for k, v in os.environ.items() if k not in ("MIXIT_BPE_DIR", "NO_PROXY", "no_proxy")}
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[key] = DEAD_PROXY
    env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "empty_tiktoken_cache")
    return {**env, **extra}


def data_py(args, env):
    return subprocess.run([sys.executable, "data.py", *args], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=60)


# ----------------------------------------------------------------------------- tokenizers


@needs_bpe
def test_offline_gpt2_bpe(monkeypatch):
    tok = data.Tokenizer("gpt2", BPE_DIR)
    assert tok.encode("Hello world") == [15496, 995]
    assert (tok.n_vocab, tok.eot) == (50257, 50256)
    assert tok.decode(tok.encode("naïve café <unk> @-@")) == "naïve café <unk> @-@"
    monkeypatch.setenv("MIXIT_BPE_DIR", BPE_DIR)
    assert data.Tokenizer("gpt2").encode("Hello world") == [15496, 995]


def test_byte_tokenizer_round_trip():
    tok = data.Tokenizer("bytes")
    assert (tok.n_vocab, tok.eot) == (257, 256)
    assert tok.encode("é!") == [195, 169, 33]
    assert tok.decode(tok.encode("naïve\n") + [tok.eot]) == "naïve\n"


def test_bad_bpe_dir_is_one_clear_line(tmp_path):
    with pytest.raises(ValueError, match="no gpt2.tiktoken in .*--bpe_dir=DIR.*MIXIT_BPE_DIR.*TIKTOKEN_CACHE_DIR"):
        data.Tokenizer("gpt2", str(tmp_path))
    (tmp_path / "gpt2.tiktoken").write_bytes(b"IQ== 0\n")
    with pytest.raises(ValueError, match="fails its sha256 check"):
        data.Tokenizer("gpt2", str(tmp_path))
    with pytest.raises(ValueError, match="valid: gpt2, bytes"):
        data.Tokenizer("gpt3")


def test_silent_network_cannot_hang_tiktoken(tmp_path, monkeypatch):
    """A proxy that accepts and never answers: tiktoken's download has no timeout, ours gives up."""
    server = socket.create_server(("127.0.0.1", 0))
    held = []
    threading.Thread(target=lambda: held.extend(server.accept() for _ in range(8)), daemon=True).start()
    proxy = f"http://127.0.0.1:{server.getsockname()[1]}"
    for key in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(key, proxy)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    start = time.time()
    try:
        with pytest.raises(ValueError, match=r"no answer within 1 s\); offline: pass --bpe_dir"):
            data.tiktoken_gpt2("offline: pass --bpe_dir=DIR", timeout=1)
        assert time.time() - start < 5
    finally:
        for conn, _ in held:
            conn.close()
        server.close()


def test_missing_tokenizer_is_one_line_exit_2(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    out = tmp_path / "data"
    proc = data_py(["text", f"--src={tmp_path / 'a.txt'}", f"--out_dir={out}"], offline_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    for hint in ("--bpe_dir=", "MIXIT_BPE_DIR", "TIKTOKEN_CACHE_DIR", "--tokenizer=bytes"):
        assert hint in proc.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------- preparation


def test_prepared_bins_decode_to_their_source(tmp_path):
    docs = {"a.txt": "First document.\nÜnïcödé line, then a blank one\n\n", "b/c.txt": "Second = one =\n" * 40}
    for name, text in docs.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text, encoding="utf-8")
    tokenizers = ["bytes"] + (["gpt2"] if os.path.isdir(BPE_DIR) else [])
    for tokenizer in tokenizers:
        folder, meta = data.prepare("text", src=str(tmp_path / "src"), tokenizer=tokenizer, bpe_dir=BPE_DIR,
                                    out_dir=str(tmp_path / "data"), name=f"mine-{tokenizer}")
        bins = [os.path.join(folder, f"{split}.bin") for split in ("train", "val")]
        stream = np.concatenate([np.fromfile(path, dtype=np.uint16) for path in bins])
        tok = data.Tokenizer(tokenizer, BPE_DIR)
        assert len(stream) == sum(meta["tokens"].values()) and meta["tokens"]["train"] == int(0.9 * len(stream))
        documents = np.split(stream, np.flatnonzero(stream == tok.eot) + 1)[:-1]  # each ends in its EOT
        assert [tok.decode(d) for d in documents] == [docs["a.txt"], docs["b/c.txt"]]  # sorted file order
        assert meta["source_files"]["a.txt"]["sha256"] == hashlib.sha256(docs["a.txt"].encode()).hexdigest()
        assert meta["vocab_size"] == tok.n_vocab and meta["tokenizer"] == tokenizer
        task = data.make_task(f"mine-{tokenizer}", 8, str(tmp_path / "data"))
        x, y = task.get_batch("train", 4, seed=1)
        assert x.shape == (4, 8) and (x[:, 1:] == y[:, :-1]).all()


def test_download_checks_the_checksum_and_keeps_nothing_bad(tmp_path):
    blob = b"some corpus\n" * 1000
    (tmp_path / "src.txt").write_bytes(blob)
    url, dest = (tmp_path / "src.txt").as_uri(), tmp_path / "got.txt"
    data.download(url, str(dest), sha256=hashlib.sha256(blob).hexdigest())
    assert dest.read_bytes() == blob
    with pytest.raises(ValueError, match="not the recorded"):
        data.download(url, str(tmp_path / "bad.txt"), md5="0" * 32)
    with pytest.raises(ValueError, match="downloading .* failed"):
        data.download((tmp_path / "absent.zip").as_uri(), str(tmp_path / "absent.zip"), md5="0" * 32)
    assert sorted(os.listdir(tmp_path)) == ["got.txt", "src.txt"]  # no .part, no bad file


def test_fetch_downloads_and_opens_the_archive(tmp_path):
    texts = {s: f" = {s.title()} = \n \n Text of {s} .\n" for s in ("train", "valid", "test")}
    with zipfile.ZipFile(tmp_path / "wikitext-2-v1.zip", "w") as z:
        for s, text in texts.items():
            z.writestr(f"wikitext-2/wiki.{s}.tokens", text)
    archive, folder = tmp_path / "wikitext-2-v1.zip", str(tmp_path / "data" / "wikitext2")
    url = archive.as_uri()
    spec = dict(data.SOURCES["wikitext2"], url=url, md5=hashlib.md5(archive.read_bytes()).hexdigest())
    files, origin = data.fetch("wikitext2", spec, None, folder)
    assert origin == url and {r: blob.decode() for r, (_, blob) in files.items()} == texts
    assert os.listdir(tmp_path / "data" / "wikitext2" / "raw") == ["wikitext-2-v1.zip"]
    files, origin = data.fetch("wikitext2", dict(spec, url="file:///nowhere"), None, folder)
    assert origin.endswith("raw") and len(files) == 3  # the copy in raw/ is used, nothing downloaded


def test_missing_corpus_is_one_line_exit_2(tmp_path):
    out = tmp_path / "data"
    proc = data_py(["wikitext2", "--tokenizer=bytes", f"--out_dir={out}"], offline_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    for hint in ("wiki.train.tokens or train.txt", "valid.txt", "wikitext-2-v1.zip", f"{out}/wikitext2/raw/", "--src="):
        assert hint in proc.stderr
    assert not out.exists()  # nothing that could later look prepared


@pytest.mark.parametrize("argv, message", [
    (["nope"], "unknown dataset 'nope'; valid: wikitext103"),
    (["wikitext2", "--foo=1"], "bad option '--foo=1'; valid: --src="),
    (["text", "--src=x", "--max_len=big"], "--max_len takes a positive integer"),
    (["text"], "text needs --src=PATH"),
    (["text", "--src=/no/such/file"], "does not exist"),
    (["text", "--src=.", "--name=dyck_3"], "would read as the algorithmic task"),
    (["sst2", "--src=TMP", "--tokenizer=bytes"], "lacks some of the files sst2 needs: train.tsv, dev.tsv"),
])
def test_data_bad_input_is_one_clear_line(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        data.main([a.replace("TMP", str(tmp_path)) for a in argv])


def test_unreadable_source_is_one_clear_line_and_leaves_nothing(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.tsv").write_text("label\tsentence\n1\ta fine film\n")
    (tmp_path / "src" / "dev.tsv").write_text("label\tsentence\n7\ta seven-star film\n")
    prepare = lambda: data.prepare("sst2", src=str(tmp_path / "src"), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"dev.tsv has labels outside the two classes \(label 0 negative"):
        prepare()
    (tmp_path / "src" / "dev.tsv").write_bytes(b"label\tsentence\n1\t\xff\n")
    with pytest.raises(ValueError, match="dev.tsv is not a sst2 file .UnicodeDecodeError.*expected UTF-8 tab-sep"):
        prepare()
    assert not (tmp_path / "data").exists()


@needs("yelp_reviews_stars", "dev.csv")
def test_yelp_star_ratings_become_polarity(tmp_path):
    folder, meta = data.prepare("yelp_polarity", src=os.path.join(SHARED, "yelp_reviews_stars"), tokenizer="bytes",
                                out_dir=str(tmp_path), max_len=32)
    assert meta["examples"] == {"train": 4484, "val": 4455}  # 3-star reviews dropped (shared/data/README.md)
    assert (meta["source_files"]["train"]["file"], meta["source_files"]["val"]["file"]) == ("dev.csv", "test.csv")
    assert "3 dropped" in meta["label_rule"]
    assert np.load(os.path.join(folder, "train_y.npy")).sum() == 3299
    assert np.load(os.path.join(folder, "train_x.npy")).shape == (4484, 32)


# ----------------------------------------------------------------------------- short runs on real data


@pytest.fixture(scope="session")
def wikitext2(tmp_path_factory):
    """WikiText-2 in GPT-2 BPE from the local copy, training on its first 1,500 lines only (for speed)."""
    if not os.path.isdir(os.path.join(SHARED, "wikitext-2")) or not os.path.isdir(BPE_DIR):
        pytest.skip(f"no local WikiText-2 and GPT-2 BPE under {SHARED}")
    root = tmp_path_factory.mktemp("wikitext2")
    src = os.path.join(SHARED, "wikitext-2")
    (root / "src").mkdir()
    with open(os.path.join(src, "train.txt"), encoding="utf-8") as f:
        (root / "src" / "train.txt").write_text("".join(f.readlines()[:1500]), encoding="utf-8")
    for name in ("valid.txt", "test.txt"):
        (root / "src" / name).write_bytes(open(os.path.join(src, name), "rb").read())
    data.prepare("wikitext2", src=str(root / "src"), bpe_dir=BPE_DIR, out_dir=str(root / "data"))
    return root / "data"


def test_wikitext2_layout_and_splits(wikitext2):
    meta = json.loads((wikitext2 / "wikitext2" / "meta.json").read_text())
    files = meta["source_files"]
    assert {s: f["file"] for s, f in files.items()} == {"train": "train.txt", "val": "valid.txt", "test": "test.txt"}
    assert files["val"]["sha256"] == "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"
    assert 258_659 <= meta["tokens"]["val"] <= 258_659 + 100  # the README's whole-file count, plus one EOT an article
    task = data.make_task("wikitext2", 64, str(wikitext2), eval_split="test")
    scored = sum(int((y >= 0).sum()) for _, y in task.eval_batches("test", 32))
    assert scored == meta["tokens"]["test"] - 1  # the whole test stream, every token predicted once


def test_short_wikitext2_run_lowers_validation_loss(wikitext2, tmp_path):
    assert run_train(tmp_path, "--task=wikitext2", f"--data_dir={wikitext2}", "--attn=softmax", "--n_layer=1",
                     "--n_embd=32", "--n_head=2", "--block_size=16", "--batch_size=8", "--max_iters=100",
                     "--eval_interval=50", "--eval_iters=4", "--learning_rate=1e-2", "--warmup_iters=10") == 0
    metrics = read_metrics(tmp_path)
    assert metrics[-1]["val_loss"] < min(metrics[0]["val_loss"], np.log(50257) - 3), metrics
    assert metrics[-1]["val_ppl"] == pytest.approx(np.exp(metrics[-1]["val_loss"]))


@pytest.fixture(scope="session")
def sst2(tmp_path_factory):
    if not os.path.isdir(os.path.join(SHARED, "sst2")) or not os.path.isdir(BPE_DIR):
        pytest.skip(f"no local SST-2 and GPT-2 BPE under {SHARED}")
    root = tmp_path_factory.mktemp("sst2")
    data.prepare("sst2", src=os.path.join(SHARED, "sst2"), bpe_dir=BPE_DIR, out_dir=str(root), max_len=64)
    return root


def test_short_sst2_run_beats_chance(sst2, tmp_path):
    meta = json.loads((sst2 / "sst2" / "meta.json").read_text())
    assert meta["examples"] == {"train": 67349, "val": 872}
    assert run_train(tmp_path, "--task=sst2", f"--data_dir={sst2}", "--attn=softmax", "--n_layer=1", "--n_embd=32",
                     "--n_head=2", "--batch_size=64", "--max_iters=200", "--eval_interval=200",
                     "--learning_rate=3e-3", "--warmup_iters=10") == 0
    majority = max(np.mean(np.load(sst2 / "sst2" / "val_y.npy")), 0.5)  # 444 of 872 dev sentences are positive
    assert read_metrics(tmp_path)[-1]["val_acc"] > majority + 0.1


# ----------------------------------------------------------------------------- presets


PRESETS = sorted(f[:-3] for f in os.listdir(os.path.join(HERE, "configs")) if f.endswith(".py"))


def preset_task(name, block_size):
    """The task behind a corpus name, as its prepared meta.json would describe it; algorithmic tasks as built."""
    if name not in data.CORPUS_TASKS and not name.startswith("wikitext2_"):
        return data.make_task(name)
    n_classes = 2 if name in ("sst2", "yelp_polarity") else 0
    vocab = data.padded_vocab(257 if name.endswith("_bytes") else 50257)
    return types.SimpleNamespace(name=name, vocab_size=vocab, causal=not n_classes, block_size=block_size,
                                 n_classes=n_classes, pad_id=50256 if n_classes else -1)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_parse_and_build_a_valid_model_for_every_run(name):
    config = train.parse_config([os.path.join(HERE, "configs", f"{name}.py")])
    runs = train.plan_runs(config)
    assert len(runs) >= 2  # every preset compares variants
    for run in runs:
        train.model_config(run, preset_task(run["task"], run["block_size"]))
    assert config["device"] == ("cpu" if name.endswith("_cpu") else "auto")  # paper presets: the GPU when present


def test_truncated_or_corrupt_data_files_give_one_line(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question. " * 40)
    folder, _ = data.prepare("text", src=str(text), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    run = ["--task=text", "--attn=softmax", f"--data_dir={tmp_path / 'data'}", "--block_size=16", "--max_iters=1",
           *FAST]
    bin_path = os.path.join(folder, "train.bin")
    blob = open(bin_path, "rb").read()
    open(bin_path, "wb").write(blob[:len(blob) // 2])
    assert run_train(tmp_path / "out", *run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "meta.json says" in err and "prepare it again" in err
    open(os.path.join(folder, "meta.json"), "w").write("{not json")
    assert run_train(tmp_path / "out", *run) == 2
    assert "meta.json is unreadable" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def torchrun(tmp_path, config_text, *args, timeout=120):
    """A 2-process CPU torchrun of train.py with a config file that may differ by rank."""
    cfg = tmp_path / "rank_cfg.py"
    cfg.write_text(config_text)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", str(cfg),
           f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--task=addition_2", "--gradient_accumulation_steps=2",
           "--max_iters=4", "--eval_interval=2", *FAST, *args]
    return subprocess.run(cmd, cwd=HERE, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=timeout)


def test_ddp_ranks_with_different_fixed_parts_stop_clearly(tmp_path):
    proc = torchrun(tmp_path, "import os\nseed = int(os.environ.get('RANK', '0'))  # another mixing matrix per rank\n",
                    "--attn=mixing")
    assert proc.returncode != 0
    assert "the fixed random parts (mixing matrices, frozen weights) differ between processes" in proc.stderr
    assert 'train.py", line' not in proc.stderr  # one line per rank (torchrun's own launcher adds its summary)
    assert not (tmp_path / "out" / "ckpt.pt").exists()


def test_ddp_a_dying_rank_ends_the_job(tmp_path):
    t0 = time.time()
    proc = torchrun(tmp_path, "import os\nif os.environ.get('RANK') == '1':\n    os._exit(3)  # rank 1 dies\n",
                    "--attn=softmax", timeout=300)
    assert proc.returncode != 0 and time.time() - t0 < 120  # rank 0 is ended, not left waiting
