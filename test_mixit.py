"""Tests of mixit, in sections that follow the files: common.py, mixit.py, data.py, prepare.py, train.py,
sample.py, report.py, bench.py, then the CUDA lane (run where a GPU is present, skipped elsewhere). No test needs a
network; the real-data tests use ../shared/data and are skipped, with the reason, where it is absent.

    python -m pytest -q
"""
import gc
import errno
import functools
import hashlib
import io
import itertools
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import zipfile
from collections import Counter

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import bench
import common
import data
import keeper
import mixit
import prepare
import report
import sample
import train
from common import ConfigError, cli, setup
from mixit import (ATTNS, MIXIT_PARTS, KVCache, MixiT, MixiTConfig, StudyOptions, gaussian_pairs, hash32,
                   mixing_matrix, mixit_config, seed_key)

torch.set_num_threads(1)  # tiny models: one thread is as fast, and a busy shared CPU cannot stall it
HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=4, n_embd=32)
FAST = ["--n_layer=2", "--n_head=2", "--mixing_heads=", "--n_embd=32", "--batch_size=64", "--warmup_iters=2"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_model(**kw):
    return MixiT(mixit_config({**TINY, **kw}))


def run_train(out_dir, *args, device="cpu"):
    """train.py in this process; returns its exit status."""
    return common.cli(train.main, [f"--out_dir={out_dir}", f"--device={device}", "--log_interval=1000",
                                   *args])


def read_metrics(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(path):
    return torch.load(os.path.join(path, "ckpt.pt"), weights_only=True)


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


def run_script(script, args, env=None):
    """python script args, finished. One thread: on a busy CPU, torch's threads spinning for each other make a
    tiny model's steps up to 70x slower."""
    return subprocess.run([sys.executable, script, *args], cwd=HERE, env=dict(env or os.environ, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=120)


def one_line_exit_2(proc):
    """A process that stopped on bad input: status 2 and one line on stderr, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


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
    prepare.prepare("wikitext2", src=str(root / "src"), bpe_dir=BPE_DIR, out_dir=str(root / "data"))
    return root / "data"


@pytest.fixture(scope="session")
def sst2(tmp_path_factory):
    if not os.path.isdir(os.path.join(SHARED, "sst2")) or not os.path.isdir(BPE_DIR):
        pytest.skip(f"no local SST-2 and GPT-2 BPE under {SHARED}")
    root = tmp_path_factory.mktemp("sst2")
    prepare.prepare("sst2", src=os.path.join(SHARED, "sst2"), bpe_dir=BPE_DIR, out_dir=str(root), max_len=64)
    return root


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


def test_batches_reach_a_gpu_from_pinned_memory_without_a_sync():
    """Env.to_device on CUDA pins each batch and copies it asynchronously; elsewhere a plain copy (a stand-in records)."""
    class Batch:
        def __init__(self):
            self.calls = []

        def pin_memory(self):
            self.calls.append("pin")
            return self

        def to(self, device, non_blocking=False):
            self.calls.append((str(device), non_blocking))
            return self

    for device, expected in (("cuda:0", ["pin", ("cuda:0", True)]), ("cpu", [("cpu", False)])):
        batches = common.Env(torch.device(device), torch.float32).to_device(Batch(), Batch())
        assert [b.calls for b in batches] == [expected, expected]


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
    described = "1 x NVIDIA H100 80GB HBM3 (datasheet matmul 989,000 GFLOP/s), bfloat16"  # H100's bf16 peak
    assert env.describe().startswith(described) or expected == "cpu"


def test_torchrun_local_rank_picks_its_gpu_and_nccl(fake_cuda, monkeypatch):
    for var, value in dict(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2").items():
        monkeypatch.setenv(var, value)
    env = common.setup("cuda", "auto")
    assert env.device == torch.device("cuda:1") and fake_cuda.chosen == [torch.device("cuda:1")]
    assert env.ddp and env.rank == 1 and not env.master and fake_cuda.groups == ["nccl"] and env.control == "gloo group"
    assert common.setup("auto", "float32").device == torch.device("cuda:1")
    with pytest.raises(common.ConfigError, match="every process needs its own GPU; use device=cuda"):
        common.setup("cuda:0", "auto")


def test_a_process_that_sees_one_gpu_takes_it(fake_cuda, monkeypatch):
    """A cluster launcher that gives each task its own GPU (CUDA_VISIBLE_DEVICES) leaves cuda:0 the only one."""
    for var, value in dict(RANK="3", LOCAL_RANK="3", WORLD_SIZE="4").items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert common.setup("cuda", "auto").device == torch.device("cuda:0") == fake_cuda.chosen[-1]


def test_teardown_leaves_no_reference_to_the_groups(fake_cuda, monkeypatch):
    """A gloo group whose last reference outlives destroy_process_group is freed during interpreter shutdown, where
    its worker threads can abort the process (it did, about one 2-process run in 15)."""
    for var, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2").items():
        monkeypatch.setenv(var, value)
    env = common.setup("cuda", "auto")
    destroyed = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: destroyed.append(env.control))
    common.teardown(env)
    assert destroyed == [None]


def test_bad_cuda_choices_name_what_is_valid(fake_cuda, monkeypatch):
    with pytest.raises(common.ConfigError, match=r"has 2 GPU\(s\); valid: cuda:0 .. cuda:1"):
        common.setup("cuda:2", "auto")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(common.ConfigError, match="bfloat16 is not supported by NVIDIA H100 80GB HBM3; valid: float32$"):
        common.setup("cuda", "bfloat16")
    assert common.setup("cuda", "auto").dtype == torch.float32  # auto falls back where bf16 is missing


def test_matmul_rate_waits_for_the_device_around_every_timed_group(monkeypatch):
    """A GPU runs matmuls asynchronously: each timed group must start and end with a synchronize, and the rate is
    2 n^3 over the best group's mean time (a stand-in matmul takes 2 ms)."""
    events = []
    monkeypatch.setattr(common, "synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(torch.ops.aten.linear, "out", lambda *a, **k: (events.append("mm"), time.sleep(0.002)))
    rate = common.measure_matmul.__wrapped__(torch.device("cpu"), torch.float32, n=64, seconds=0.3)
    assert 0.5 * 2 * 64 ** 3 / 0.002 < rate <= 2 * 64 ** 3 / 0.002  # a sleep is never shorter than asked
    groups = "".join("|" if e == "sync" else "m" for e in events).split("|")
    assert events[0] == events[-1] == "sync" and all(groups[1::2]) and not any(groups[::2])  # sync, mm.., sync


def test_gpu_work_is_awaited_and_calibrated_on_its_own_device(monkeypatch):
    """synchronize waits for CUDA (a stand-in records) but not for a CPU; bench's CUDA calibration times 8192^3 there."""
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: waited.append("cuda"))
    common.synchronize(torch.device("cpu"))
    common.synchronize(torch.device("cuda", 0))
    assert waited == ["cuda"]
    monkeypatch.setattr(bench, "measure_matmul", lambda device, dtype, n: {8192: 750e12}[n])
    env = types.SimpleNamespace(device_type="cuda", device=torch.device("cuda", 0), dtype=torch.bfloat16,
                                describe=lambda: "1 x NVIDIA H100 80GB HBM3")
    calib = bench.calibrate(env, 989e12)
    assert (calib["matmul"], calib["measured_tflops"], round(calib["measured_over_peak"], 3)) == ("8192^3", 750, 0.758)


def test_peak_flops_from_the_datasheet_or_measured(fake_cuda):
    assert common.peak_flops("cuda:0", torch.bfloat16) == 989e12 and common.peak_flops("cuda:0") == 494e12
    assert 1e9 < common.peak_flops("cpu") < 1e14  # measured
    assert common.peak_flops("mps") is None


@pytest.mark.parametrize("script,argv,expected", [
    (train, ["--n_embd=64"], 64), (train, ["--compile=True"], True), (train, ["--attn=mixing"], "mixing"),
    (train, ["--fixed_head=previous"], "previous"), (sample, ["--induction"], True)])  # a bare --flag turns a bool on
def test_configurator_types(script, argv, expected):
    config = common.configure(script.DEFAULTS, argv, script.RULES, files=False)
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


@pytest.mark.parametrize("depth_alpha", [0.0, 0.5])
def test_forward_is_the_papers_formulas(depth_alpha):
    """MixiT's block written out by hand from its formulas: h = s h + r (A V) W_O with A = I + P, then the shaped
    MLP gain * leaky_relu(gate, 1 + c/sqrt(d)) * up, every linear multiplied by sqrt(base / fan_in); s^2 + r^2 = 1,
    or with depth_alpha s = 1, r = (4 / n_layer)^alpha."""
    model = tiny_model(attn="mixing", init_std=0.2, cminus=1.0, skip=0.6, depth_alpha=depth_alpha)
    idx = torch.randint(0, 32, (2, 12))
    cfg, C, H = model.config, 32, 4
    mult = lambda fan_in, base=cfg.base_width: math.sqrt(base / fan_in)
    lin = lambda layer, x, m: (x @ layer.weight.T + layer.bias) * m
    norm = lambda n, x: x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * n.weight
    h = model.wte(idx) + model.wpe.weight[:12]
    s, r = (1.0, 2.0 ** depth_alpha) if depth_alpha else (0.6, math.sqrt(1 - 0.36))
    slope = 1 + 1 / math.sqrt(C)
    for block in model.blocks:
        v = lin(block.attn.v, norm(block.norm1, h), mult(C)).view(2, 12, H, C // H).transpose(1, 2)
        y = ((torch.eye(12) + block.attn.mixing) @ v).transpose(1, 2).reshape(2, 12, C)
        h = s * h + r * lin(block.attn.o, y, mult(C))
        gate, up = lin(block.mlp.gate_up, norm(block.norm2, h), mult(C)).chunk(2, -1)
        act = math.sqrt(2 / (1 + slope ** 2)) * F.leaky_relu(gate, slope) * up
        h = s * h + r * lin(block.mlp.down, act, mult(4 * C, cfg.base_ffn))
    logits = norm(model.norm, h) @ model.head.weight.T * mult(C)
    assert torch.allclose(model(idx)[0], logits, atol=1e-4, rtol=1e-4)


def test_the_papers_part_alone_is_the_model():
    """mixit.py's part above its divider runs alone: its Transformer gives MixiT's logits bit for bit, and its plain
    loss MixiT's chunked one."""
    idx = torch.randint(0, 32, (2, 12))
    targets = idx.roll(-1, 1)
    targets[:, :4] = -1
    for attn in ("softmax", "ms"):
        model = tiny_model(attn=attn)
        model.loss_chunk = 64
        paper = mixit.Transformer(model.config)
        assert torch.equal(paper(idx)[0], model(idx)[0]), attn
        assert torch.allclose(paper(idx, targets)[1], model(idx, targets)[1], atol=1e-6), attn


def place_checksum(tensors):
    """Each value times its place in the tensors laid end to end, summed in float64: a value changed or
    moved changes it; a last bit that moves with the CPU barely does."""
    flat = torch.cat([t.double().flatten() for t in tensors])
    return (flat * torch.arange(1, len(flat) + 1)).sum().item()


def test_initial_weights_and_mixing_matrices_are_pinned():
    """A checksum of every weight drawn on the host, and the sizes of the fixed matrices, for one seed: any change to
    the seeding (flat integers hashed into keys) or to the generators fails here. Both are pinned to float32 rounding,
    not to the bit: torch's normal draws and the matrices' log, cos and sin are vectorised float maths whose last bit
    varies with the processor (ATEN_CPU_CAPABILITY=default moves it). The values come from the code before the
    restyle; the noise across CPUs is about 1e-7 of them, a changed init std or draw order far more."""
    sizes = [44.3936709, 39.9228874, 45.494504, 37.7319202]  # sum |A - I| per layer
    expected = {"softmax": (9615639.616, []), "frozen_qk": (9219083.597, []), "mixing": (8309904.786, sizes),
                "learned_mixing": (8309904.786, sizes), "sfml": (9012789.701, sizes[2:])}
    for attn, (checksum, sizes) in expected.items():
        model = tiny_model(attn=attn, n_layer=4, seed=3)
        weights = [value for key, value in model.state_dict().items() if not key.endswith(".mixing")]
        assert place_checksum(weights) == pytest.approx(checksum, rel=1e-6), attn
        matrices = [b.attn.mixing.double().abs().sum().item() for b in model.blocks if hasattr(b.attn, "mixing")]
        assert matrices == pytest.approx(sizes, rel=1e-6), attn


def test_logits_of_a_small_model_are_pinned():
    """Nine logits of each attention and the mean |logit| (float32, on the CPU) for one seed and input, taken from
    the code before mixit.py was restyled: any change to what the model computes fails here (a sink head of 0.49,
    a skip scale of 0.7, rows not centred, RMSNorm's eps 1e-5, cminus -1.01 each move a value by 3e-5 or more).
    They hold to 1e-5: the last bits of softmax attention and of the matmuls move with the processor (AVX2 or
    AVX-512) and the thread count, by about 1e-6 at most (ATEN_CPU_CAPABILITY=default against avx2)."""
    idx = torch.arange(24).view(2, 12) * 7 % 32
    mixing = ([0.1220321, 0.05392814, -0.4546818, 0.003960722, 0.1418215, 0.1946332, 0.1291575, -0.03828574,
               0.239666], 0.3917567)
    expected = {"softmax": ([0.1200646, 0.1923545, -0.07897288, -0.09108815, -0.1997336, 0.1638684, -0.1014952,
                             -0.06348173, 0.06798082], 0.08664098),
                "frozen_qk": ([0.1278915, 0.1953109, -0.1042866, -0.09317727, -0.189265, 0.1610217, -0.09905692,
                               -0.05934088, 0.02352382], 0.08641417),
                "mixing": mixing, "learned_mixing": mixing}
    for attn, (values, mean) in expected.items():
        logits, _ = tiny_model(attn=attn, seed=5)(idx)
        assert logits.dtype == torch.float32
        # the last position (it reads every token) and an early one
        pinned = torch.cat([logits[1, -1, :6], logits[0, 3, :3]]).tolist()
        assert pinned == pytest.approx(values, abs=1e-5), attn
        assert logits.abs().mean().item() == pytest.approx(mean, abs=1e-6), attn


def test_fixed_random_numbers_are_a_function_of_their_index():
    """Box-Muller of hashed integers: pinned values (no torch or numpy RNG behind them), the same for an index
    whatever else is drawn with it, and standard normal."""
    pairs = gaussian_pairs(torch.arange(4), key=7)
    pinned = [[0.2585376, 0.0597775], [1.3125789, -0.5321221], [0.5312530, -0.9752279], [-1.5839924, 0.1576807]]
    assert pairs.shape == (4, 2) and torch.allclose(pairs, torch.tensor(pinned), atol=1e-6)
    for i in range(4):  # the same in plain Python floats: torch's kernels add rounding, nothing else
        u1 = (hash32(i ^ hash32(7)) + 0.5) * 2.0 ** -32
        angle = hash32(i ^ hash32(8)) * 2 * math.pi * 2.0 ** -32
        radius = math.sqrt(-2 * math.log(u1))
        assert pairs[i].tolist() == pytest.approx([radius * math.cos(angle), radius * math.sin(angle)], abs=1e-5)
    assert torch.equal(gaussian_pairs(torch.tensor([3, 1]), key=7), pairs[[3, 1]])
    z = gaussian_pairs(torch.arange(200_000), key=11).flatten()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01 and abs((z ** 4).mean() - 3) < 0.05  # normal's kurtosis
    assert not torch.equal(gaussian_pairs(torch.arange(4), key=8), pairs)
    assert hash32(5) == hash32(torch.tensor(5)).item() and seed_key(1, 2) != seed_key(2, 1)
    assert "numpy" not in open(os.path.join(HERE, "mixit.py")).read()  # the model is numpy-free


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


@pytest.mark.parametrize("attn", ["softmax", "mixing"])
def test_last_token_pooling_reads_the_last_real_token(attn):
    """pool=last (the reference's classifier): the final norm's output at the rightmost real token, under right and
    left padding alike; mean pooling (the default) reads another summary."""
    idx = torch.randint(1, 32, (2, 12))
    idx[0, 8:] = 0  # right padding: the last real token at 7
    idx[1, :3] = 0  # left padding: at 11
    model = tiny_model(n_classes=3, pad_id=0, causal=False, attn=attn, pool="last")
    x = model.embed(idx)
    for block in model.blocks:
        x = block(x, None, idx != 0)
    expected = model.head(model.norm(x)[[0, 1], [7, 11]])
    assert torch.allclose(model(idx)[0], expected, atol=1e-6)
    assert not torch.allclose(tiny_model(n_classes=3, pad_id=0, causal=False, attn=attn)(idx)[0], expected, atol=1e-4)


@pytest.mark.parametrize("attn", ["softmax", "mixing"])
def test_masked_pads_change_nothing_and_attended_pads_are_read(attn):
    """The same texts with 2 or 4 pads after them: the same logits with pads masked (the default), others with pads
    attended (the reference), whose pad embedding starts at 0 and gets no gradient."""
    text = torch.randint(1, 32, (2, 8))
    padded = lambda n: torch.cat([text, torch.zeros(2, n, dtype=torch.long)], 1)
    for pads, same in (("masked", True), ("attended", False)):
        model = tiny_model(n_classes=3, pad_id=0, causal=False, attn=attn, pads=pads)
        assert torch.allclose(model(padded(2))[0], model(padded(4))[0], atol=1e-5) == same, pads
    assert torch.equal(model.wte.weight[0], torch.zeros(32))
    model(padded(4), torch.tensor([0, 1]))[1].backward()
    assert torch.equal(model.wte.weight.grad[0], torch.zeros(32)) and model.wte.weight.grad[1:].abs().sum() > 0


def test_non_causal_rows_sum_to_one_unless_centred_as_the_reference():
    """Non-causal MixiT centres each row of noise on its mean: rows of A sum to 1. The reference divides row i's
    sum over all T columns by i + 1: its rows are off 1 by T times the shift between the two. Causal rows agree."""
    T = 16
    ours, ref = (mixing_matrix(T, 4, 8, causal=False, study=StudyOptions(centring=c)) for c in ("mean", "reference"))
    assert ours[1:].sum(-1).abs().max() < 1e-5 and ref[1:].sum(-1).abs().max() > 0.05
    shift = ours - ref  # (rowsum N) (1/(i+1) - 1/T), the same along each row
    assert torch.allclose(shift, shift[..., :1].expand_as(shift), atol=1e-6)
    assert torch.allclose(ref[1:].sum(-1), -T * shift[1:, :, 0], atol=1e-5)
    assert torch.equal(ours[0], ref[0])  # the sink head
    assert torch.equal(mixing_matrix(T, 4, 8), mixing_matrix(T, 4, 8, study=StudyOptions(centring="reference")))


def test_depth_alpha_scales_the_branches_and_drops_the_identity():
    """depth_alpha > 0 (the reference's LM launchers): h = h + (base_depth / n_layer)^alpha f(h) in every model, and
    MixiT's A = N - rowmean(N) without its identity (rows sum to 0), every head's noise std 1/sqrt(T)."""
    for attn, n_layer, alpha in (("mixing", 2, 1.0), ("softmax", 8, 0.5)):
        for block in tiny_model(attn=attn, n_layer=n_layer, depth_alpha=alpha).blocks:
            assert (block.skip_scale, block.branch_scale) == (1.0, (4 / n_layer) ** alpha)
    T, H = 256, 4
    A = torch.eye(T) + mixing_matrix(T, H, 16, study=StudyOptions(depth_alpha=1.0))
    assert A[1:].sum(-1).abs().max() < 1e-5 and A[1:].diagonal(dim1=1, dim2=2).abs().max() < 0.5
    below = torch.ones(T, T).tril(-1).bool()
    for h in range(1, H):  # centring shrinks the entries by sqrt(1 - 1/(i+1)): within 5 % of 1/sqrt(T) in all
        assert A[h][below].std().item() == pytest.approx(1 / math.sqrt(T), rel=0.05)
    assert torch.equal(A[0], torch.eye(T) + mixing_matrix(T, H, 16)[0])  # the sink head keeps itself


FROZEN_CASES = [("frozen_qk", "", ["attn.qk"]), ("softmax", "mlp", ["mlp."]), ("mixing", "mlp", ["mlp."]),
                ("softmax", "blocks", ["blocks."]), ("mixing", "blocks", ["blocks."]), ("mf", "", ["1.attn.qk"])]


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


def test_mixits_parametrization_part_by_part():
    """standard_parts turns each part of MixiT's parametrization into the standard one's alone; all four together
    give the standard parametrization's model, logit for logit; an unknown part names the valid ones."""
    idx = torch.randint(0, 32, (2, 8))
    logits = lambda **kw: tiny_model(attn="mixing", init_std=0.2, **kw).eval()(idx)[0]
    standard, mixit = logits(parametrization="standard"), logits()
    assert torch.equal(logits(standard_parts=",".join(MIXIT_PARTS)), standard)
    for part in MIXIT_PARTS:  # each part alone moves the output away from both
        one = logits(standard_parts=part)
        assert not torch.allclose(one, mixit) and not torch.allclose(one, standard), part
    model = tiny_model(attn="mixing", standard_parts="residual,positions")
    block = model.blocks[0]
    assert model.wpe is None and block.skip_scale == block.branch_scale == 1.0  # the plain sum h + f(h)
    assert block.mlp.shaped and block.mlp.gate_up.mult != 1.0  # the other two stay MixiT's
    with pytest.raises(ValueError, match="unknown standard_parts 'skip'; valid: a comma list of residual, activation"):
        tiny_model(attn="mixing", standard_parts="skip")


def test_each_layer_is_built_as_its_pattern_says():
    """One letter per layer; a uniform pattern is the uniform model, bit for bit; the parametrization follows
    the mixing layers unless stated."""
    model = tiny_model(attn="sfml", n_layer=4)
    assert [b.attn.kind for b in model.blocks] == ["softmax", "frozen_qk", "mixing", "learned_mixing"]
    a0, a1, a2, a3 = (b.attn for b in model.blocks)
    assert hasattr(a0, "qkv") and hasattr(a0, "rotary") and hasattr(a1, "qk") and hasattr(a1, "rotary")
    assert "mixing" in dict(a2.named_buffers()) and not hasattr(a2, "rotary")  # fixed: a buffer
    assert isinstance(a3.mixing, torch.nn.Parameter) and not hasattr(a3, "rotary")  # learned: a parameter
    assert torch.equal(a2.mixing, tiny_model(attn="mixing", n_layer=4).blocks[2].attn.mixing)  # its seed: (seed, layer)
    assert model.config.mixit_param and model.wpe is not None and model.blocks[0].skip_scale < 1
    assert not tiny_model(attn="sfml", n_layer=4, parametrization="standard").config.mixit_param
    for attn, pattern in (("mixing", "mm"), ("softmax", "ss"), ("frozen_qk", "ff")):
        a, b = tiny_model(attn=attn).state_dict(), tiny_model(attn=pattern).state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    for bad in ("smx", "sm", "softmax,mixing"):  # unknown letters, wrong length
        with pytest.raises(ValueError, match="one letter per layer for n_layer=3"):
            tiny_model(attn=bad, n_layer=3)


def test_mixing_matrix_properties():
    """Stored less its identity: A = I + P, causal, rows of A summing to 1 (in float32 and in bfloat16, the
    dtype a bfloat16 run stores it in), head 0 the sink, each head's noise scale in [1/sqrt(T d_h), 1/sqrt(T)]."""
    T, H, hd = 16, 4, 8
    P = mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0))
    A = torch.eye(T) + P
    assert P.shape == (H, T, T) and P.dtype == torch.float32
    assert torch.equal(A, A.tril())  # causal
    assert torch.allclose(A[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6)  # rows sum to 1
    stored = torch.eye(T) + P.bfloat16().float()  # the noise keeps bfloat16's relative precision
    error, error_of_a = (stored[1:].sum(-1) - 1).abs().max(), (A[1:].bfloat16().float().sum(-1) - 1).abs().max()
    assert error < 2e-3 and error < error_of_a / 2  # A itself in bfloat16 would round the noise near 1 away
    sink = torch.eye(T) * 0.5
    sink[:, 0] = 0.5
    assert torch.equal(A[0], sink)  # the sink head; row 0 sums to 0.5
    noise = P[1:].tril(-1)
    for h in range(H - 1):  # per-head std between 1/sqrt(T d_h) and 1/sqrt(T) (loosely: a finite sample)
        std = noise[h][torch.ones(T, T).tril(-1).bool()].std().item()
        assert 0.5 / np.sqrt(T * hd) < std < 1.5 / np.sqrt(T)
    assert torch.equal(P, mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0)))  # deterministic
    assert torch.allclose(P, mixing_matrix(T, H, hd, causal=True, seed=(3, 1, 0), rows=5), atol=1e-7)  # any blocks
    assert not torch.equal(P, mixing_matrix(T, H, hd, causal=True, seed=(4, 1, 0)))
    full = torch.eye(T) + mixing_matrix(T, H, hd, causal=False)
    assert torch.allclose(full[1:].sum(-1), torch.ones(H - 1, T), atol=1e-6) and (full[1:].triu(1) != 0).any()


@pytest.mark.parametrize("causal", [True, False])
def test_the_papers_reading_builds_the_models_matrix(causal):
    """MixingAttention's own matrix, the paper's in a few lines (all rows at once), is bit for bit the one the model
    builds a few rows at a time (T = 200 crosses the chunk of 128) with no study departure."""
    config = mixit_config(dict(attn="mixing", block_size=200, n_head=4, n_embd=32, mix_beta=0.7, seed=3,
                               causal=causal, n_classes=0 if causal else 2, pad_id=0))
    model = mixit.MIXING_ATTENTIONS["mixing"](config, 1)
    assert type(model) is not mixit.MixingAttention
    assert torch.equal(mixit.MixingAttention(config, 1).mixing, model.mixing)

def test_sigma_min_holds_the_noise_range_as_heads_change():
    """The noise std's lowest value rises with heads (1/sqrt(T d_h)); sigma_min fixes it: at 1/sqrt(T) every noise
    head takes the top std whatever its size, as head size 1 gives, and a model takes it from its config."""
    T, top = 12, 1 / math.sqrt(12)
    at_top = mixing_matrix(T, 8, 1, seed=(0, 1, 0))
    assert torch.equal(mixing_matrix(T, 8, 16, seed=(0, 1, 0), study=StudyOptions(sigma_min=top)), at_top)
    assert not torch.equal(mixing_matrix(T, 8, 16, seed=(0, 1, 0)), at_top)
    model = tiny_model(attn="mixing", n_head=8, block_size=T, sigma_min=top)
    assert torch.equal(model.blocks[0].attn.mixing, at_top) and "noise std from 0.289" in report.describe_model(model.config)


@pytest.mark.parametrize("causal", [True, False])
def test_a_fixed_head_holds_its_pattern_and_changes_no_other_head(causal):
    """fixed_head: head 1 of A is the prefix mean (row i: 1/(i+1) on positions 0..i, nothing on the future; non-causal:
    1/T everywhere) or the previous token (row i: 1 at i - 1, row 0 at itself), its rows sum to 1; every other head is
    bit for bit the paper's MixiT, the default."""
    T, H, hd = 12, 4, 8
    paper, mean, previous = (mixing_matrix(T, H, hd, causal, seed=(3, 1, 0), study=StudyOptions(fixed_head=f))
                             for f in ("", "mean", "previous"))
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    expected = torch.where(j <= i, 1 / (i + 1.0), 0.0) if causal else torch.full((T, T), 1 / T)
    assert torch.allclose(torch.eye(T) + mean[1], expected, atol=1e-7)
    assert torch.equal(torch.eye(T) + previous[1], (j == (i - 1).clamp(min=0)).float())
    for fixed in (mean, previous):
        assert torch.allclose((torch.eye(T) + fixed[1]).sum(-1), torch.ones(T))
        assert torch.equal(fixed[[0, 2, 3]], paper[[0, 2, 3]])
    assert torch.equal(paper, mixing_matrix(T, H, hd, causal, seed=(3, 1, 0)))  # off: the paper's MixiT
    model = tiny_model(attn="mixing", fixed_head="mean", block_size=16, init_std=0.3).eval()
    assert torch.allclose(torch.eye(16) + model.blocks[1].attn.mixing[1], torch.ones(16, 16).tril() /
                          torch.arange(1, 17.0).view(-1, 1), atol=1e-7)
    prompt = torch.randint(0, 32, (2, 5))
    assert torch.equal(model.generate(prompt, 20, top_k=1), model.generate(prompt, 20, top_k=1, use_cache=False))
    with pytest.raises(ValueError, match="fixed_head needs n_head >= 2"):
        tiny_model(attn="mixing", fixed_head="mean", n_head=1)
    with pytest.raises(ValueError, match="unknown fixed_head 'prev'; valid: '', mean, previous"):
        tiny_model(attn="mixing", fixed_head="prev")


def test_fixed_matrices_are_rebuilt_from_the_seed_not_saved():
    """The state dict holds no fixed matrix; the global RNG plays no part; a checkpoint keeps a fingerprint."""
    torch.manual_seed(0)
    a = tiny_model(attn="mixing", seed=7)
    torch.manual_seed(1)
    b, c = tiny_model(attn="mixing", seed=7), tiny_model(attn="mixing", seed=8)
    assert not any("mixing" in k for k in a.state_dict())
    assert torch.equal(a.blocks[1].attn.mixing, b.blocks[1].attn.mixing)
    assert not torch.equal(a.blocks[0].attn.mixing, a.blocks[1].attn.mixing)  # layers differ
    assert not torch.equal(a.blocks[1].attn.mixing, c.blocks[1].attn.mixing)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    prints = common.fingerprint(a)
    assert len(prints) == 2 and np.array(prints[1]).shape == (4, 12) and prints == common.fingerprint(b)
    learned = tiny_model(attn="learned_mixing", seed=7)  # a trained matrix is a parameter: saved
    assert "blocks.1.attn.mixing" in learned.state_dict() and common.fingerprint(learned) == [None, None]
    assert torch.equal(learned.blocks[1].attn.mixing, a.blocks[1].attn.mixing)  # from the same init


class HostTensors(TorchDispatchMode):
    """The largest tensor any op makes on the host."""
    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.largest = max(self.largest, t.numel())
        return out


def test_fixed_matrices_are_built_on_the_target_device_never_on_the_host():
    """The meta device stands in for a GPU: the matrices are made there, a block of rows at a time, and the host
    holds nothing larger than the weights; in bfloat16 they are stored cast, once."""
    cfg = MixiTConfig(vocab_size=32, block_size=256, n_layer=2, n_head=8, n_embd=32, attn="mixing")
    with HostTensors() as host:
        model = MixiT(cfg, "meta", torch.bfloat16)
    P = model.blocks[0].attn.mixing
    assert P.device.type == "meta" and P.dtype == torch.bfloat16 and P.shape == (8, 256, 256)
    assert host.largest <= max(p.numel() for p in model.parameters()) < P.numel() // 8  # no head's matrix on the host
    assert all(p.device.type == "meta" for p in model.parameters()) and model.blocks[0].attn.v.weight.dtype == torch.float32


def test_flops_count_what_each_layer_computes():
    flops = {attn: tiny_model(attn=attn).flops_per_token() for attn in ATTNS}
    assert flops["mixing"] < flops["learned_mixing"] < flops["frozen_qk"] < flops["softmax"]
    d, L, V, T = 32, 2, 32, 12
    seen = (T + 1) / 2
    matmuls = L * (4 * d * d + 8 * d * d + 4 * d * d) + d * V  # qkv + o, mlp (gate_up 8d^2, down 4d^2), head
    assert flops["softmax"] == 6 * matmuls + L * 12 * d * seen
    assert flops["frozen_qk"] == flops["softmax"] - L * 2 * (2 * d * d)  # no weight gradient for W_Q, W_K
    assert flops["mixing"] == 6 * (matmuls - L * 2 * d * d) + L * 4 * d * seen
    assert flops["learned_mixing"] == flops["mixing"] + L * 2 * d * seen  # and the matrix's gradient
    one = {a: tiny_model(attn=a, n_layer=1).flops_per_token() for a in ATTNS}  # embedding and head + one block
    head = 2 * one["softmax"] - flops["softmax"]  # what a model of no block would cost
    hybrid = tiny_model(attn="sfml", n_layer=4).flops_per_token()
    assert hybrid == pytest.approx(head + sum(one[a] - head for a in ATTNS))  # a hybrid: the sum of its layers


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


@pytest.mark.parametrize("attn", [*ATTNS, "mlf"])
def test_flop_count_matches_the_matmuls_autograd_runs(attn):
    """flops_per_token, which MFU divides by, against every matmul of a real forward and backward: the linears
    exactly (frozen W_Q/W_K without weight gradient); attention as computed (SDPA is no matmul op on CPU;
    MixiT's product is dense, where the count takes the causal half)."""
    B, T = 3, 16
    model = MixiT(MixiTConfig(vocab_size=32, block_size=T, n_layer=3, n_head=2, n_embd=16, attn=attn))
    with MatmulFlops() as recorder:
        model(torch.randint(32, (B, T)), torch.randint(32, (B, T)))[1].backward()
    seen, C, counted, ran = (T + 1) / 2, 16, 0, 0
    for kind in model.config.layer_attn:
        matmuls = 3 if kind == "learned_mixing" else 2 if kind == "mixing" else 0  # A V, A^T dY (, dY V^T)
        counted += 2 * C * seen * (matmuls or 6)
        ran += 2 * C * T * matmuls  # dense
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


GENERATING = [*ATTNS, "smfl"]


@pytest.mark.parametrize("attn", GENERATING)
def test_cached_generation_matches_uncached(attn):
    model = tiny_model(attn=attn, block_size=16, n_layer=4, init_std=0.1).eval()
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


@pytest.mark.parametrize("temperature, top_k", [(0.5, None), (2.0, None), (1.0, 4), (0.5, 4), (1.0, 1)])
def test_sampling_draws_the_softmax_of_the_logits_over_the_temperature_among_the_top_k(temperature, top_k):
    """generate on a model whose logits are set by hand: 4000 draws of one token follow softmax(logits / T) kept to
    the top_k largest logits and renormalized; no draw falls outside the top_k; top_k=1 is the argmax."""
    model, n = tiny_model().eval(), 4000
    logits = -torch.arange(32.0).roll(7) / 4  # token 7 the likeliest, then 8, 9, ...: known, no ties
    model.forward = lambda idx, targets=None, cache=None: (logits.expand(*idx.shape, 32), None)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        drawn = model.generate(torch.zeros(n, 3, dtype=torch.long), 1, temperature=temperature, top_k=top_k)[:, -1]
    share = torch.bincount(drawn, minlength=32) / n
    best = sorted(range(32), key=lambda v: -logits[v])[:top_k or 32]  # brute force: the top_k tokens
    weights = torch.tensor([math.exp(logits[v] / temperature) if v in best else 0.0 for v in range(32)])
    expected = weights / weights.sum()
    assert (share[expected == 0] == 0).all() and (share - expected).abs().max() < 0.025  # ~4 standard deviations


@pytest.mark.parametrize("attn", GENERATING)
def test_generation_past_block_size_reads_the_last_block_size_tokens(attn):
    """Past block_size each new token is the model's answer to the last block_size tokens, cached or not."""
    model = tiny_model(attn=attn, block_size=8, n_layer=2 if attn in ATTNS else len(attn), init_std=0.3).eval()
    idx = torch.randint(0, 32, (2, 3))
    expected = idx
    for _ in range(20):  # brute force: a full forward of the newest window
        expected = torch.cat((expected, model(expected[:, -8:])[0][:, -1].argmax(-1, keepdim=True)), dim=1)
    for use_cache in (True, False):
        assert torch.equal(model.generate(idx, 20, top_k=1, use_cache=use_cache), expected)


@pytest.mark.parametrize("attn", GENERATING)
def test_cache_filled_in_chunks_matches_one_forward(attn):
    """forward with a cache, a few tokens at a time (a chunk after the first is causal within itself)."""
    model = tiny_model(attn=attn, init_std=0.2, n_layer=4).eval()
    idx = torch.randint(0, 32, (2, 12))
    full, _ = model(idx)
    cache = KVCache(model.config.n_layer, 12)
    with torch.no_grad():
        parts = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 5), (5, 6), (6, 12))]
    assert cache.pos == 12 and torch.allclose(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-4)
    assert [k is None for k in cache.k] == [a in ("mixing", "learned_mixing") for a in model.config.layer_attn]


