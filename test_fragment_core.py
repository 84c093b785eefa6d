import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import common
import data
import train
from mixit import ATTNS, KVCache, MixiT, MixiTConfig, mixing_matrix

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=4, n_embd=32)
FAST = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--batch_size=16", "--warmup_iters=2"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_model(**kw):
    return MixiT(MixiTConfig(**{**TINY, **kw}))


def run_train(out_dir, *args, device="cpu"):
    """train.py in this process; returns its exit status."""
    return common.cli(train.main, [f"--out_dir={out_dir}", f"--device={device}", "--log_interval=1000",
                                   *args])


def read_metrics(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(path):
    return torch.load(os.path.join(path, "ckpt.pt"), weights_only=True)


# ===== common.py: device selection, with a stand-in for CUDA


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA as torch shows it on a 2-GPU machine, set_device with torch's own rule (a device needs an index);
    returns the devices set, in order. Process-group calls are recorded instead of made."""
    chosen, groups = [], []

    def set_device(device):
        chosen.append(torch.device("cuda", torch.cuda._utils._get_device_index(device)))  # raises without an index

    for name, fn in dict(is_available=lambda: True, device_count=lambda: 2, set_device=set_device,
                         get_device_name=lambda device=None: "NVIDIA H100 80GB HBM3",
                         is_bf16_supported=lambda *a, **k: True).items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kw: groups.append(backend))
    monkeypatch.setattr(torch.distributed, "new_group", lambda backend, **kw: f"{backend} group")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    return types.SimpleNamespace(chosen=chosen, groups=groups)


def test_the_cuda_stand_in_keeps_torchs_rule(fake_cuda):
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_device(torch.device("cuda"))  # what broke every single-GPU user


@pytest.mark.parametrize("name,expected", [("auto", "cuda:0"), ("cuda", "cuda:0"), ("cuda:1", "cuda:1"),
                                           ("cpu", "cpu")])
def test_device_selection_on_one_process(fake_cuda, name, expected):
    env = common.setup(name, "auto")
    assert str(env.device) == expected and not env.ddp and env.world_size == 1
    assert fake_cuda.chosen == ([torch.device(expected)] if expected != "cpu" else [])
    assert env.dtype == (torch.bfloat16 if expected != "cpu" else torch.float32)  # bf16 on a GPU that has it
    assert "H100" in env.describe() or expected == "cpu"


def test_torchrun_local_rank_picks_its_gpu_and_nccl(fake_cuda, monkeypatch):
    for var, value in dict(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2").items():
        monkeypatch.setenv(var, value)
    env = common.setup("cuda", "auto")
    assert env.device == torch.device("cuda:1") and fake_cuda.chosen == [torch.device("cuda:1")]
    assert env.ddp and env.rank == 1 and not env.master and fake_cuda.groups == ["nccl"] and env.control == "gloo group"
    assert common.setup("auto", "float32").device == torch.device("cuda:1")
    with pytest.raises(common.ConfigError, match="every process needs its own GPU; use device=cuda"):
        common.setup("cuda:0", "auto")


def test_bad_cuda_choices_name_what_is_valid(fake_cuda, monkeypatch):
    with pytest.raises(common.ConfigError, match=r"has 2 GPU\(s\); valid: cuda:0 .. cuda:1"):
        common.setup("cuda:2", "auto")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(common.ConfigError, match="bfloat16 is not supported by NVIDIA H100 80GB HBM3; valid: float16, float32"):
        common.setup("cuda", "bfloat16")
    assert common.setup("cuda", "auto").dtype == torch.float32  # auto falls back where bf16 is missing


def test_peak_flops_from_the_datasheet_or_measured(fake_cuda):
    assert common.peak_flops("cuda:0", torch.bfloat16) == 989e12 and common.peak_flops("cuda:0") == 494e12
    assert 1e9 < common.peak_flops("cpu") < 1e14  # measured
    assert common.peak_flops("mps") is None


@pytest.mark.parametrize("argv,expected", [(["--n_embd=64"], 64), (["--compile=True"], True), (["--attn=mixing"], "mixing")])
def test_configurator_types(argv, expected):
    config = common.configure(train.DEFAULTS, argv, train.RULES)
    assert config[argv[0][2:].partition("=")[0]] == expected


# ===== mixit.py


@pytest.mark.parametrize("attn", ATTNS)
def test_shapes_and_initial_loss(attn):
    model = tiny_model(attn=attn)
    idx = torch.randint(0, 32, (3, 12))
    logits, none = model(idx)
    assert logits.shape == (3, 12, 32) and none is None
    no_logits, loss = model(idx, idx)
    assert no_logits is None and abs(loss.item() - np.log(32)) < 0.5  # near-uniform at init; no logits kept
    targets = idx.clone()
    targets[:, :6] = -1
    _, partial = model(idx, targets)
    expected = F.cross_entropy(logits[:, 6:].reshape(-1, 32), idx[:, 6:].reshape(-1))
    assert torch.allclose(partial, expected, atol=1e-6)  # -1 targets are ignored


def test_forward_is_the_papers_formulas():
    """MixiT's block written out by hand from its formulas: h = s h + r (A V) W_O, then the shaped MLP
    gain * leaky_relu(gate, 1 + c/sqrt(d)) * up, every linear multiplied by sqrt(base / fan_in)."""
    model = tiny_model(attn="mixing", init_std=0.2, cminus=1.0, skip=0.6)
    idx = torch.randint(0, 32, (2, 12))
    cfg, C, H = model.config, 32, 4
    mult = lambda fan_in, base=cfg.base_width: math.sqrt(base / fan_in)
    lin = lambda layer, x, m: (x @ layer.weight.T + layer.bias) * m
    norm = lambda n, x: x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * n.weight
    h = model.wte(idx) + model.wpe.weight[:12]
    s, r = 0.6, math.sqrt(1 - 0.36)
    slope = 1 + 1 / math.sqrt(C)
    for block in model.blocks:
        v = lin(block.attn.v, norm(block.norm1, h), mult(C)).view(2, 12, H, C // H).transpose(1, 2)
        y = (block.attn.mixing @ v).transpose(1, 2).reshape(2, 12, C)
        h = s * h + r * lin(block.attn.o, y, mult(C))
        gate, up = lin(block.mlp.gate_up, norm(block.norm2, h), mult(C)).chunk(2, -1)
        act = math.sqrt(2 / (1 + slope ** 2)) * F.leaky_relu(gate, slope) * up
        h = s * h + r * lin(block.mlp.down, act, mult(4 * C, cfg.base_ffn))
    logits = norm(model.norm, h) @ model.head.weight.T * mult(C)
    assert torch.allclose(model(idx)[0], logits, atol=1e-4, rtol=1e-4)


def test_initial_weights_and_mixing_matrices_are_pinned():
    """A checksum of every initial tensor for one seed: any change to seeding (numpy's SeedSequence of flat
    integers, torch's generator) fails here. Mixing matrices and trained weights are those of earlier versions."""
    expected = {"softmax": "6c15353fc1d3c2f7", "frozen_qk": "4e185c60204bd531", "mixing": "fef4c6878ac3af92"}
    for attn, digest in expected.items():
        h = hashlib.sha256()
        for key, value in tiny_model(attn=attn, seed=3).state_dict().items():
            h.update(key.encode())
            h.update(value.numpy().tobytes())
        assert h.hexdigest()[:16] == digest, attn


def test_every_variant_builds_under_a_numpy_that_refuses_nested_seeds(monkeypatch):
    """numpy >= 2.5 refuses nested sequences in SeedSequence; a stand-in for it here."""
    seed_sequence = np.random.SeedSequence

    def strict(entropy, *args, **kwargs):
        if any(isinstance(e, (list, tuple, np.ndarray)) for e in np.atleast_1d(np.asarray(entropy, dtype=object))):
            raise TypeError("SeedSequence does not accept nested sequences")
        return seed_sequence(entropy, *args, **kwargs)

    monkeypatch.setattr(np.random, "SeedSequence", strict)
    with pytest.raises(TypeError):
        np.random.SeedSequence([(0, 1, 2)])
    for attn in ATTNS:
        for freeze in ("", "mlp", "blocks"):
            tiny_model(attn=attn, freeze=freeze)


@pytest.mark.parametrize("attn", ATTNS)
def test_causal_prefix_consistency(attn):
    """A prefix gives the prefix of the full output: no position sees the future, and MixiT's shorter inputs
    use the leading block of its matrices."""
    model = tiny_model(attn=attn)
    idx = torch.randint(0, 32, (2, 12))
    assert torch.allclose(model(idx)[0][:, :7], model(idx[:, :7])[0], atol=1e-5)


def test_classifier_pools_real_tokens_only():
    model = tiny_model(n_classes=3, pad_id=0, causal=False)
    padded = torch.randint(1, 32, (2, 12))
    padded[:, 8:] = 0
    logits, _ = model(padded)
    assert logits.shape == (2, 3) and model(padded, torch.tensor([0, 2]))[1].item() > 0
    for attn in ("softmax", "mixing"):  # padding is invisible to attention and pooling
        m = tiny_model(n_classes=3, pad_id=0, causal=False, attn=attn)
        a, _ = m(padded)
        m.wte.weight.data[0] += 1.0  # change what a padding token looks like
        assert torch.allclose(a, m(padded)[0], atol=1e-5)


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
    assert not any(id(p) in in_optimizer for n, p in model.named_parameters() if n in frozen)  # no state, no decay
    for _ in range(5):
        idx = torch.randint(0, 32, (4, 12))
        model(idx, idx)[1].backward()
        opt.step()
        opt.zero_grad()
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], p) for n, p in frozen.items())
    assert all(params[n].grad is None for n in frozen)  # no wasted weight-gradient work
    assert all(not torch.equal(params[n], p) for n, p in trained.items() if "norm" not in n or freeze != "blocks")


