"""Tests for the corpora of data.py: python -m pytest -q test_data.py (CPU only, no network).
The real-data tests use ../shared/data and are skipped, with the reason, where it is absent."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
import zipfile

import numpy as np
import pytest

import data
import train

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "shared", "data")
BPE_DIR = os.path.join(SHARED, "gpt2_bpe")
DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens there: any download fails at once, network or not
needs_bpe = pytest.mark.skipif(not os.path.isfile(os.path.join(BPE_DIR, "gpt2.tiktoken")),
                               reason=f"no offline GPT-2 BPE at {BPE_DIR}")


def needs(*parts):
    path = os.path.join(SHARED, *parts)
    return pytest.mark.skipif(not os.path.exists(path), reason=f"no local copy at {path}")


def run_train(out_dir, *args):
    """train.py in this process; returns its exit status."""
    return train.cli([f"--out_dir={out_dir}", "--device=cpu", "--log_interval=1000", *args])


def read_metrics(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


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
def test_bad_input_is_one_clear_line(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        data.main([a.replace("TMP", str(tmp_path)) for a in argv])


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


@pytest.mark.parametrize("name", ["lm_cpu", "lm_paper", "sst2_cpu", "yelp_paper"])
def test_presets_parse_and_build_a_valid_model(name):
    config = train.parse_config([os.path.join(HERE, "configs", f"{name}.py")])
    assert config["task"] in data.CORPUS_TASKS
    n_classes = 2 if config["task"] in ("sst2", "yelp_polarity") else 0
    task = types.SimpleNamespace(name=config["task"], vocab_size=data.padded_vocab(50257), causal=not n_classes,
                                 block_size=config["block_size"], n_classes=n_classes, pad_id=50256 if n_classes else -1)
    for attn in ("softmax", "frozen_qk", "mixing"):
        train.model_config(dict(config, attn=attn), task)
    if name.endswith("_paper"):  # one step is the same for 1, 2 (and 4, 8) processes
        assert config["gradient_accumulation_steps"] % 2 == 0