def test_a_learned_mixing_matrix_stays_causal_and_learns():
    """Trained: its causal entries move, the future's get no gradient and stay 0 (weight decay included)."""
    model = tiny_model(attn="learned_mixing")
    before = model.blocks[0].attn.mixing.detach().clone()
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu")
    for _ in range(5):
        idx = torch.randint(0, 32, (4, 12))
        model(idx, idx.roll(-1, 1))[1].backward()
        assert not model.blocks[0].attn.mixing.grad.triu(1).any()
        opt.step()
        opt.zero_grad()
    after = model.blocks[0].attn.mixing.detach()
    assert not after.triu(1).any() and not torch.equal(after.tril(), before.tril())


@pytest.mark.parametrize("attn,classifier", [(a, False) for a in GENERATING] + [("softmax", True), ("mixing", True)])
def test_attention_maps_are_what_each_layer_applies(attn, classifier):
    """Replacing each layer's attention by its map (times the values) reproduces forward."""
    kw = dict(n_classes=3, pad_id=0, causal=False) if classifier else {}
    model = tiny_model(attn=attn, init_std=0.2, n_layer=4, **kw).eval()
    idx = torch.randint(1, 32, (2, 12))
    if classifier:
        idx[:, 9:] = 0
    maps = model.attention_maps(idx)
    assert maps.shape == (4, 2, 4, 12, 12)
    for kind, m in zip(model.config.layer_attn, maps):
        if kind in ("softmax", "frozen_qk"):
            assert torch.allclose(m.sum(-1), torch.ones(2, 4, 12), atol=1e-5)  # probabilities
        assert torch.equal(m, m.tril()) or classifier
    layer = iter(maps)

    def attention_by_map(self, x, cache=None, pad_mask=None):
        B, t, C = x.shape
        v = self.qkv(x)[..., 2 * C:] if self.kind == "softmax" else self.v(x)
        v = v.view(B, t, self.n_head, -1).transpose(1, 2)
        return self.o((next(layer) @ v).transpose(1, 2).reshape(B, t, C))

    expected, _ = model(idx)
    for block in model.blocks:
        block.attn.forward = types.MethodType(attention_by_map, block.attn)
    assert torch.allclose(model(idx)[0], expected, atol=1e-5)


# ===== data.py
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


@pytest.mark.parametrize("name", ["addition_2", "dyck_4", "memorize_4", "modadd_5"])
def test_chance_is_the_best_answer_to_each_place_that_reads_no_input(name):
    """The no-skill floor of tasks whose answer follows from the input alone: for each place k (a row's k-th
    answer) the most frequent answer there, counted row by row (Dyck: the majority answer; addition: the format)."""
    task = data.make_task(name)
    _, y = task.xy(task.split_rows(task.val_split))
    tallies = {}
    for row in y.tolist():
        for k, answer in enumerate(a for a in row if a >= 0):
            tallies.setdefault(k, Counter())[answer] += 1
    best = sum(c.most_common(1)[0][1] for c in tallies.values())
    assert task.chance() == pytest.approx(best / sum(sum(c.values()) for c in tallies.values()))


def recall_guesses(task, row):
    """For each scored answer of a row: the answer and the candidates of the no-skill guesser, from the tokens."""
    if isinstance(task, data.Retrieval):  # every value of the context, not which key it follows
        H, N = task.half, task.n
        values = {row[p + 1] for p in range(0, 2 * N, 2) if H <= row[p] < H + N}
        return [(row[p + 1], values) for p in range(len(row) - 1) if row[p] >= H + N]
    if isinstance(task, data.MQAR):  # the values of the keys not yet queried
        pairs = {row[p]: row[p + 1] for p in range(0, 2 * task.n, 2) if row[p] != task.PAD}
        queries = range(2 * len(pairs), 4 * len(pairs), 2)
        return [(row[q + 1], {pairs[row[p]] for p in queries if p >= q}) for q in queries]
    n = int(task.segment_lengths(np.array([row]))[0])  # induction: the segment's tokens not yet repeated
    return [(row[p + 1], set(row[:n]) - set(row[n:p + 1])) for p in range(n, 2 * n - 1)]


@pytest.mark.parametrize("name", ["retrieval_3", "mqar_3", "mqar_5", "induction_5"])
def test_recall_chance_is_a_guess_among_the_candidates_left(name):
    """Recall without matching: a uniform guess among the values of the context (retrieval), those of the keys not
    yet queried (MQAR), the segment's tokens not yet repeated (induction); brute force over the test rows."""
    task = data.make_task(name)
    shares = [1 / len(candidates) for row in task.test.tolist() for answer, candidates in recall_guesses(task, row)
              if answer in candidates or pytest.fail(f"{answer} not among {candidates}")]
    assert len(shares) == (task.scored(task.test)).sum()
    assert task.chance() == pytest.approx(np.mean(shares))


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


@pytest.mark.parametrize("name", ["addition_2", "dyck_8", "retrieval_2", "induction_4", "mqar_1", "mqar_2"])
def test_training_stream_never_repeats_the_test_set(name):
    task = data.make_task(name)
    test = {tuple(r) for r in task.test}
    for step in range(20):
        x, y = task.get_batch("train", 256, seed=[0, step, 0])
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


@pytest.mark.parametrize("name, message", [
    ("nope", "unknown task 'nope'; valid: addition_N"), ("dyck_x", "dyck_N takes an integer N >= 4"),
    ("modadd_1", "modadd_N takes an integer N >= 2"), ("retrieval_200", "retrieval_N needs 2N <= 256"),
])
def test_bad_task_names_are_one_clear_line(name, message):
    with pytest.raises(ValueError, match=message):
        data.make_task(name)


@pytest.mark.parametrize("base", data.TASKS)
def test_every_task_trains_from_its_smallest_n(base):
    """At its smallest N a task's training stream still holds sequences outside its test set (below it, as dyck_3's,
    almost none: training could not draw a batch); one less is refused by name."""
    smallest = data.TASKS[base][2]
    x, y = data.make_task(f"{base}_{smallest}").get_batch("train", 64)
    assert len(x) == 64 and (y >= 0).any()
    with pytest.raises(ValueError, match=f"{base}_N takes an integer N >= {smallest}"):
        data.make_task(f"{base}_{smallest - 1}")


def brute_mqar(task, x, y):
    """Checks the layout of one row with plain loops and returns its answers."""
    V, PAD = task.VALUE, task.PAD
    row = list(x) + [max(int(y[-1]), PAD)]  # the last token: the last answer when n = N, else padding
    n = sum(1 for t in row if t != PAD) // 4
    assert 1 <= n <= task.n and len(row) == 4 * task.n
    assert all(t != PAD for t in row[:4 * n]) and all(t == PAD for t in row[4 * n:])  # padding after
    value_of = {}
    for i in range(n):
        key, value = row[2 * i], row[2 * i + 1]
        assert 1 <= key < V <= value < 2 * V and key not in value_of  # distinct keys
        value_of[key] = value
    queries, answers = [], []
    for i in range(n):
        key, answer = row[2 * n + 2 * i], row[2 * n + 2 * i + 1]
        assert key in value_of and answer == value_of[key]  # asks a key present earlier; the value after it
        queries.append(key)
        answers.append(value_of[key])
    assert sorted(queries) == sorted(value_of)  # every key once
    assert [p for p in range(len(y)) if y[p] >= 0] == [2 * n + 2 * i for i in range(n)]  # scored: the queries
    return answers


@pytest.mark.parametrize("name", ["mqar_1", "mqar_4", "mqar_16", "mqar_255"])
def test_mqar_labels_by_brute_force(name):
    task = data.make_task(name)
    for split in ("train", "test"):
        x, y = task.get_batch(split, 300, seed=[1, 2, 3])
        assert x.shape == (300, task.block_size) == y.shape and x.dtype == torch.long
        assert 0 <= x.min() and x.max() < task.vocab_size == 512
        for xr, yr in zip(x.numpy(), y.numpy()):
            assert list(yr[yr >= 0]) == brute_mqar(task, xr, yr)


def test_mqar_draws_every_pair_count_key_and_query_order():
    task = data.make_task("mqar")
    assert task.name == "mqar_16" and task.block_size == 63
    pairs = (task.test != 0).sum(1) // 4
    assert set(pairs) == set(range(1, 17)) and 200 < np.bincount(pairs)[1:].min()  # n ~ U{1..16}: 250 each
    assert set(task.test[:, 0:32:2].ravel()) == set(range(256))  # every key (and PAD) appears
    asked_in_order = [list(r[2 * n:4 * n:2]) == list(r[:2 * n:2]) for r, n in zip(task.test, pairs) if n == 3]
    assert 0.1 < np.mean(asked_in_order) < 0.25  # 3 keys are queried in their own order 1/6 of the time
    assert [task.token_str(t) for t in (0, 1, 255, 256, 511)] == ["_", "k1", "k255", "0", "255"]


@pytest.mark.parametrize("name, message", [
    ("mqar_0", r"^task 'mqar_0': mqar_N takes an integer N >= 1$"),
    ("mqar_256", r"^mqar_N needs distinct keys, N <= 255, got N=256$"),
    ("mqar_300", r"^mqar_N needs distinct keys, N <= 255, got N=300$"),
])
def test_bad_mqar_names_are_one_clear_line(name, message):
    with pytest.raises(ValueError, match=message):
        data.make_task(name)


# ----------------------------------------------------------------------------- readers of prepared corpora