def test_frozen_qk_init_is_the_papers_or_the_references():
    """Frozen W_Q, W_K ~ N(0, 1/n_embd) by default (their biases 0); qk_init=reference keeps init_std."""
    paper, ref = tiny_model(attn="frozen_qk", n_embd=64), tiny_model(attn="frozen_qk", n_embd=64, qk_init="reference")
    w, b = paper.blocks[0].attn.qk.weight, paper.blocks[0].attn.qk.bias
    assert abs(w.std().item() - 1 / 8) < 0.01 and not b.any()
    assert abs(ref.blocks[0].attn.qk.weight.std().item() - 0.02) < 0.002
    assert torch.equal(paper.blocks[0].attn.v.weight, ref.blocks[0].attn.v.weight)  # the trained weights agree


def test_weight_decay_groups_and_fused_adamw():
    opt = tiny_model().configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    groups = opt.param_groups
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and groups[0]["weight_decay"] == 0.1
    assert all(p.dim() < 2 for p in groups[1]["params"]) and groups[1]["weight_decay"] == 0.0
    assert opt.defaults["fused"]


def test_softmax_fuses_qkv_and_mixing_has_no_query_key_or_rotary():
    names = [n for n, _ in tiny_model(attn="mixing").named_parameters()]
    assert not any(".qk" in n for n in names) and "wpe.weight" in names
    softmax = [n for n, _ in tiny_model().named_parameters()]
    assert "blocks.0.attn.qkv.weight" in softmax and "wpe.weight" not in softmax
    assert "blocks.0.mlp.gate_up.weight" in softmax


