"""
Prepare corpora for mixit: download (checksummed) or copy, tokenize (GPT-2 BPE through tiktoken,
or bytes) and write data/<name>, which data.py reads.

  python prepare.py wikitext103 | wikitext2 | tinyshakespeare | yelp_polarity | sst2   # download
  python prepare.py wikitext2 --src=PATH --bpe_dir=DIR   # an offline copy, DIR/gpt2.tiktoken's BPE
  python prepare.py text --src=PATH [--name=mytext]   # any text file or folder: --task=mytext

  options: --tokenizer=gpt2|bytes  --bpe_dir=DIR (or MIXIT_BPE_DIR)  --out_dir=data  --max_len=256
           --name=NAME

Language modeling: {train,val,test}.bin uint16 token streams, an end-of-text token after every
document (a WikiText article; a file of `text`); WikiText's lines also each tokenized alone,
{split}_lines.bin and {split}_lines.npy (where each starts), for train.py --lm_rows=lines.
Classification: {train,val}_{x,y}.npy. meta.json, written last, records the tokenizer, the counts
and the source files with their sha256. Bad input ends in one line on stderr and exit status 2,
leaving nothing half-written.
"""
import csv
import glob
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import urllib.request
import zipfile

import numpy as np

from common import ConfigError, OneOf, cli, configure, positive, write_atomic
from data import TASKS, TOKENIZERS, Tokenizer, encode_examples


def _wikitext(url, md5, ext):
    # WikiText's valid split is our val.
    names = {"train": "train", "val": "valid", "test": "test"}
    files = {split: (f"wiki.{name}.{ext}", f"{name}.txt") for split, name in names.items()}
    return dict(kind="lm", url=url, md5=md5, files=files)