def test_training_needs_no_preparation_code():
    proc = subprocess.run([sys.executable, "-c", "import sys, data, train; assert 'prepare' not in sys.modules"],
                          cwd=HERE, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert set(data.CORPUS_TASKS) == set(prepare.SOURCES)  # every corpus prepare.py writes reads by its name


def test_unprepared_corpus_names_the_command(tmp_path):
    with pytest.raises(ValueError, match=r"is not prepared: run `python prepare\.py wikitext2` \(offline: add --src"):
        data.make_task("wikitext2", data_dir=str(tmp_path))


def test_truncated_or_corrupt_data_files_give_one_line(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question. " * 40)
    folder, _ = prepare.prepare("text", src=str(text), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    make = lambda: data.make_task("text", 16, str(tmp_path / "data"))
    bin_path = os.path.join(folder, "train.bin")
    blob = open(bin_path, "rb").read()
    open(bin_path, "wb").write(blob[:len(blob) // 2])
    with pytest.raises(ValueError, match=r"meta\.json says \d+; prepare it again: python prepare\.py text$"):
        make()
    open(os.path.join(folder, "meta.json"), "w").write("{not json")
    with pytest.raises(ValueError, match=r"meta\.json is unreadable .*prepare it again: python prepare\.py text"):
        make()
    assert run_train(tmp_path / "out", "--task=text", "--attn=softmax", f"--data_dir={tmp_path / 'data'}",
                     "--block_size=16", "--max_iters=1") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "meta.json is unreadable" in err and not (tmp_path / "out").exists()


def test_classifier_longer_than_prepared_names_the_command(sst2):
    with pytest.raises(ValueError, match=r"kept by `python prepare\.py sst2`; prepare again with --max_len=65"):
        data.make_task("sst2", 65, str(sst2))


def test_short_wikitext2_run_lowers_validation_loss(wikitext2, tmp_path):
    assert run_train(tmp_path, "--task=wikitext2", f"--data_dir={wikitext2}", "--attn=softmax", "--n_layer=1",
                     "--n_embd=32", "--n_head=2", "--block_size=16", "--batch_size=8", "--max_iters=40",
                     "--eval_interval=20", "--eval_iters=4", "--learning_rate=1e-2", "--warmup_iters=5") == 0
    metrics = read_metrics(tmp_path)
    assert metrics[-1]["val_loss"] < min(metrics[0]["val_loss"], np.log(50257) - 3), metrics
    assert metrics[-1]["val_ppl"] == pytest.approx(np.exp(metrics[-1]["val_loss"]))


def test_short_sst2_run_beats_chance(sst2, tmp_path):
    assert run_train(tmp_path, "--task=sst2", f"--data_dir={sst2}", "--attn=softmax", "--n_layer=1", "--n_embd=32",
                     "--n_head=2", "--block_size=32", "--batch_size=64", "--max_iters=100", "--eval_interval=100",
                     "--learning_rate=3e-3", "--warmup_iters=10") == 0
    majority = max(np.mean(np.load(sst2 / "sst2" / "val_y.npy")), 0.5)  # 444 of 872 dev sentences are positive
    assert read_metrics(tmp_path)[-1]["val_acc"] > majority + 0.1


# ----------------------------------------------------------------------------- the induction-head probe


def test_prefix_matching_score_on_hand_built_patterns():
    s = 16
    T = 2 * s
    induction = torch.eye(T)  # attend to yourself in the first copy
    for i in range(s, T):
        induction[i] = 0.0
        induction[i, i - s + 1] = 1.0  # the token after the earlier copy of token i
    uniform = torch.ones(T, T).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert data.prefix_matching_score(induction, s).item() == pytest.approx(1.0)
    assert data.prefix_matching_score(uniform, s).item() < 0.1
    batched = data.prefix_matching_score(torch.stack([induction, uniform, torch.eye(T)]).view(3, 1, T, T), s)
    assert batched.shape == (3, 1) and batched[2].item() == 0.0  # attending to itself scores 0


def test_pattern_residuals_are_0_in_the_span_of_the_heads_and_1_outside_it():
    """The probe's residual: 0 for a pattern that is a head (or a mix of heads), 1 for one orthogonal to every head,
    and for a part of both, the share outside the span."""
    T = 10
    patterns = data.named_patterns(T)
    heads = torch.stack([patterns["prefix mean"], 2 * patterns["identity"] - patterns["first token"]])
    res = data.pattern_residuals(heads, patterns)
    assert res["prefix mean"] < 1e-9 and res["identity"] > 0.1  # a head; the identity only with the first token
    assert data.pattern_residuals(torch.stack([heads[1], patterns["first token"]]), patterns)["identity"] < 1e-9
    g = torch.Generator().manual_seed(0)
    other = torch.randn(T, T, generator=g).tril().double()
    flat = heads.double().flatten(1).T  # (T*T, 2)
    other = other - (flat @ torch.linalg.pinv(flat) @ other.flatten()).view(T, T)  # orthogonal to both heads
    assert data.pattern_residuals(heads, {"other": other})["other"] == pytest.approx(1.0, abs=1e-9)
    half = heads[0].double() + other / other.norm() * heads[0].double().norm()  # as much outside the span as in it
    assert data.pattern_residuals(heads, {"half": half})["half"] == pytest.approx(math.sqrt(0.5), abs=1e-9)
    batch = data.pattern_residuals(torch.stack([heads, heads.flip(0)]), patterns)["prefix mean"]  # per input
    assert batch.shape == (2,) and (batch < 1e-9).all()
    names = {n: p for n, p in patterns.items()}
    assert all(torch.allclose(p.sum(-1), torch.ones(T)) and torch.equal(p, p.tril()) for p in names.values())


@pytest.mark.parametrize("name, asked", [("mqar_4", 0), ("retrieval_4", 4), ("induction_6", 0)])
def test_recall_score_finds_the_value_after_each_asked_key(monkeypatch, name, asked):
    """A head attending from every answer's position to the token after the first occurrence of the key it asks
    (the token, less `asked`) scores 1; a head attending to the key itself, or any other, 0."""
    task = data.make_task(name)
    model = tiny_model(vocab_size=task.vocab_size, block_size=task.block_size)
    T = task.block_size
    _, y = task.xy(task.test[:8])

    def perfect_head(idx):
        maps = torch.zeros(2, len(idx), 4, T, T)
        maps[0, :, 0] = torch.eye(T)  # a distractor: each position to itself
        for b, row in enumerate(idx.tolist()):
            for t in range(T):
                if y[b, t] >= 0:
                    key = row.index(row[t] - asked)
                    maps[1, b, 2, t, key + 1] = 1.0  # layer 1, head 2
                    maps[1, b, 3, t, key] = 1.0  # off by one: the key, not its value
        return maps

    monkeypatch.setattr(model, "attention_maps", perfect_head)
    scores = data.recall_scores(model, task, n_seqs=8)
    assert scores.shape == (2, 4) and scores[1, 2] == 1.0 and scores.sum() == 1.0


def test_recall_scores_refuse_a_task_without_earlier_keys():
    with pytest.raises(ValueError, match=r"^recall_scores: addition_2 scores a position whose key does not occur"):
        data.recall_scores(tiny_model(vocab_size=31), data.make_task("addition_2"))


@pytest.mark.parametrize("attn", ATTNS)
def test_induction_scores_shape_and_no_side_effects(attn):
    model = tiny_model(attn=attn, block_size=16).train()
    rng = torch.get_rng_state()
    scores = data.induction_scores(model, n_seqs=8)
    assert scores.shape == (2, 4) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(scores, data.induction_scores(model, n_seqs=8))  # seeded: the same sequences
    if attn == "mixing":  # input-independent: the score of the fixed matrices themselves
        direct = torch.stack([data.prefix_matching_score(b.attn.mixing[:, :16, :16], 8) for b in model.blocks])
        assert torch.allclose(scores, direct, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())
    data.induction_scores(model.eval(), n_seqs=2)
    assert not model.training  # a model in eval mode stays so


def test_probe_restores_the_mode_when_the_model_fails():
    model = tiny_model().train()
    with pytest.raises(ValueError, match="seg_len"):
        data.induction_scores(model, seg_len=7)
    model.attention_maps = lambda idx: 1 / 0
    with pytest.raises(ZeroDivisionError):
        data.induction_scores(model, n_seqs=2)
    assert model.training


def test_repeated_tokens_are_distinct_repeats_without_padding():
    cfg = mixit_config({**TINY, "block_size": 40, "n_classes": 2, "pad_id": 5, "causal": False})
    idx = data.repeated_tokens(cfg, 50, seed=3)
    assert idx.shape == (50, 40) and torch.equal(idx[:, :20], idx[:, 20:]) and (idx != 5).all()
    assert all(len(set(row[:20].tolist())) == 20 for row in idx)
    with pytest.raises(ValueError, match="seg_len"):
        data.repeated_tokens(cfg, 1, seg_len=21)


def test_induction_score_is_the_best_heads(monkeypatch):
    """induction_metrics on attention set by hand, on a segment of 3 and its repeat (induction_4): in layer 0 a head
    with half its weight on the token after the earlier copy (score 0.5), in layer 1 a uniform causal head (the mean
    of 1/(i+1) over i = 3, 4, 5), every other head on itself (0). The score is the best head's, a layer's its best."""
    task = data.make_task("induction_4")
    model = tiny_model(vocab_size=task.vocab_size, block_size=task.block_size)

    def maps(idx):
        n, T = idx.shape
        eye, uniform = torch.eye(T), torch.ones(T, T).tril()
        uniform, half = uniform / uniform.sum(-1, keepdim=True), eye / 2
        for i in range(T // 2, T):
            half[i, i - T // 2 + 1] = 0.5
        return torch.stack([torch.stack([eye, half, eye, eye]), torch.stack([eye, eye, uniform, eye])])[:, None] \
            .expand(2, n, 4, T, T)

    monkeypatch.setattr(model, "attention_maps", maps)
    scores = data.induction_metrics(model, task, common.setup("cpu", "float32"))
    assert scores["induction_score"] == pytest.approx(0.5)
    assert scores["induction_layers"] == pytest.approx([0.5, (1 / 4 + 1 / 5 + 1 / 6) / 3])


class Predicts(torch.nn.Module):
    """A stand-in model whose predictions are answer(x) (B, T), as logits 3 there and 0 elsewhere: the loss of a right
    answer is log(e^3 + V - 1) - 3, of a wrong one log(e^3 + V - 1)."""

    def __init__(self, vocab_size, answer):
        super().__init__()
        self.vocab_size, self.answer = vocab_size, answer

    def forward(self, x, targets=None):
        return 3.0 * F.one_hot(self.answer(x), self.vocab_size).float(), None


def test_evaluation_of_a_batch_built_by_hand():
    """evaluate on 4 rows: both answers right; 2 of 3 right; its one answer wrong; no answer. Exact match counts a row
    only when all its answers are right, among the rows with answers; each score by hand."""
    y = torch.tensor([[-1, 2, 3, -1], [-1, 1, 4, 0], [-1, -1, 2, -1], [-1, -1, -1, -1]])
    pred = torch.tensor([[0, 2, 3, 0], [0, 1, 4, 1], [0, 0, 1, 0], [1, 1, 1, 1]])
    task = types.SimpleNamespace(block_size=4, eval_batches=lambda split, size, rank, world: iter([(pred, y)]))
    got = data.evaluate(Predicts(5, lambda x: x), task, "test", 8, common.setup("cpu", "float32"))  # x: pred
    right, wrong = math.log(math.exp(3) + 4) - 3, math.log(math.exp(3) + 4)
    assert got["loss"] == pytest.approx((4 * right + 2 * wrong) / 6) and got["acc"] == pytest.approx(4 / 6)
    assert got["exact"] == pytest.approx(1 / 3)
    assert got["acc_pos"] == pytest.approx([2 / 3, 1, 0])  # a row's 1st, 2nd and 3rd answers
    # The row with no answer alone: no token scored, no loss (nan, never the best).
    task.eval_batches = lambda split, size, rank, world: iter([(pred[3:], y[3:])])
    nothing = data.evaluate(Predicts(5, lambda x: x), task, "test", 8, common.setup("cpu", "float32"))
    assert math.isnan(nothing["loss"]) and nothing["acc"] == 0 and nothing["exact"] == 0


class NoFloat64(torch.overrides.TorchFunctionMode):
    """A stand-in for MPS, which has no float64: any op that makes a float64 tensor raises."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dtype == torch.float64:
            raise TypeError(f"{func.__name__} made a float64 tensor, which MPS cannot hold")
        return out


@pytest.mark.parametrize("attn", ["softmax", "mixing"])
def test_evaluation_on_mps_keeps_its_totals_in_float32_and_agrees(attn):
    """On an MPS device evaluate makes no float64 tensor (a CPU Env named mps, under NoFloat64), and its scores agree
    with the float64 totals elsewhere: an algorithmic task, and a classifier's margin."""
    class MPS(common.Env):
        device_type = "mps"

    cpu, mps = common.setup("cpu", "float32"), MPS(torch.device("cpu"), torch.float32)
    task, model = data.make_task("addition_3"), tiny_model(vocab_size=31, block_size=12, attn=attn).eval()
    table = torch.tensor([[0.0, 1.0], [0.0, 3.0], [1.0, 0.0], [2.0, 2.0]])
    batch = (torch.arange(4), torch.tensor([1, 1, 0, 1]))
    classifier = types.SimpleNamespace(block_size=1, eval_batches=lambda *a: iter([batch]))
    for m, t in ((model, task), (lambda x: (table[x], None), classifier)):
        want = data.evaluate(m, t, "test", 500, cpu)
        with NoFloat64():
            got = data.evaluate(m, t, "test", 500, mps)
        assert got.keys() == want.keys() and all(np.allclose(got[k], want[k], equal_nan=True) for k in want)


def test_modular_addition_reports_training_accuracy_on_the_training_split():
    """modadd_5 (23 training pairs, 2 test pairs) and a model that knows the sums of the first 10 training pairs only,
    answering every other pair wrong: train_acc 10/23, val_acc 0."""
    task = data.make_task("modadd_5")
    known = {(a, b): c for a, b, c in task.split_rows("train")[:10].tolist()}
    answer = lambda x: torch.tensor([[0, known.get((a, b), (a + b + 1) % 5)] for a, b in x.tolist()])
    got = data.eval_metrics(Predicts(5, answer), task, 8, common.setup("cpu", "float32"))
    assert len(task.split_rows("train")) == 23 and got["train_acc"] == pytest.approx(10 / 23) and got["val_acc"] == 0


# the floors: what loss and accuracy read with the least skill


def test_the_bigram_floor_is_the_counted_bigrams_loss(tmp_path):
    """val_loss_floor of text: -log (c(a, b) + 1) / (c(a) + V), counted on train, over the pairs the models are scored
    on: eval_iters batches of windows of the validation split, the same tokens at each evaluation."""
    (tmp_path / "a.txt").write_text("abracadabra, a cab; " * 40 + "zebra and bread " * 7)
    prepare.prepare("text", src=str(tmp_path / "a.txt"), tokenizer="bytes", out_dir=str(tmp_path), name="tiny")
    task = data.make_task("tiny", 8, str(tmp_path), eval_iters=1)
    train_, val = (task.tokens(split).tolist() for split in ("train", "val"))
    V, pairs, contexts = task.meta["vocab_size"], Counter(zip(train_, train_[1:])), Counter(train_[:-1])
    bigram = lambda a, b: -math.log((pairs[a, b] + 1) / (contexts[a] + V))
    starts = np.random.default_rng(data.TEST_SEED).integers(0, len(val) - 8, 4)  # 1 batch of 4 windows
    brute = [bigram(val[s + t], val[s + t + 1]) for s in starts for t in range(8)]
    assert V == 257 and len(set(brute)) > 5
    assert task.loss_floor(4) == pytest.approx(sum(brute) / len(brute), rel=1e-12)
    assert run_train(tmp_path / "out", "--task=tiny", f"--data_dir={tmp_path}", "--n_layer=0", "--attn=softmax",
                     "--block_size=8", "--max_iters=2", "--eval_interval=2", "--batch_size=4", "--eval_iters=1") == 0
    final = read_metrics(tmp_path / "out")[-1]  # a model of 0 layers: no attention to probe for induction heads
    assert final["val_loss_floor"] == pytest.approx(task.loss_floor(4)) and "induction_score" not in final


def test_a_classifiers_floor_is_the_class_priors_loss_and_n_layer_0_a_bag_of_words(tmp_path):
    (tmp_path / "src").mkdir()
    for name, labels in (("train.tsv", [1, 1, 1, 0] * 16), ("dev.tsv", [1, 0, 0, 0, 1])):
        rows = "".join(f"{'a fine' if y else 'a dull'} film, take {i}\t{y}\n" for i, y in enumerate(labels))
        (tmp_path / "src" / name).write_text("sentence\tlabel\n" + rows)
    prepare.prepare("sst2", src=str(tmp_path / "src"), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    task = data.make_task("sst2", 0, str(tmp_path / "data"))
    assert task.loss_floor(2) == pytest.approx(-(2 * math.log(0.75) + 3 * math.log(0.25)) / 5)  # train's shares on dev
    assert task.chance() == pytest.approx(0.6)
    assert run_train(tmp_path / "out", "--task=sst2", f"--data_dir={tmp_path / 'data'}", "--n_layer=0",
                     "--attn=softmax", "--max_iters=4", "--eval_interval=2", "--batch_size=8") == 0
    final = read_metrics(tmp_path / "out")[-1]
    assert (final["val_loss_floor"], final["val_acc_chance"]) == (pytest.approx(task.loss_floor(8)), pytest.approx(0.6))
    x, _ = task.get_batch("val", 5)
    shuffled = x.clone()
    for row, real in zip(shuffled, x != task.pad_id):
        row[real] = row[real][torch.randperm(int(real.sum()))]
    logits = lambda n, idx: MixiT(train.model_config(dict(train.DEFAULTS, n_layer=n, attn="softmax"), task))(idx)[0]
    assert torch.allclose(logits(0, shuffled), logits(0, x), atol=1e-6)  # no layers: a bag of words
    assert not torch.allclose(logits(2, shuffled), logits(2, x), atol=1e-6)  # attention reads the order
    fresh = MixiT(mixit_config(load_ckpt(tmp_path / "out")["model_args"]))  # the seed's model before training
    at_init = data.evaluate(fresh.eval(), task, "val", 8, common.setup("cpu", "float32"))["margin_std"]
    assert final["val_margin_std_init"] == pytest.approx(at_init) != final["val_margin_std"]


def test_a_classifiers_margin_spread_is_the_std_of_its_log_odds():
    """evaluate's margin_std, the spread over rows of logit 1 - logit 0, by hand: 4 rows of margins 1, 3, -1, 0; a
    model that gives every row the same log-odds (a constant predictor, whatever its bias) has none."""
    for table, spread in ((torch.tensor([[0.0, 1.0], [0.0, 3.0], [1.0, 0.0], [2.0, 2.0]]), np.std([1, 3, -1, 0])),
                          (torch.tensor([[0.0, 1.1], [2.0, 3.1], [-1.0, 0.1], [0.5, 1.6]]), 0.0)):
        rows = [(torch.arange(4), torch.tensor([1, 1, 0, 1]))]
        task = types.SimpleNamespace(block_size=1, eval_batches=lambda *a: iter(rows))
        got = data.evaluate(lambda x: (table[x], None), task, "val", 8, common.setup("cpu", "float32"))
        assert got["margin_std"] == pytest.approx(spread, abs=1e-6) and got["acc"] == 0.75


# ===== prepare.py
# ----------------------------------------------------------------------------- tokenizers


@needs_bpe
def test_offline_gpt2_bpe(monkeypatch):
    tok = data.Tokenizer("gpt2", BPE_DIR)
    assert tok.encode_batch(["Hello world"])[0] == [15496, 995]
    assert (tok.n_vocab, tok.eot) == (50257, 50256)
    assert tok.decode(tok.encode_batch(["naïve café <unk> @-@"])[0]) == "naïve café <unk> @-@"
    monkeypatch.setenv("MIXIT_BPE_DIR", BPE_DIR)
    assert data.Tokenizer("gpt2").encode_batch(["Hello world"])[0] == [15496, 995]


def test_byte_tokenizer_round_trip():
    tok = data.Tokenizer("bytes")
    assert (tok.n_vocab, tok.eot) == (257, 256)
    assert tok.encode_batch(["é!"])[0] == [195, 169, 33]
    assert tok.decode(tok.encode_batch(["naïve\n"])[0] + [tok.eot]) == "naïve\n"


def test_encode_examples_truncates_pads_and_drops_empty_texts():
    x, keep = data.encode_examples(data.Tokenizer("bytes"), ["abcdef", "", "é"], 4)
    assert x.dtype == np.uint16 and x.tolist() == [[97, 98, 99, 100], [256] * 4, [195, 169, 256, 256]]
    assert keep.tolist() == [True, False, True]


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
    err = one_line_exit_2(run_script("prepare.py", ["text", f"--src={tmp_path / 'a.txt'}", f"--out_dir={out}"],
                                     offline_env(tmp_path)))
    for hint in ("--bpe_dir=", "MIXIT_BPE_DIR", "TIKTOKEN_CACHE_DIR", "--tokenizer=bytes"):
        assert hint in err
    assert not out.exists()


# ----------------------------------------------------------------------------- preparation


def test_prepared_bins_decode_to_their_source(tmp_path):
    docs = {"a.txt": "First document.\nÜnïcödé line, then a blank one\n\n", "b/c.txt": "Second = one =\n" * 40}
    for name, text in docs.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text, encoding="utf-8")
    tokenizers = ["bytes"] + (["gpt2"] if os.path.isdir(BPE_DIR) else [])
    for tokenizer in tokenizers:
        folder, meta = prepare.prepare("text", src=str(tmp_path / "src"), tokenizer=tokenizer, bpe_dir=BPE_DIR,
                                       out_dir=str(tmp_path / "data"), name=f"mine-{tokenizer}")
        bins = [os.path.join(folder, f"{split}.bin") for split in ("train", "val")]
        stream = np.concatenate([np.fromfile(path, dtype=np.uint16) for path in bins])
        tok = data.Tokenizer(tokenizer, BPE_DIR)
        assert len(stream) == sum(meta["tokens"].values()) and meta["tokens"]["train"] == int(0.9 * len(stream))
        documents = np.split(stream, np.flatnonzero(stream == tok.eot) + 1)[:-1]  # each ends in its EOT
        assert [tok.decode(d) for d in documents] == [docs["a.txt"], docs["b/c.txt"]]  # sorted file order
        assert meta["source_files"]["a.txt"]["sha256"] == hashlib.sha256(docs["a.txt"].encode()).hexdigest()
        assert meta["vocab_size"] == tok.n_vocab and meta["tokenizer"] == tokenizer
        assert sorted(os.listdir(folder)) == ["meta.json", "train.bin", "val.bin"]  # no .tmp left
        task = data.make_task(f"mine-{tokenizer}", 8, str(tmp_path / "data"))
        x, y = task.get_batch("train", 4, seed=1)
        assert x.shape == (4, 8) and (x[:, 1:] == y[:, :-1]).all()


def test_download_checks_the_checksum_and_keeps_nothing_bad(tmp_path):
    blob = b"some corpus\n" * 1000
    (tmp_path / "src.txt").write_bytes(blob)
    url, dest = (tmp_path / "src.txt").as_uri(), tmp_path / "got.txt"
    prepare.download(url, str(dest), sha256=hashlib.sha256(blob).hexdigest())
    assert dest.read_bytes() == blob
    with pytest.raises(ValueError, match="not the recorded"):
        prepare.download(url, str(tmp_path / "bad.txt"), md5="0" * 32)
    with pytest.raises(ValueError, match="downloading .* failed"):
        prepare.download((tmp_path / "absent.zip").as_uri(), str(tmp_path / "absent.zip"), md5="0" * 32)
    assert sorted(os.listdir(tmp_path)) == ["got.txt", "src.txt"]  # no .part, no bad file


def test_fetch_downloads_and_opens_the_archive(tmp_path):
    texts = {s: f" = {s.title()} = \n \n Text of {s} .\n" for s in ("train", "valid", "test")}
    with zipfile.ZipFile(tmp_path / "wikitext-2-v1.zip", "w") as z:
        for s, text in texts.items():
            z.writestr(f"wikitext-2/wiki.{s}.tokens", text)
    archive, folder = tmp_path / "wikitext-2-v1.zip", str(tmp_path / "data" / "wikitext2")
    url = archive.as_uri()
    spec = dict(prepare.SOURCES["wikitext2"], url=url, md5=hashlib.md5(archive.read_bytes()).hexdigest())
    files, origin = prepare.fetch("wikitext2", spec, None, folder)
    # fetch gives the files by split: WikiText's valid is val
    by_split = {"train": texts["train"], "val": texts["valid"], "test": texts["test"]}
    assert origin == url and {r: blob.decode() for r, (_, blob) in files.items()} == by_split
    assert os.listdir(tmp_path / "data" / "wikitext2" / "raw") == ["wikitext-2-v1.zip"]
    files, origin = prepare.fetch("wikitext2", dict(spec, url="file:///nowhere"), None, folder)
    assert origin.endswith("raw") and len(files) == 3  # the copy in raw/ is used, nothing downloaded
    # an archive that lacks a split's file is one clear error, and leaves no folder behind
    short = tmp_path / "short.zip"
    with zipfile.ZipFile(short, "w") as z:
        z.writestr("wiki.train.tokens", texts["train"])
    short_spec = dict(spec, url=short.as_uri(), md5=hashlib.md5(short.read_bytes()).hexdigest())
    with pytest.raises(ValueError, match="short.zip lacks some of the files wikitext2 needs"):
        prepare.fetch("wikitext2", short_spec, None, str(tmp_path / "new" / "wikitext2"))
    assert not (tmp_path / "new").exists()


def test_missing_corpus_is_one_line_exit_2(tmp_path):
    out = tmp_path / "data"
    err = one_line_exit_2(run_script("prepare.py", ["wikitext2", "--tokenizer=bytes", f"--out_dir={out}"],
                                     offline_env(tmp_path)))
    for hint in ("wiki.train.tokens or train.txt", "valid.txt", "wikitext-2-v1.zip", f"{out}/wikitext2/raw/", "--src="):
        assert hint in err
    assert not out.exists()  # nothing that could later look prepared


@pytest.mark.parametrize("argv, message", [
    ([], "usage: python prepare.py DATASET [--key=value]; datasets: wikitext103"),
    (["--src=x"], "usage: python prepare.py DATASET"),
    (["nope"], "unknown dataset 'nope'; valid: wikitext103"),
    (["wikitext2", "--foo=1"], "unknown option --foo; valid: --bpe_dir, --max_len, --name, --out_dir, --src"),
    (["wikitext2", "TMP"], "unexpected argument"),
    (["wikitext2", "--src"], "--src needs a value"),
    (["text", "--src=x", "--max_len=big"], "--max_len=big: expected a int"),
    (["text", "--src=x", "--max_len=0"], "max_len=0 in --max_len: must be positive"),
    (["text", "--src=x", "--tokenizer=gpt3"], "valid: gpt2, bytes"),
    (["text"], "text needs --src=PATH"),
    (["text", "--src=/no/such/file"], "does not exist"),
    (["text", "--src=.", "--name=dyck_3"], "would read as the algorithmic task"),
    (["text", "--src=.", "--name=../up"], "a folder name of letters"),
    (["sst2", "--src=TMP", "--tokenizer=bytes"], "lacks some of the files sst2 needs: train.tsv, dev.tsv"),
])
def test_prepare_bad_input_is_one_clear_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)  # the default --out_dir=data would land here
    assert cli(prepare.main, [a.replace("TMP", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert os.listdir(tmp_path) == []


def test_prepare_command_line_writes_the_corpus(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("hello there, " * 50)
    argv = ["text", f"--src={tmp_path / 'a.txt'}", "--tokenizer=bytes", f"--out_dir={tmp_path / 'data'}",
            "--name=greetings"]
    assert cli(prepare.main, argv) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'data' / 'greetings'}: train 585 tokens, val 66 tokens " \
                                      f"(bytes, vocab 257)\n"
    with pytest.raises(ConfigError, match="unknown option --colour"):
        prepare.main(["text", "--colour=red"])


def test_unreadable_source_is_one_clear_line_and_leaves_nothing(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.tsv").write_text("label\tsentence\n1\ta fine film\n")
    (tmp_path / "src" / "dev.tsv").write_text("label\tsentence\n7\ta seven-star film\n")
    run = lambda: prepare.prepare("sst2", src=str(tmp_path / "src"), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"dev.tsv has labels outside the two classes \(label 0 negative"):
        run()
    (tmp_path / "src" / "dev.tsv").write_bytes(b"label\tsentence\n1\t\xff\n")
    with pytest.raises(ValueError, match="dev.tsv is not a sst2 file .UnicodeDecodeError.*expected UTF-8 tab-sep"):
        run()
    assert not (tmp_path / "data").exists()


@needs("yelp_reviews_stars", "dev.csv")
def test_yelp_star_ratings_become_polarity(tmp_path):
    folder, meta = prepare.prepare("yelp_polarity", src=os.path.join(SHARED, "yelp_reviews_stars"),
                                   tokenizer="bytes", out_dir=str(tmp_path), max_len=32)
    assert meta["examples"] == {"train": 4484, "val": 4455}  # 3-star reviews dropped
    assert (meta["source_files"]["train"]["file"], meta["source_files"]["val"]["file"]) == ("dev.csv", "test.csv")
    assert "3 dropped" in meta["label_rule"]
    assert np.load(os.path.join(folder, "train_y.npy")).sum() == 3299
    assert np.load(os.path.join(folder, "train_x.npy")).shape == (4484, 32)


def test_wikitext2_layout_and_splits(wikitext2):
    meta = json.loads((wikitext2 / "wikitext2" / "meta.json").read_text())
    files = meta["source_files"]
    assert {s: f["file"] for s, f in files.items()} == {"train": "train.txt", "val": "valid.txt", "test": "test.txt"}
    assert files["val"]["sha256"] == "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"
    assert 258_659 <= meta["tokens"]["val"] <= 258_659 + 100  # the README's whole-file count, plus one EOT an article
    task = data.make_task("wikitext2", 64, str(wikitext2), eval_split="test")
    scored = sum(int((y >= 0).sum()) for _, y in task.eval_batches("test", 32))
    assert scored == meta["tokens"]["test"] - 1  # the whole test stream, every token predicted once
    assert meta["lines"] == {"train": 1500, "val": 3760, "test": 4358}  # its lines, each a row for --lm_rows=lines
    lines = data.make_task("wikitext2", 64, str(wikitext2), eval_split="test", lm_rows="lines")
    assert lines.starts("test")[-1] == meta["line_tokens"]["test"] and len(lines.starts("test")) == 4358 + 1


def test_lines_are_rows_cut_to_the_context_padded_and_never_scored_past_their_end(tmp_path):
    """--lm_rows=lines on a hand-made WikiText in bytes: each line a row (a blank line an empty row), cut to T = 8
    tokens and padded with the end-of-text token (256); y is the next token inside the row, -1 past it. The model's
    loss is the mean over those scored tokens alone: padding changes nothing."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        (src / name).write_text(" = A = \n \n ab\n a long line .\n\n")
    prepare.prepare("wikitext2", src=str(src), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    task = data.make_task("wikitext2", 8, str(tmp_path / "data"), 2, "test", "lines")
    (x, y), = task.eval_batches("test", 8)  # the test split: every line, in order
    rows = [b" = A = \n", b"", b" ab\n", b" a long ", b""]  # the 4th cut at 8 tokens
    assert x.tolist() == [list(r) + [256] * (8 - len(r)) for r in rows]
    assert y.tolist() == [list(r[1:]) + [-1] * (8 - max(len(r) - 1, 0)) for r in rows]
    model = MixiT(MixiTConfig(vocab_size=task.vocab_size, block_size=8, n_layer=1, n_embd=16))
    logits = model(x)[0]
    by_hand = np.mean([F.cross_entropy(logits[i, t], y[i, t]).item() for i, t in zip(*np.nonzero(y.numpy() >= 0))])
    assert model(x, y)[1].item() == pytest.approx(by_hand, rel=1e-5)
    padded = torch.where(x == 256, torch.randint_like(x, 256), x)  # other tokens in the padding
    assert model(padded, y)[1].item() == pytest.approx(by_hand, rel=1e-5)


def test_a_lines_run_counts_the_tokens_it_scored(tmp_path, capsys):
    """A language model's tokens and FLOPs count the tokens it predicted, each step's scored tokens (lines: about a
    third of its positions here), which the step line gives as a share."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        (src / name).write_text("".join(f" line {i} " + "x" * (i % 7) * 3 + "\n \n" for i in range(60)))
    prepare.prepare("wikitext2", src=str(src), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    args = ["--task=wikitext2", f"--data_dir={tmp_path / 'data'}", "--lm_rows=lines", "--block_size=16",
            "--batch_size=4", "--max_iters=3", "--eval_interval=3", "--log_interval=3", "--eval_iters=2",
            "--attn=softmax", "--n_layer=1", "--n_embd=16"]
    assert run_train(tmp_path / "run", *args) == 0
    task = data.make_task("wikitext2", 16, str(tmp_path / "data"), 2, "val", "lines")
    scored = [int((task.get_batch("train", 4, seed=[0, it, 0])[1] >= 0).sum()) for it in range(3)]
    m, model = read_metrics(tmp_path / "run")[-1], MixiT(mixit_config(load_ckpt(tmp_path / "run")["model_args"]))
    assert m["tokens"] == sum(scored) and m["flops"] == pytest.approx(sum(scored) * model.flops_per_token(16))
    assert f"({sum(scored[1:]) / (2 * 4 * 16):.0%} scored)" in capsys.readouterr().out  # the first step is warm-up


def test_sst2_examples_and_labels(sst2):
    meta = json.loads((sst2 / "sst2" / "meta.json").read_text())
    assert meta["examples"] == {"train": 67349, "val": 872} and meta["max_len"] == 64
    assert np.load(sst2 / "sst2" / "val_y.npy").sum() == 444  # 444 of 872 dev sentences are positive


# ===== train.py


def test_short_run_learns_an_easy_task(tmp_path, capsys):
    """A short run learns retrieval_2; its first line names the machine's model, its matmul rate and its thread
    count (the tests' one)."""
    assert run_train(tmp_path, "--task=retrieval_2", "--attn=softmax", "--max_iters=200", "--eval_interval=100",
                     "--n_embd=64", "--batch_size=128", "--learning_rate=1e-2") == 0
    metrics = read_metrics(tmp_path)
    assert [m["iter"] for m in metrics] == [100, 200]
    assert metrics[-1]["val_acc"] > 0.9 and metrics[-1]["val_loss"] < 0.1 * np.log(512)  # from log(V) at init
    ckpt = load_ckpt(tmp_path)
    assert ckpt["iter_num"] == 200 and ckpt["config"]["task"] == "retrieval_2"
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"1 x {cpu_model_read_here()} (1 thread, matmul {common.peak_flops('cpu') / 1e9:,.0f} GFLOP/s), " \
                    f"float32, torch {torch.__version__}"  # the rate mfu divides by (measured once a process)


def cpu_model_read_here():
    """The CPU's model as /proc/cpuinfo names it, read apart from common's reader; "cpu" where it names none."""
    cpuinfo = open("/proc/cpuinfo").read() if os.path.isfile("/proc/cpuinfo") else ""
    found = re.search(r"^model name\s*: (.+)$", cpuinfo, re.MULTILINE)
    return found.group(1).strip() if found else "cpu"


def test_accuracy_per_answer_position():
    """evaluate's accuracy of the k-th answer of every row, against a row-by-row count."""
    task, model = data.make_task("addition_3"), tiny_model(vocab_size=31, block_size=12, attn="mixing", init_std=0.3)
    result = data.evaluate(model, task, "test", 500, common.setup("cpu", "float32"))
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


def test_training_draws_nothing_from_torchs_random_state(tmp_path):
    """A checkpoint keeps no RNG state because training draws none: batches come from their own seeds and the
    weights from config.seed, so a run is the same bit for bit whatever torch's global generator holds."""
    for k in (0, 1):
        torch.manual_seed(k)
        assert run_train(tmp_path / str(k), "--task=addition_2", "--attn=smf", "--max_iters=3", *FAST,
                         "--n_layer=3") == 0
    a, b = load_ckpt(tmp_path / "0"), load_ckpt(tmp_path / "1")
    untimed = lambda path: [{k: v for k, v in m.items() if k != "time"} for m in read_metrics(path)]
    assert "rng" not in a and untimed(tmp_path / "0") == untimed(tmp_path / "1")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_learning_rate_warms_up_then_decays_on_a_cosine():
    """Linear warmup from lr/(warmup+1) to lr at its end; then half a cosine down to min_lr at lr_decay_iters."""
    config = dict(train.DEFAULTS, learning_rate=1.0, min_lr=0.1, warmup_iters=10, max_iters=110, lr_decay_iters=0)
    lr = lambda it: train.get_lr(it, config)
    assert lr(0) == pytest.approx(1 / 11) and lr(9) == pytest.approx(10 / 11)  # the first step already moves
    assert lr(10) == pytest.approx(1.0) and lr(60) == pytest.approx(0.55) and lr(110) == lr(500) == 0.1
    assert lr(35) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 4)))
    assert train.get_lr(60, dict(config, lr_decay_iters=210)) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 4)))


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
                         "--eval_interval=3", f"--compile={mode}", *FAST, "--n_layer=1") == 0  # fewer C++ kernels
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
    assert run_train(tmp_path, "--task=addition_2,retrieval_2", "--attn=frozen_qk,mixing", "--max_iters=2",
                     "--eval_interval=2", "--seeds=2", *FAST) == 0
    out = capsys.readouterr().out
    assert "| retrieval_2 | mixing | 2 |" in out and "±" in out and "induction_score" in out
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    results = (tmp_path / "results.md").read_text()
    assert "| addition_2 | frozen_qk | 2 | 2 |" in results and "over seeds 0, 1. 8 runs in" in results
    assert (tmp_path / "retrieval_2-frozen_qk-s1" / "ckpt.pt").exists()


def torchrun_cmd(nproc, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "train.py",
            *args]


@pytest.mark.parametrize("accum, attn, more", [(1, "mixing", ["--task=induction_2", "--batch_size=2", "--eval_interval=4"]),
                                               (4, "fl", [])])
def test_torchrun_two_processes_match_one(tmp_path, capsys, accum, attn, more):
    """The step is the same batch_size x accum sequences for any number of processes: whole micro-batches per
    process (accum 4: two each, the gradients synchronized on the last, none on the first), or each micro-batch's rows
    dealt out (accum 1, the default: MixiT on induction_2 at 2 rows a step, where a process's row often scores
    nothing; one eval of its 4,000 test rows, 2 a batch), and a hybrid of a Frozen-QK layer and a learned mixing layer.
    The log lines read the same losses."""
    args = ["--task=addition_2", f"--attn={attn}", "--max_iters=4", "--eval_interval=2", "--device=cpu",
            f"--gradient_accumulation_steps={accum}", *FAST, "--log_interval=1", *more]
    proc = subprocess.run(torchrun_cmd(2, *args, f"--out_dir={tmp_path / 'ddp'}"), cwd=HERE, capture_output=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), text=True, timeout=240)
    assert proc.returncode == 0, f"ddp run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert cli(train.main, args + [f"--out_dir={tmp_path / 'one'}"]) == 0
    logged = lambda out: [float(v) for v in re.findall(r"iter \d/4: loss (\S+),", out)]
    ddp_losses, one_losses = logged(proc.stdout), logged(capsys.readouterr().out)
    slow = "each process computes 1 rows of each of 1 micro-batches: correct, but slow; --batch_size=2"
    assert (slow in proc.stdout) == (accum == 1)  # a micro-batch split below 8 rows is said to be slow
    assert len(ddp_losses) == 4 and ddp_losses == pytest.approx(one_losses, abs=2e-4, nan_ok=True)  # nan: none scored
    ddp, one = read_metrics(tmp_path / "ddp"), read_metrics(tmp_path / "one")
    assert len(ddp) == len(one) == (1 if more else 2)  # evals at step 4 (and 2)
    for m, n in zip(ddp, one):
        assert m["train_loss"] == pytest.approx(n["train_loss"], rel=1e-5)
        assert m["val_loss"] == pytest.approx(n["val_loss"], rel=1e-5)
    a, b = load_ckpt(tmp_path / "ddp")["model"], load_ckpt(tmp_path / "one")["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_memorization_capacity_in_bits_per_parameter(tmp_path):
    """bits_per_param = rows x (log2 N - loss in bits) / trainable parameters, from the logged loss."""
    assert run_train(tmp_path, "--task=memorize_8", "--attn=mixing", "--freeze=mlp", "--max_iters=30",
                     "--eval_interval=30", "--learning_rate=1e-2", *FAST) == 0
    m = read_metrics(tmp_path)[-1]
    model = MixiT(mixit_config(load_ckpt(tmp_path)["model_args"]))
    bits = 64 * max(0.0, 3 - m["val_loss"] / math.log(2))
    params = model.get_num_params(non_embedding=False, trainable=True)
    assert m["bits_per_param"] == pytest.approx(bits / params)
    assert 0 < m["bits_per_param"] < m["bits_ceiling"] == pytest.approx(64 * 3 / params)  # the whole table held


def test_each_score_is_reported_beside_its_chance_level(tmp_path):
    """Every eval gives the task's chance accuracy and the induction score of the same model at init: for MixiT, whose
    matrices never train, the very score it ends with (same matrix, same probe); for softmax, its start."""
    assert run_train(tmp_path, "--task=retrieval_2,induction_4", "--attn=softmax,mixing", "--max_iters=40",
                     "--eval_interval=20", "--learning_rate=1e-2", *FAST) == 0
    for task in ("retrieval_2", "induction_4"):
        mixing, softmax = (read_metrics(tmp_path / f"{task}-{a}") for a in ("mixing", "softmax"))
        assert all(m["induction_score"] == m["induction_init"] for m in mixing)
        assert softmax[-1]["induction_score"] != softmax[-1]["induction_init"]
        assert {m["val_acc_chance"] for m in mixing + softmax} == {data.make_task(task).chance()}
        ckpt = load_ckpt(tmp_path / f"{task}-softmax")
        fresh = MixiT(mixit_config(ckpt["model_args"]))  # the seed's model before training
        level = data.chance_metrics(fresh, data.make_task(task), common.setup("cpu", "float32"), 64)["induction_init"]
        assert softmax[0]["induction_init"] == pytest.approx(level, abs=1e-6)
    header = (tmp_path / "results.md").read_text().splitlines()[4]
    assert "| val_acc | val_acc_chance |" in header and "| induction_score | induction_init |" in header


def test_mixing_heads_run_mixit_at_each_head_count(tmp_path, capsys):
    """MixiT at several head counts beside the others at n_head: labelled, each in its own out_dir."""
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax,mixing", "--max_iters=2", "--eval_interval=2",
                     *FAST, "--mixing_heads=1,4") == 0
    assert sorted(os.listdir(tmp_path)) == [".lock", "addition_2-mixing-h1", "addition_2-mixing-h4",
                                            "addition_2-softmax", "compare.png", "results.md", "runs.json"]
    assert load_ckpt(tmp_path / "addition_2-mixing-h4")["model_args"]["n_head"] == 4
    assert load_ckpt(tmp_path / "addition_2-softmax")["model_args"]["n_head"] == 2
    assert "| addition_2 | mixing h=1 | 1 | 2 |" in capsys.readouterr().out
    assert run_train(tmp_path / "bad", "--mixing_heads=4,x") == 2
    assert "unknown mixing_heads 'x'; valid: integers > 0" in capsys.readouterr().err


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


@pytest.mark.parametrize("world, peak, device, line", [
    (1, 1.2e12, "cpu", "32,000 tok/s, mfu 8.0%, eta 0m01s"),  # 3e6 FLOPs x 32,000 tokens/s of 1.2e12 FLOP/s
    (2, 1.2e12, "cpu", "32,000 tok/s over 2 processes, mfu 4.0% per process, eta 0m01s"),  # tokens of all, one's MFU
    (1, None, "cpu", "32,000 tok/s, mfu n/a, eta 0m01s"),  # no known peak
    (1, None, "cuda", "32,000 tok/s, mfu n/a, peak 1.50 GiB, eta 0m01s")])  # the GPU's peak memory so far
def test_progress_line_of_a_step(world, peak, device, line, monkeypatch):
    """iter 5 of 10 at 0.25 s a step of 8000 tokens: 32,000 tokens/s, 5 steps left of 0.25 s."""
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 1.5 * 2 ** 30)  # a stand-in for the GPU's
    env = types.SimpleNamespace(world_size=world, ddp=world > 1, device_type=device, device=torch.device(device))
    got = keeper.progress(5, {"max_iters": 10}, torch.tensor(1.23456), 3e-4, 0.25, 8000, 3e6, peak, env)
    assert got == "iter 5/10: loss 1.2346, lr 3.00e-04, 250.0 ms/iter, " + line


def test_log_lines_and_metrics_of_a_run(tmp_path, capsys, monkeypatch):
    """A 3-step run of 3 micro-batches of 8 sequences of 2 tokens a step (48 tokens), logged at each step, evaluated at
    steps 2 and 3: a log line reads its step's loss and learning rate, ms/iter x tok/s = 48 tokens and the MFU of a
    peak set by hand; an eval's train_loss is the mean of the step losses since the last; the eval line holds each
    metric to 4 decimals; metrics.jsonl counts the tokens and FLOPs of every step so far."""
    monkeypatch.setattr(keeper, "peak_flops", lambda device, dtype: 1e9)
    assert run_train(tmp_path, "--task=memorize_4", "--attn=softmax", "--max_iters=3", "--eval_interval=2", *FAST,
                     "--batch_size=8", "--gradient_accumulation_steps=3", "--log_interval=1") == 0
    out, metrics = capsys.readouterr().out, read_metrics(tmp_path)
    config = dict(train.DEFAULTS, learning_rate=1e-3, warmup_iters=2, max_iters=3)
    per_token = MixiT(mixit_config(load_ckpt(tmp_path)["model_args"])).flops_per_token()
    steps = re.findall(r"iter (\d)/3: loss (\S+), lr (\S+), (\S+) ms/iter, (\S+) tok/s, mfu (\S+)%", out)
    assert [int(s[0]) for s in steps] == [1, 2, 3]
    for it, loss, lr, ms, tok_s, mfu in steps:
        tok_s = float(tok_s.replace(",", ""))
        assert lr == f"{train.get_lr(int(it) - 1, config):.2e}"
        assert abs(float(ms) * tok_s / 1000 - 48) < (0.051 * tok_s + 0.51 * float(ms)) / 1000  # ms/iter to 0.1, tok/s to 1
        assert float(mfu) == pytest.approx(100 * per_token * tok_s / 1e9, abs=0.06)
    losses = [float(s[1]) for s in steps]
    assert [m["train_loss"] for m in metrics] == pytest.approx([(losses[0] + losses[1]) / 2, losses[2]], abs=1e-4)
    for m, k in zip(metrics, (2, 3)):
        assert (m["iter"], m["tokens"], m["samples"], m["lr"]) == (k, 48 * k, 24 * k, train.get_lr(k - 1, config))
        assert m["flops"] == pytest.approx(48 * k * per_token)
    logged = dict(field.split(" ") for field in out[out.rindex("eval iter 3"):].splitlines()[0][5:].split(", "))
    shown = {k: v for k, v in metrics[1].items() if not isinstance(v, list) and k not in ("lr", "tokens", "samples",
                                                                                          "flops", "time")}
    assert logged == {k: f"{v:.4f}" if isinstance(v, float) else str(v) for k, v in shown.items()}
    assert {"train_loss", "val_loss", "val_acc", "bits_per_param"} <= set(logged)


def test_every_run_of_a_multi_run_job_is_compiled(tmp_path, monkeypatch):
    """Ten models in one process, one after another, as train.py trains a comparison: dynamo's recompile limit (8
    graphs per code object) must not send the later ones back to eager. A backend that counts what it compiles."""
    compiled = []
    compile_ = torch.compile

    def counting(model, **kw):
        return compile_(model, backend=lambda gm, inputs: compiled.append(len(compiled)) or gm.forward, **kw)

    monkeypatch.setattr(torch, "compile", counting)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 3)  # reached sooner: fewer models show the same
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax,mixing", "--seeds=5", "--compile=True",
                     "--max_iters=1", "--eval_interval=1", *FAST) == 0
    assert len(compiled) >= 10  # a graph for each model's forward (and backward)


def count_ddp_broadcasts(rank, store_path, results):
    """One of 2 gloo processes: 3 training steps of keeper.wrap's DDP model, then one forward of a plain DDP model,
    counting the buffer broadcasts of each; reports them with a digest of the gradients and matrices."""
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"file://{store_path}")
    try:
        torch.set_num_threads(1)
        model = tiny_model(attn="mixing")
        ddp = keeper.wrap(model, {"compile": False}, types.SimpleNamespace(ddp=True, device_type="cpu", local_rank=0))
        broadcasts, broadcast = [], dist._broadcast_coalesced
        dist._broadcast_coalesced = lambda *a, **k: broadcasts.append(a)  # counted, not sent: both ranks skip it
        for step in range(3):
            idx = torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(10 * rank + step))  # own data
            ddp(idx, idx)[1].backward()
        ours = len(broadcasts)
        plain = torch.nn.parallel.DistributedDataParallel(tiny_model(attn="mixing"))
        broadcasts.clear()
        plain(idx, idx)[1].backward()
        dist._broadcast_coalesced = broadcast
        grads = [p.grad.double().sum().item() for p in model.parameters()]
        results.put((rank, ours, len(broadcasts), grads, common.fingerprint(model)))
    finally:  # as common.teardown: no DDP wrapper may outlive the group into interpreter shutdown (it can abort)
        ddp = plain = None
        gc.collect()
        dist.destroy_process_group()


def test_ddp_syncs_no_buffers_during_steps(tmp_path):
    """2 gloo processes: the fixed matrices and rotary tables are identical by construction, so no step broadcasts
    them (a plain DDP model does at every forward); the gradients are still averaged, the matrices still agree."""
    context = torch.multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    torch.multiprocessing.spawn(count_ddp_broadcasts, args=(str(tmp_path / "store"), results), nprocs=2)
    (_, ours0, plain0, grads0, prints0), (_, ours1, plain1, grads1, prints1) = sorted(results.get() for _ in range(2))
    assert ours0 == ours1 == 0 and plain0 == plain1 == 1
    assert grads0 == pytest.approx(grads1, rel=1e-6) and prints0 == prints1


def test_checkpoint_holds_no_fixed_matrix_and_refuses_another_one(tmp_path, capsys):
    """A checkpoint keeps a fingerprint of the matrices, rebuilt from the seed on load: a mismatch is refused in
    one line, by train.py and by sample.py."""
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--max_iters=2", *FAST) == 0
    ckpt = load_ckpt(tmp_path)
    assert not any("mixing" in k for k in ckpt["model"]) and len(ckpt["fingerprint"]) == 2
    ckpt["fingerprint"][1][1][0] += 0.01  # another generator would differ everywhere
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--max_iters=4", "--init_from=resume", *FAST) == 2
    assert run_sample(tmp_path, "--num_samples=1", "--checkpoint=latest") == 2
    for err in capsys.readouterr().err.splitlines()[-2:]:
        assert "the fixed mixing matrix of layer 1 cannot be rebuilt here" in err and "another version" in err


def test_a_checkpoint_of_another_seeds_matrices_is_refused_by_one_process(tmp_path, capsys):
    """A checkpoint whose mixing matrices are another seed's (its fingerprint that of seed 1, its arguments seed 0):
    refused by a single process's load, sample.py's and a resuming train.py's; its own fingerprint loads."""
    args = ["--task=addition_2", "--attn=mixing", *FAST]
    assert run_train(tmp_path, *args, "--max_iters=2") == 0
    ckpt = load_ckpt(tmp_path)
    assert run_sample(tmp_path, "--num_samples=1", "--checkpoint=latest") == 0  # its own fingerprint loads
    ckpt["fingerprint"] = common.fingerprint(MixiT(mixit_config({**ckpt["model_args"], "seed": 1})))
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert run_sample(tmp_path, "--num_samples=1", "--checkpoint=latest") == 2
    assert run_train(tmp_path, *args, "--max_iters=4", "--init_from=resume") == 2
    for err in capsys.readouterr().err.splitlines():
        assert "the fixed mixing matrix of layer 0 cannot be rebuilt here" in err


# MixiTConfig's fields, in order, before the study's options had their own group: checkpoints held them flat
FLAT_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "attn", "freeze", "causal", "n_classes",
               "pad_id", "seed", "bias", "rope_theta", "init_std", "qk_init", "parametrization", "base_width",
               "base_ffn", "skip", "cminus", "mix_beta", "standard_parts", "sigma_min", "fixed_head", "centring", "pool",
               "pads", "depth_alpha", "base_depth")


def test_a_checkpoint_with_flat_model_args_loads_resumes_and_samples(tmp_path, capsys):
    """A checkpoint as the code before the study's own group wrote it (model_args flat, standard_parts a comma
    string) is the same model: sample.py shows it, train.py resumes it; another model's options are refused in one
    line, and so is a fingerprint its seed does not rebuild."""
    args = ["--task=addition_2", "--attn=mixing", "--standard_parts=residual,positions", *FAST]
    assert run_train(tmp_path, *args, "--max_iters=2") == 0
    ckpt = load_ckpt(tmp_path)
    config = mixit_config(ckpt["model_args"])
    assert config.study.standard_parts == ("residual", "positions")
    flat = mixit.flat_args(ckpt["model_args"])
    ckpt["model_args"] = dict({k: flat[k] for k in FLAT_FIELDS}, standard_parts="residual,positions")
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert mixit_config(ckpt["model_args"]) == config
    assert run_sample(tmp_path, "--num_samples=1", "--checkpoint=latest") == 0
    assert run_train(tmp_path, *args[:2], "--standard_parts=residual", *FAST, "--max_iters=4",
                     "--init_from=resume") == 2
    assert "standard_parts=('residual', 'positions') (this run: ('residual',))" in capsys.readouterr().err
    assert run_train(tmp_path, *args, "--max_iters=4", "--init_from=resume") == 0
    ckpt["fingerprint"][0][1][0] += 0.01
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert run_train(tmp_path, *args, "--max_iters=4", "--init_from=resume") == 2
    assert "the fixed mixing matrix of layer 0 cannot be rebuilt here" in capsys.readouterr().err