def test_mixing_matrix_properties():
    T, H, hd = 16, 4, 8
    A = mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0))
    assert A.shape == (H, T, T) and A.dtype == torch.float32
    assert torch.equal(A, A.tril())  # causal
    assert torch.allclose(A[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6)  # rows sum to 1
    sink = torch.eye(T) * 0.5
    sink[:, 0] = 0.5
    assert torch.equal(A[0], sink)  # the sink head; row 0 sums to 0.5
    noise = (A[1:] - torch.eye(T)).tril(-1)
    for h in range(H - 1):  # per-head std between 1/sqrt(T d_h) and 1/sqrt(T) (loosely: a finite sample)
        std = noise[h][torch.ones(T, T).tril(-1).bool()].std().item()
        assert 0.5 / np.sqrt(T * hd) < std < 1.5 / np.sqrt(T)
    assert torch.equal(A, mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0)))  # deterministic
    assert not torch.equal(A, mixing_matrix(T, H, hd, causal=True, seed=(4, 1, 0)))
    full = mixing_matrix(T, H, hd, causal=False)
    assert torch.allclose(full[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6) and (full[1:].triu(1) != 0).any()


def test_mixing_matrix_is_a_seeded_buffer_in_the_state_dict():
    torch.manual_seed(0)
    a = tiny_model(attn="mixing", seed=7)
    torch.manual_seed(1)  # the global RNG plays no part
    b, c = tiny_model(attn="mixing", seed=7), tiny_model(attn="mixing", seed=8)
    key, state = "blocks.1.attn.mixing", a.state_dict()
    assert key in state and torch.equal(state[key], b.state_dict()[key])
    assert not torch.equal(state["blocks.0.attn.mixing"], state[key])  # layers differ
    assert not torch.equal(state[key], c.state_dict()[key])
    c.load_state_dict(state)
    assert torch.equal(c.blocks[1].attn.mixing, state[key])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_flops_count_what_each_variant_computes():
    flops = {attn: tiny_model(attn=attn).flops_per_token() for attn in ATTNS}
    assert flops["mixing"] < flops["frozen_qk"] < flops["softmax"]
    d, L, V, T = 32, 2, 32, 12
    seen = (T + 1) / 2
    matmuls = L * (4 * d * d + 8 * d * d + 4 * d * d) + d * V  # qkv + o, mlp (gate_up 8d^2, down 4d^2), head
    assert flops["softmax"] == 6 * matmuls + L * 12 * d * seen
    assert flops["frozen_qk"] == flops["softmax"] - L * 2 * (2 * d * d)  # no weight gradient for W_Q, W_K
    assert flops["mixing"] == 6 * (matmuls - L * 2 * d * d) + L * 4 * d * seen
    assert tiny_model().flops_per_token(training=False) == 2 * matmuls + L * 4 * d * seen


class MatmulFlops(TorchDispatchMode):
    """The FLOPs of every matmul op that runs."""
    ops = {torch.ops.aten.mm.default: lambda a, b: a.shape[0] * a.shape[1] * b.shape[1],
           torch.ops.aten.addmm.default: lambda c, a, b: a.shape[0] * a.shape[1] * b.shape[1],
           torch.ops.aten.bmm.default: lambda a, b: a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]}
    total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.ops:
            self.total += 2 * self.ops[func](*args[:3 if func == torch.ops.aten.addmm.default else 2])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attn", ATTNS)