# Public sources, with their published checksums, and their files by split: each split's file
# names, the first preferred.
SOURCES = {
    "wikitext103": _wikitext("https://wikitext.smerity.com/wikitext-103-raw-v1.zip",
                             "0ca3512bd7a238be4a63ce7b434f8935", "raw"),
    "wikitext2": _wikitext("https://wikitext.smerity.com/wikitext-2-v1.zip",
                           "542ccefacc6c27f945fb54453812b3cd", "tokens"),
    "tinyshakespeare": dict(
        kind="lm", files={"stream": ("input.txt",)},
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/"
            "input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
    # Yelp polarity: the public archive holds train.csv (560k) and test.csv (38k, evaluated as
    # 'val'); the star-rated offline copy (yelp_reviews_stars) dev.csv and test.csv (5k each),
    # which train and evaluate (the rule in meta.json).
    "yelp_polarity": dict(
        kind="classification", files={"train": ("train.csv", "dev.csv"), "val": ("test.csv",)},
        md5="620c8ae4bd5a150b730f1ba9a7c6a4d3",
        url="https://drive.usercontent.google.com/download?id=0Bz8a_Dbh9QhbNUpYQ2N3SGlFaDg"
            "&export=download&confirm=t", archive="yelp_review_polarity_csv.tar.gz"),
    "sst2": dict(
        kind="classification", files={"train": ("train.tsv",), "val": ("dev.tsv",)},
        url="https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        md5="9f81648d4199384278b86e315dac217c"),
    "text": dict(kind="lm", files=None),
}
FORMATS = {"sst2": "UTF-8 tab-separated rows under a header naming label and sentence (or content)",
           "yelp_polarity": 'UTF-8 CSV rows "label","text" with label 1 or 2, '
                            'or text,label1,"Review Stars: s" under a header'}
# Some servers refuse urllib's own (Python-urllib/3.x).
USER_AGENT = "Mozilla/5.0 (compatible; mixit prepare.py)"
ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")
OPTIONS = {"src": "", "tokenizer": "gpt2", "bpe_dir": "", "out_dir": "data", "max_len": 256,
           "name": ""}
RULES = {"tokenizer": OneOf(TOKENIZERS), "max_len": positive}


def download(url, path, md5=None, sha256=None):
    """Fetch url to path (progress on stderr) and check its recorded checksum; a failure is a
    ValueError, and leaves no file."""
    tmp = path + ".part"
    digest = hashlib.md5() if md5 else hashlib.sha256()
    expected = md5 or sha256
    try:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        with urllib.request.urlopen(request, timeout=30) as response, open(tmp, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0)
            of_total = f" of {total / 1e6:.1f}" if total else ""
            try:
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
                    digest.update(chunk)
                    print(f"\rdownloading {url}: {f.tell() / 1e6:.1f} MB{of_total}", end="",
                          file=sys.stderr, flush=True)
            finally:
                print(file=sys.stderr)  # ends the progress line
        if digest.hexdigest() != expected:
            raise ValueError(f"{url} has checksum {digest.hexdigest()}, "
                             f"not the recorded {expected}")
        os.replace(tmp, path)
    except OSError as e:  # urllib's errors, timeouts included
        raise ValueError(f"downloading {url} failed ({type(e).__name__}: {e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def archive_members(path):
    """{basename: bytes} of the files inside a zip or tar archive."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return {os.path.basename(name): archive.read(name) for name in archive.namelist()
                    if not name.endswith("/")}
    with tarfile.open(path) as archive:
        return {os.path.basename(member.name): archive.extractfile(member).read()
                for member in archive.getmembers() if member.isfile()}


def files_in(src):
    """[src] for a file, else the files in the folder src and below it, sorted (glob leaves out
    hidden ones)."""
    if os.path.isfile(src):
        return [src]
    paths = glob.glob(os.path.join(src, "**", "*"), recursive=True)
    return sorted(path for path in paths if os.path.isfile(path))


def find_files(src, wanted):
    """{split: (name, bytes)} of wanted ({split: basenames, first preferred}) in src: a folder or an
    archive; None where a split has none of its files there."""
    found = {}
    for path in files_in(src):
        found.setdefault(os.path.basename(path), path)
        if path.endswith(ARCHIVES):
            for name, blob in archive_members(path).items():
                found.setdefault(name, blob)
    files = {}
    for split, names in wanted.items():
        name = next((n for n in names if n in found), None)
        if name is None:
            return None
        blob = found[name]
        if not isinstance(blob, bytes):
            blob = open(blob, "rb").read()
        files[split] = name, blob
    return files


def make_dirs(path):
    """os.makedirs(path), and the topmost folder it created (None if none)."""
    made = None
    parent = path
    while parent and not os.path.isdir(parent):
        made = parent
        parent = os.path.dirname(parent)
    os.makedirs(path, exist_ok=True)
    return made


def fetch(dataset, spec, src, folder):
    """The source files of a dataset as {split: (name, bytes)}, and where they came from: --src,
    else folder/raw, else a download into folder/raw (on failure nothing is left, not even the
    folders)."""
    raw = os.path.join(folder, "raw")
    wanted = spec["files"]
    archive = spec.get("archive") or os.path.basename(spec["url"])
    needs = ", ".join(" or ".join(names) for names in wanted.values())
    if archive not in needs:
        needs += f" (or {archive})"
    if src:
        if os.path.isfile(src) and len(wanted) == 1 and not src.endswith(ARCHIVES):
            # one file, taken for the dataset's one file whatever its name
            blob = open(src, "rb").read()
            return {split: (os.path.basename(src), blob) for split in wanted}, src
        files = find_files(src, wanted)
        if files is None:
            raise ValueError(f"--src={src} lacks some of the files {dataset} needs: {needs}")
        return files, src
    # A missing raw folder holds none.
    files = find_files(raw, wanted)
    if files is not None:
        return files, raw
    made = make_dirs(raw)
    try:
        download(spec["url"], os.path.join(raw, archive), md5=spec.get("md5"),
                 sha256=spec.get("sha256"))
        files = find_files(raw, wanted)
        if files is None:
            raise ValueError(f"{archive} lacks some of the files {dataset} needs")
    except ValueError as e:
        if made:
            shutil.rmtree(made)
        raise ValueError(f"{dataset}: no local copy, and {e}; put {needs} in {raw}/ or pass "
                         f"--src=PATH to a copy") from None
    return files, spec["url"]


def read_documents(src):
    """The documents of `text` as {name: (name, bytes)} (one file, or every file of a folder,
    sorted), and src, where they came from."""
    files = {}
    for path in files_in(src):
        name = os.path.relpath(path, src) if path != src else os.path.basename(path)
        files[name] = name, open(path, "rb").read()
    if not files:
        raise ValueError(f"--src={src}: no text files found")
    return files, src


def wikitext_articles(text):
    """A WikiText split as articles: each starts at a level-1 heading line ' = Title = '."""
    return [a for a in re.split(r"(?m)^(?= = [^=].* = $)", text) if a.strip()]


def read_sst2(blob):
    """GLUE SST-2 TSV with a header, in either column order (sentence/content, label): texts,
    labels, rule."""
    rows = csv.reader(io.StringIO(blob.decode("utf-8")), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(rows)
    text_col = next(i for i, h in enumerate(header) if h in ("sentence", "content"))
    rows = [r for r in rows if r]
    labels = [int(r[header.index("label")]) for r in rows]
    return [r[text_col] for r in rows], labels, "label 0 negative, 1 positive"


def read_yelp(blob):
    """Yelp polarity CSV ("label","text" with 1 negative, 2 positive), or star-rated reviews
    (text,label1,"Review Stars: s") as in the offline copy: 1-2 stars negative, 4-5 positive, 3
    dropped. Returns texts, labels, the rule."""
    rows = list(csv.reader(io.StringIO(blob.decode("utf-8"))))
    if rows[0][0] == "text":
        rated = [(r[0], float(r[2].split(":")[-1])) for r in rows[1:]]
        return ([text for text, stars in rated if stars != 3],
                [int(stars >= 4) for text, stars in rated if stars != 3],
                "stars: 1-2 negative, 4-5 positive, 3 dropped")
    texts = [r[1].replace("\\n", "\n").replace('\\"', '"') for r in rows]
    return texts, [int(r[0]) - 1 for r in rows], "class 1 negative, 2 positive"


def encode_rows(tok, texts, end=()):
    """Each text's tokens, then end, in one uint16 stream; and where each row starts, and the last
    ends (rows + 1)."""
    rows = [np.asarray(ids + list(end), dtype=np.uint16) for i in range(0, len(texts), 1024)
            for ids in tok.encode_batch(texts[i:i + 1024])]
    stream = np.concatenate(rows) if rows else np.zeros(0, np.uint16)
    return stream, np.cumsum([0] + [len(r) for r in rows])


def write_npy(path, array):
    """array saved at path, atomically, as a .npy file (no pickled objects)."""
    write_atomic(path, lambda f: np.save(f, array, allow_pickle=False))


def prepare(dataset, src=None, tokenizer="gpt2", bpe_dir=None, out_dir="data", max_len=256,
            name=None):
    """Tokenize a corpus into out_dir/<name> (the files above); meta.json last, so it marks a
    complete folder."""
    check_request(dataset, src, name)
    spec = SOURCES[dataset]
    folder = os.path.join(out_dir, name or dataset)
    tok = Tokenizer(tokenizer, bpe_dir)
    files, origin = read_documents(src) if dataset == "text" else fetch(dataset, spec, src, folder)
    made = make_dirs(folder)
    meta_path = os.path.join(folder, "meta.json")
    # a folder being rewritten is not prepared
    if os.path.exists(meta_path):
        os.remove(meta_path)
    # by split: train, val, test, or stream (text: by file)
    sources = {split: {"file": file, "sha256": hashlib.sha256(blob).hexdigest()}
               for split, (file, blob) in files.items()}
    meta = {"dataset": dataset, "kind": spec["kind"], "tokenizer": tok.name,
            "vocab_size": tok.n_vocab, "eot": tok.eot, "source": origin, "source_files": sources}
    try:
        if spec["kind"] == "lm":
            meta.update(write_lm(tok, dataset, files, folder))
        else:
            meta.update(write_classification(tok, dataset, files, folder, max_len))
    except ValueError:
        # unreadable source files: a folder made here goes again
        if made:
            shutil.rmtree(made)
        raise
    write_atomic(meta_path, lambda f: f.write(json.dumps(meta, indent=1).encode()))
    return folder, meta


def check_request(dataset, src, name):
    """prepare()'s arguments, checked before anything is read or written."""
    if dataset not in SOURCES:
        raise ValueError(f"unknown dataset {dataset!r}; valid: {', '.join(SOURCES)}")
    if name and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValueError(f"--name={name!r}: a folder name of letters, digits, '_', '.' and '-'")
    if name and name.partition("_")[0] in TASKS:
        raise ValueError(f"--name={name!r} would read as the algorithmic task "
                         f"{name.partition('_')[0]}_N; choose another name")
    if dataset == "text" and not src:
        raise ValueError("text needs --src=PATH: a text file or a folder of text files")
    if src and not os.path.exists(src):
        raise ValueError(f"--src={src} does not exist")


def write_lm(tok, dataset, files, folder):
    """{split}.bin token streams, one cut 90% train / 10% val or WikiText's splits (an end-of-text
    token after each article), and WikiText's lines each tokenized alone ({split}_lines.bin, .npy
    where each starts); meta's counts."""
    lines = {}
    if dataset in ("tinyshakespeare", "text"):
        texts = [blob.decode("utf-8", errors="replace") for _, blob in files.values()]
        stream = encode_rows(tok, texts, [tok.eot])[0]
        cut = int(0.9 * len(stream))
        splits = {"train": stream[:cut], "val": stream[cut:]}
    else:
        splits = {}
        for split, (file, blob) in files.items():
            try:
                text = blob.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{file} is not UTF-8 text (byte {e.start})") from None
            splits[split] = encode_rows(tok, wikitext_articles(text), [tok.eot])[0]
            # the paper's rows: a blank line is an empty row
            rows = [line if line.strip() else "" for line in text.splitlines(keepends=True)]
            lines[split] = encode_rows(tok, rows)
    for split, tokens in splits.items():
        write_atomic(os.path.join(folder, f"{split}.bin"), tokens.tofile)
    for split, (tokens, starts) in lines.items():
        write_atomic(os.path.join(folder, f"{split}_lines.bin"), tokens.tofile)
        write_npy(os.path.join(folder, f"{split}_lines.npy"), starts)
    counts = {"tokens": {split: len(tokens) for split, tokens in splits.items()}}
    if lines:
        counts["lines"] = {split: len(starts) - 1 for split, (_, starts) in lines.items()}
        counts["line_tokens"] = {split: len(tokens) for split, (tokens, _) in lines.items()}
    return counts


def write_classification(tok, dataset, files, folder, max_len):
    """{split}_x.npy (n, max_len) token ids and {split}_y.npy labels; meta's classes, counts and
    label rule."""
    reader = read_sst2 if dataset == "sst2" else read_yelp
    examples = {}
    rules = set()
    for split, (file, blob) in files.items():
        try:
            texts, labels, rule = reader(blob)
        except (ValueError, IndexError, StopIteration, csv.Error) as e:
            # a file that is not UTF-8 too: UnicodeDecodeError is a ValueError
            raise ValueError(f"{file} is not a {dataset} file ({type(e).__name__}: {e}); expected "
                             f"{FORMATS[dataset]}") from None
        if not set(labels) <= {0, 1}:
            raise ValueError(f"{file} has labels outside the two classes ({rule})")
        x, keep = encode_examples(tok, texts, max_len)
        write_npy(os.path.join(folder, f"{split}_x.npy"), x[keep])
        write_npy(os.path.join(folder, f"{split}_y.npy"), np.asarray(labels, dtype=np.uint8)[keep])
        examples[split] = int(keep.sum())
        rules.add(rule)
    return {"max_len": max_len, "n_classes": 2, "pad_id": tok.eot,
            "labels": ["negative", "positive"], "examples": examples,
            "label_rule": "; ".join(sorted(rules))}


def main(argv):
    """python prepare.py DATASET [--key=value ...]: prepare the corpus, print what was written."""
    if not argv or argv[0].startswith("--"):
        raise ConfigError(f"usage: python prepare.py DATASET [--key=value]; datasets: "
                          f"{', '.join(SOURCES)}")
    options = configure(OPTIONS, argv[1:], RULES, files=False)
    try:
        folder, meta = prepare(argv[0], **options)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    unit = "tokens" if meta["kind"] == "lm" else "examples"
    counts = ", ".join(f"{split} {n:,} {unit}" for split, n in meta[unit].items())
    print(f"wrote {folder}: {counts} ({meta['tokenizer']}, vocab {meta['vocab_size']})")


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