@pytest.mark.parametrize("saved", [None, [], [[], []], [None, None]])
def test_checkpoint_without_a_fingerprint_is_refused(tmp_path, capsys, saved):
    """A checkpoint of a MixiT whose fingerprint is missing, empty or names no layer cannot show that its matrices
    are those this code rebuilds: refused in one line, like a wrong one."""
    assert run_train(tmp_path, "--task=addition_2", "--attn=mixing", "--max_iters=2", *FAST) == 0
    ckpt = load_ckpt(tmp_path)
    ckpt.pop("fingerprint") if saved is None else ckpt.update(fingerprint=saved)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert run_sample(tmp_path, "--num_samples=1", "--checkpoint=latest") == 2
    assert "the fixed mixing matrix of layer 0 cannot be rebuilt here" in capsys.readouterr().err


def test_classifiers_take_the_references_width_multiplier_base():
    """The reference's classifier never sets base_hidden_size (1: every MixiT linear times 1/sqrt(fan_in)); its
    language models and algorithmic runs use 512. base_width > 0 states one."""
    lm, classifier = data.make_task("addition_2"), types.SimpleNamespace(
        name="yelp", vocab_size=64, block_size=16, causal=False, n_classes=2, pad_id=0)
    config = dict(train.DEFAULTS, attn="mixing")
    assert train.model_config(config, lm).base_width == 512 and train.model_config(config, classifier).base_width == 1
    assert train.model_config(dict(config, base_width=64.0), classifier).base_width == 64


def test_comparison_states_each_runs_settings(tmp_path, capsys):
    """The header line and results.md name what tells the variants apart: heads, parametrization, Q/K init."""
    assert run_train(tmp_path, "--task=mqar_2", "--attn=frozen_qk,mixing,ml", "--max_iters=2", "--eval_interval=2",
                     *FAST, "--mixing_heads=4") == 0
    out = capsys.readouterr().out
    assert "[mqar_2 | mixing h=4 | seed 0] 2 layers x 32, 4 heads, MixiT parametrization (multipliers base 512" in out
    assert "2 layers x 32, 2 heads, standard parametrization, frozen W_Q, W_K ~ N(0, 1/n)" in out
    assert "layers mixing learned_mixing" in (tmp_path / "results.md").read_text()
    finals = json.loads((tmp_path / "runs.json").read_text())
    assert [r["variant"] for r in finals] == ["frozen_qk", "mixing h=4", "ml"]
    metrics = read_metrics(tmp_path / "mqar_2-ml")[-1]
    assert len(metrics["val_acc_pos"]) == 2 and len(metrics["induction_layers"]) == 2  # 2 answers at most; layers
    assert metrics["flops"] == pytest.approx(2 * 64 * 7 * MixiT(mixit_config(load_ckpt(tmp_path / "mqar_2-ml")
                                                                     ["model_args"])).flops_per_token())


def test_sample_standard_deviation_over_seeds():
    runs = [dict(task="t", variant="softmax", model="m", seed=s) for s in range(3)]
    histories = [[{"iter": 1, "val_acc": v}] for v in (0.1, 0.2, 0.6)]
    (row,) = report.summarize(runs, histories)
    assert row["val_acc"] == pytest.approx((0.3, np.std([0.1, 0.2, 0.6], ddof=1)))  # n - 1


UNFREEZE = ["--task=addition_2", "--attn=fl", "--freeze=mlp", "--unfreeze_at=3", "--eval_interval=3",
            "--learning_rate=1e-2", *FAST]


def test_frozen_parts_start_training_at_the_unfreeze_step(tmp_path, capsys):
    """Frozen W_Q, W_K, MLPs and a learned mixing matrix: bit-identical to their init until the step, then moving,
    in the optimizer with fresh state; the FLOPs per token follow."""
    assert run_train(tmp_path / "a", *UNFREEZE, "--max_iters=3") == 0
    ckpt = load_ckpt(tmp_path / "a")
    init = MixiT(mixit_config(ckpt["model_args"])).state_dict()
    late = [k for k in init if "attn.qk" in k or "mlp." in k or k.endswith("attn.mixing")]
    assert len(late) == 11 and all(torch.equal(ckpt["model"][k], init[k]) for k in late)  # frozen until step 3
    assert len(ckpt["optimizer"]["param_groups"]) == 2
    assert run_train(tmp_path / "a", *UNFREEZE, "--max_iters=6", "--init_from=resume") == 0
    ckpt = load_ckpt(tmp_path / "a")
    assert all(not torch.equal(ckpt["model"][k], init[k]) for k in late if "bias" not in k)  # trained since
    assert len(ckpt["optimizer"]["param_groups"]) == 4  # the late parameters: decayed matrices, then vectors
    assert "iter 3: unfroze" in capsys.readouterr().out
    first, last = read_metrics(tmp_path / "a")
    assert last["flops"] - first["flops"] > first["flops"]  # the steps after cost more: weight gradients