def test_flop_count_matches_the_matmuls_autograd_runs(attn):
    """flops_per_token, which MFU divides by, against every matmul of a real forward and backward: the linears
    exactly (frozen W_Q/W_K without weight gradient); attention as computed (SDPA is no matmul op on CPU;
    MixiT's product is dense, where the count takes the causal half)."""
    B, T = 3, 16
    model = MixiT(MixiTConfig(vocab_size=32, block_size=T, n_layer=2, n_head=2, n_embd=16, attn=attn))
    with MatmulFlops() as recorder:
        model(torch.randint(32, (B, T)), torch.randint(32, (B, T)))[1].backward()
    cfg, seen = model.config, (T + 1) / 2
    counted = cfg.n_layer * cfg.n_embd * (4 * seen if attn == "mixing" else 12 * seen)
    ran = cfg.n_layer * 4 * cfg.n_embd * T if attn == "mixing" else 0  # A @ V and A^T @ dY, dense
    assert recorder.total == (model.flops_per_token() - counted + ran) * B * T


def test_bf16_residual_stream_trains_like_float32():
    """Under autocast the residual stream is kept in bfloat16 (half the bytes): training still follows float32."""
    dtypes, losses = [], {}
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = tiny_model(attn="mixing", n_embd=64)
        hook = model.blocks[1].register_forward_pre_hook(lambda m, args: dtypes.append(args[0].dtype))
        opt = model.configure_optimizers(0.0, 3e-3, (0.9, 0.99), "cpu")
        idx = torch.randint(0, 32, (16, 12))
        for _ in range(40):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                _, loss = model(idx, idx.roll(1, 1))
            loss.backward()
            opt.step()
            opt.zero_grad()
        hook.remove()
        losses[dtype] = loss.item()
    assert dtypes[0] == torch.float32 and dtypes[-1] == torch.bfloat16
    assert losses[torch.bfloat16] < 0.5 * math.log(32) and abs(losses[torch.bfloat16] - losses[torch.float32]) < 0.1


