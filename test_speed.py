"""Tests for the speed paths of mixit and for bench.py: python -m pytest -q test_speed.py (CPU, a few seconds)."""
import math

import pytest
import torch
from torch.nn import functional as F

import bench
from mixit import ATTNS, CausalMix, MixiT, MixiTConfig, mixing_matrix

TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=4, n_embd=32)


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
                   "batches/s", "cached tok/s", "uncached tok/s", "speedup", "no gradient and no optimizer state"):
        assert column in out
    assert all(a in out for a in ATTNS)
    assert bench.cli(tiny + ["--sweep=block_size", "--attn=softmax,mixing"]) == 0
    assert "block_size sweep" in capsys.readouterr().out and (tmp_path / "bench_block_size.png").stat().st_size > 0


@pytest.mark.parametrize("arg,message", [("--colour=1", "unknown option"), ("--iters=x", "expected int"),
                                         ("--sweep=depth", "valid:"), ("--attn=linear", "unknown attn")])
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