def test_unfrozen_weights_train_with_their_kinds_weight_decay(tmp_path):
    """At the unfreeze step the frozen matrices (W_Q, W_K, the MLPs', the learned mixing matrix) join AdamW with the
    run's weight_decay, the vectors (biases) without, as the parameters that trained from the start."""
    assert run_train(tmp_path, *UNFREEZE, "--max_iters=4", "--weight_decay=0.25") == 0
    ckpt = load_ckpt(tmp_path)
    fresh = MixiT(mixit_config(ckpt["model_args"]))
    late = [p for name, p in fresh.named_parameters() if not p.requires_grad or name.endswith(".mixing")]
    groups = ckpt["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.25, 0.0, 0.25, 0.0]
    assert [len(g["params"]) for g in groups[2:]] == [sum(p.dim() >= 2 for p in late), sum(p.dim() < 2 for p in late)]


def test_resume_across_the_unfreeze_step_matches_an_uninterrupted_run(tmp_path):
    run = [*UNFREEZE, "--eval_interval=2", "--lr_decay_iters=6"]
    assert run_train(tmp_path / "full", *run, "--max_iters=6") == 0
    for stop in (2, 4, 6):  # before the switch, after it
        assert run_train(tmp_path / "part", *run, f"--max_iters={stop}", f"--init_from={'resume' if stop > 2 else 'scratch'}") == 0
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [m["iter"] for m in part] == [2, 4, 6]
    for a, b in zip(full, part):
        for key in ("train_loss", "val_loss", "flops"):
            assert a[key] == pytest.approx(b[key], rel=1e-6)
    a, b = load_ckpt(tmp_path / "full")["model"], load_ckpt(tmp_path / "part")["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_chosen_parametrization_is_part_of_the_label_and_folder():
    """Runs whose parametrization is chosen, not auto, say so: the same pattern in both reads apart in every report."""
    runs = train.plan_runs(dict(train.DEFAULTS, task="retrieval_4", attn="ssss,mmmm", n_layer=4,
                                parametrization="mixit", out_dir="o"))
    assert [train.run_label(r) for r in runs] == ["ssss mixit", "mmmm mixit"]
    assert [r["out_dir"] for r in runs] == [os.path.join("o", f"retrieval_4-{p}-mixit") for p in ("ssss", "mmmm")]
    assert train.run_label(dict(runs[0], parametrization="auto")) == "ssss"


def test_schedules_without_frozen_parts_are_not_run_twice():
    config = dict(train.DEFAULTS, task="addition_2", attn="softmax,frozen_qk,mm,ml", unfreeze_at="never,50%")
    labels = [train.run_label(r) for r in train.plan_runs(config)]
    assert labels == ["softmax", "frozen_qk", "frozen_qk unfreeze@50%", "mm", "ml", "ml unfreeze@50%"]


def write_config(tmp_path, text):
    path = tmp_path / "cfg.py"
    path.write_text(text)
    return str(path)


BAD_INPUTS = [
    (["--attn=linear"], "valid: softmax, frozen_qk, mixing, learned_mixing, all, or one letter per layer"),
    (["--attn=smx", "--n_layer=3"], "unknown attn 'smx'; valid: softmax, frozen_qk, mixing, learned_mixing, all"),
    (["--attn=smsm", "--n_layer=3"], "one letter per layer for n_layer=3 (s softmax, f frozen_qk, m mixing"),
    (["--parametrization=shaped"], "valid: auto, mixit, standard"),
    (["--unfreeze_at=half"], "unknown unfreeze_at 'half'; valid: never, a step like 2000 or a share like 50% (0-100%)"),
    (["--unfreeze_at=150%"], "a share like 50% (0-100%)"),
    (["--attn=mixing", "--unfreeze_at=50%"], "has nothing frozen to unfreeze; add never, or freeze=mlp"),
    (["--freeze=attn"], "valid: '', mlp, blocks"),
    (["--task=sorting_5"], "valid: addition_N, dyck_N, retrieval_N, modadd_P, memorize_N, induction_N"),
    (["--task=addition_x"], "addition_N takes an integer N >= 2"),
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
    (["--dtype=float64"], "valid: auto, float32, bfloat16\n"),
    (["--dtype=float16"], "valid: auto, float32, bfloat16\n"),  # no float16: the residual stream could overflow
    (["--n_layer=-1"], "n_layer must be 0 or more, got -1"),
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
    (["--pool=max"], "valid: mean, last"),
    (["--pads=dropped"], "valid: masked, attended"),
    (["--centring=median"], "valid: mean, reference"),
    (["--depth_alpha=-1.0"], "must be zero or positive"),
    (["--base_depth=0.0"], "must be positive"),
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
def test_bad_input_is_one_clear_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, also on one with
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


@pytest.mark.parametrize("script, args", [(train, ["--task=addition_2", "--max_iters=1", *FAST]),
                                          (bench, ["--device=cpu", "--parts=calib"]),
                                          (sample, ["--propagation=2"]), (sample, ["--express=init"])])
def test_out_dir_not_writable(tmp_path, capsys, script, args):
    """Every script that writes into out_dir ends in one line when it cannot, before any work."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert common.cli(script.main, [*args, f"--out_dir={blocker / 'out'}"]) == 2
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
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--max_iters=4", "--learning_rate=3e-3",
                     "--init_from=resume", *FAST) == 0
    out = capsys.readouterr().out
    assert "changed training options" in out and "max_iters: 2 -> 4" in out and "learning_rate: 0.001 -> 0.003" in out
    assert load_ckpt(tmp_path)["iter_num"] == 4


def test_nonfinite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, capsys):
    run = ["--task=addition_2", "--attn=softmax", *FAST]
    assert run_train(tmp_path, *run, "--max_iters=2") == 0
    before = (tmp_path / "ckpt.pt").read_bytes()
    assert run_train(tmp_path, *run, "--max_iters=6", "--eval_interval=2", "--learning_rate=1e30",
                     "--init_from=resume") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-finite loss or gradient norm at iter 4" in err and "untouched" in err
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
    assert err.count("\n") == 1 and "out of memory at batch_size=64" in err and "untouched" in err
    assert "--batch_size=32 --gradient_accumulation_steps=2 (the same 64 sequences a step)" in err
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


def test_a_stop_counts_its_first_request_once_and_a_late_second_ctrl_c_at_once(monkeypatch, capsys):
    """Every signal torchrun forwards asks for a stop; the first request holds, its copies change nothing, and a
    Ctrl-C more than 2 s after the first stops at once, in one line."""
    clock = [100.0]
    monkeypatch.setattr(common, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    assert {signal.SIGHUP, signal.SIGQUIT} <= set(common.Stop.SIGNALS)
    stop = common.Stop()
    try:
        with pytest.raises(common.Interrupted, match="stopped by SIGTERM before the first step: nothing was saved"):
            os.kill(os.getpid(), signal.SIGTERM)  # at start-up, at once
        stop.signum = 0
        stop.starting = False
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGINT)
        clock[0] += 1.0
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum == signal.SIGHUP
        clock[0] += 1.5
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        stop.restore()

    def interrupted(argv):
        raise KeyboardInterrupt
    assert common.cli(interrupted, []) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "stopped at once by Ctrl-C, without a checkpoint\n"


def test_a_stop_during_start_up_ends_at_once_in_one_line(tmp_path, monkeypatch, capsys):
    """A stop asked for before the first step (here while the model builds) ends the run at once in one line, exit
    status 128 + the signal, and writes nothing: a Ctrl-C, and under torchrun a launcher that dies then, or had died
    before the worker looked (its parent is init), which a thread sees within a second."""
    build = train.new_model
    parent = [os.getppid()]

    def slow_build(*args):
        if "TORCHELASTIC_RUN_ID" not in os.environ:
            os.kill(os.getpid(), signal.SIGINT)
        parent[0] += 1  # the launcher dies
        time.sleep(10)
        return build(*args)
    monkeypatch.setattr(train, "new_model", slow_build)
    monkeypatch.setattr(os, "getppid", lambda: parent[0])
    for signum, launcher in ((signal.SIGINT, None), (signal.SIGHUP, parent[0]), (signal.SIGHUP, 1)):
        if launcher:
            monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
            parent[0] = launcher
        t0 = time.time()
        assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--n_layer=1", "--n_embd=16") == 128 + signum
        assert time.time() - t0 < 5
        name = signal.Signals(signum).name
        assert capsys.readouterr().err == f"stopped by {name} before the first step: nothing was saved\n"
        assert not run_files(tmp_path)


def run_files(folder):
    """The files of a run's folder, by name, but the lock (which names the run that holds it)."""
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file() and path.name != ".lock"}


def test_a_collective_that_lost_a_process_is_one_line_and_other_errors_are_not_hidden(monkeypatch, capsys):
    """A collective whose peer died (gloo's error, here in a stand-in) ends this process in one line, status 1: the
    dead one's own line says why; any other RuntimeError keeps its traceback."""
    monkeypatch.setenv("RANK", "0")

    def lost(argv):
        raise RuntimeError("[third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer")

    def bug(argv):
        raise RuntimeError("a bug")
    assert common.cli(lost, []) == 1
    assert capsys.readouterr().err.startswith("error: rank 0: lost another process ([third_party/gloo/")
    with pytest.raises(RuntimeError, match="a bug"):
        common.cli(bug, [])


def test_a_worker_whose_launcher_died_stops_with_a_checkpoint(tmp_path, monkeypatch, capsys):
    """Under torchrun (TORCHELASTIC_RUN_ID set), a worker whose parent changed (its launcher was killed) after step 2
    stops as at SIGHUP within a second (a thread looks), with a checkpoint, rather than train on as an orphan."""
    launcher, steps, step = os.getppid(), [], train.train_step

    def slow_step(*args):
        steps.append(1)
        time.sleep(0.1)
        return step(*args)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(os, "getppid", lambda: launcher + (len(steps) >= 2))
    monkeypatch.setattr(train, "train_step", slow_step)
    assert run_train(tmp_path, "--task=addition_2", "--max_iters=100", "--eval_interval=100", "--attn=softmax",
                     "--n_layer=1", "--n_embd=16") == 128 + signal.SIGHUP
    stopped = load_ckpt(tmp_path)["iter_num"]
    assert 3 <= stopped < 20
    assert f"stopped by SIGHUP at iter {stopped}: wrote {tmp_path / 'ckpt.pt'}" in capsys.readouterr().out


def test_one_run_owns_an_out_dir(tmp_path, capsys):
    """A run holds out_dir/.lock: a second run into that folder, resumed or fresh, ends in one line naming the
    first and changes nothing; a lock no process holds (its run ended or was killed) is taken over."""
    args = ["--task=addition_2", "--max_iters=2", "--attn=softmax", "--n_layer=1", "--n_embd=16"]
    assert run_train(tmp_path, *args) == 0
    before = run_files(tmp_path)
    with common.lock_folder(str(tmp_path)):
        for more in ([], ["--init_from=resume", "--max_iters=4"]):
            assert run_train(tmp_path, *args, *more) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"{tmp_path} is in use by the run of pid {os.getpid()} on " in err
        assert run_files(tmp_path) == before
    assert run_train(tmp_path, *args, "--init_from=resume", "--max_iters=4") == 0
    assert load_ckpt(tmp_path)["iter_num"] == 4 and (tmp_path / ".lock").read_text().count(" pid ") == 1


def test_a_fresh_run_keeps_the_earlier_one_aside(tmp_path, monkeypatch, capsys):
    """A fresh run into a folder that holds a run, even one whose first checkpoint failed (a metrics.jsonl alone),
    moves that run's files to previous-N and says so; a full disk there is one line. A comparison into a folder that
    holds another comparison's report moves the report and that comparison's runs' folders together."""
    args = ["--task=addition_2", "--max_iters=2", "--attn=softmax", "--n_layer=1", "--n_embd=16"]
    assert run_train(tmp_path, *args) == 0
    first = (tmp_path / "ckpt.pt").read_bytes()
    for number in (1, 2):
        assert run_train(tmp_path, *args) == 0
        assert f"{tmp_path} held an earlier run: moved its files to {tmp_path / f'previous-{number}'}" in (
            capsys.readouterr().out)
    assert (tmp_path / "previous-1" / "ckpt.pt").read_bytes() == first and (tmp_path / "ckpt.pt").exists()
    assert sorted(os.listdir(tmp_path / "previous-1")) == ["best.pt", "ckpt.pt", "metrics.jsonl"]
    assert len(read_metrics(tmp_path / "previous-2")) == 1
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "metrics.jsonl").write_text("")
    assert run_train(failed, *args) == 0
    assert f"{failed} held an earlier run: moved its files to {failed / 'previous-1'}" in capsys.readouterr().out
    assert (failed / "previous-1" / "metrics.jsonl").read_text() == ""
    monkeypatch.setattr(os, "replace", lambda *paths: raiser(errno.ENOSPC)())
    assert run_train(failed, *args) == 1
    assert capsys.readouterr().err == (f"error: could not write {failed / 'previous-2'} (No space left on device): "
                                       f"make room in {failed} and run again\n")
    monkeypatch.undo()
    comparison = tmp_path / "comparison"
    for attns in ("softmax,mixing", "frozen_qk,learned_mixing"):
        assert run_train(comparison, *args, f"--attn={attns}", "--mixing_heads=") == 0
    assert (comparison / "previous-1" / "results.md").exists() and (comparison / "results.md").exists()
    assert (comparison / "previous-1" / "addition_2-mixing" / "ckpt.pt").exists()
    assert not (comparison / "addition_2-mixing").exists()


def test_a_restarted_torchrun_attempt_resumes(tmp_path, monkeypatch, capsys):
    """torchrun --max_restarts starts the workers again with TORCHELASTIC_RESTART_COUNT > 0: that attempt continues
    from the latest checkpoint, where the first moved nothing aside and trained from iter 0."""
    args = ["--task=addition_2", "--eval_interval=2", "--lr_decay_iters=4", "--attn=softmax", "--n_layer=1",
            "--n_embd=16"]
    assert run_train(tmp_path, *args, "--max_iters=2") == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert run_train(tmp_path, *args, "--max_iters=4") == 0
    assert f"resumed {tmp_path / 'ckpt.pt'} at iter 2" in capsys.readouterr().out
    assert [m["iter"] for m in read_metrics(tmp_path)] == [2, 4] and not (tmp_path / "previous-1").exists()


def test_a_corrupt_metrics_line_anywhere_is_one_line(tmp_path, capsys):
    """A metrics line, not the last, that is no eval record (an edit, a copy): no JSON, JSON without an iter, a string,
    null, or bytes that are not UTF-8. The resume ends in one line naming the file and line, exit status 2, and
    changes no file."""
    args = ["--task=addition_2", "--max_iters=4", "--eval_interval=1", "--attn=softmax", "--n_layer=1", "--n_embd=16"]
    assert run_train(tmp_path, *args) == 0
    lines = (tmp_path / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    for bad in (lines[1][5:], b'{"val_loss": 1.0}\n', b'"an eval"\n', b"null\n", b'{"iter": 2, "note": "\xff"}\n'):
        (tmp_path / "metrics.jsonl").write_bytes(b"".join(lines[:1] + [bad] + lines[2:]))
        before = run_files(tmp_path)
        assert run_train(tmp_path, *args, "--max_iters=6", "--init_from=resume") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{tmp_path / 'metrics.jsonl'}, line 2, is not an eval record" in err
        assert run_files(tmp_path) == before


class FillingFile(io.FileIO):
    """A file on a disk with room for `room` more bytes: a write past it writes what fits (as write(2) does), and the
    next one calls fault(), which raises the disk's error."""

    def __init__(self, path, room, fault):
        super().__init__(path, "w")
        self.room = room
        self.fault = fault

    def write(self, data):
        if not self.room:
            self.fault()
        written = super().write(bytes(data)[:self.room])
        self.room -= written
        return written


def fail_a_write(monkeypatch, folder, name, number, fault):
    """The number-th write of folder/name (into name.tmp, as write_atomic writes) reaches a full disk: fault() after
    100 bytes. Returns the folder's files as they were then (their bytes, by name)."""
    opened = []
    before = {}

    def open_(path, mode="r", *args, **kwargs):
        if path == str(folder / name) + ".tmp":
            opened.append(path)
            if len(opened) == number:
                before.update(run_files(folder))
                return io.BufferedWriter(FillingFile(path, 100, fault))
        return open(path, mode, *args, **kwargs)
    monkeypatch.setattr(common, "open", open_, raising=False)
    return before


def raiser(error):
    """A fault that raises an OSError with this errno, as the OS does."""
    def fault():
        raise OSError(error, os.strerror(error))
    return fault


FAULT_RUN = ["--task=addition_2", "--max_iters=4", "--eval_interval=2", "--attn=softmax", "--n_layer=1",
             "--n_embd=64", "--n_head=2", "--mixing_heads=", "--batch_size=64", "--warmup_iters=2",
             "--learning_rate=1e-2"]
# Each failing write (its file, which of its writes, how many checkpoint files that save has left): the first
# checkpoint (best.pt, written first, holds), best.pt at iter 4, metrics.jsonl at iter 4 (the first is at the
# start), and the checkpoint of a stop at iter 3.
FAILING_WRITES = {"first ckpt.pt": ("ckpt.pt", 1, 1), "best.pt": ("best.pt", 2, 2),
                  "metrics.jsonl": ("metrics.jsonl", 3, 0), "a stop's ckpt.pt": ("ckpt.pt", 2, 1)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """FAULT_RUN run through: its evals and best checkpoint."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    assert run_train(folder, *FAULT_RUN) == 0
    return read_metrics(folder), torch.load(folder / "best.pt", weights_only=True)


def stop_at_iter_3(monkeypatch):
    """A stop (SIGHUP) that arrives during step 2: read at step 3, checkpointed."""
    steps = []
    step = train.train_step

    def train_step(*args):
        steps.append(1)
        if len(steps) == 2:
            os.kill(os.getpid(), signal.SIGHUP)
        return step(*args)
    monkeypatch.setattr(train, "train_step", train_step)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EISDIR], ids=["full disk", "directory"])
@pytest.mark.parametrize("write", FAILING_WRITES)
def test_a_failed_write_is_one_line_and_the_resume_continues(tmp_path, monkeypatch, capsys, uninterrupted, write,
                                                              error):
    """A write that fails (a full disk, or another cause: here a directory) at the first checkpoint, best.pt,
    metrics.jsonl or a stop's checkpoint ends in one line that names the file and the cause, and the room the save
    needs where the cause is space; no .tmp stays, and the files before it stay as they were. Once there is room, the
    resume (a fresh run where no checkpoint was written) ends as an uninterrupted run."""
    name, number, files_left = FAILING_WRITES[write]
    if write == "a stop's ckpt.pt":
        stop_at_iter_3(monkeypatch)
    before = fail_a_write(monkeypatch, tmp_path, name, number, raiser(error))
    assert run_train(tmp_path, *FAULT_RUN) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not write {tmp_path / name} ({os.strerror(error)})") and err.count("\n") == 1
    assert run_files(tmp_path) == before and not list(tmp_path.glob("*.tmp"))
    size = len(before.get("ckpt.pt", before.get("best.pt")))
    room = max(files_left * size / 2 ** 20, 0.1)
    assert (f": make room for about {room:.1f} MB in {tmp_path} and run again" in err) == (error == errno.ENOSPC)
    assert ("make room" in err) == (error == errno.ENOSPC)
    if error != errno.ENOSPC:
        return
    monkeypatch.undo()
    resumes = ["--init_from=resume"] * ("ckpt.pt" in before)
    assert run_train(tmp_path, *FAULT_RUN, *resumes) == 0
    evals, best = uninterrupted
    assert [m["val_loss"] for m in read_metrics(tmp_path)] == [m["val_loss"] for m in evals]
    resumed = torch.load(tmp_path / "best.pt", weights_only=True)
    assert resumed["iter_num"] == best["iter_num"] == 4
    assert all(torch.equal(resumed["model"][k], v) for k, v in best["model"].items())


def test_a_second_ctrl_c_during_a_checkpoint_write_stops_at_once_and_leaves_no_tmp(tmp_path, monkeypatch, capsys):
    """A Ctrl-C asks for a stop; a second one, 3 s later, lands while the stop's checkpoint is being written: the run
    stops at once in one line, exit status 130, with no .tmp and the last checkpoint as it was."""
    steps = []
    step = train.train_step
    clock = time.monotonic
    late = []

    def train_step(*args):
        steps.append(1)
        if len(steps) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return step(*args)

    def second_ctrl_c():
        late.append(3.0)
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the second Ctrl-C did not stop the write")
    monkeypatch.setattr(train, "train_step", train_step)
    monkeypatch.setattr(time, "monotonic", lambda: clock() + sum(late))
    before = fail_a_write(monkeypatch, tmp_path, "ckpt.pt", 2, second_ctrl_c)
    assert run_train(tmp_path, *FAULT_RUN) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "stopped at once by Ctrl-C, without a checkpoint\n"
    assert run_files(tmp_path) == before and load_ckpt(tmp_path)["iter_num"] == 2


def test_a_full_disk_or_a_directory_at_the_lock_or_the_metrics_is_one_line(tmp_path, monkeypatch, capsys):
    """A disk full at the start fails the lock's write (its open succeeds): one line, the room unknown yet. A lock or
    metrics.jsonl that is a directory is named as the cause, with no word of room; the disk's quota counts as space."""
    write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: raiser(errno.ENOSPC)())
    assert run_train(tmp_path / "full", *FAULT_RUN) == 1
    monkeypatch.setattr(os, "write", write)
    lock = tmp_path / "full" / ".lock"
    assert capsys.readouterr().err == (f"error: could not write {lock} (No space left on device): make room in "
                                       f"{tmp_path / 'full'} and run again\n")
    for name in (".lock", "metrics.jsonl"):
        (tmp_path / name).mkdir(parents=True)
        assert run_train(tmp_path, *FAULT_RUN) == 1
        assert capsys.readouterr().err == f"error: could not write {tmp_path / name} (Is a directory)\n"
        (tmp_path / name).rmdir()
    assert sorted(os.listdir(tmp_path)) == [".lock", "full"]
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert str(common.write_failed(str(tmp_path / "ckpt.pt"), quota, 3 * 2 ** 20)) == (
        f"could not write {tmp_path / 'ckpt.pt'} (Disk quota exceeded): make room for about 3.0 MB in {tmp_path} "
        f"and run again")


PRESETS = sorted(f[:-3] for f in os.listdir(os.path.join(HERE, "configs")) if f.endswith(".py") and f != "claims.py")


def preset_task(name, block_size):
    """The task behind a corpus name, as its prepared meta.json would describe it; algorithmic tasks as built."""
    if name not in data.CORPUS_TASKS and not name.startswith("wikitext2_"):
        return data.make_task(name)
    n_classes = 2 if name in ("sst2", "yelp_polarity") else 0
    vocab = data.padded_vocab(257 if name.endswith("_bytes") else 50257)
    return types.SimpleNamespace(name=name, vocab_size=vocab, causal=not n_classes, block_size=block_size,
                                 n_classes=n_classes, pad_id=50256 if n_classes else -1)


def stated(text, pattern, cast=int):
    """The number a preset's comment states (None where it states none)."""
    match = re.search(pattern, text)
    return None if match is None else cast(match.group(1).replace(",", "").rstrip("."))


@pytest.mark.parametrize("name", PRESETS)
def test_presets_run_what_their_comments_state(name):
    """Every preset states its model and training in two comment lines, and every run it plans builds that model:
    layers, width, heads (MixiT's too), context, multipliers' base; steps, sequences a step, learning rate."""
    path = os.path.join(HERE, "configs", f"{name}.py")
    text = open(path).read()
    model_line = next(line for line in text.splitlines() if line.startswith("# Model: "))
    training_line = next(line for line in text.splitlines() if line.startswith("# Training: "))
    config = common.configure(train.DEFAULTS, [path], train.RULES)
    runs = train.plan_runs(config)
    assert len(runs) >= 2  # every preset compares variants
    mixit_heads = re.search(r"MixiT ([\d, ]+) heads", model_line)
    for run in runs + train.plan_runs(dict(config, attn="mixing", unfreeze_at="never")):  # MixiT asked for too
        m = train.model_config(run, preset_task(run["task"], run["block_size"]))
        assert (m.n_layer, m.n_embd) == (stated(model_line, r"(\d+) layers"), stated(model_line, r"width ([\d,]+)"))
        if run["attn"] == "mixing" and mixit_heads:
            assert m.n_head in [int(h) for h in mixit_heads.group(1).split(",")], run["out_dir"]
        else:
            assert m.n_head == stated(model_line, r"([\d,]+) heads")
        assert stated(model_line, r"context ([\d,]+)") in (None, m.block_size)
        assert stated(model_line, r"multipliers base ([\d.]+)", float) in (None, m.base_width)
        assert run["max_iters"] == stated(training_line, r"([\d,]+) steps")
        assert run["batch_size"] * run["gradient_accumulation_steps"] == stated(training_line, r"of ([\d,]+) sequences")
        assert run["learning_rate"] == stated(training_line, r"lr ([\d.e-]+)", float)
    assert config["device"] == ("cpu" if name.endswith("_cpu") else "auto")  # paper presets: the GPU when present
    commands = preset_commands(text, name)
    assert commands  # every preset says how to run it
    for args in commands:  # and every command its comment gives plans as written: valid options, models that build
        for run in train.plan_runs(common.configure(train.DEFAULTS, [path, *args], train.RULES)):
            train.model_config(run, preset_task(run["task"], run["block_size"]))
    assert name.endswith("_cpu") or "departs" in text  # a paper preset says where it departs from the reference


def preset_commands(text, name):
    """The arguments of each train.py command a preset's comment gives for itself (continued lines joined)."""
    comment = "\n".join(line[1:] for line in text.splitlines() if line.startswith("#")).replace("\\\n", " ")
    marker = f"train.py configs/{name}.py"
    return [line.split(marker, 1)[1].split("  #")[0].split() for line in comment.splitlines() if marker in line]


DOC_COMMAND = re.compile(r"(?:python|torchrun[^`\n]*?) (train|sample)\.py([^`\n]*)")
PREPARE_COMMAND = re.compile(r"python prepare\.py (\w+)([^`\n]*)")


def doc_prepared(text):
    """The corpus names the prepare.py commands of a document write, each command's dataset and options checked."""
    names = set()
    for m in PREPARE_COMMAND.finditer(text.replace("\\\n", " ")):
        assert m.group(1) in prepare.SOURCES, m.group(0)
        options = common.configure(prepare.OPTIONS, m.group(2).split(" #")[0].split(), prepare.RULES, files=False)
        names.add(options["name"] or m.group(1))
    return names


def doc_commands(text):
    """(script, arguments) of each train.py (python or torchrun) and sample.py command a document gives, in code
    blocks or inline (continued lines joined, comments cut)."""
    return [(m.group(1), m.group(2).split(" #")[0].split()) for m in DOC_COMMAND.finditer(text.replace("\\\n", " "))]


def doc_section(text, heading):
    """The text under the heading that starts with `heading`, up to the next heading."""
    return re.split(r"\n#+ ", text.split(f"\n{heading}", 1)[1].split("\n", 1)[1])[0]


@pytest.mark.parametrize("doc", ["README.md", "RESULTS.md"])
def test_documented_commands_plan_what_they_say(doc):
    """Every train.py command the README and RESULTS.md give plans valid runs whose models build, and every sample.py
    command is valid and reads a checkpoint that a train.py command of the same document writes. The README's main
    job plans the tasks, model and training "What you should see" states, and its induction run that many of those
    runs."""
    text = open(os.path.join(HERE, doc)).read()
    plans, out_dirs = {}, set()
    for script, args in doc_commands(text):
        if script == "train":
            args = [a if a.startswith("--") else os.path.join(HERE, a) for a in args]
            runs = train.plan_runs(common.configure(train.DEFAULTS, args, train.RULES))
            for run in runs:
                run["model"] = train.model_config(run, preset_task(run["task"], run["block_size"]))
                out_dirs.add(os.path.normpath(run["out_dir"]))
            plans[" ".join(args)] = runs
    assert plans and doc_prepared(text)  # every prepare.py command names a dataset and valid options
    for script, args in doc_commands(text):
        if script == "sample":
            config = common.configure(sample.DEFAULTS, args, sample.RULES, files=False)
            at_init = config["propagation"] or config["express"] == "init"  # no checkpoint
            assert at_init or os.path.normpath(config["out_dir"]) in out_dirs, args
    if doc != "README.md":
        return
    main, said = plans[""], doc_section(text, "## What you should see")
    flat = " ".join(said.split())
    assert {run["task"] for run in main} == set(re.findall(r"\n\| (\w+):", said))  # the table's rows
    for run in main:
        m = run["model"]
        assert (m.n_layer, m.n_embd) == (stated(flat, r"(\d+) layers"), stated(flat, r"width ([\d,]+)"))
        assert m.n_head == stated(flat, r"MixiT with (\d+)" if run["attn"] == "mixing" else r"with (\d+) heads")
        assert run["max_iters"] == stated(flat, r"([\d,]+) steps") and run["batch_size"] == stated(flat, r"of (\d+) seq")
    minute_section = doc_section(text, "## Watch an induction head form")
    minute = plans[" ".join(doc_commands(minute_section)[0][1])]
    same = lambda r: (r["task"], r["attn"], repr(r["model"]), r["max_iters"], r["batch_size"], r["learning_rate"])
    assert {same(r) for r in minute} <= {same(r) for r in main}
    assert f"{['No', 'One', 'Two', 'Three'][len(minute)]} of the main job's runs" in " ".join(minute_section.split())



def test_the_readme_reads_in_one_sitting():
    """The README, read top to bottom by a learner, holds at most 2,800 words of prose, at most 24 words a sentence
    on average (tables, headings and code blocks left out; inline code a word, a link its text)."""
    text = re.sub(r"```.*?```", " ", open(os.path.join(HERE, "README.md")).read(), flags=re.S)
    prose = " ".join(line for line in text.splitlines() if not line.startswith(("|", "#")))
    prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"`[^`]*`", "X", prose))
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[`])", prose) if len(s.split()) > 2]
    assert len(prose.split()) <= 2800
    assert sum(len(s.split()) for s in sentences) <= 24 * len(sentences)


def test_what_you_should_see_is_the_main_jobs_section_of_results():
    """The README's "What you should see" (right under "Run first") gives the main job's final values as RESULTS.md's
    main-job tables give them, row by row, and every other number it states (the times table's times and matmul rates,
    the largest difference between machines, the seeds' spreads) stands in that RESULTS section too: one source."""
    text = open(os.path.join(HERE, "README.md")).read()
    assert text.index("**Run first**") < text.index("\n## What you should see") < text.index("\n## The question")
    said = doc_section(text, "## What you should see")
    measured = doc_section(open(os.path.join(HERE, "RESULTS.md")).read(), "## The main job")
    numbers = lambda cell: re.findall(r"\d[\d,]*\.\d+|\d+(?:,\d{3})*", cell)  # 1,000; not the comma after 0-2
    shown, accuracy = markdown_rows(said), markdown_rows(measured[measured.index("| task (chance level) |"):])
    induction = {r["retrieval_6"]: r for r in markdown_rows(measured[measured.index("| retrieval_6 |"):])}
    assert [r["task (chance level)"] for r in shown[:-1]] == [r["task (chance level)"] for r in accuracy]
    for row, source in zip(shown, accuracy):  # each cell's accuracy: the first number of the RESULTS cell
        for col, col_source in zip(list(row)[1:], list(source)[1:]):
            assert numbers(row[col]) == numbers(source[col_source])[:1], (row, col)
    *_, last = shown
    assert last["task (chance level)"] == "retrieval_6: induction score, trained (at init)"
    trained, init = induction["induction score, trained"], induction["induction score, at init"]
    for col, col_source in zip(list(last)[1:], list(trained)[1:]):
        assert numbers(last[col]) == numbers(trained[col_source]) + numbers(init[col_source]), col
    table_end = said.index("\n\n", said.index("\n|"))
    rest = said[table_end:]  # what follows the final values: the times table and the spreads
    times, rates = re.findall(r"\d+ min \d+ s", rest), re.findall(r"[\d-]+ GFLOP/s", rest)
    assert len(times) >= 3 and len(rates) >= 3 and re.search(r"\b(?:one|two) threads?\b|\| (?:one|two)\b", rest)
    for stated_here in numbers(rest) + times + rates:  # whole numbers: 0.99 is not read inside 0.9996
        assert re.search(rf"(?<![\d.,]){re.escape(stated_here)}(?![\d,]|\.\d)", measured), stated_here


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


def test_ddp_a_busy_out_dir_stops_every_rank_in_one_line(tmp_path):
    """Under torchrun, a run into a folder another run holds ends every process in one line, exit status 2."""
    (tmp_path / "out").mkdir()
    with common.lock_folder(str(tmp_path / "out")):
        proc = torchrun(tmp_path, "", "--attn=softmax")
    lines = sorted(line for line in proc.stderr.splitlines() if line.startswith("error: "))
    assert lines[0].startswith(f"error: {tmp_path / 'out'} is in use by the run of pid {os.getpid()} ")
    assert lines[1] == f"error: rank 1: stopped as rank 0 failed to take {tmp_path / 'out'}", proc.stderr
    assert len(lines) == 2, proc.stderr
    # torchrun ends the other worker once one exits: that one may die of its SIGTERM first
    assert set(re.findall(r"exitcode\s+: (-?\d+)", proc.stderr)) in ({"2"}, {"2", "-15"}), proc.stderr
    assert 'train.py", line' not in proc.stderr and not run_files(tmp_path / "out")


def test_ddp_a_dying_rank_ends_the_job(tmp_path):
    t0 = time.time()
    proc = torchrun(tmp_path, "import os\nif os.environ.get('RANK') == '1':\n    os._exit(3)  # rank 1 dies\n",
                    "--attn=softmax", timeout=300)
    assert proc.returncode != 0 and time.time() - t0 < 120  # rank 0 is ended, not left waiting


# ===== sample.py

TRAIN = ["--device=cpu", "--log_interval=1000", "--n_layer=2", "--n_head=2", "--mixing_heads=", "--n_embd=32",
         "--batch_size=16",
         "--warmup_iters=2", "--max_iters=4", "--eval_interval=4", "--eval_iters=2"]


def start(*args):
    """A script of this repository in a subprocess, one thread each (the CPU is shared)."""
    return subprocess.Popen([sys.executable, *args], cwd=HERE, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_sample(out_dir, *args):
    """sample.py in this process; returns its exit status."""
    return cli(sample.main, [f"--out_dir={out_dir}", "--device=cpu", *args])


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Tiny checkpoints trained for 4 steps: an induction task, a byte-level text corpus and a classifier."""
    root = tmp_path_factory.mktemp("ckpts")
    data = root / "data"
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 30)
    sst = root / "sst"
    sst.mkdir()
    rows = [f"a {w} film\t{y}" for w, y in (("great", 1), ("dull", 0), ("lovely", 1), ("awful", 0))] * 6
    for name in ("train.tsv", "dev.tsv"):
        (sst / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    for args in (["text", f"--src={text}"], ["sst2", f"--src={sst}", "--max_len=16"]):
        assert cli(prepare.main, [*args, "--tokenizer=bytes", f"--out_dir={data}"]) == 0
    runs = {"induction": ["--task=induction_8", "--attn=softmax"],
            "text": ["--task=text", "--attn=mixing", "--block_size=16"],
            "sst2": ["--task=sst2", "--attn=softmax", "--block_size=16"]}
    for name, args in runs.items():  # in this process: no Python to start
        assert cli(train.main, [f"--out_dir={root / name}", f"--data_dir={data}", *TRAIN, *args]) == 0
    return root


def is_png(path, min_size=10_000):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > min_size


# ----------------------------------------------------------------------------- checkpoints of each kind


def test_task_checkpoint_shows_answers_maps_and_induction(ckpts, capsys):
    out = ckpts / "induction"
    assert run_sample(out, "--num_samples=5") == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert len(lines) == 6 and all("truth:" in line and "model:" in line for line in lines[:5])
    assert "best.pt, the test split" in lines[-1] and "answer tokens right" in lines[-1]
    assert run_sample(out, "--num_samples=1", "--checkpoint=latest") == 0  # its score is the last eval's val_acc
    final = read_metrics(out)[-1]
    assert f"ckpt.pt, the test split, each answer token from the true ones before it (train.py's val_acc, val_exact): " \
           f"{final['val_acc']:.4f} of the answer tokens right" in capsys.readouterr().out
    assert run_sample(out, "--num_samples=5", "--use_cache=False") == 0
    assert capsys.readouterr().out == printed  # greedy: the same answers without the cache
    assert run_sample(out, "--attn_maps", "--induction=True") == 0  # a bare --flag turns a bool option on
    printed = capsys.readouterr().out
    assert "head 1" in printed and "best: layer" in printed
    assert "answer tokens right" not in printed
    assert is_png(out / "attn_maps.png") and is_png(out / "induction.png")


def test_text_checkpoint_samples_from_a_prompt(ckpts, capsys, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("the lazy")
    for start, text in (("the quick", "the quick"), (f"FILE:{prompt}", "the lazy")):
        assert run_sample(ckpts / "text", f"--start={start}", "--num_samples=2", "--max_new_tokens=7") == 0
        printed = capsys.readouterr().out.split("---------------\n")
        assert len(printed) == 3 and all(s.startswith(text) and len(s) >= len(text) + 1 for s in printed[:2])
    args = ["--start=the", "--num_samples=2", "--max_new_tokens=9", "--temperature=1.5"]
    assert run_sample(ckpts / "text", *args) == 0
    cached = capsys.readouterr().out
    assert run_sample(ckpts / "text", *args, "--use_cache=False") == 0
    assert capsys.readouterr().out == cached  # seeded: the same samples without the cache
    assert run_sample(ckpts / "text", "--attn_maps") == 0
    assert is_png(ckpts / "text" / "attn_maps.png")


def test_classifier_checkpoint_labels_text(ckpts, capsys):
    assert run_sample(ckpts / "sst2", "--classify=a lovely film") == 0
    label, _, prob = capsys.readouterr().out.strip().partition(" (p=")
    assert label in ("negative", "positive") and 0.5 <= float(prob.rstrip(")")) <= 1.0
    assert run_sample(ckpts / "sst2", "--num_samples=4") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and "truth:" in lines[0] and lines[-1].startswith("accuracy:")
    assert run_sample(ckpts / "sst2", "--induction") == 0
    assert "best: layer" in capsys.readouterr().out


# ----------------------------------------------------------------------------- bad input

SAMPLE_BAD_INPUTS = [
    (["--temprature=0.5"], "unknown option --temprature; valid:"),
    (["--top_k=many"], "expected a int"),
    (["--top_k"], "--top_k needs a value"),
    (["--use_cache=yes"], "expected a bool"),
    (["--temperature=0"], "must be positive"),
    (["--max_new_tokens=-1"], "must be zero or positive"),
    (["--device=tpu"], "unknown device"),
    (["configs/x.py"], "unexpected argument"),
    (["--start=FILE:/nonexistent/prompt.txt"], "cannot read the file"),
    (["--classify=some text"], "--classify needs a classifier"),
    (["--data_dir=/nonexistent"], "is not prepared"),
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
    proc = start("sample.py", f"--out_dir={tmp_path}")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "Traceback" not in err and err.count("\n") == 1


def test_propagation_at_init_prints_and_plots(tmp_path, capsys):
    """No checkpoint: covariance and similarity of tokens after each layer, for the four networks at init. The sink
    head is what draws MixiT's tokens together: without it they stay as apart as they start."""
    assert cli(sample.main, ["--propagation=4", "--propagation_width=32", f"--out_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in sample.NETWORKS) and is_png(tmp_path / "propagation.png", 20_000)
    curves = sample.propagation_curves(8, 128, seed=0)
    assert all(c.shape == (9, 2) for c in curves.values())
    random, mixit, plain = curves["random transformer"], curves["MixiT"], curves["MixiT without shaping"]
    assert random[8, 1] > 0.7 and plain[8, 1] > 0.7 and mixit[8, 1] < 0.5  # tokens collapse together without shaping
    sinkless = curves["MixiT without its sink head"]
    assert mixit[8, 1] > 0.2 and abs(sinkless[8, 1]) < 0.02 and abs(sinkless[8, 1] - sinkless[0, 1]) < 0.01


def test_express_probe_at_init_and_on_a_checkpoint(tmp_path, capsys, monkeypatch):
    """--express=init: at init the mean head forms the prefix mean exactly, a softmax layer nearly (random small scores
    give near-uniform causal weights), MixiT's few heads hardly; a table and express.png. --express=ckpt: each layer of
    a checkpoint, trained and at init."""
    monkeypatch.setattr(sample, "LENGTHS", (8,))
    monkeypatch.setattr(sample, "HEAD_COUNTS", (2, 4))
    mean = {(r["variant"], r["heads"]): r["prefix mean"] for r in sample.residuals_at_init(seed=0)}
    assert len(mean) == 8 and mean["MixiT, mean head", 2] < 1e-6 and mean["softmax", 4] < 0.15  # float32 maps
    assert mean["MixiT", 2] > mean["MixiT", 4] > 0.5
    assert cli(sample.main, ["--express=init", f"--out_dir={tmp_path}"]) == 0
    assert "MixiT, mean head" in capsys.readouterr().out and is_png(tmp_path / "express.png", 20_000)
    assert run_train(tmp_path / "run", "--task=dyck_8", "--attn=mixing", "--fixed_head=mean", "--max_iters=2", *FAST) == 0
    assert run_sample(tmp_path / "run", "--express=ckpt") == 0
    rows = [line.replace("at init", "init").split() for line in capsys.readouterr().out.splitlines()]
    assert [r[:3] for r in rows if r[:1] in (["0"], ["1"]) and r[1] != "x"] == [[layer, model, "0.000"] for layer in "01" for model in
                                                               ("trained", "init")]  # the mean head: prefix mean


def test_greedy_answers_are_counted_by_token_and_by_example(capsys):
    """sample.py's answers on addition_2's first 3 evaluation rows, set by hand: the first all right, the second wrong
    in its first answer token only, the third wrong in every one; the last line counts tokens and whole examples."""
    task = data.make_task("addition_2")
    _, y = next(task.eval_batches(task.val_split, 3))
    truths = [row[row >= 0] for row in y]
    wrong = iter(zip(truths, (0, 1, len(truths[2]))))

    def generate(prompt, new, top_k, use_cache):
        truth, n = next(wrong)
        return torch.cat([prompt, torch.cat([(truth[:n] + 1) % 31, truth[n:]])[None]], 1)

    sample.show_answers(types.SimpleNamespace(generate=generate), task, {"num_samples": 3, "use_cache": True}, "cpu")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines] == ["ok", "WRONG", "WRONG"]


def test_induction_printout_names_the_best_head(capsys, monkeypatch):
    """sample.py --induction on scores set by hand (2 layers x 3 heads, the best at layer 1, head 1): each score to 3
    decimals in its place, the best head."""
    scores = torch.tensor([[0.1, 0.5, 0.2], [0.3, 0.9, 0.0]])
    monkeypatch.setattr(sample, "induction_scores", lambda *args, **kw: scores)
    monkeypatch.setattr(sample, "plot_induction", lambda *args: None)
    model = types.SimpleNamespace(config=MixiTConfig(attn="softmax"))
    sample.show_induction(model, None, {"seed": 0, "out_dir": "."}, "text")
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["layer", "0", "0.100", "0.500", "0.200"] and lines[3].split()[2:] == ["0.300", "0.900",
                                                                                                      "0.000"]
    assert lines[4] == "best: layer 1, head 1 (0.900)" and len(lines) == 5


def test_express_on_a_checkpoint_sets_the_same_model_at_init_beside_it(tmp_path, capsys):
    """--express=ckpt on a softmax checkpoint whose W_Q, W_K, W_V moved far from init (times 30: sharp attention): the
    "trained" rows are the probe of the checkpoint's model, the "at init" rows that of a model built afresh from its
    config and seed, on the task's first 8 evaluation rows (printed to 3 decimals)."""
    task = data.make_task("dyck_4")
    mconf = MixiTConfig(vocab_size=4, block_size=task.block_size, n_layer=2, n_head=2, n_embd=32, attn="softmax")
    trained = MixiT(mconf)
    with torch.no_grad():
        for block in trained.blocks:
            block.attn.qkv.weight.mul_(30.0)
    common.save_checkpoint([str(tmp_path / "ckpt.pt")], trained, torch.optim.AdamW(trained.parameters()),
                           {"task": "dyck_4"}, {"iter_num": 1})
    assert run_sample(tmp_path, "--express=ckpt") == 0
    rows = [line.replace("at init", "init").split() for line in capsys.readouterr().out.splitlines()]
    printed = {(int(r[0]), r[1]): [float(v) for v in r[2:]] for r in rows if r[0].isdigit()}
    idx = next(task.eval_batches(task.val_split, 8))[0]
    for when, model in (("trained", trained), ("init", MixiT(mconf))):
        probe = sample.layer_residuals(model, idx)  # {pattern: (n_layer,)}
        for layer in range(2):
            assert printed[layer, when] == pytest.approx([r[layer].item() for r in probe.values()], abs=6e-4)
    moved = [abs(a - b) for layer in range(2) for a, b in zip(printed[layer, "trained"], printed[layer, "init"])]
    assert max(moved) > 0.05  # the trained rows tell apart from the init rows


def test_unshaped_mixing_is_plain_random_attention_and_the_sinkless_head_the_identity():
    block = tiny_model(attn="mixing").blocks[0]
    sample.unshape(block, torch.Generator().manual_seed(0))
    A = torch.eye(12) + block.attn.mixing
    assert torch.allclose(A.sum(-1), torch.ones(4, 12)) and (A >= 0).all() and torch.equal(A, A.tril())
    assert block.skip_scale == block.branch_scale == 1.0
    sample.NETWORKS["MixiT without its sink head"][1](block, None)
    assert torch.equal(block.attn.mixing[0], torch.zeros(12, 12)) and block.attn.mixing[1:].abs().sum() > 0


# ===== report.py


def test_report_redoes_a_finished_comparison_from_its_runs_files(tmp_path):
    """python report.py DIR: the results.md, runs.json and compare.png train.py wrote, again, from the runs' own files
    (runs.json names each run's folder)."""
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax,mixing", "--max_iters=2", "--eval_interval=1",
                     *FAST) == 0
    written = {name: (tmp_path / name).read_text() for name in ("results.md", "runs.json")}
    for name in ("results.md", "compare.png"):
        (tmp_path / name).unlink()
    proc = subprocess.run([sys.executable, "report.py", str(tmp_path)], cwd=HERE, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {name: (tmp_path / name).read_text() for name in written} == written
    assert is_png(tmp_path / "compare.png")
    assert [r["run_dir"] for r in json.loads(written["runs.json"])] == ["addition_2-softmax", "addition_2-mixing"]


MIXIT_PARAM = "MixiT parametrization (multipliers base 512, skip 0.707, c- -1)"


@pytest.mark.parametrize("kw, described", [
    (dict(attn="mixing"), MIXIT_PARAM),
    (dict(attn="mixing", fixed_head="mean"), f"{MIXIT_PARAM}, mixing head 1 the prefix mean"),
    (dict(attn="softmax", fixed_head="mean"), "standard parametrization"),  # no mixing head to hold the mean
    (dict(attn="ms", fixed_head="previous"), f"layers mixing softmax, {MIXIT_PARAM}, mixing head 1 the previous token"),
    (dict(attn="fl", n_classes=2, causal=False), f"layers frozen_qk learned_mixing, {MIXIT_PARAM}, frozen W_Q, W_K ~ "
                                                 f"N(0, 1/n), mean pooling, pads masked, mean centring")])
def test_model_description_of_each_setting(kw, described):
    """The description in the log, results.md and runs.json: only a MixiT run with fixed_head set names its head 1."""
    assert report.describe_model(mixit_config({**TINY, **kw})) == f"2 layers x 32, 4 heads, {described}"


def markdown_rows(text):
    """The rows of the first markdown table in text, each a dict from heading to cell."""
    lines = list(itertools.takewhile(lambda line: line.startswith("|"),
                                     itertools.dropwhile(lambda line: not line.startswith("|"), text.splitlines())))
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]
    return [dict(zip(cells(lines[0]), cells(line))) for line in lines[2:]]


def test_report_files_and_plots_hold_each_runs_numbers(tmp_path, monkeypatch):
    """write_report on 3 runs set by hand (softmax at seeds 0 and 1, mixing at seed 0; 8 sequences a micro-batch, 3
    micro-batches a step, 5 steps): results.md's mean ± sample std over seeds, runs.json's step in samples (8 x 3),
    samples seen (5 steps of 24), folder, hardware and seconds; compare.png's curves (the seeds' mean at each
    evaluation) and chance line."""
    base = dict(train.DEFAULTS, task="addition_2", mixing_heads="", batch_size=8, gradient_accumulation_steps=3,
                model="2 layers")
    runs = [dict(base, attn=attn, seed=seed, out_dir=str(tmp_path / f"run{k}"))
            for k, (attn, seed) in enumerate([("softmax", 0), ("softmax", 1), ("mixing", 0)])]
    evals = lambda acc, loss, k: [{"iter": 1, "train_loss": 2.0, "val_loss": 2.0, "val_acc": acc[0], "lr": 1e-3,
                                   "tokens": 24 * 7, "flops": 1e8, "time": 0.5},
                                  {"iter": 5, "train_loss": 1.2, "val_loss": loss, "val_acc": acc[1], "lr": 1e-3,
                                   "val_acc_chance": 0.25, "tokens": 5 * 24 * 7, "flops": 1e9 * k, "time": 2.0 * k}]
    histories = [evals((0.1, 0.2), 1.0, 1), evals((0.3, 0.4), 1.5, 2), evals((0.5, 0.9), 0.5, 3)]
    for h, by_pairs in zip(histories, ([0.1, 0.3], [0.3, 0.5], [1.0, 0.8])):
        h[0]["val_acc_chance"], h[1]["val_acc_pos"] = 0.25, by_pairs  # accuracy of the 1st and 2nd answers
    figures = []
    monkeypatch.setattr(report.plt, "close", figures.append)
    env = types.SimpleNamespace(master=True, describe=lambda: "1 x cpu")
    report.write_report(runs, histories, train.run_label, str(tmp_path), env, 75.0)
    results = (tmp_path / "results.md").read_text()
    assert "over seeds 0, 1. 3 runs in 1m15s on 1 x cpu." in results
    softmax, mixing = markdown_rows(results)
    assert {k: softmax[k] for k in ("variant", "seeds", "iters", "train_loss", "val_loss", "val_acc", "time")} == {
        "variant": "softmax", "seeds": "2", "iters": "5", "train_loss": "1.2", "val_loss": "1.25 ± 0.35",
        "val_acc": "0.3 ± 0.14", "time": "3 ± 1.4"}  # std: sqrt(((0.4 - 0.3)^2 + (0.2 - 0.3)^2) / (2 - 1))
    assert (mixing["seeds"], mixing["val_acc"], mixing["val_acc_chance"], mixing["model"]) == ("1", "0.9", "0.25",
                                                                                               "2 layers")
    finals = json.loads((tmp_path / "runs.json").read_text())
    assert [(r["variant"], r["seed"], r["run_dir"], r["val_acc"]) for r in finals] == [
        ("softmax", 0, "run0", 0.2), ("softmax", 1, "run1", 0.4), ("mixing", 0, "run2", 0.9)]
    assert all(r["step_samples"] == 24 and r["samples"] == 120 and r["hardware"] == "1 x cpu" and r["seconds"] == 75
               for r in finals)
    (compare,) = figures
    acc = compare.axes[0]
    curves = {line.get_label(): line.get_xydata() for line in acc.lines if line.get_label()[0] != "_"}
    assert list(curves) == ["softmax", "mixing"] and np.allclose(curves["mixing"], [[1, 0.5], [5, 0.9]])
    assert np.allclose(curves["softmax"], [[1, (0.1 + 0.3) / 2], [5, (0.2 + 0.4) / 2]])
    chance = [line.get_ydata()[0] for line in acc.lines if line.get_label()[0] == "_"]
    assert chance == [0.25, 0.25] and acc.get_xlabel() == "optimizer step"
    assert acc.get_title() == "addition_2: accuracy (dashed: chance)"
    by_pairs = {line.get_label(): line.get_xydata() for line in compare.axes[2].lines}  # x: answer position
    assert np.allclose(by_pairs["softmax"], [[0, 0.2], [1, 0.4]])
    assert np.allclose(by_pairs["mixing"], [[0, 1.0], [1, 0.8]])
    assert compare.axes[2].get_xlabel() == "answer position"


def test_report_takes_one_folder_or_a_claims_file(tmp_path, capsys):
    """report.py on several folders, or none, is one line, status 2; so is one folder without runs.json, or whose
    runs.json names no run folders, or an out_dir that is no folder; nothing written."""
    runs = [dict(task="mqar_4", variant="softmax", attn="softmax", freeze="", seed=0, model="m", val_acc=0.2)]
    (tmp_path / "where").mkdir()
    (tmp_path / "where" / "runs.json").write_text(json.dumps(runs))
    for names in ([str(tmp_path / "where"), str(tmp_path / "where")], []):
        assert cli(report.main, names) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "name one folder of a finished train.py comparison" in err
    assert cli(report.main, [str(tmp_path / "nowhere"), f"--out_dir={tmp_path / 'new'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere/runs.json (No such file or directory); a finished train.py" in err
    assert not (tmp_path / "new").exists()
    assert cli(report.main, [str(tmp_path / "where"), f"--out_dir={tmp_path / 'where' / 'runs.json'}"]) == 2
    assert "is not writable" in capsys.readouterr().err
    assert cli(report.main, [str(tmp_path / "where")]) == 2  # one folder: its runs' files, which these runs lack
    assert "names no run folders" in capsys.readouterr().err
    assert os.listdir(tmp_path / "where") == ["runs.json"]


def test_variant_colors_keep_a_lone_kinds_colour():
    """compare.png's colours: a kind's one variant takes its colour; the rest (hybrids, frozen_qk's two variants) each
    one of tab20b's, a colour per variant for a hybrid study's many patterns too."""
    variants = ["".join(p) for p in itertools.product("ms", repeat=4)] + ["frozen_qk", "frozen_qk unfreeze@50%"]
    runs = [dict(variant=v, attn=v.split()[0]) for v in variants]
    colors = report.variant_colors(runs)
    assert len(set(colors.values())) == len(variants)
    assert [colors["ssss"], colors["mmmm"]] == [report.COLORS["softmax"], report.COLORS["mixing"]]
    assert [colors["mmms"], colors["frozen_qk"]] == [report.plt.cm.tab20b(0), report.plt.cm.tab20b(18)]


# ===== bench.py

BENCH_SHAPE = dict(n_layer=1, n_embd=32, n_head=2, block_size=16, batch_size=2, accum=2, vocab_size=64)


def run_bench(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # a shared CPU: one thread does not stall on busy cores
    return subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), *args], capture_output=True, text=True,
                          cwd=HERE, env=env, timeout=300)


def test_cpu_run_writes_every_table(tmp_path, capsys):
    out = tmp_path / "b"
    assert cli(bench.main, ["--device=cpu", "--parts=calib,train,profile", "--steps=1", "--repeats=1",
                            "--warmup=1", "--profile_steps=1", f"--out_dir={out}"]) == 0
    results = json.loads((out / "bench.json").read_text())
    assert results["config"]["size"] == "tiny" and results["calib"]["measured_tflops"] > 0
    for shape in results["shapes"]:  # a row per variant and shape, every number positive
        rows = [r for r in results["train"] if r["shape"] == shape]
        assert [r["attn"] for r in rows] == list(ATTNS[:3])  # all: the paper's three
        for r in rows:
            assert min(r["ms_median"], r["ms_min"], r["tok_s_median"], r["mfu_pct"], r["peak_mib"],
                       r["flops_per_token"], r["trainable_m"]) > 0
            assert r["tok_s_median"] == pytest.approx(r["tokens_per_step"] / (r["ms_median"] / 1e3))
    lm = [r for r in results["train"] if r["shape"] == "lm_tiny"]
    assert lm[0]["accum"] == 2 and lm[0]["tokens_per_step"] == 8 * 2 * 64
    md = (out / "bench.md").read_text()
    for heading in ("## Calibration", "### lm_tiny", "### gpt2_tiny", "## Profile: mixing"):
        assert heading in md
    for a in ATTNS[:3]:
        assert f"| {a} |" in md and "aten::" in (out / f"profile_{a}.txt").read_text()
    assert "## Profile: mixing" in capsys.readouterr().out  # the tables are printed too


def test_memory_part_measures_a_step_with_the_whole_logits_and_in_chunks(tmp_path):
    """bench.py's memory part: one softmax step at the tiny shape (vocabulary 50,304), the loss over every position's
    logits at once and in chunks of 2^22 logits (82 positions): each row's peak memory and step time, in bench.md."""
    out = tmp_path / "b"
    assert cli(bench.main, ["--device=cpu", "--parts=memory", f"--out_dir={out}"]) == 0
    rows = json.loads((out / "bench.json").read_text())["memory"]
    assert [(r["loss"], r["chunk"]) for r in rows] == [("whole logits", 0), ("in chunks", 2 ** 22)]
    assert all(r["peak_mib"] > 0 and r["ms_median"] > 0 and r["vocab_size"] == 50304 for r in rows)
    assert "## The LM head's memory" in (out / "bench.md").read_text()


def test_sweep_part_prints_results_table_across_context(tmp_path, capsys):
    """bench.py's sweep part at two context lengths on a CPU: RESULTS' columns, a row per T, every
    variant's tokens/s and both ratios positive; the same table in bench.md."""
    out = tmp_path / "b"
    assert cli(bench.main, ["--device=cpu", "--parts=sweep", "--contexts=16,32", "--steps=1",
                            "--repeats=1", "--warmup=1", f"--out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    header = "| T | softmax (flash) | Frozen-QK | MixiT | MixiT / softmax | softmax / MixiT FLOPs |"
    table = printed[printed.index(header):].split("\n\n")[0]
    lines = table.splitlines()
    assert lines[1] == "|---|---|---|---|---|---|"
    cells = [line.strip("| ").split(" | ") for line in lines[2:]]
    assert [row[0] for row in cells] == ["16", "32"]
    assert all(float(cell.replace(",", "")) > 0 for row in cells for cell in row[1:])
    assert table in (out / "bench.md").read_text()


@pytest.mark.parametrize("arg, message", [("--colour=1", "unknown option --colour"), ("--steps=x", "--steps=x"),
                                          ("--device=tpu", "tpu"), ("--parts=calib,plots", "unknown part 'plots'"),
                                          ("--attn=linear", "unknown attn 'linear'"), ("--steps=-1", "steps=-1"),
                                          ("--size=huge", "size='huge'"), ("extra", "unexpected argument"),
                                          ("--contexts=64,x", "unknown context length 'x'")])
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, arg, message):
    assert cli(bench.main, [arg, f"--out_dir={tmp_path}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err
    assert not os.listdir(tmp_path)  # nothing written


def test_bad_input_exit_status():
    proc = run_bench("--colour=1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:")


def test_one_optimizer_step_per_step_over_the_micro_batches(monkeypatch):
    counts = {"step": 0, "forward": 0}
    configure = MixiT.configure_optimizers

    def counting(model, *args, **kwargs):
        optimizer = configure(model, *args, **kwargs)
        step = optimizer.step
        optimizer.step = lambda *a, **k: (counts.__setitem__("step", counts["step"] + 1), step(*a, **k))[1]
        model.register_forward_pre_hook(lambda *_: counts.__setitem__("forward", counts["forward"] + 1))
        return optimizer

    monkeypatch.setattr(MixiT, "configure_optimizers", counting)
    row = bench.time_training(setup("cpu", "float32"), BENCH_SHAPE, "mixing", steps=3, repeats=2, warmup=1, compile=False)
    assert counts == {"step": 1 + 3 * 2, "forward": 2 * (1 + 3 * 2)}  # accum 2: two micro-batches a step
    assert len(row["step_s"]) == 2 and row["tokens_per_step"] == 2 * 2 * 16
    assert row["ms_min"] <= row["ms_median"] and row["final_loss"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_timer_on_cuda(tmp_path):
    env = setup("cuda", "auto")
    row = bench.time_training(env, {**BENCH_SHAPE, "n_embd": 64, "block_size": 128}, "softmax", steps=3, repeats=2, warmup=2,
                              compile=True, profile_steps=2, profile_to=tmp_path / "p.txt")
    assert row["tok_s_median"] > 0 and row["peak_mib"] > 0 and row["final_loss"] > 0
    assert row["profile"]["sort"] == "self_device_time_total" and row["profile"]["top"][0]["ms_per_step"] > 0
    assert "Self CUDA" in (tmp_path / "p.txt").read_text()


# ===== the CUDA lane: run by the same test command where a GPU is present, skipped elsewhere


@cuda
def test_cuda_every_variant_trains_compiled_in_bf16_like_eager(tmp_path):
    args = ["--task=addition_3", "--attn=all", "--max_iters=20", "--eval_interval=10", "--dtype=bfloat16",
            "--n_embd=64", "--batch_size=64", "--warmup_iters=2"]
    for mode in ("True", "False"):
        assert run_train(tmp_path / mode, *args, f"--compile={mode}", device="cuda") == 0
    for attn in ATTNS[:3]:  # all: the paper's three
        compiled, eager = (read_metrics(next((tmp_path / mode).glob(f"addition_3-{attn}*")))  # -h64: MixiT's heads
                           for mode in ("True", "False"))
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
def test_cuda_builds_the_cpus_mixing_matrices_on_the_gpu():
    """The matrices are a function of the seed on any device: a GPU's equal the CPU's to float rounding, so a
    checkpoint trained on one loads on the other; in bfloat16 they are stored cast."""
    cfg = lambda: MixiTConfig(vocab_size=32, block_size=300, n_layer=2, n_head=8, n_embd=64, attn="mixing")
    gpu, cpu = MixiT(cfg(), "cuda", torch.bfloat16), MixiT(cfg())
    P = gpu.blocks[1].attn.mixing
    assert P.is_cuda and P.dtype == torch.bfloat16
    assert torch.allclose(P.float().cpu(), cpu.blocks[1].attn.mixing, rtol=1e-2, atol=1e-3)
    assert torch.allclose(MixiT(cfg(), "cuda").blocks[1].attn.mixing.cpu(), cpu.blocks[1].attn.mixing, atol=1e-6)
    common.check_fingerprint(cpu, {"fingerprint": common.fingerprint(gpu)}, "a GPU's checkpoint")


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


# ----- the verdict rule

FLOOR3 = [0.3, 0.3, 0.3]  # a chance level, one per seed


@pytest.mark.parametrize("p, df, published", [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776),
                                              (0.975, 10, 2.228), (0.975, 30, 2.042), (0.95, 2, 2.920),
                                              (0.95, 4, 2.132), (0.95, 10, 1.812), (0.95, 120, 1.658)])
def test_t_quantiles_match_the_published_table(p, df, published):
    assert report.t_quantile(p, df) == pytest.approx(published, abs=6e-4)


def test_welchs_interval_and_p_on_the_textbook_pair():
    """The textbook pair (15 values each; Welch: t = 2.46, 24.99 degrees of freedom, p = 0.021): the difference, its
    95 % interval (t 2.060 at 25 degrees of freedom, times the standard error) and the two-sided p; the tail agrees
    with Student's t near 0 too (a t of 1e-12 leaves half of it)."""
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    c = report.contrast([(1, report.sample(b)), (-1, report.sample(a))])
    se = math.sqrt(np.var(a, ddof=1) / 15 + np.var(b, ddof=1) / 15)
    assert c[:2] == pytest.approx((np.mean(b) - np.mean(a), se)) and c[0] / se == pytest.approx(2.455, abs=1e-3)
    assert c[2] == pytest.approx(24.99, abs=0.01) and 2 * report.p_above(c) == pytest.approx(0.0214, abs=2e-4)
    assert report.t_quantile(0.975, c[2]) == pytest.approx(2.060, abs=2e-3)
    assert report.p_above(report.neg(c)) == pytest.approx(1 - report.p_above(c)) and report.p_above(c, c[0]) == \
        pytest.approx(0.5, abs=1e-7)
    assert report.contrast([(1, (0.9, 0.0, 3)), (-1, (0.4, 0.0, math.inf))])[:2] == (0.5, 0.0)  # levels: exact
    assert report.t_tail(1e-12, 4) == pytest.approx(0.5, abs=1e-6) and report.t_tail(2.776, 4) == \
        pytest.approx(0.025, abs=2e-5)


@pytest.mark.parametrize("first, other, floors, steps, direction, word", [
    ([0.50, 0.52, 0.48], [0.90, 0.92, 0.88], (FLOOR3, FLOOR3), (100, 100), "higher", "yes"),
    ([0.50, 0.52, 0.48], [0.90, 0.92, 0.88], (FLOOR3, FLOOR3), (100, 100), "lower", "no"),  # reversed
    ([0.50, 0.505, 0.495], [0.50, 0.501, 0.499], (FLOOR3, FLOOR3), (100, 100), "higher",
     "no: equal within ±0.02"),  # [-0.012, +0.012] at 95 %: inside the margin, not higher in any way that counts
    ([0.50, 0.60, 0.40], [0.62, 0.72, 0.52], (FLOOR3, FLOOR3), (100, 100), "higher",
     "not shown (15 seeds a model for ≥ 80% power at look 2)"),  # planned at the next look's level
    ([0.50, 0.52, 0.48], [0.46, 0.48, 0.44], (FLOOR3, FLOOR3), (100, 100), "higher",
     "not shown (7 seeds a model for ≥ 80% power at look 2)"),  # reversed, [-0.085, +0.005] holds 0
    ([0.50, 0.60, 0.40], [0.50, 0.60, 0.40], (FLOOR3, FLOOR3), (100, 100), "higher",
     "not shown (more than 100 seeds a model for ≥ 80% power at look 2)"),  # equal means: no count decides it
    ([1.00, 1.00, 1.00], [0.995, 0.997, 0.993], (FLOOR3, FLOOR3), (100, 100), "match", "yes"),  # 95 %: ±0.005
    ([1.00, 1.00, 1.00], [0.95, 0.96, 0.94], (FLOOR3, FLOOR3), (100, 100), "match", "no"),  # [-0.075, -0.025]
    ([1.00, 1.00, 1.00], [0.97, 0.99, 0.95], (FLOOR3, FLOOR3), (100, 100), "match",
     "not shown (41 seeds a model for ≥ 80% power at look 2)"),  # the mean -0.03 lies past the margin
    ([0.90, 0.90, 0.90], [0.90, 0.90, 0.90], (FLOOR3, FLOOR3), (100, 100), "match",
     "equal at every seed (3 of 3 at 0.9: at most 71 % of seeds off it, 97.5 %)"),  # 1 - 0.025 ** (1 / 3) = 0.708
    ([0.50, 0.505, 0.495], [0.495, 0.49, 0.50], (FLOOR3, FLOOR3), (100, 100), "holds", "yes"),  # bound -0.016
    ([0.50, 0.52, 0.48], [0.47, 0.465, 0.475], (FLOOR3, FLOOR3), (100, 100), "holds",
     "not shown (43 seeds a model for ≥ 80% power at look 2)"),  # -0.03: past the margin, not shown yet
    ([0.50, 0.505, 0.495], [0.44, 0.445, 0.435], (FLOOR3, FLOOR3), (100, 100), "holds", "no"),  # bound -0.049
    ([0.50, 0.52, 0.48], [0.62, 0.64, 0.60], (FLOOR3, FLOOR3), (100, 100), "holds", "yes"),  # gaining holds too
    ([0.50, 0.52, 0.48], [0.90, 0.92, 0.88], (FLOOR3, FLOOR3), (100, 400), "higher", "unequal budgets"),
    ([0.50], [0.90], ([0.3], [0.3]), (100, 100), "higher", "spread unknown"),
    ([0.50, 0.52, 0.48], [0.20, 0.22, 0.18], (FLOOR3, FLOOR3), (100, 100), "lower",
     "yes — the other below its floor"),  # decisive, and said beside it
    ([0.34, 0.36, 0.35], [0.90, 0.92, 0.88], ([0.5, 0.5, 0.5], FLOOR3), (100, 100), "higher",
     "yes — the first below its floor"),  # the first below its own floor: the other, claimed better, clears it
    ([0.50, 0.52, 0.48], [0.299, 0.301, 0.300], (FLOOR3, FLOOR3), (100, 100), "fails", "yes: at its floor"),
    ([0.50, 0.52, 0.48], [0.10, 0.12, 0.08], (FLOOR3, FLOOR3), (100, 100), "fails", "yes: below its floor"),
    ([0.50, 0.52, 0.48], [0.40, 0.42, 0.38], (FLOOR3, FLOOR3), (100, 100), "fails", "no"),
    ([0.50, 0.52, 0.48], [0.30, 0.32, 0.28], (FLOOR3, FLOOR3), (100, 100), "fails",
     "not shown (15 seeds a model for ≥ 80% power at look 2)"),  # 0.30 ± 0.02
    ([0.299, 0.301, 0.300], [0.299, 0.301, 0.300], (FLOOR3, FLOOR3), (100, 100), "fails",
     "not reproduced at this scale: the first is not shown 0.1 past its floor (the difference alone: yes: at its "
     "floor)"),
    ([0.299, 0.301, 0.300], [0.300, 0.302, 0.298], (FLOOR3, FLOOR3), (100, 100), "match",
     "not reproduced at this scale: the first is not shown 0.1 past its floor (the difference alone: yes)"),  # trivial
    ([0.29, 0.31, 0.30], [0.10, 0.12, 0.08], (FLOOR3, FLOOR3), (100, 100), "match",
     "not reproduced at this scale: the first is not shown 0.1 past its floor (the difference alone: no)"),  # a no too
    ([0.40, 0.405, 0.395], [0.40, 0.402, 0.398], ([0.33] * 3,) * 2, (100, 100), "lower",
     "not reproduced at this scale: the first is not shown 0.1 past its floor (the difference alone: no: equal within "
     "±0.02)"),  # 0.07 above chance: nothing at stake to lose
    ([0.50, 0.52, 0.48], [0.90, 0.92, 0.88], ([0.45, 0.50, 0.55], [0.70, 0.72, 0.74]), (100, 100), "higher",
     "yes — the first near its floor"),  # trained floors: the first not shown apart from its own
    ([0.50, 0.52, 0.48], [0.90, 0.92, 0.88], ([0.45, 0.50, 0.55], [0.86, 0.90, 0.94]), (100, 100), "higher",
     "not reproduced at this scale: the other is not shown 0.1 past its floor (the difference alone: yes)"),
])
def test_the_verdict_rule_on_hand_set_seeds(first, other, floors, steps, direction, word):
    """One case per word and per condition, every one-sided test at 2.5 % (a 95 % interval's side): a direction by
    the difference's interval (Welch), and no where it lies inside ±0.02; a match by two one-sided tests at ±0.02;
    holds, non-inferiority (the lower bound above -0.02); fails, the other at its floor (within ±0.02) or below it;
    any word where the model the claim needs (the one claimed better, else the first) is not shown 0.1 past its floor
    is not reproduced; a decisive word names a model that does not clear its floor; two constants off the ceiling are
    equal at every seed, with the exact bound on seeds that would differ; equal steps, two seeds each; the seeds for
    80 % power at the next look. A score with no ceiling named: the margin 0.02 in its unit, the stake 5 margins."""
    assert report.verdict([first, other], floors, steps, direction)[0] == word


def test_the_verdict_rule_on_losses_reads_lower_as_better():
    """Losses: a floor is cleared from below (a bigram's 2.35), higher means worse; competitive: the other below the
    midpoint of the first and the floor (a trained one, MixiT's 2.40 ± 0.01): more than half the gain kept; holds:
    the other's loss no more than 0.02 nats above the first's."""
    softmax, mixing, floor = [1.70, 1.72, 1.74], [2.10, 2.08, 2.12], [2.35] * 3
    verdict = lambda *args: report.verdict(*args)[0]
    assert verdict([softmax, mixing], (floor, floor), (90, 90), "higher", True) == "yes"
    assert verdict([softmax, [2.48, 2.46, 2.50]], (floor, floor), (90, 90), "higher", True) == \
        "yes — the other above its floor"  # worse than the bigram (a loss above it): still decisively behind
    assert verdict([softmax, mixing], (floor, floor), (90, 90), "lower", True) == "no"
    tight = [1.715, 1.72, 1.725]
    assert verdict([tight, [1.72, 1.725, 1.73]], (floor, floor), (90, 90), "holds", True) == "yes"  # +0.0163
    assert verdict([tight, [1.80, 1.81, 1.79]], (floor, floor), (90, 90), "holds", True) == "no"
    mixit = [2.39, 2.40, 2.41]  # the midpoint of 1.72 and 2.40 is 2.06
    for other, word in (([1.95, 1.96, 1.97], "yes"), ([2.20, 2.21, 2.22], "no"),
                        ([1.96, 2.02, 2.08], "not shown (25 seeds a model for ≥ 80% power at look 2)")):
        assert verdict([softmax, other], (mixit, mixit), (90, 90), "competitive", True) == word
    # the midpoint is the first's and the reference's (the other's floor, 2.80: 2.26), not the first's own floor
    assert verdict([softmax, [2.14, 2.15, 2.16]], (floor, [2.79, 2.80, 2.81]), (90, 90), "competitive", True) == "yes"


def test_the_verdict_rule_at_its_edges():
    """Where a word's bound sits: a match is 'no' only when the difference lies beyond ±0.02 (0.015 shown above 0 is
    not enough); 'equal within ±0.02' asks both one-sided tests at 2.5 %; two constants that differ are compared,
    not 'equal'; the plan names no word (a forecast is no evidence); the seeds asked can be two more than those run."""
    verdict = lambda *args: report.verdict(*args)[0]
    assert verdict([[0.50, 0.505, 0.495], [0.515, 0.52, 0.51]], (FLOOR3, FLOOR3), (1, 1), "match") == \
        "not shown (27 seeds a model for ≥ 80% power at look 2)"
    assert verdict([[0.495, 0.50, 0.505]] * 2, (FLOOR3, FLOOR3), (1, 1), "higher") == "no: equal within ±0.02"
    assert verdict([[0.49, 0.50, 0.51]] * 2, (FLOOR3, FLOOR3), (1, 1), "higher").startswith("not shown")  # ±0.025
    assert verdict([[1.0] * 3, [0.9] * 3], (FLOOR3, FLOOR3), (1, 1), "lower") == "yes"
    assert verdict([[0.50, 0.60, 0.40], [0.38, 0.48, 0.28]], ([0.3] * 3, [0.45] * 3), (1, 1), "lower") == \
        "not shown (15 seeds a model for ≥ 80% power at look 2)"  # planned: yes — the other below its floor
    assert verdict([[0.55, 0.45], [0.77, 0.67]], ([0.3] * 2,) * 2, (1, 1), "higher") == \
        "not shown (4 seeds a model for ≥ 80% power at look 2)"


def test_power_planning_holds_the_floor_gate_to_the_same_power():
    """Seeds for 80 % power clear the floor gate that often too: MixiT at 0.482 ± 0.045 against a random transformer at
    0.402 ± 0.0005 (chance 0.328) is a yes at 7 seeds by the point estimate, but MixiT is then not shown 0.1 past
    chance 80 % of the time, so 7 seeds are not planned; the count planned is one where the gate passes too."""
    floors = [(0.3277, 0.0, 7)] * 2
    word, _ = report.decide((0.402, 0.00049, 7), (0.4822, 0.045, 7), floors, "higher", False, (2, 2),
                              math.inf, power=0.8)
    assert word.startswith("not reproduced at this scale")
    assert report.verdict([[0.4015, 0.402, 0.4025], [0.4372, 0.4822, 0.5272]], ([0.3277] * 3,) * 2, (1, 1),
                          "higher")[0] == "not shown (10 seeds a model for ≥ 80% power at look 2)"


def test_a_model_short_of_the_stake_is_not_shown_beside_its_interval():
    """MixiT at 2 layers 0.097 above chance (0.3), the stake 5 x 0.03 x 0.7 = 0.105: its interval, 0.097 ± 4.303 x
    0.005 / sqrt(3) = [0.0846, 0.109], holds the stake, so more seeds could pass it: not shown, never 'at any seed count',
    the plan past 100 seeds at the observed mean, and the cell prints that interval beside the stake."""
    cells, _ = report.rule_cells(rule_runs([0.392, 0.397, 0.402], "a"), rule_runs([0.35, 0.45, 0.55], "b"), "val_acc",
                              directions=("holds",))
    assert cells["holds"] == "not shown (more than 100 seeds a model for ≥ 80% power at look 2)"
    assert cells["difference [interval], p"].endswith("; the first - floor: +0.097 [+0.0846, +0.109] 95% (needs > "
                                                      "0.105), p 1")
    assert cells["margin, stake"] == "±0.021, stake 0.105 of 0.7"


def test_margins_and_stakes_are_sized_to_what_the_score_can_move():
    """A score with a ceiling of 1: its margin 3 % of the headroom from its floor (chance 1/3: 0.02; a bag of words at
    0.895: 0.00315) and its stake 5 margins; a loss or bits a parameter: 0.02 in its unit, the stake 0.1. A stake the
    headroom cannot reach is out of reach, its own word: a loss floor of 0.05 nats lies 0.05 from 0, under 0.1 (the
    first, its loss claimed lower, is the model the claim needs)."""
    assert report.headroom(1 / 3, 1.0) == (pytest.approx(2 / 3), pytest.approx(0.02))
    assert report.headroom(0.895, 1.0)[1] == pytest.approx(0.00315)
    assert report.headroom(2.34, 0.0) == (pytest.approx(2.34), 0.02) and report.headroom(0.0, math.inf) == (math.inf, 0.02)
    word, p = report.verdict([[0.03, 0.04, 0.05], [0.10, 0.11, 0.12]], ([0.05] * 3,) * 2, (1, 1), "higher", True,
                             ceiling=0.0)
    assert word == "out of reach: the first's floor is 0.05 from the ceiling, the stake 0.1 (the difference alone: yes)"
    assert p < 0.05
    # at the ceiling of 1 the same floor is reachable: 5 x 0.03 x 0.95 = 0.1425 past 0.05
    assert report.verdict([[0.03, 0.04, 0.05], [0.90, 0.91, 0.92]], ([0.05] * 3,) * 2, (1, 1), "higher",
                          ceiling=1.0)[0] == "yes — the first near its floor"


def test_both_models_at_the_ceiling_are_untestable_with_the_exact_bound():
    """Both models at the ceiling at every seed: untestable, whatever the direction, no test run (outside Holm and the
    yes/no tally), with the one-sided Clopper-Pearson bound at the rule's 2.5 %: n of n at 1 leaves at most
    1 - 0.025 ** (1 / n) of seeds below, 52 % at 5 seeds, 71 % at 3; at two looks 1 - 0.0125 ** (1 / 5) = 58 %, and
    1 - 0.0125 ** (1 / 3) = 77 % at 3 seeds (the fewer of the two models')."""
    for direction in ("lower", "match", "higher", "holds"):
        assert report.verdict([[1.0] * 5, [1.0] * 5], (FLOOR3, FLOOR3), (1, 1), direction, ceiling=1.0) == (
            "untestable: both at the ceiling at every seed (5 of 5 at 1: at most 52 % of seeds below, 97.5 %)", None)
    assert report.verdict([[1.0] * 4, [1.0] * 3], (FLOOR3, FLOOR3), (1, 1), "lower", looks=(2, 2), ceiling=1.0)[0] == \
        "untestable: both at the ceiling at every seed (3 of 3 at 1: at most 77 % of seeds below, 98.75 %)"
    assert report.constant_bound(5, 1.0, 2, 1.0) == "5 of 5 at 1: at most 58 % of seeds below, 98.75 %"
    assert report.verdict([[1.0] * 3, [0.99, 1.0, 0.98]], (FLOOR3, FLOOR3), (1, 1), "lower", ceiling=1.0)[1] is not None


def test_a_change_between_two_variants_is_read_per_seed_without_a_stake():
    """A variant (folder, label, folder, label) is a change: per seed, the first's score less the second's, its floor
    no change (0); 'further' reads the other's change past the first's as 'higher' does, and no model's skill is at
    stake: a fall of 0.078 is no 0.15 past 0 but the word stands. Falls 0.05 0.10 0.08 0.03 0.13 (mean 0.078, std
    0.0396) against 0.20 0.22 0.19 (0.2033, 0.0153): +0.125, Welch se sqrt(0.0396² / 5 + 0.0153² / 3) = 0.0198."""
    later = {("f", "a"): [0.5, 0.6], ("g", "a"): [0.3, 0.7]}
    find = lambda variant: [dict(seed=s, val_acc=x, val_acc_chance=0.3) for s, x in enumerate(later[variant])]
    assert [(r["val_acc"], r["val_acc_chance"]) for r in report.variant_runs(find, ("f", "a", "g", "a"), "val_acc")] \
        == [(pytest.approx(0.2), 0.0), (pytest.approx(-0.1), 0.0)]
    assert report.variant_label(("f", "a", "g", "a")) == "a (f) - a (g)"
    falls = [[0.05, 0.10, 0.08, 0.03, 0.13], [0.20, 0.22, 0.19]]
    word, p = report.verdict(falls, ([0.0] * 5, [0.0] * 3), (1, 1), "further", ceiling=1.0)
    c = report.contrast([(1, report.sample(falls[1])), (-1, report.sample(falls[0]))])
    assert c[0] == pytest.approx(0.1253, abs=1e-4) and c[1] == pytest.approx(0.0198, abs=1e-4)
    assert word == "yes" and p == pytest.approx(2 * report.p_above(c))


def test_the_seeds_planned_can_be_the_most_a_model_already_has():
    """The next look adds seeds to the model with fewer (Frozen-QK's reference: 3 against 5): the count planned can be
    the 5 the other already has, where the word comes out with 80 % power at the third look."""
    first, other = [1.0] * 5, [0.305, 0.298, 0.31]
    assert report.verdict([first, other], ([0.3] * 5, FLOOR3), (1, 1), "fails", looks=(2, 2))[0] == \
        "not shown (5 seeds a model for ≥ 80% power at look 3)"
    grown = (*report.mean_std(other), 5)
    assert report.decide(report.sample(first), grown, [(0.3, 0.0, 5)] * 2, "fails", False, (3, 3), math.inf, power=0.8)[0] == \
        "yes: at its floor"


def test_a_word_not_reproduced_prints_the_gates_evidence_after_its_own():
    """Not reproduced: after the word's own p (the one Holm reads) the cell prints the needed model's score less its
    floor, that quantity's interval, the 0.1 it needs to pass and the p of passing it."""
    first, other = rule_runs([0.40, 0.405, 0.395], "a", 0.33), rule_runs([0.40, 0.402, 0.398], "b", 0.33)
    cells, p = report.rule_cells(first, other, "val_acc", directions=("lower",))
    # the stake: 5 margins of 3 % of the headroom 1 - 0.33, 0.1005
    assert cells["lower"].startswith("not reproduced at this scale: the first is not shown 0.1 past its floor")
    skill = report.contrast([(1, report.sample([0.40, 0.405, 0.395])), (-1, report.sample([0.33] * 3))])
    gate = min(1.0, 2 * report.p_above(skill, 5 * 0.03 * 0.67))
    assert cells["difference [interval], p"].endswith(f", p {p:.2g}; the first - floor: "
                                                      f"{report.interval(skill, 1)} (needs > 0.1), p {gate:.2g}")
    assert gate > 0.5 and p < 0.05


def test_a_word_with_no_test_prints_no_interval():
    """Two constants (equal at every seed) and a score fixed by construction have no test: their difference is printed
    alone, said so, never as an interval."""
    cells, p = report.rule_cells(rule_runs([1.0] * 3, "a"), rule_runs([1.0] * 3, "b"), "val_acc", directions=("match",))
    assert cells["match"].startswith("untestable") and p is None
    assert cells["difference [interval], p"] == "+0 (no test)"


def test_a_score_fixed_by_construction_is_said_so_not_tested():
    """A model's induction score that is its own score at init at every seed (MixiT's: its attention is fixed) is
    stated as fixed and read at its floor, never compared with its init as if the two were independent samples."""
    first = [dict(variant="softmax", seed=s, iter=9, induction_score=0.99, induction_init=0.16) for s in (0, 1)]
    other = [dict(variant="mixing", seed=s, iter=9, induction_score=x, induction_init=x) for s, x in ((0, .1), (1, .11))]
    cells, _ = report.rule_cells(first, other, "induction_score", directions=("fails",))
    assert cells["fails"] == "fixed by construction: the same at init and trained, at every seed (not tested)"
    assert cells["difference [interval], p"] == "-0.885 (no test)"  # no interval either
    # a constant: 1 - 0.025 ** (1 / 2) = 0.84 of seeds could score otherwise
    assert cells["scores (floors)"] == "0.99 ± 0 (2 of 2 at 0.99: at most 84 % of seeds off it, 97.5 %; clears 0.16) / " \
                                      "0.105 ± 0.0071 (at 0.105)"  # its floor exactly
    assert report.rule_cells(first, other, "induction_score", [0.1, 0.11], ("fails",))[0]["fails"] != cells["fails"]


def test_seeds_for_80_percent_power_decide_that_often_by_simulation():
    """The seeds printed for a 'not shown' give the word about 80 % of the time at the next look (its level halved:
    more seeds are a second look) when seeds are drawn at the observed means and spreads: at least 75 % at that
    count, less than 80 % with 2 seeds fewer (2,000 draws each), and at this look's level the count would be lower."""
    first, other = [0.50, 0.60, 0.40], [0.62, 0.72, 0.52]
    word = report.verdict([first, other], (FLOOR3, FLOOR3), (100, 100), "higher")[0]
    n = int(re.search(r"\((\d+) seeds a model for ≥ 80% power at look 2", word).group(1))
    rng = np.random.default_rng(0)
    floors = [report.sample(FLOOR3)] * 2  # the word of each draw: verdict's, without its search for seeds
    share = lambda n, looks: np.mean([report.decide(report.sample(list(rng.normal(0.5, 0.1, n))),
                                                    report.sample(list(rng.normal(0.62, 0.1, n))), floors, "higher",
                                                    False, (looks, looks), math.inf)[0] == "yes" for _ in range(2000)])
    assert share(n, 2) >= 0.75 and share(n - 2, 2) < 0.8 and share(n - 2, 1) >= 0.75, (n, share(n, 2))


def test_a_setting_looked_at_twice_reads_at_half_the_level():
    """Seeds added after a look: the words read at ALPHA / looks (Bonferroni), the interval widened to match."""
    first, other = [0.50, 0.52, 0.48, 0.51, 0.49], [0.54, 0.56, 0.52, 0.55, 0.53]  # +0.04, p 0.0017
    runs = lambda xs, v: [dict(variant=v, seed=s, iter=9, val_acc=x, val_acc_chance=0.3) for s, x in enumerate(xs)]
    once, once_p = report.rule_cells(runs(first, "a"), runs(other, "b"), "val_acc", directions=("higher",))
    thrice, thrice_p = report.rule_cells(runs(first, "a"), runs(other, "b"), "val_acc", directions=("higher",), looks=(3, 3))
    assert once["higher"] == thrice["higher"] == "yes" and thrice_p == pytest.approx(3 * once_p)
    assert "95%" in once["difference [interval], p"] and "98.3%" in thrice["difference [interval], p"]
    first, other = [0.50, 0.52, 0.48], [0.55, 0.57, 0.53]  # p 0.037 two-sided: yes once, not shown at two looks
    assert report.verdict([first, other], (FLOOR3, FLOOR3), (1, 1), "higher", looks=(1, 1))[0] == "yes"
    assert report.verdict([first, other], (FLOOR3, FLOOR3), (1, 1), "higher", looks=(2, 2))[0].startswith("not shown")


def test_holm_ranks_every_test_a_claim_ran():
    """Holm's step-down within a claim: p (scaled to ALPHA) 0.01, 0.02, 0.03 against 0.05/3, 0.05/2, 0.05/1: all kept;
    0.01, 0.03, 0.04: the second fails 0.025, so it and every larger one drop. Undecided members (p 0.3, 0.4) count
    in the family: a word at 0.02, kept alone at 0.05, ranks first of three beside them, at 0.05/3, and drops."""
    assert report.holm([(0.02, "b"), (0.01, "a"), (0.03, "c")]) == {"a": (1, 0.05 / 3, True), "b": (2, 0.025, True),
                                                                  "c": (3, 0.05, True)}
    assert [kept for _, _, kept in report.holm([(0.04, "c"), (0.01, "a"), (0.03, "b")]).values()] == [True, False, False]
    assert report.holm([(0.02, "a")]) == {"a": (1, 0.05, True)}
    assert report.holm([(0.3, "u"), (0.02, "a"), (0.4, "v")])["a"] == (1, 0.05 / 3, False)
    assert report.holm([]) == {}


def test_a_score_at_its_floor_reads_without_dividing_by_it():
    """Bits per parameter of 0 at the floor 0 (a table not yet held): the rule reads it, no share of a gain divides."""
    runs = [dict(task="memorize_8", variant=v, seed=s, iter=5, bits_per_param=0.0) for v in ("a", "b") for s in (0, 1)]
    cells, _ = report.rule_cells(runs[:2], runs[2:], "bits_per_param")
    # the word's own p, then the floor gate's evidence that decided it
    assert cells["difference [interval], p"] == \
        "+0 [+0, +0] 95%, p 1; the first - floor: +0 [+0, +0] 95% (needs > 0.1), p 1"
    assert cells["higher"].startswith("not reproduced at this scale: the other is not shown 0.1 past its floor")
    assert cells["scores (floors)"] == " / ".join(["0 ± 0 (2 of 2 at 0: at most 84 % of seeds off it, 97.5 %; at 0)"] * 2)


def test_seeds_on_two_plateaus_are_counted():
    """Two plateaus: a gap wider than 0.05 and than 4 spreads (sample stds) of each side of two seeds or more."""
    assert report.plateaus([1.0, 1.0, 1.0, 1.0, 0.8]) == "1 at 0.8, 4 at 1 (1, 1, 1, 1, 0.8)"
    assert report.plateaus([0.743, 0.607, 0.763, 0.609, 0.609]) == \
        "3 at 0.607-0.609, 2 at 0.743-0.763 (0.743, 0.607, 0.763, 0.609, 0.609)"
    assert report.plateaus([0.955, 0.747, 0.998, 0.858, 0.52]) == ""  # spread out, not two plateaus
    assert report.plateaus([1.0, 1.0, 1.0, 0.8]) == "1 at 0.8, 3 at 1 (1, 1, 1, 0.8)"  # four seeds can
    assert report.plateaus([1.0, 1.0, 0.8]) == ""  # three seeds show no plateaus
    assert report.plateaus([0.91, 1.0, 1.0, 0.96, 1.0]) == ""  # a gap of 0.05 is none


def test_a_wide_split_is_no_plateau():
    """Plateaus are tight: mod 97's seeds at 6,000 steps split 0.097 apart, but one side spreads over 0.34 (std 0.17):
    no plateau; nor 16 heads' 15 seeds, 7 of them spread over 0.72-0.89. Drawn from one normal (std 0.05-0.2), 5
    seeds show a split 13-16 % of the time and 15 seeds 0.2 % (RESULTS states it)."""
    assert report.plateaus([0.955, 0.747, 0.998, 0.858, 0.52, 0.987]) == ""
    assert report.plateaus([0.955, 0.8, 0.998, 0.81, 0.79, 0.987]) == \
        "3 at 0.79-0.81, 3 at 0.955-0.998 (0.955, 0.8, 0.998, 0.81, 0.79, 0.987)"  # tight sides, the same gap
    assert report.plateaus([0.894, 0.779, 1, 1, 1, 0.992, 1, 0.804, 0.722, 1, 1, 0.96, 0.805, 0.812, 0.803]) == ""
    rng = np.random.default_rng(0)
    for n, low, high in ((5, 0.11, 0.19), (15, 0.0, 0.006)):
        share = np.mean([report.plateaus(list(rng.normal(0.7, sd, n))) != "" for sd in (0.05, 0.1, 0.2)
                         for _ in range(700)])
        assert low <= share <= high, (n, share)


def rule_runs(values, variant, level=0.3):
    """Hand-set finals of one variant: a seed per value, its accuracy and the task's chance level."""
    return [dict(variant=variant, seed=s, iter=9, val_acc=x, val_acc_chance=level) for s, x in enumerate(values)]


def test_each_word_prints_its_own_test_and_p():
    """A claim's setting prints the p of the test that decided its word, not the difference's two-sided p: a match's
    yes the larger of its two one-sided tests (2 x, one-sided at 2.5 %); a fails word the other's score against its
    floor, with that quantity's 95 % interval, beside the difference, the floor named. The margin: 3 % of 1 - 0.3."""
    first, other = rule_runs([1.0, 1.0, 1.0], "a"), rule_runs([0.995, 0.997, 0.993], "b")
    cells, p = report.rule_cells(first, other, "val_acc", directions=("match",))
    c = report.contrast([(1, report.sample([0.995, 0.997, 0.993])), (-1, report.sample([1.0] * 3))])
    tost = 2 * max(report.p_above(c, -0.021), report.p_above(report.neg(c), -0.021))
    assert cells["match"] == "yes" and p == pytest.approx(tost)
    assert cells["difference [interval], p"] == f"-0.005 [-0.00997, -3.17e-05] 95%, p {tost:.2g}"  # t(2) 4.303
    assert f"{tost:.2g}" != f"{2 * min(report.p_above(c), report.p_above(report.neg(c))):.2g}"
    cells, word_p = report.rule_cells(first, rule_runs([0.299, 0.301, 0.300], "b"), "val_acc", directions=("fails",))
    skill = report.contrast([(1, report.sample([0.299, 0.301, 0.300])), (-1, report.sample([0.3] * 3))])
    p = 2 * max(report.p_above(skill, -0.021), report.p_above(report.neg(skill), -0.021))
    assert cells["fails"] == "yes: at its floor, chance 0.3" and word_p == pytest.approx(p)
    assert cells["difference [interval], p"] == f"-0.7; other - floor: +0 [-0.00248, +0.00248] 95%, p {p:.2g}"


def test_every_one_sided_test_reads_at_half_of_alpha():
    """One level for every word: each one-sided test at 2.5 %, a hold's and a failure's as a direction's, so a yes and
    a no together spend 5 % and every interval is 95 %. A claim at one-sided p 0.03 is not shown (p 0.06 printed),
    at 0.02 it holds (p 0.04); at two looks each test at 1.25 %."""
    below = report.t_quantile(0.97, 10)  # a t whose one-sided p is 0.03 at 10 degrees of freedom
    assert report.first_word([("yes", [((0.0, 0.02 / below, 10), -0.02)])]) == ("not shown", pytest.approx(0.06))
    above = report.t_quantile(0.98, 10)
    assert report.first_word([("yes", [((0.0, 0.02 / above, 10), -0.02)])]) == ("yes", pytest.approx(0.04))
    assert report.first_word([("yes", [((0.0, 0.02 / above, 10), -0.02)])], looks=2)[0] == "not shown"
    hold = report.verdict([[0.50, 0.505, 0.495], [0.49, 0.495, 0.485]], (FLOOR3, FLOOR3), (1, 1), "holds")
    assert hold[0].startswith("not shown") and 0.05 < hold[1] < 0.1  # one-sided p 0.035: a yes at 5 %, not at 2.5 %


def test_seeds_on_two_plateaus_plan_their_power_by_drawing_the_seeds():
    """Where a model's seeds split on two plateaus, its seeds for 80 % power come from draws of the observed seeds at
    the next look, said so: normal theory does not describe a split. An independent simulation agrees: at the count
    printed at least 75 % of 1,000 draws give the likely word, at 4 fewer less than 80 %."""
    first, other = [0.50, 0.52, 0.48, 0.50, 0.50], [0.90, 0.91, 0.89, 0.40, 0.41]
    floors = ([0.3] * 5,) * 2
    word = report.verdict([first, other], floors, (1, 1), "higher")[0]
    n = int(re.match(r"not shown \((\d+) seeds a model for ≥ 80% power at look 2, by drawing the seeds\)$",
                     word).group(1))
    rng = np.random.default_rng(1)
    share = lambda n: np.mean([report.decide(report.sample(list(rng.choice(first, n))),
                                             report.sample(list(rng.choice(other, n))),
                                             [report.sample([0.3] * n)] * 2, "higher", False, (2, 2), math.inf)[0] == "yes"
                               for _ in range(1000)])
    assert share(n) >= 0.75 and share(n - 4) < 0.8, (n, share(n), share(n - 4))


def test_a_score_short_of_a_trained_floor_at_the_tasks_level_reads_at_it():
    """A model below a trained floor (a bag of words) that sits at the task's own level (the majority class) reads at
    that level, beside the trained floor, not merely below it, each at its own margin: 3 % of 1 - 0.744 = 0.0077 for
    the level. The stake above the bag of words is 5 x 3 % of its headroom 1 - 0.895: 0.0158, reachable, so the
    word comes from the data: softmax is 0.005 [0.0008, 0.0092] past it, short of the stake 0.01575."""
    cells, _ = report.rule_cells(rule_runs([0.90, 0.902, 0.898], "softmax", 0.744),
                              rule_runs([0.745, 0.746, 0.744], "mixing", 0.744), "val_acc", [0.895, 0.894, 0.896],
                              ("match",), names=("softmax", "mixing", "the bag of words"))
    assert cells["scores (floors)"] == "0.9 ± 0.002 (clears 0.895) / 0.745 ± 0.001 (at 0.744, below 0.895)"
    assert cells["match"].startswith("not reproduced at this scale: softmax is not shown 0.0157 past its floor")
    assert cells["margin, stake"] == "±0.00315, stake 0.0157 of 0.105"
    assert cells["difference [interval], p"].endswith("; softmax - floor: +0.005 [+0.000845, +0.00916] 95% (needs > "
                                                      "0.0157), p 1")


def test_the_stored_looks_count_the_seeds_each_comparison_holds():
    """configs/claims.py's LOOKS: each comparison's seeds counted at each look, rising, the last its stored seeds."""
    namespace = {}
    exec(open(os.path.join(HERE, "configs", "claims.py")).read(), namespace)
    for folder, counts in namespace["LOOKS"].items():
        seeds = {r["seed"] for f in folder.split("+")
                 for r in json.load(open(os.path.join(HERE, "assets", "runs", f, "runs.json")))}
        assert list(counts) == sorted(set(counts)) and seeds == set(range(counts[-1])), folder


def test_each_claims_tally_counts_settings_by_what_they_say_of_it():
    """A yes supports its claim and a no goes against it, except in a part whose yes goes against it (AGAINST: MixiT
    better than a model of no layers, where its no supports 'MixiT trails'); the other words counted by name."""
    words = ["yes", "no: equal within ±0.02", "yes: at its floor, chance 0.3", "untestable: both at the ceiling",
             "not shown (5 seeds a model)", "no", "fixed by construction: the same"]
    assert report.word_counts(words, [False] * 5 + [True, False]) == \
        "supports 3, against 1, untestable 1, not shown 1, fixed by construction 1"
    assert report.word_counts(["not shown"], [False]) == "supports 0, against 0, not shown 1"


def test_each_sample_is_read_at_its_own_looks(tmp_path, capsys):
    """A sample's looks are those of its folder's seed counts by look (LOOKS) that its seeds reach: 4 seeds of (2, 4)
    reach two, 2 seeds one. A fails word reads the other model alone, so a sample read once (Frozen-QK's reference) is
    read at the full 0.05 beside a first model looked at twice; a match reads both, at the most looks."""
    write_claims(tmp_path, [("p", "fails", "heads+heads", "addition_3", "val_acc", "softmax", ("heads", "mixing h=64"),
                             "fails"),
                            ("p", "match", "heads+heads", "addition_3", "val_acc", "softmax", ("heads", "mixing h=64"),
                             "match"),
                            ("p", "fewer", "heads", "addition_3", "val_acc", "softmax", "mixing h=64", "match")],
                 {"heads+heads": (2, 4), "heads": (2, 4)})
    assert cli(report.main, [str(tmp_path / "claims.py"), f"--runs_dir={tmp_path / 'runs'}"]) == 0
    rows = markdown_rows(capsys.readouterr().out.split("\n\n")[1])
    assert [r["looks"] for r in rows] == ["1", "2: at α 0.025", "1"]
    assert report.word_looks((2, 1), "fails") == 1 and report.word_looks((2, 1), "match") == 2


def test_a_part_of_a_claim_gives_one_word_or_each_word_with_its_settings():
    assert report.part_word(["yes", "yes"], ["at 6,000 steps", "at 24,000 steps"]) == "yes"
    assert report.part_word(["not shown (11 seeds a model for 80% power)", "yes — mixing below its floor",
                             "not shown (6 seeds a model for 80% power)"],
                            ["mod 97 at 24,000 steps", "mod 47 at 24,000 steps", "at 6,000"]) \
        == "not shown mod 97 at 24,000 steps and at 6,000; yes — mixing below its floor mod 47 at 24,000 steps"


def rule_finals(task_name="addition_3", metric="val_acc", level="val_acc_chance"):
    """Hand-set finals of 2 seeds of two variants: softmax 0.9 ± 0.0141, mixing 0.6 ± 0.0141, floor 0.33."""
    return [dict(task=task_name, variant=v, seed=s, iter=500, **{metric: x, level: 0.33}) for v, xs in
            (("softmax", (0.91, 0.89)), ("mixing h=64", (0.61, 0.59))) for s, x in enumerate(xs)]


def test_results_md_prints_what_the_rule_reads(tmp_path, monkeypatch):
    """results.md: each variant against the first, its scores beside their floors, the difference with its 95 %
    interval and p (Welch: 2 degrees of freedom here, t 4.303), the steps and the word for each direction; one seed: no
    interval, the spread unknown."""
    monkeypatch.setattr(report, "plot_comparison", lambda *a: None)
    runs = [dict(r, hardware="cpu", seconds=1.0, step_samples=8, model="m") for r in rule_finals()]
    histories = [[{k: r[k] for k in ("iter", "val_acc", "val_acc_chance")}] for r in runs]
    report.write_files(runs, histories, str(tmp_path))
    text = (tmp_path / "results.md").read_text()
    (row,) = markdown_rows(text[text.index("The verdict rule"):])
    assert row == {"task": "addition_3", "variant": "mixing h=64", "against": "softmax", "score": "val_acc",
                   "scores (floors)": "0.9 ± 0.014 (clears 0.33) / 0.6 ± 0.014 (clears 0.33)",
                   "difference [interval], p": "-0.3 [-0.361, -0.239] 95%, p 0.0022", "steps": "500 / 500",
                   "two plateaus": "", "higher": "no", "lower": "yes", "match": "no", "fails": "no",
                   "margin, stake": "±0.0201, stake 0.1 of 0.67"}  # 3 % of 1 - 0.33, 5 margins
    report.write_files(runs[::2], histories[::2], str(tmp_path))
    (row,) = markdown_rows((tmp_path / "results.md").read_text().split("The verdict rule")[1])
    assert row["difference [interval], p"] == "-0.3 (one seed)" and row["lower"] == "spread unknown"


def write_claims(tmp_path, settings, looks=None):
    (tmp_path / "runs" / "heads").mkdir(parents=True)
    (tmp_path / "runs" / "heads" / "runs.json").write_text(json.dumps(
        [dict(r, hardware="1 x cpu", seconds=75.0, time=18.75) for r in rule_finals()]))
    (tmp_path / "claims.py").write_text(f"CLAIMS = {{'MixiT adds': {settings!r}}}\nLOOKS = {looks or {}!r}\n"
                                        "COMMANDS = {'heads': 'python train.py configs/heads_cpu.py --seeds=2'}\n")


def test_the_claims_command_prints_each_parts_word_and_each_settings_reading(tmp_path, capsys, monkeypatch):
    """python report.py CLAIMS.py --runs_dir=DIR: each part of a claim with its word (each word with its settings
    where they differ), each setting's reading and word (its own p: the match's no its one-sided test, at 2.5 % over
    the looks), its rank in Holm's family, the claim's words under Holm, each comparison's command, seeds by look
    (LOOKS: the seeds counted at each look), machine and time; folders joined by + read as one; a variant the runs
    lack is one line, status 2."""
    write_claims(tmp_path, [("at 500 steps", "lower", "heads", "addition_3", "val_acc", "softmax", "mixing h=64",
                             "lower"),
                            ("at 500 steps", "a match", "heads+heads", "addition_3", "val_acc", "softmax",
                             "mixing h=64", "match")], {"heads+heads": (2, 4)})
    assert cli(report.main, [str(tmp_path / "claims.py"), f"--runs_dir={tmp_path / 'runs'}"]) == 0
    verdicts, settings, holm, commands = capsys.readouterr().out.split("\n\n")
    assert markdown_rows(verdicts) == [{"claim": "MixiT adds", "part": "at 500 steps",
                                        "verdict": "yes lower; no a match"}]
    assert [(r["part"], r["looks"], r["difference [interval], p"], r["the claim"], r["word"], r["Holm: rank, level"])
            for r in markdown_rows(settings)] == [
        ("at 500 steps, lower", "1", "-0.3 [-0.361, -0.239] 95%, p 0.0022", "lower", "yes", "2 of 2, 0.05"),
        ("at 500 steps, a match", "2: at α 0.025", "-0.3 [-0.324, -0.276] 97.5%, p 8.2e-08", "match", "no",
         "1 of 2, 0.025")]  # its 97.5 % interval: t(6) 2.969
    assert markdown_rows(holm) == [{"claim": "MixiT adds", "settings": "2", "tested: Holm's family": "2",
                                    "words decided": "2", "kept by Holm": "2", "dropped": "",
                                    "the settings' words": "supports 1, against 1"}]
    assert markdown_rows(commands) == [
        {"comparison": "heads", "command": "`python train.py configs/heads_cpu.py --seeds=2`",
         "seeds, by look": "0-1 (look 1)", "runs": "4", "machine": "1 x cpu", "training time": "1m15s"},
        {"comparison": "heads+heads", "command": "`python train.py configs/heads_cpu.py --seeds=2`; `python train.py "
         "configs/heads_cpu.py --seeds=2`", "seeds, by look": "0-1 (look 1), 2-3 (look 2)", "runs": "8",
         "machine": "1 x cpu", "training time": "2m30s"}]
    monkeypatch.setattr(report, "holm", lambda family: {k: (1, 0.05, k == 0) for _, k in family})  # one not kept
    assert cli(report.main, [str(tmp_path / "claims.py"), f"--runs_dir={tmp_path / 'runs'}"]) == 0
    verdicts, _, holm, _ = capsys.readouterr().out.split("\n\n")
    assert markdown_rows(verdicts)[0]["verdict"] == "yes lower; no, not kept by Holm a match"
    assert markdown_rows(holm)[0]["dropped"] == "at 500 steps, a match"
    write_claims(tmp_path / "b", [("p", "s", "heads", "addition_3", "val_acc", "softmax", "mixing h=16", "match")])
    assert cli(report.main, [str(tmp_path / "b" / "claims.py"), f"--runs_dir={tmp_path / 'b' / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no runs of 'mixing h=16' on addition_3; it holds addition_3: mixing h=64;" \
        in err


def test_a_setting_reads_at_the_looks_of_every_comparison_it_reads(tmp_path, capsys):
    """A setting whose model comes from another comparison (more seeds added after a look) reads at its looks."""
    write_claims(tmp_path, [("p", "s", "heads", "addition_3", "val_acc", "softmax", ("heads+heads", "mixing h=64"),
                             "lower")], {"heads+heads": (2, 4)})
    assert cli(report.main, [str(tmp_path / "claims.py"), f"--runs_dir={tmp_path / 'runs'}"]) == 0
    (row,) = markdown_rows(capsys.readouterr().out.split("\n\n")[1])
    assert row["looks"] == "2: at α 0.025" and row["first / other"] == "softmax / mixing h=64 (heads+heads)"


def test_a_trained_floor_from_another_comparison(tmp_path, capsys):
    """A setting's last part names a trained floor (a bag of words): each model's score read against its per-seed
    scores; a decisive word names the model that does not clear it."""
    write_claims(tmp_path, [("p", "s", "heads", "addition_3", "val_acc", "softmax", "mixing h=64", "lower",
                             ("heads", "mixing h=64"))])
    assert cli(report.main, [str(tmp_path / "claims.py"), f"--runs_dir={tmp_path / 'runs'}"]) == 0
    (row,) = markdown_rows(capsys.readouterr().out.split("\n\n")[1])
    assert row["scores (floors)"] == "0.9 ± 0.014 (clears 0.6) / 0.6 ± 0.014 (near 0.6)"  # 2 seeds: not within ±0.02
    assert row["word"] == "yes — mixing h=64 near its floor, mixing h=64 (heads) 0.6"  # the floor named


def stored_claims(capsys):
    """What python report.py configs/claims.py prints from the stored runs: the parts' words, the settings' readings."""
    assert cli(report.main, [os.path.join(HERE, "configs", "claims.py"), f"--runs_dir={HERE}/assets/runs"]) == 0
    return capsys.readouterr().out.split("\n\n")[:3]


def test_the_documents_verdicts_are_the_claims_commands(capsys):
    """RESULTS.md's claims table gives each part of each claim the word python report.py configs/claims.py prints from
    the stored runs (assets/runs) and holds the settings and Holm tables as printed, so each claim's tally by direction
    (the README's sentences quote RESULTS for the counts) is the command's; each setting counted once."""
    verdicts, settings, holm = stored_claims(capsys)
    printed = [(r["claim"], r["part"], r["verdict"]) for r in markdown_rows(verdicts)]
    results = open(os.path.join(HERE, "RESULTS.md")).read()
    rows = markdown_rows(results[results.index("| claim | part | verdict |"):])
    assert [(r["claim"], r["part"], r["verdict"]) for r in rows] == printed
    assert settings in results and holm in results
    for r in markdown_rows(holm):
        counts = re.findall(r" (\d+)(?:,|$)", r["the settings' words"])
        assert sum(map(int, counts)) == int(r["settings"]), r["claim"]


def test_the_readme_states_each_claim_in_words_it_defines_first():
    """The README's "What reproduces" defines every word the rule prints (report.WORDS) in a table before its claims
    table; that table gives every claim of configs/claims.py, in order, a sentence with a link to an existing RESULTS
    section; and the README names the test machinery at most once, in a sentence that links RESULTS."""
    readme, results = (open(os.path.join(HERE, d)).read() for d in ("README.md", "RESULTS.md"))
    section = doc_section(readme, "## What reproduces")
    header = "| claim, and its section in RESULTS | what reproduces, and what does not |"
    defined = {r["word"].strip("*") for r in markdown_rows(section[:section.index(header)])}
    assert set(report.WORDS) <= defined
    namespace = {}
    exec(open(os.path.join(HERE, "configs", "claims.py")).read(), namespace)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", results, re.M)}
    rows = [list(r.values()) for r in markdown_rows(section[section.index(header):])]
    claims = [re.fullmatch(r"\[(.+)\]\(RESULTS\.md#([\w-]+)\)", claim) for claim, _ in rows]
    assert [c[1] for c in claims] == list(namespace["CLAIMS"])
    assert {c[2] for c in claims} <= anchors and all(len(said.split()) > 10 for _, said in rows)
    for name in ("Welch", "Holm", "TOST", "non-inferiority"):
        assert readme.count(name) <= 1, name
    sentence = next(s for s in re.split(r"(?<=\.)\s", section) if "Welch" in s)
    assert "](RESULTS.md#" in sentence


def test_holms_family_is_every_setting_a_claim_tested_and_a_reader_can_redo_it(capsys):
    """From the stored runs: each claim's family is every setting with a test (constants and fixed scores aside, said
    so), undecided members counted; each member's rank and level ALPHA / (m - rank + 1) follow its printed p, and the
    words Holm does not keep are the decided ones from the first p over its level on."""
    verdicts, settings, holm = stored_claims(capsys)
    rows = markdown_rows(settings)
    undecided = 0
    for family in markdown_rows(holm):
        members = [r for r in rows if r["claim"] == family["claim"] and r["Holm: rank, level"] != "aside: no test"]
        aside = [r for r in rows if r["claim"] == family["claim"] and r not in members]
        assert all(r["word"].startswith(("untestable", "equal at every seed", "fixed by construction")) for r in aside)
        m = int(family["tested: Holm's family"])
        assert len(members) == m and int(family["settings"]) == m + len(aside)
        ranked = sorted(members, key=lambda r: int(r["Holm: rank, level"].split(" of ")[0]))
        # the word's own p, the first printed (a gate's p follows where a word is not reproduced)
        ps = [float(r["difference [interval], p"].split(", p ")[1].split(";")[0]) for r in ranked]
        assert ps == sorted(ps)
        failed = False
        for k, (row, p) in enumerate(zip(ranked, ps)):
            level = 0.05 / (m - k)
            assert row["Holm: rank, level"] == f"{k + 1} of {m}, {level:.2g}"
            failed = failed or p >= level
            dropped = f"{row['part']}" in family["dropped"].split("; ")
            assert dropped == (failed and not row["word"].startswith("not ")), row["part"]
        undecided += sum(r["word"].startswith("not shown") for r in members)
    assert undecided >= 10


def test_every_mean_and_std_the_claims_quote_is_a_stored_comparisons(capsys):
    """Each 'mean ± std' in RESULTS.md's claims section and the README's claims table is, at its printed digits, the
    mean and sample std of one variant's seeds in a comparison the claims read (assets/runs), or of a change's."""
    namespace = {}
    exec(open(os.path.join(HERE, "configs", "claims.py")).read(), namespace)
    folders = {f for rows in namespace["CLAIMS"].values() for s in rows for f in
               [s[2]] + [v[0] for v in s[5:] if isinstance(v, tuple)]}
    stored = []
    for folder in folders:
        runs = [r for f in folder.split("+") for r in json.load(open(os.path.join(HERE, "assets", "runs", f,
                                                                                   "runs.json")))]
        groups = {}
        for r in runs:
            for k, v in r.items():
                if isinstance(v, float):
                    groups.setdefault((r["task"], r["variant"], k), []).append(v)
        stored += [report.mean_std(v) for v in groups.values() if len(v) > 1]
    # a change (two runs' per-seed difference) the claims read
    for setting in (s for rows in namespace["CLAIMS"].values() for s in rows):
        find = functools.partial(report.find_runs, {}, os.path.join(HERE, "assets", "runs"), *setting[2:4])
        stored += [report.mean_std([r[setting[4]] for r in report.variant_runs(find, v, setting[4])])
                   for v in setting[5:7] if isinstance(v, tuple) and len(v) == 4]
    decimals = lambda s: len((s + ".").split(".")[1])
    same = lambda x, s: float(f"{x:.2g}") == float(s) if "e" in s else round(x, decimals(s)) == float(s)
    results, readme = (open(os.path.join(HERE, d)).read() for d in ("RESULTS.md", "README.md"))
    number = r"(\d+(?:\.\d+)?(?:e-\d+)?)"
    quoted = re.findall(number + " ± " + number, doc_section(results, "## The claims")
                        + doc_section(readme, "## What reproduces"))
    assert len(quoted) > 50
    for m, s in quoted:
        assert any(same(a, m) and same(b, s) for a, b in stored), (m, s)


def stored_spread(folder, task_name, variant, key):
    """The mean and sample std of one variant's key over a stored comparison's seeds (folders joined by +)."""
    return report.mean_std([r[key] for f in folder.split("+")
                            for r in json.load(open(os.path.join(HERE, "assets", "runs", f, "runs.json")))
                            if r["task"] == task_name and r["variant"] == variant])


def test_the_sections_quote_the_stored_runs_they_name():
    """RESULTS' sections quote stored comparisons as the runs hold them: mod 97 at 6,000 steps over all 6 seeds (0.844 ±
    0.185, 0.156 short of softmax's 1.0000), the random transformer with its residual scaling standard (stored:
    0.844 ± 0.0095), and the capacity table's 1,500 steps (MixiT 0.853 ± 0.014, Frozen-MLP 1.253 ± 0.016)."""
    results = open(os.path.join(HERE, "RESULTS.md")).read()
    mean, std = stored_spread("modadd_97_6k+modadd_97_6k_more", "modadd_97", "mixing h=16", "val_acc")
    arithmetic = doc_section(results, "## Arithmetic, Dyck and heads")
    assert f"MixiT {mean:.3f} ± {std:.3f}" in arithmetic and f"by {1 - mean:.3f} at P = 97" in arithmetic
    mean, std = stored_spread("depth_part_residual", "dyck_16", "softmax freeze=blocks mixit", "val_acc")
    assert f"gives {mean:.3f} ± {std:.4f}" in doc_section(results, "## Depth and signal propagation")
    capacity = doc_section(results, "## Memorization capacity")
    for row, folder, variant in (("MixiT (16 heads)", "capacity_cpu", "mixing h=16"),
                                 ("Frozen-MLP (standard, MLPs frozen)", "capacity_cpu", "softmax freeze=mlp"),
                                 ("standard transformer", "capacity_cpu", "softmax"),
                                 ("MixiT in the standard parametrization", "capacity_mixit_std", "mixing h=16 standard")):
        mean, std = stored_spread(folder, "memorize_128", variant, "bits_per_param")
        assert f"| {row} | {mean:.3f} ± {std:.3f} (" in capacity, row


def test_every_exercise_gives_a_command_its_time_and_the_results_section_that_answers_it():
    """Each README exercise: a train.py or sample.py command (test_documented_commands_plan_what_they_say plans it),
    a measured time on a 2-core CPU, a link to an existing RESULTS.md section that holds its answer, and, where it
    trains on a corpus, the prepare.py command that writes it, with that step's own time."""
    section = doc_section(open(os.path.join(HERE, "README.md")).read(), "## Exercises")
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", open(os.path.join(HERE, "RESULTS.md")).read(), re.M)}
    items = re.split(r"^\d+\. ", section, flags=re.M)[1:]
    assert len(items) == 7
    for item in items:
        assert re.search(r"`python (train|sample)\.py", item) and re.search(r"\d+ ?(min|s)\b", item), item
        links = re.findall(r"\]\(RESULTS\.md#([\w-]+)\)", item)
        assert links and set(links) <= anchors, item
        # a corpus it trains on is written by a prepare.py command the exercise gives, timed on its own
        corpora = {run["task"] for script, args in doc_commands(item) if script == "train"
                   for run in train.plan_runs(common.configure(train.DEFAULTS, [a if a.startswith("--") else
                                                                                os.path.join(HERE, a) for a in args],
                                                               train.RULES))
                   if run["task"] in data.CORPUS_TASKS or run["task"].startswith("wikitext2_")}
        assert corpora <= doc_prepared(item), item
        for m in PREPARE_COMMAND.finditer(item):
            assert re.match(r"`\s*\((\d+ min )?\d+ s\b", item[m.end():]), item  # its own time, right after it


# ----- the floors and probe scores, each by brute force on a hand-built case


def test_the_bigram_floor_by_hand_with_unseen_pairs_and_unseen_contexts(tmp_path):
    """V = 5, train 0 1 2 1 0 1 3, test 1 2 4 4 0 1 3 3 (read whole, in consecutive windows of 2, 3 to a batch): c(a)
    counts train's first 6 tokens (0: 2, 1: 3, 2: 1; 3, the last, none), c(a, b) its 6 pairs; each of the 7 test
    pairs costs -log (c(a, b) + 1) / (c(a) + V). (4, 4) is the largest code of all, beyond every training pair; 4 and
    3 never open a training pair."""
    train, test = [0, 1, 2, 1, 0, 1, 3], [1, 2, 4, 4, 0, 1, 3, 3]
    for split, tokens in (("train", train), ("test", test)):
        np.array(tokens, np.uint16).tofile(tmp_path / f"{split}.bin")
    meta = {"vocab_size": 5, "eot": 4, "tokens": {"train": len(train), "test": len(test)}}
    task = data.TextTask("tiny", str(tmp_path), meta, 2, 1, "test")
    # (1,2) (2,4) (4,4) (4,0) (0,1) (1,3) (3,3)
    probs = [2 / 8, 1 / 6, 1 / 5, 1 / 5, 3 / 7, 2 / 8, 1 / 5]
    assert task.loss_floor(3) == pytest.approx(-sum(map(math.log, probs)) / 7, rel=1e-12)


def test_a_bag_of_words_is_the_head_of_the_mean_normed_embedding_of_the_real_tokens():
    """n_layer=0 (no positions: standard parametrization): logits = head(mean over the real tokens p of
    norm(wte[x_p])), pads (0) anywhere in the row left out; a row of pads alone pools to 0."""
    model = MixiT(MixiTConfig(vocab_size=16, block_size=6, n_layer=0, n_head=2, n_embd=8, n_classes=3, pad_id=0,
                              causal=False, attn="softmax"))
    assert model.wpe is None
    with torch.no_grad():
        model.norm.weight.copy_(torch.linspace(0.5, 2.0, 8))  # a gain that is not all ones
    idx = torch.tensor([[3, 5, 5, 0, 0, 0], [0, 0, 7, 2, 9, 4], [1, 0, 2, 0, 3, 0], [6, 6, 6, 6, 6, 6],
                        [0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        got = model(idx)[0]
        E, g = model.wte.weight.double(), model.norm.weight.double()
        for row, logits in zip(idx.tolist(), got):
            pooled = torch.zeros(8, dtype=torch.float64)
            real = [tok for tok in row if tok != 0]
            for tok in real:
                e = E[tok]
                pooled += e / torch.sqrt((e * e).mean() + 1e-6) * g / len(real)
            want = model.head(pooled.float()[None])[0]
            assert torch.allclose(logits, want, atol=1e-6), (row, logits, want)
    assert torch.equal(got[4], torch.zeros(3))  # nothing to pool: the head of 0 (no bias)


def test_distinct_per_row_leaves_out_absent_wherever_it_sorts():
    """The count behind the recall tasks' chance levels: distinct values per row, absent left out, whether absent is the
    smallest value of a row, the largest or one between."""
    values = np.array([[3, 5, 3, 9], [5, 5, 7, 7], [3, 1, 1, 2], [5, 5, 5, 5], [9, 3, 5, 6]])
    want = [len(set(row) - {5}) for row in values.tolist()]
    assert want == [2, 1, 3, 0, 3] and data.distinct_per_row(values, absent=5).tolist() == want


# ----------------------------------------------------------------------------- the probes


def hand_maps(idx, layers, heads, weight):
    """(layers, B, heads, T, T) causal maps: row i of head h of layer l puts weight(b, l, h, i) on column
    i - T/2 + 1 (the token after the earlier copy) where i >= T/2, and the rest on i itself."""
    B, T = idx.shape
    s = T // 2
    maps = torch.zeros(layers, B, heads, T, T)
    for l in range(layers):
        for b in range(B):
            for h in range(heads):
                for i in range(T):
                    w = weight(b, l, h, i) if i >= s else 0.0
                    maps[l, b, h, i, i - s + 1] += w
                    maps[l, b, h, i, i] += 1.0 - w
    return maps


def test_induction_scores_are_the_mean_weight_on_the_token_after_the_first_copy_by_brute_force(monkeypatch):
    """Hand-built maps whose induction weight varies with the row's first token, the layer, the head and the position:
    the score of a head is the mean over the rows (64 segments drawn from TEST_SEED for the evaluation's metric) and
    over i = s..2s-1 of the weight from i to i - s + 1; induction_metrics reports the best head and each layer's."""
    task = data.make_task("induction_4")  # block 7: segments of 3
    model = tiny_model(vocab_size=task.vocab_size, block_size=task.block_size)
    weight = lambda idx: lambda b, l, h, i: ((int(idx[b, 0]) + 3 * l + h + i) % 5) / 4
    seen = []

    def maps(idx):
        seen.append(idx.clone())
        return hand_maps(idx, 2, 4, weight(idx))

    monkeypatch.setattr(model, "attention_maps", maps)

    def brute(idx):
        s = idx.shape[1] // 2
        return torch.tensor([[np.mean([weight(idx)(b, l, h, i) for b in range(len(idx)) for i in range(s, 2 * s)])
                              for h in range(4)] for l in range(2)])

    scores = data.induction_scores(model, n_seqs=5, seg_len=3, seed=1)
    assert seen[-1].shape == (5, 6) and torch.allclose(scores, brute(seen[-1]).float(), atol=1e-6)
    got = data.induction_metrics(model, task, common.setup("cpu", "float32"))
    idx = data.repeated_tokens(model.config, 64, seed=data.TEST_SEED)
    assert torch.equal(seen[-1], idx)
    want = brute(idx)
    assert got["induction_score"] == pytest.approx(want.max().item(), abs=1e-6)
    assert got["induction_layers"] == pytest.approx(want.max(1).values.tolist(), abs=1e-6)
    assert len(set(want.flatten().tolist())) > 4  # the heads differ: the test tells max from mean from first


@pytest.mark.parametrize("name", ["mqar_4", "retrieval_4", "induction_6"])
def test_recall_score_is_the_mean_weight_over_every_answer_by_brute_force(monkeypatch, name):
    """Layer 0 head 1 puts a weight that varies with the row and the position on the token after the first earlier
    occurrence of the key each answer asks for (retrieval: query H+N+k asks key H+k), the rest on position 0; the
    score is that weight's mean over every scored position of the first rows, found here by a plain search."""
    task = data.make_task(name)
    model = tiny_model(vocab_size=task.vocab_size, block_size=task.block_size)
    T, n = task.block_size, 6
    rows = task.test[:n].tolist()  # T + 1 tokens: scored() reads the answer's place from whole rows
    weight = lambda b, t: ((7 * b + t) % 4 + 1) / 4

    def key_of(tok):
        return tok - task.n if name.startswith("retrieval") and tok >= task.half + task.n else tok

    def answers(row):  # (t, the position of the value after the key) for every scored t
        scored = task.scored(np.array([row]))[0]
        return [(t, row.index(key_of(row[t])) + 1) for t in range(T) if scored[t]]

    def maps(idx):
        out = torch.zeros(1, len(idx), 2, T, T)
        out[0, :, 0] = torch.eye(T)
        out[0, :, 1, :, 0] = 1.0
        assert torch.equal(idx, torch.tensor(rows)[:, :-1])
        for b, row in enumerate(rows):
            for t, source in answers(row):
                assert 0 < source < t
                out[0, b, 1, t, source] += weight(b, t)
                out[0, b, 1, t, 0] -= weight(b, t)
        return out

    monkeypatch.setattr(model, "attention_maps", maps)
    want = [weight(b, t) for b, row in enumerate(rows) for t, _ in answers(row)]
    assert len(want) >= n and len(set(want)) > 1
    scores = data.recall_scores(model, task, n_seqs=n)
    assert scores.shape == (1, 2) and scores[0, 0] == 0.0
    assert scores[0, 1].item() == pytest.approx(np.mean(want), abs=1e-6)


class Knows(torch.nn.Module):
    """A stand-in language model: at position p, logit a_p = (p + 1) / 2 on the true next token idx[p + 1], 0 on every
    other, so its loss there is log(e^a_p + V - 1) - a_p, distinct at every position."""

    def __init__(self, config):
        super().__init__()
        self.config, self.wte = config, torch.nn.Embedding(config.vocab_size, 1)

    def forward(self, idx, targets=None):
        n, T = idx.shape
        logits = torch.zeros(n, T, self.config.vocab_size)
        for p in range(T - 1):
            logits[:, p] = (p + 1) / 2 * F.one_hot(idx[:, p + 1], self.config.vocab_size)
        return logits, None


def hand_patterns(T):
    prefix, previous, first, identity = (np.zeros((T, T)) for _ in range(4))
    for i in range(T):
        for j in range(i + 1):
            prefix[i, j] = 1 / (i + 1)
        previous[i, max(i - 1, 0)] = 1.0
        first[i, 0] = 1.0
        identity[i, i] = 1.0
    return {"prefix mean": prefix, "previous token": previous, "first token": first, "identity": identity}


def test_named_patterns_by_hand():
    got = data.named_patterns(5)
    want = hand_patterns(5)
    assert list(got) == list(want)
    for name in want:
        assert np.allclose(got[name].numpy(), want[name], rtol=0, atol=1e-7), name


def test_layer_residuals_are_each_layers_relative_least_squares_residual_averaged_over_the_rows(monkeypatch):
    """The expressivity probe on hand-built maps (2 layers, 3 rows, 2 heads of random causal weights, a different draw
    per row; layer 1's head 0 the prefix mean plus noise in row 0 only): per layer, pattern and row the residual
    min_c ||c_0 A_0 + c_1 A_1 - P|| / ||P|| by numpy's least squares, averaged over the rows."""
    T, B, L, H = 6, 3, 2, 2
    g = np.random.default_rng(0)
    raw = g.random((L, B, H, T, T)) * np.tril(np.ones((T, T)))
    raw /= raw.sum(-1, keepdims=True)
    patterns = hand_patterns(T)
    raw[1, 1:, 0] = patterns["prefix mean"]  # formed exactly in rows 1 and 2, not in row 0
    model = tiny_model(block_size=T)
    monkeypatch.setattr(model, "attention_maps", lambda idx: torch.from_numpy(raw).float())
    got = sample.layer_residuals(model, torch.zeros(B, T, dtype=torch.long))
    assert list(got) == list(patterns)
    for name, P in patterns.items():
        for l in range(L):
            shares = []
            for b in range(B):
                A = np.stack([raw[l, b, h].astype(np.float32).astype(np.float64).ravel() for h in range(H)], 1)
                c = np.linalg.lstsq(A, P.ravel(), rcond=None)[0]
                shares.append(np.linalg.norm(A @ c - P.ravel()) / np.linalg.norm(P))
            assert got[name][l].item() == pytest.approx(np.mean(shares), abs=1e-6), (name, l)
    assert 0.05 < got["prefix mean"][1].item() < 0.5  # one row of three misses it: the mean, not any one row



# ===== issue 56: the training path under launchers, empty shares, true figures, the host's work, precision, resume

def test_ddp_gets_the_device_it_picked_under_either_launcher(fake_cuda, monkeypatch):
    """torchrun on a 2-GPU machine (LOCAL_RANK 1: cuda:1) and a launcher that shows each process one GPU (SLURM, one
    GPU a task: LOCAL_RANK 3, only cuda:0 visible): DDP is handed the device picked, never LOCAL_RANK."""
    handed = []
    monkeypatch.setattr(keeper, "DDP", lambda model, device_ids, **kw: handed.append(device_ids) or model)
    for local_rank, count, expected in (("1", 2, 1), ("3", 1, 0)):
        for var, value in dict(RANK=local_rank, LOCAL_RANK=local_rank, WORLD_SIZE="4").items():
            monkeypatch.setenv(var, value)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        env = common.setup("cuda", "auto")
        keeper.wrap(torch.nn.Linear(1, 1), {"compile": False}, env)
        assert env.device == torch.device("cuda", expected) and handed[-1] == [expected]


class GradsAtStep:
    """An optimizer stand-in: at step() it keeps a copy of every gradient; zero_grad drops them."""

    def __init__(self, model):
        self.model, self.grads = model, None

    def step(self):
        self.grads = [p.grad.clone() for p in self.model.parameters()]

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("lines", [False, True])
def test_a_share_without_scored_tokens_adds_nothing_and_two_processes_match_one(lines, tmp_path):
    """induction_2's rows of a 1-token segment score nothing, as empty lines do (--lm_rows=lines): a step of 2
    micro-batches of 2 rows where a share holds no scored token. Dealt to 2 processes (rows, or whole micro-batches),
    each process's part (the counts all-reduced by a stand-in) gives, averaged as DDP does, the loss and gradients of
    1 process: finite, the token mean."""
    if lines:
        (tmp_path / "src").mkdir()
        for name in ("train.txt", "valid.txt", "test.txt"):
            (tmp_path / "src" / name).write_text(" = A = \n \n ab cd\n \n")
        prepare.prepare("wikitext2", src=str(tmp_path / "src"), tokenizer="bytes", out_dir=str(tmp_path / "data"))
    task = data.make_task("wikitext2", 8, str(tmp_path / "data"), lm_rows="lines") if lines else \
        data.make_task("induction_2")
    config = dict(train.DEFAULTS, batch_size=2, gradient_accumulation_steps=2, seed=0)
    it = next(i for i in range(100) if any((y[r] < 0).all() for x, y in
                                            keeper.step_batches(task, config, [(0, slice(None)), (1, slice(None))], i)
                                            for r in range(2)))
    base = MixiT(MixiTConfig(vocab_size=task.vocab_size, block_size=task.block_size, n_layer=1, n_embd=16))

    def step(world, rank, total=None):
        env = types.SimpleNamespace(world_size=world, rank=rank, ddp=False, device=torch.device("cpu"),
                                    autocast=common.nullcontext)
        model = MixiT(base.config)
        model.load_state_dict(base.state_dict())
        shares = train.step_shares(2, 2, env) if world > 1 else [(0, slice(None)), (1, slice(None))]
        batches = keeper.step_batches(task, config, shares, it)
        counts = [int((y >= 0).sum()) for _, y in batches]

        def agreed():
            return [sum(counts) if total is None else total]  # all-reduced
        opt = GradsAtStep(model)
        loss, _, _ = train.train_step(model, batches, counts, agreed, opt, list(model.parameters()), 0.0, env)
        return loss, opt.grads, batches

    one_loss, one_grads, batches = step(1, 0)
    total = sum(int((y >= 0).sum()) for _, y in batches)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    assert one_loss.item() / total == pytest.approx(base(x, y)[1].item(), rel=1e-5) and math.isfinite(one_loss)
    for accum_split in (False, True):
        parts = []
        for rank in (0, 1):
            env = types.SimpleNamespace(world_size=2, rank=rank)
            shares = train.step_shares(2 if accum_split else 1, 2, env)
            assert shares  # rows dealt out (accum 1 stand-in) or whole micro-batches
            parts.append(step(2, rank, total))
        assert (parts[0][0] + parts[1][0]).item() == pytest.approx(one_loss.item(), rel=1e-5)
        for a, b, g in zip(parts[0][1], parts[1][1], one_grads):
            assert torch.allclose((a + b) / 2, g, atol=1e-6)


def test_a_step_that_scores_nothing_leaves_the_weights_and_the_mean_counts_tokens(tmp_path, capsys, monkeypatch):
    """induction_2 at batch_size 1, where a step may score no token: such a step leaves the weights and AdamW's
    moments as they were; train_loss is the interval's summed loss over its scored tokens, not a mean of steps."""
    steps, step = [], train.train_step

    def recorded(model, batches, counts, wait_agreed, optimizer, *rest):
        before = [p.detach().clone() for p in model.parameters()] + [s.clone() for state in optimizer.state.values()
                                                                       for s in state.values()]
        result = step(model, batches, counts, wait_agreed, optimizer, *rest)
        after = [p.detach() for p in model.parameters()] + [s for state in optimizer.state.values()
                                                            for s in state.values()]
        unchanged = len(before) == len(after) and all(map(torch.equal, before, after))
        loss_sum, _, agreed = result
        steps.append((agreed[0], loss_sum.item(), unchanged))
        return result
    monkeypatch.setattr(train, "train_step", recorded)
    assert run_train(tmp_path, "--task=induction_2", "--batch_size=1", "--max_iters=12", "--eval_interval=12",
                     "--log_interval=1", "--compile=False", "--attn=softmax", "--n_layer=1", "--n_embd=16") == 0
    assert {s[0] == 0 for s in steps} == {True, False}  # both kinds of step happened
    assert all(unchanged == (count == 0) for count, _, unchanged in steps)
    assert read_metrics(tmp_path)[-1]["train_loss"] == pytest.approx(sum(s[1] for s in steps) / sum(s[0] for s in steps))
    losses = re.findall(r"iter \d+/12: loss (\S+),", capsys.readouterr().out)
    assert [v == "nan" for v in losses] == [s[0] == 0 for s in steps]  # a step without a scored token has no loss


def test_resume_drops_a_cut_off_metrics_line_and_counts_what_each_step_trained(tmp_path, capsys):
    """4 steps at batch 8, then resumed to 8 at batch 32 after a kill cut metrics.jsonl's last line: the line is
    dropped (said in one line), and tokens and samples add up what each step trained (addition_2: 9 positions)."""
    args = ["--task=addition_2", "--attn=softmax", "--eval_interval=2", "--n_layer=1", "--n_embd=16"]
    assert run_train(tmp_path, *args, "--max_iters=4", "--batch_size=8") == 0
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iter": 12, "train_l')
    assert run_train(tmp_path, *args, "--max_iters=8", "--batch_size=32", "--init_from=resume") == 0
    assert f"{tmp_path / 'metrics.jsonl'}: dropped its last line, cut off mid-write: " in capsys.readouterr().out
    metrics = read_metrics(tmp_path)
    assert [m["iter"] for m in metrics] == [2, 4, 6, 8]
    assert (metrics[-1]["tokens"], metrics[-1]["samples"]) == (4 * 8 * 9 + 4 * 32 * 9, 4 * 8 + 4 * 32)


def test_a_checkpoint_without_some_counters_resumes_them_from_0(tmp_path):
    """A checkpoint written before a counter existed (here without samples, flops and train_time) still resumes:
    those counters count on from 0, the others from their saved values (addition_2 at batch 8: 9 positions)."""
    args = ["--task=addition_2", "--attn=softmax", "--eval_interval=2", "--n_layer=1", "--n_embd=16", "--batch_size=8"]
    assert run_train(tmp_path, *args, "--max_iters=2") == 0
    ckpt = load_ckpt(tmp_path)
    for key in ("samples", "flops", "train_time"):
        del ckpt[key]
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert run_train(tmp_path, *args, "--max_iters=4", "--init_from=resume") == 0
    first, last = read_metrics(tmp_path)
    assert (last["iter"], last["tokens"], last["samples"]) == (4, 4 * 8 * 9, 2 * 8)
    assert last["flops"] == pytest.approx(first["flops"])


def test_the_loss_in_chunks_is_the_whole_loss(monkeypatch):
    """The loss over the vocabulary a few positions at a time, each chunk's logits made again in the backward pass:
    the loss and every gradient of the whole (B, T, V) at once, to float tolerance; in evaluate too."""
    config = MixiTConfig(vocab_size=300, block_size=12, n_layer=1, n_embd=32, attn="softmax")
    x, y = torch.randint(0, 300, (5, 12)), torch.randint(-1, 300, (5, 12))
    losses, grads = [], []
    for chunk in (0, 7 * 300):  # 0: all at once; else 7 positions a chunk, 9 chunks
        model = MixiT(config)
        model.loss_chunk = chunk
        loss = model(x, y)[1]
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad for p in model.parameters()])
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))
    logits = MixiT(config)(x)[0]
    whole = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum")
    assert mixit.cross_entropy_sum(lambda z: z, logits, y, 300, 7 * 300).item() == \
        pytest.approx(whole.item(), rel=1e-6)


def test_the_loss_floor_is_counted_by_the_master_alone():
    """Under torchrun only rank 0 counts a corpus's bigram; the others take its value."""
    task = types.SimpleNamespace(loss_floor=lambda b: pytest.fail("counted twice"), probe=None, metrics=())
    env = types.SimpleNamespace(master=False, from_master=lambda value: 4.25)
    assert data.chance_metrics(None, task, env, 8) == {"val_loss_floor": 4.25}


class Oracle:
    """A perfect recaller: each new token is the one after the first earlier occurrence of the last token's key."""

    def __init__(self, task):
        self.task = task

    def generate(self, idx, new, top_k=1, use_cache=True):
        seq = idx[0].tolist()
        for _ in range(new):
            key = int(self.task.key_of(np.array(seq[-1])))
            seq.append(seq[seq.index(key) + 1] if key in seq[:-1] else -2)
        return torch.tensor(seq)[None]


@pytest.mark.parametrize("name", ["mqar_8", "retrieval_6", "induction_8"])
def test_a_perfect_recaller_scores_every_answer(name, capsys):
    """sample.py decodes each run of scored positions from the true tokens before it: MQAR's queries are given."""
    task = data.make_task(name)
    sample.show_answers(Oracle(task), task, {"num_samples": 20, "use_cache": True}, "cpu")
    assert capsys.readouterr().out.count(" ok\n") == 20


def test_figures_count_the_sequences_trained_and_leave_the_warm_up_out(tmp_path, capsys, monkeypatch):
    """block_size 64 over addition_2's 9 tokens: tokens and FLOPs of 9-token sequences. A clock stand-in: the first
    step takes 10 s (compiling), the others 0.1 s; the first log window (steps 2-3) reads 100 ms/iter, and a window
    that holds only the first step names it."""
    clock, step = [0.0], train.train_step

    def timed_step(*args):
        clock[0] += 10.0 if not timed_step.calls else 0.1
        timed_step.calls += 1
        return step(*args)
    timed_step.calls = 0
    monkeypatch.setattr(train, "train_step", timed_step)
    monkeypatch.setattr(keeper, "time", types.SimpleNamespace(time=lambda: clock[0]))
    assert run_train(tmp_path, "--task=addition_2", "--attn=softmax", "--block_size=64", "--max_iters=3",
                     "--eval_interval=3", "--batch_size=4", "--log_interval=3", "--n_layer=1", "--n_embd=16") == 0
    m, out = read_metrics(tmp_path)[-1], capsys.readouterr().out
    model = MixiT(mixit_config(load_ckpt(tmp_path)["model_args"]))
    assert model.config.block_size == 64 and m["tokens"] == 3 * 4 * 9
    assert m["flops"] == pytest.approx(3 * 4 * 9 * model.flops_per_token(9))
    assert "100.0 ms/iter, 360 tok/s" in out and "warm-up" not in out
    timed_step.calls = 0
    assert run_train(tmp_path / "b", "--task=addition_2", "--max_iters=2", "--eval_interval=2", "--attn=softmax",
                     "--log_interval=1", "--n_layer=1", "--n_embd=16") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter ")]
    assert "10000.0 ms/iter" in lines[0] and lines[0].endswith("warm-up step included")
    assert "100.0 ms/iter" in lines[1] and "warm-up" not in lines[1]


def batches_digest(batches, h):
    for x, y in batches:
        h.update(x.numpy().tobytes())
        h.update(y.numpy().tobytes())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_batches_made_ahead_are_todays(monkeypatch, tmp_path, device):
    """The worker thread's batches are those of the code before it (a digest pinned from it), and the steps of a run
    train on them, in order (on a GPU made by the worker while the step before runs; on a CPU, whose cores run the
    step, made at the step)."""
    h = hashlib.sha256()
    for name in ("addition_3", "dyck_10", "retrieval_4", "induction_8", "mqar_8", "memorize_4", "modadd_7"):
        config = dict(train.DEFAULTS, batch_size=8, seed=0)
        for it in range(3):
            batches_digest(keeper.AHEAD.submit(keeper.step_batches, data.make_task(name), config,
                                              [(0, slice(None)), (1, slice(None))], it).result(), h)
    assert h.hexdigest() == "30173dbd9a926986687e558bdb9c75a793aadc1a0937bef280b013290143e600"
    seen, step = [], train.train_step
    monkeypatch.setattr(train, "train_step", lambda model, batches, *a: seen.append(batches) or step(model, batches, *a))
    assert run_train(tmp_path, "--task=dyck_10", "--max_iters=3", "--eval_interval=3", "--batch_size=4",
                     "--attn=softmax", "--n_layer=1", "--n_embd=16", "--gradient_accumulation_steps=2",
                     device=device) == 0
    task = data.make_task("dyck_10")
    for it, batches in enumerate(seen):
        for micro, (x, y) in enumerate(batches):
            ex, ey = task.get_batch("train", 4, seed=[0, it, micro])
            assert torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey)