@pytest.mark.parametrize("attn", ATTNS)
def test_cached_generation_matches_uncached(attn):
    model = tiny_model(attn=attn, block_size=16).eval()
    prompt = torch.randint(0, 32, (2, 5))
    for new in (8, 30):  # 30 runs past block_size: the window is cropped and the cache rebuilt
        cached = model.generate(prompt, new, top_k=1, use_cache=True)
        assert cached.shape == (2, 5 + new) and torch.equal(cached, model.generate(prompt, new, top_k=1, use_cache=False))
    for p in (prompt, torch.randint(0, 32, (2, 20))):  # the second is cropped to its last 16 tokens
        torch.manual_seed(3)
        a = model.generate(p, 25, temperature=1.5, top_k=5)
        torch.manual_seed(3)
        assert torch.equal(a, model.generate(p, 25, temperature=1.5, top_k=5, use_cache=False))
    batched = model.generate(prompt, 15, top_k=1)  # batched rows equal their one-row runs
    assert all(torch.equal(batched[r:r + 1], model.generate(prompt[r:r + 1], 15, top_k=1)) for r in range(2))


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


@pytest.mark.parametrize("attn,classifier", [(a, False) for a in ATTNS] + [("softmax", True), ("mixing", True)])
def test_attention_maps_are_what_each_layer_applies(attn, classifier):
    """Replacing each layer's attention by its map (times the values) reproduces forward."""
    kw = dict(n_classes=3, pad_id=0, causal=False) if classifier else {}
    model = tiny_model(attn=attn, init_std=0.2, **kw).eval()
    idx = torch.randint(1, 32, (2, 12))
    if classifier:
        idx[:, 9:] = 0
    maps = model.attention_maps(idx)
    assert maps.shape == (2, 2, 4, 12, 12)
    if attn != "mixing":
        assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 4, 12), atol=1e-5)  # probabilities
        assert torch.equal(maps, maps.tril()) or classifier
    layer = iter(maps)

    def attention_by_map(self, x, cache=None, pad_mask=None):
        B, t, C = x.shape
        v = self.v(x) if self.attn != "softmax" else self.qkv(x)[..., 2 * C:]
        v = v.view(B, t, self.n_head, -1).transpose(1, 2)
        return self.o((next(layer) @ v).transpose(1, 2).reshape(B, t, C))

    expected, _ = model(idx)
    model.blocks[0].attn.forward = types.MethodType(attention_by_map, model.blocks[0].attn)
    model.blocks[1].attn.forward = types.MethodType(attention_by_map, model.blocks[1].attn)
    assert torch.allclose(model(idx)[0], expected, atol=1e-5)


# ===== train.py


def test_short_run_learns_an_easy_task(tmp_path):
    assert run_train(tmp_path, "--task=retrieval_2", "--attn=softmax", "--max_iters=200", "--eval_interval=100",
                     "--n_embd=64", "--batch_size=128", "--learning_rate=1e-2") == 0
    metrics = read_metrics(tmp_path)
    assert [m["iter"] for m in metrics] == [100, 200]
    assert metrics[-1]["val_acc"] > 0.9 and metrics[-1]["val_loss"] < 0.1 * np.log(512)  # from log(V) at init
    ckpt = load_ckpt(tmp_path)
    assert ckpt["iter_num"] == 200 and ckpt["config"]["task"] == "retrieval_2"