def test_the_latest_checkpoint_at_every_eval_and_on_time_the_best_apart(tmp_path, monkeypatch):
    """Evals read val_loss 3, 4, 2 (every 6 steps): the latest (ckpt.pt) at each, and between them every
    checkpoint_interval (a clock stand-in: a step takes 1 s; 0.05 minutes: after the first step that starts more than
    3 s after the last save); the best (best.pt, the latest too) where val_loss improves. metrics.jsonl holds every
    eval."""
    losses, saved, clock, step = iter([3.0, 4.0, 2.0]), [], [0.0], train.train_step
    monkeypatch.setattr(keeper, "eval_metrics", lambda *a: {"val_loss": next(losses)})
    monkeypatch.setattr(keeper, "save_checkpoint", lambda paths, m, o, cfg, state: saved.append(
        ([os.path.basename(p) for p in paths], state["iter_num"])))
    monkeypatch.setattr(keeper, "time", types.SimpleNamespace(time=lambda: clock[0]))

    def timed_step(*args):
        clock[0] += 1.0
        return step(*args)
    monkeypatch.setattr(train, "train_step", timed_step)
    assert run_train(tmp_path, "--task=addition_2", "--max_iters=18", "--eval_interval=6", "--attn=softmax",
                     "--n_layer=1", "--n_embd=16", "--checkpoint_interval=0.05") == 0
    latest, best = ["ckpt.pt"], ["best.pt", "ckpt.pt"]
    assert saved == [(latest, 5), (best, 6), (latest, 11), (latest, 12), (latest, 17), (best, 18)]
    assert len(read_metrics(tmp_path)) == 3