def test_accuracy_per_answer_position():
    """evaluate's accuracy of the k-th answer of every row, against a row-by-row count."""
    task, model = data.make_task("addition_3"), tiny_model(vocab_size=31, block_size=12, attn="mixing", init_std=0.3)
    result = train.evaluate(model, task, "test", 500, common.setup("cpu", "float32"))
    hits, counts = np.zeros(5), np.zeros(5)
    for x, y in task.eval_batches("test", 500):
        pred = model(x)[0].argmax(-1)
        for p, t in zip(pred, y):
            answers = torch.nonzero(t >= 0).flatten()
            for k, pos in enumerate(answers):
                hits[k] += int(p[pos] == t[pos])
                counts[k] += 1
    assert counts[3] == counts[0] > counts[4] > 0  # 4 answers a row, 5 where the sum carries out
    assert np.allclose(result["acc_pos"], hits / counts) and result["acc"] == pytest.approx(hits.sum() / counts.sum())


def test_resume_matches_uninterrupted_run(tmp_path):
    common_args = ["--task=addition_3", "--attn=mixing", "--eval_interval=4", *FAST]
    assert run_train(tmp_path / "full", *common_args, "--max_iters=8") == 0
    assert run_train(tmp_path / "part", *common_args, "--max_iters=4", "--lr_decay_iters=8") == 0
    assert run_train(tmp_path / "part", *common_args, "--max_iters=8", "--lr_decay_iters=8", "--init_from=resume") == 0
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


def test_compiled_training_matches_eager_and_saves_a_clean_state_dict(tmp_path):
    """--compile=True (TorchInductor's C++ kernels on CPU; the CUDA path's code) trains like the eager model, and
    the checkpoint holds the uncompiled module's keys."""
    for mode in ("False", "True"):
        assert run_train(tmp_path / mode, "--task=memorize_4", "--attn=frozen_qk", "--max_iters=3",
                         "--eval_interval=3", f"--compile={mode}", *FAST) == 0
    eager, compiled = read_metrics(tmp_path / "False")[-1], read_metrics(tmp_path / "True")[-1]
    for key in ("train_loss", "val_loss", "val_acc"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-5)
    a, b = load_ckpt(tmp_path / "False")["model"], load_ckpt(tmp_path / "True")["model"]
    assert list(a) == list(b) and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_compiled_training_has_no_graph_break_and_no_recompile(tmp_path, monkeypatch):
    """As train.py runs them (steps, evaluations, checkpoint saves) for every variant: fullgraph turns a graph
    break into an error, error_on_recompile a recompilation. AOTAutograd traces the backward too."""
    import torch._dynamo
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, backend="aot_eager", fullgraph=True, **kw))
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    for attn in ATTNS:
        torch._dynamo.reset()
        assert run_train(tmp_path / attn, "--task=addition_2", f"--attn={attn}", "--compile=True", "--max_iters=4",
                         "--eval_interval=2", *FAST) == 0


def test_comparison_writes_table_and_plot(tmp_path, capsys):
    assert run_train(tmp_path, "--task=addition_2,retrieval_2", "--attn=all", "--max_iters=4", "--eval_interval=2",
                     "--seeds=2", *FAST) == 0
    out = capsys.readouterr().out
    assert "| retrieval_2 | mixing | 2 |" in out and "±" in out and "induction_score" in out
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    results = (tmp_path / "results.md").read_text()
    assert "| addition_2 | frozen_qk | 2 | 4 |" in results and "over seeds 0, 1. 12 runs in" in results
    assert (tmp_path / "retrieval_2-softmax-s1" / "ckpt.pt").exists()


def torchrun_cmd(nproc, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "train.py",
            *args]