def test_best_pt_survives_a_lost_metrics_file_and_an_eval_that_scores_nothing(tmp_path, monkeypatch, capsys):
    """best.pt (iter 2, val_loss 1) stays the best when metrics.jsonl is emptied before a resume whose evals read 3
    and 2: the checkpoint keeps the best val_loss. An eval that scores no token (val_loss nan, as evaluate reads it)
    logs val_loss nan and is never the best."""
    losses = iter([1.0, 3.0, 2.0, math.nan])
    monkeypatch.setattr(keeper, "eval_metrics", lambda *args: {"val_loss": next(losses), "val_acc": 0.0})
    args = ["--task=addition_2", "--eval_interval=2", "--lr_decay_iters=8", "--attn=softmax", "--n_layer=1",
            "--n_embd=16"]
    assert run_train(tmp_path, *args, "--max_iters=2") == 0
    (tmp_path / "metrics.jsonl").write_text("")
    for max_iters in (6, 8):
        assert run_train(tmp_path, *args, f"--max_iters={max_iters}", "--init_from=resume") == 0
        best = torch.load(tmp_path / "best.pt", weights_only=True)
        assert best["iter_num"] == 2 and best["best_val_loss"] == 1.0
    assert re.search(r"eval iter 8, train_loss \S+, val_loss nan, ", capsys.readouterr().out)
    assert [m["val_loss"] for m in read_metrics(tmp_path)][:2] == [3.0, 2.0]
    assert math.isnan(read_metrics(tmp_path)[-1]["val_loss"])