@pytest.mark.parametrize("accum", [1, 2])
def test_torchrun_two_processes_match_one(tmp_path, accum):
    """The step is the same batch_size x accum sequences for any number of processes: whole micro-batches per
    process (accum 2), or each micro-batch's rows dealt out (accum 1, the default)."""
    args = ["--task=addition_2", "--attn=softmax,mixing", "--max_iters=4", "--eval_interval=2", "--device=cpu",
            f"--gradient_accumulation_steps={accum}", *FAST]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for launcher, out in ((torchrun_cmd(2), "ddp"), ([sys.executable, "train.py"], "one")):
        proc = subprocess.run(launcher + args + [f"--out_dir={tmp_path / out}"], cwd=HERE, env=env,
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, f"{out} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    for attn in ("softmax", "mixing"):
        ddp, one = read_metrics(tmp_path / "ddp" / f"addition_2-{attn}"), read_metrics(tmp_path / "one" / f"addition_2-{attn}")
        for m, n in zip(ddp, one):
            assert m["train_loss"] == pytest.approx(n["train_loss"], rel=1e-5)
            assert m["val_loss"] == pytest.approx(n["val_loss"], rel=1e-5)
        a, b = load_ckpt(tmp_path / "ddp" / f"addition_2-{attn}")["model"], load_ckpt(tmp_path / "one" / f"addition_2-{attn}")["model"]
        assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_step_shares_cover_the_step_once():
    for world in (1, 2, 3, 4):
        for accum, batch in ((1, 12), (2, 12), (4, 12), (3, 12), (6, 5)):
            if accum % world and batch % world:
                continue
            seen = []
            for rank in range(world):
                env = types.SimpleNamespace(world_size=world, rank=rank)
                for micro, rows in train.step_shares(accum, batch, env):
                    seen += [(micro, r) for r in range(batch)[rows]]
            assert sorted(seen) == [(m, r) for m in range(accum) for r in range(batch)]
    with pytest.raises(common.ConfigError, match="share neither gradient_accumulation_steps=3 nor batch_size=5"):
        train.step_shares(3, 5, types.SimpleNamespace(world_size=2, rank=0))


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
    (["--qk_init=normal"], "valid: paper, reference"),
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
    (["--task=wikitext2", "--data_dir=/nonexistent"], "is not prepared: run `python prepare.py wikitext2`"),
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
    assert common.cli(train.main, ["--task=addition_2", "--max_iters=1", f"--out_dir={blocker / 'out'}", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not writable" in err and blocker.read_text() == "not a folder"


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
    for kind, blob in {"truncated": good[:len(good) // 2], "garbage": os.urandom(2000)}.items():
        (tmp_path / "ckpt.pt").write_bytes(blob)
        assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--init_from=resume", *FAST) == 2, kind
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a readable checkpoint" in err, err
    torch.save({"model": {}}, tmp_path / "ckpt.pt")
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--init_from=resume", *FAST) == 2
    assert "is not a mixit checkpoint (missing model_args, config)" in capsys.readouterr().err


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


def test_out_of_memory_is_one_line_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    """torch's own out-of-memory error inside a training step: a line that names the batch size and the way
    out at the same global batch; the checkpoint stays as it was."""
    run = ["--task=addition_2", "--attn=softmax", *FAST]
    assert run_train(tmp_path, *run, "--max_iters=2") == 0
    before = (tmp_path / "ckpt.pt").read_bytes()
    forward = MixiT.forward

    def out_of_memory(self, idx, targets=None, cache=None):
        if targets is not None:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 24.00 GiB")
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(MixiT, "forward", out_of_memory)
    assert run_train(tmp_path, *run, "--max_iters=4", "--init_from=resume") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory at batch_size=16" in err and "untouched" in err
    assert "--batch_size=8 --gradient_accumulation_steps=2 (the same 16 sequences a step)" in err
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
    config = common.configure(train.DEFAULTS, [os.path.join(HERE, "configs", f"{name}.py")], train.RULES)
    runs = train.plan_runs(config)
    assert len(runs) >= 2  # every preset compares variants
    for run in runs:
        train.model_config(run, preset_task(run["task"], run["block_size"]))
    assert config["device"] == ("cpu" if name.endswith("_cpu") else "auto")  # paper presets: the GPU when present


def torchrun(tmp_path, config_text, *args, timeout=120):
    """A 2-process CPU torchrun of train.py with a config file that may differ by rank."""
    cfg = tmp_path / "rank_cfg.py"
    cfg.write_text(config_text)
    cmd = torchrun_cmd(2, str(cfg), f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--task=addition_2",
                       "--max_iters=4", "--eval_interval=2", *FAST, *args)
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


# ===== the CUDA lane: run by the same test command where a GPU is present, skipped elsewhere


@cuda
def test_cuda_every_variant_trains_compiled_in_bf16_like_eager(tmp_path):
    args = ["--task=addition_3", "--attn=all", "--max_iters=20", "--eval_interval=10", "--dtype=bfloat16",
            "--n_embd=64", "--batch_size=64", "--warmup_iters=2"]
    for mode in ("True", "False"):
        assert run_train(tmp_path / mode, *args, f"--compile={mode}", device="cuda") == 0
    for attn in ATTNS:
        compiled, eager = (read_metrics(tmp_path / mode / f"addition_3-{attn}") for mode in ("True", "False"))
        assert compiled[-1]["val_loss"] < compiled[0]["val_loss"] < math.log(31)  # the loss falls
        assert compiled[-1]["train_loss"] == pytest.approx(eager[-1]["train_loss"], rel=0.05)  # bf16 tolerance


@cuda
def test_cuda_fused_adamw_and_fused_attention_kernels():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for attn in ATTNS:
        model = tiny_model(attn=attn, n_embd=128, block_size=64).cuda()
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cuda")
        assert opt.defaults["fused"]
        idx = torch.randint(0, 32, (4, 64), device="cuda")
        # no math fallback allowed: softmax and frozen_qk must run through flash or cuDNN attention
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]), \
                torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(idx, idx)
        loss.backward()
        opt.step()


@cuda
@pytest.mark.parametrize("attn", ATTNS)
def test_cuda_cached_generation_matches_uncached(attn):
    model = tiny_model(attn=attn, block_size=16).cuda().eval()
    prompt = torch.randint(0, 32, (2, 5), device="cuda")
    assert torch.equal(model.generate(prompt, 20, top_k=1), model.generate(prompt, 20, top_k=1, use_cache=False))


@cuda
def test_cuda_resume_matches_uninterrupted_run(tmp_path):
    args = ["--task=addition_3", "--attn=mixing", "--eval_interval=4", "--dtype=float32", "--compile=False", *FAST]
    assert run_train(tmp_path / "full", *args, "--max_iters=8", device="cuda") == 0
    assert run_train(tmp_path / "part", *args, "--max_iters=4", "--lr_decay_iters=8", device="cuda") == 0
    assert run_train(tmp_path / "part", *args, "--max_iters=8", "--lr_decay_iters=8", "--init_from=resume",
                     device="cuda") == 0
    assert read_metrics(tmp_path / "full")[-1]["val_loss"] == pytest.approx(read_metrics(tmp_path / "part")[-1]["val_loss"],
                                                                            rel=1e-4)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_cuda_torchrun_nccl_two_gpus_match_one(tmp_path):
    args = ["--task=addition_2", "--attn=softmax", "--max_iters=4", "--eval_interval=2", "--device=cuda",
            "--dtype=float32", "--compile=False", *FAST]
    for launcher, out in ((torchrun_cmd(2), "ddp"), ([sys.executable, "train.py"], "one")):
        proc = subprocess.run(launcher + args + [f"--out_dir={tmp_path / out}"], cwd=HERE, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_metrics(tmp_path / "ddp")[-1]["val_loss"] == pytest.approx(read_metrics(tmp_path / "one")[-1]["val_loss"],
                                                                           rel=1e-4)