def test_a_stop_is_read_at_the_next_step_whatever_the_log_interval(tmp_path, monkeypatch, capsys):
    """A stop asked for during step 1 is agreed with step 2's count (under torchrun: a 1-process gloo group, its
    all-reduce started before the step's backward and read after it): the run checkpoints after step 2 and exits,
    whatever log_interval; SIGUSR1 (SLURM's pre-emption warning) sets it like SIGTERM."""
    stops, step = [], train.train_step
    monkeypatch.setattr(train, "Stop", lambda: stops.append(common.Stop()) or stops[-1])
    monkeypatch.setattr(train.Stop, "SIGNALS", common.Stop.SIGNALS, raising=False)

    def asking(*args):
        if not stops[-1].signum:
            os.kill(os.getpid(), signal.SIGUSR1)  # its handler sets the flag
        return step(*args)
    monkeypatch.setattr(train, "train_step", asking)
    for name in ("one", "ddp"):
        if name == "ddp":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            for var, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                                   MASTER_PORT=str(port)).items():
                monkeypatch.setenv(var, value)
        assert run_train(tmp_path / name, "--task=addition_2", "--max_iters=9", "--eval_interval=9",
                         "--attn=softmax", "--n_layer=1", "--n_embd=16", "--log_interval=5000") == 128 + signal.SIGUSR1
        assert f"stopped by SIGUSR1 at iter 2: wrote {tmp_path / name / 'ckpt.pt'}" in capsys.readouterr().out
        assert load_ckpt(tmp_path / name)["iter_num"] == 2 and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_sigterm_under_torchrun_checkpoints_within_a_step_and_resume_matches(tmp_path, capsys):
    """2 processes under torchrun, log_interval far beyond the run: a SIGTERM to torchrun (forwarded to each worker)
    mid-run writes a checkpoint at the step every process agreed on, within a step, and exits; resumed (2 processes),
    the run ends as an uninterrupted one does (1 process: the same sequences a step)."""
    run = ["--task=addition_3", "--attn=softmax", "--eval_interval=5000", "--log_interval=5000", "--lr_decay_iters=5000",
           "--device=cpu", "--checkpoint_interval=0", *FAST, "--batch_size=16"]
    stopped, log = tmp_path / "stopped", open(tmp_path / "stopped.log", "w")
    proc = subprocess.Popen(torchrun_cmd(2, *run, "--max_iters=5000", f"--out_dir={stopped}"), cwd=HERE, stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wait_for(lambda: "out_dir" in (tmp_path / "stopped.log").read_text(), proc, timeout=180)
    time.sleep(2.0)  # some steps
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    text = (tmp_path / "stopped.log").read_text()
    step = load_ckpt(stopped)["iter_num"]
    assert 0 < step < 5000 and f"stopped by SIGTERM at iter {step}: wrote" in text and "forcefully" not in text
    resume = subprocess.run(torchrun_cmd(2, *run, f"--max_iters={step + 2}", "--init_from=resume",
                                         f"--out_dir={stopped}"), cwd=HERE, capture_output=True, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=240)
    assert resume.returncode == 0, resume.stderr[-3000:]
    assert run_train(tmp_path / "full", *run, f"--max_iters={step + 2}") == 0
    a, b = read_metrics(stopped)[-1], read_metrics(tmp_path / "full")[-1]
    assert a["iter"] == b["iter"] == step + 2 and a["tokens"] == b["tokens"] and a["samples"] == b["samples"]
    for key in ("train_loss", "val_loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-5)


def test_ddp_a_signal_to_one_worker_stops_every_rank_with_a_checkpoint(tmp_path):
    """2 processes under torchrun: a SIGUSR1 to rank 1 alone (not the launcher, not the master) stops every process
    after the step they agree on, with the checkpoint of that step."""
    run = ["--task=addition_2", "--attn=softmax", "--eval_interval=5000", "--log_interval=1", "--lr_decay_iters=5000",
           "--device=cpu", "--checkpoint_interval=0", "--max_iters=5000", *FAST, "--batch_size=16"]
    log = tmp_path / "out.log"
    with open(log, "w") as out:
        launcher = subprocess.Popen(torchrun_cmd(2, *run, f"--out_dir={tmp_path / 'out'}"), cwd=HERE, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wait_for(lambda: log.read_text().count("\niter ") >= 3, launcher, timeout=180)
    workers = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    rank_1 = [int(pid) for pid in workers if b"RANK=1" in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")]
    assert len(rank_1) == 1
    os.kill(rank_1[0], signal.SIGUSR1)
    assert launcher.wait(timeout=60) != 0
    text = log.read_text()
    step = load_ckpt(tmp_path / "out")["iter_num"]
    assert 3 <= step < 5000 and f"stopped by SIGUSR1 at iter {step}: wrote" in text and 'train.py", line' not in text


def test_a_stop_sent_twice_or_to_every_process_checkpoints_and_resumes_on_any_process_count(tmp_path):
    """Two SIGINTs 10 ms apart stop one process once, with a checkpoint. Resumed on 2 processes under torchrun, a SIGINT
    to the launcher and to every worker at once (each worker gets its own and torchrun's forward) checkpoints too.
    Resumed on 1, the run ends as an uninterrupted one: train_loss counts the losses before each stop once, whatever
    the process counts (1 -> 2 -> 1)."""
    run = ["--task=addition_3", "--attn=softmax", "--eval_interval=5000", "--log_interval=1", "--lr_decay_iters=5000",
           "--checkpoint_interval=0", *FAST, "--batch_size=16"]
    stopped, log = tmp_path / "stopped", tmp_path / "stopped.log"
    proc = start_run(stopped, *run, "--max_iters=5000")
    wait_for(lambda: log.read_text().count("\niter ") >= 3, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT
    first = load_ckpt(stopped)["iter_num"]
    assert f"stopped by SIGINT at iter {first}: wrote" in log.read_text() and "Traceback" not in log.read_text()
    with open(tmp_path / "ddp.log", "w") as out:
        launcher = subprocess.Popen(torchrun_cmd(2, *run, "--device=cpu", "--max_iters=5000", "--init_from=resume",
                                                 f"--out_dir={stopped}"), cwd=HERE, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wait_for(lambda: (tmp_path / "ddp.log").read_text().count("\niter ") >= 3, launcher, timeout=180)
    workers = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2
    for pid in [launcher.pid, *map(int, workers)]:
        os.kill(pid, signal.SIGINT)
    assert launcher.wait(timeout=60) != 0
    text = (tmp_path / "ddp.log").read_text()
    second = load_ckpt(stopped)["iter_num"]
    assert second > first and f"stopped by SIGINT at iter {second}: wrote" in text and 'train.py", line' not in text
    assert run_train(stopped, *run, f"--max_iters={second + 2}", "--init_from=resume") == 0
    assert run_train(tmp_path / "full", *run, f"--max_iters={second + 2}") == 0
    a, b = read_metrics(stopped)[-1], read_metrics(tmp_path / "full")[-1]
    assert a["iter"] == b["iter"] == second + 2 and a["tokens"] == b["tokens"]
    for key in ("train_loss", "val_loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-5)


SLOW_BUILD = """
import mixit as _mixit, time as _time
_init = _mixit.MixiT.__init__
def _slow(self, *args, **kwargs):
    print("building the model", flush=True)
    _time.sleep(60)
    _init(self, *args, **kwargs)
_mixit.MixiT.__init__ = _slow
"""


def test_ddp_a_stop_or_a_dead_launcher_during_start_up_ends_every_worker_in_one_line(tmp_path):
    """2 processes under torchrun, while the model builds (after the rendezvous): a SIGINT to every process, or a
    kill -9 of the launcher, ends each worker within seconds in one line, with no traceback from train.py and no file
    written. (torchrun prints its own traceback when signalled.)"""
    cfg = tmp_path / "slow.py"
    cfg.write_text(SLOW_BUILD)
    out_dir = tmp_path / "out"
    for signum, name in ((signal.SIGINT, "SIGINT"), (signal.SIGKILL, "SIGHUP")):
        log = tmp_path / f"{name}.log"
        with open(log, "w") as out:
            launcher = subprocess.Popen(torchrun_cmd(2, str(cfg), f"--out_dir={out_dir}", "--device=cpu",
                                                     "--task=addition_2", *FAST), cwd=HERE, stdout=out,
                                        stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        wait_for(lambda: log.read_text().count("building the model") == 2, launcher, timeout=180)
        workers = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                                                      text=True).stdout.split()]
        assert len(workers) == 2
        signalled = [launcher.pid, *workers] if signum == signal.SIGINT else [launcher.pid]
        for pid in signalled:
            os.kill(pid, signum)
        launcher.wait(timeout=60)
        t0 = time.time()
        while any(os.path.exists(f"/proc/{pid}") for pid in workers):
            assert time.time() - t0 < 20, "a worker outlived its launcher"
            time.sleep(0.1)
        text = log.read_text()
        assert text.count(f"stopped by {name} before the first step: nothing was saved\n") == 2, text
        assert 'train.py", line' not in text and "KeyboardInterrupt" not in text
        assert not run_files(out_dir)


FAULTS = {"disk": """
import errno as _errno, io as _io, os as _os, common as _common
_opened = []
class _FullDisk(_io.FileIO):
    def write(self, data):
        raise OSError(_errno.ENOSPC, "No space left on device")
def _open(path, mode="r", *args, **kwargs):
    _opened.append(path)
    if _os.environ["RANK"] == "0" and _opened.count(path) == 2 and path.endswith("ckpt.pt.tmp"):
        return _io.BufferedWriter(_FullDisk(path, "w"))
    return open(path, mode, *args, **kwargs)
_common.open = _open
""", "oom": """
import os as _os, mixit as _mixit, torch as _torch
_forward, _steps = _mixit.MixiT.forward, []
def _out_of_memory(self, idx, targets=None, cache=None):
    _steps.append(self.training)
    if _os.environ["RANK"] == "1" and sum(_steps) == 3:
        raise _torch.OutOfMemoryError("CUDA out of memory")
    return _forward(self, idx, targets, cache)
_mixit.MixiT.forward = _out_of_memory
"""}


@pytest.mark.parametrize("fault", FAULTS)
def test_ddp_a_full_disk_or_one_ranks_out_of_memory_ends_every_rank_in_one_line(tmp_path, fault):
    """Under torchrun, the master's disk fills at iter 4's checkpoint, or rank 1 runs out of memory at step 3: every
    process ends, each in one line, and the checkpoint of iter 2 loads."""
    t0 = time.time()
    proc = torchrun(tmp_path, FAULTS[fault], "--attn=softmax", timeout=300)
    assert proc.returncode != 0 and time.time() - t0 < 120
    assert 'train.py", line' not in proc.stderr and load_ckpt(tmp_path / "out")["iter_num"] == 2
    if fault == "disk":
        assert "error: could not write" in proc.stderr and "rank 1: stopped as rank 0 failed" in proc.stderr
    else:
        assert "error: out of memory" in proc.stderr and "error: rank 0: " in proc.stderr


def test_probes_sharded_over_processes_sum_to_the_whole():
    """Each of 2 processes scores every 2nd sequence; their sums (the all-reduce a stand-in for it) are the score."""
    model, task = tiny_model(attn="softmax", vocab_size=512, block_size=16), data.make_task("retrieval_6")
    whole = (data.induction_scores(model, seed=3), data.recall_scores(model, task))
    parts = [(data.induction_scores(model, seed=3, env=env), data.recall_scores(model, task, env=env))
             for env in (types.SimpleNamespace(rank=r, world_size=2, all_reduce=lambda t: t) for r in (0, 1))]
    for k in (0, 1):
        assert torch.allclose(parts[0][k] + parts[1][k], whole[k], atol=1e-6)
        assert not torch.allclose(parts[0][k], whole[k])


def test_rotary_turns_in_float32_and_rounds_once():
    """In bfloat16 the rotation is float32's, rounded once at the end (the tables are never rounded)."""
    rot = mixit.Rotary(16, 64, 10000.0)
    x = torch.randn(2, 2, 64, 16)
    want = rot(x, 0).bfloat16()
    assert torch.equal(rot(x.bfloat16(), 0), mixit.Rotary(16, 64, 10000.0)(x.bfloat16().float(), 0).bfloat16())
    assert rot(x.bfloat16(), 0).dtype == torch.bfloat16 and (rot(x.bfloat16(), 0).float() - want.float()).abs().max() < 0.1


def test_resume_an_unfreeze_share_with_another_max_iters(tmp_path, capsys):
    """unfreeze_at=50% of 4 steps (unfrozen at 2), resumed to 8 steps (50%: 4): its optimizer holds the unfrozen
    parts, and the resumed run trains them on."""
    args = ["--task=addition_2", "--attn=frozen_qk", "--unfreeze_at=50%", "--eval_interval=4", *FAST]
    assert run_train(tmp_path, *args, "--max_iters=4") == 0
    assert run_train(tmp_path, *args, "--max_iters=8", "--init_from=resume") == 0
    ckpt = load_ckpt(tmp_path)
    assert ckpt["iter_num"] == 8 and len(ckpt["optimizer"]["param_groups"]) == 4
    assert "unfroze" not in capsys.readouterr().out.split("resumed")[1]


def test_bench_times_train_py_s_step(monkeypatch):
    """bench's training rows time train.train_step itself."""
    calls, step = [], train.train_step
    monkeypatch.setattr(train, "train_step", lambda *a: calls.append(1) or step(*a))
    env = common.setup("cpu", "float32")
    shape = dict(n_layer=1, n_embd=16, n_head=2, vocab_size=32, block_size=8, batch_size=2, accum=2)
    row = bench.time_training(env, shape, "mixing", 2, 1, 1, False)
    assert len(calls) == 3 and math.isfinite(row["final_loss"])
