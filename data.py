"""
Data for mixit.

make_task(name) builds a task by its command-line name:
  addition_N   two N-digit numbers, digits reversed, and their sum      (arithmetic)
  dyck_N       is a bracket string of at most 2N characters balanced?  (structure)
  retrieval_N  in-context key -> value recall over up to N pairs       (retrieval; the reference's condattend)
  modadd_P     (a + b) mod P for all P^2 pairs, 95/5 train/test split  (arithmetic, in weights)
  memorize_N   random labels for all N^2 two-token inputs              (memorization; scored on the training set)
  induction_N  a random segment followed by its repeat                 (the classic induction-head task)
  wikitext103, wikitext2, tinyshakespeare, text, yelp_polarity, sst2: a corpus prepared in data/<name>
A bare algorithmic name takes the default N. Every task gives batches (x, y) of LongTensors where
y = -1 at the positions that are not scored, and a fixed evaluation split that no training batch repeats.

Preparing corpora into data/<name> (GPT-2 BPE through tiktoken, or bytes):
  python data.py wikitext103 | wikitext2 | tinyshakespeare | yelp_polarity | sst2   # download (checksummed)
  python data.py wikitext2 --src=../shared/data/wikitext-2 --bpe_dir=../shared/data/gpt2_bpe   # offline copy
  python data.py text --src=PATH [--name=mytext]          # any text file or folder; train with --task=mytext
  options: --tokenizer=gpt2|bytes  --bpe_dir=DIR (or MIXIT_BPE_DIR)  --out_dir=data  --max_len=256
Language modeling: {train,val,test}.bin uint16 token streams, an end-of-text token after every document
(a WikiText article; a file of `text`). Classification: {train,val}_{x,y}.npy. meta.json, written last,
records the tokenizer, the counts and the source files with their sha256.
"""
import base64
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
import threading
import urllib.request
import zipfile
from abc import ABC, abstractmethod

import numpy as np
import torch

TEST_SEED = 12345  # the reference's seed for test sets and fixed tables
N_TEST = 4000  # the reference's test-set size for streaming tasks


def _row_hash(seqs):
    """A 64-bit hash per row (a random linear map mod 2^64); equal rows hash equally."""
    weights = np.random.default_rng(0).integers(1, 2 ** 62, size=seqs.shape[1], dtype=np.int64) | 1
    with np.errstate(over="ignore"):
        return (seqs * weights).sum(1)


class Task(ABC):
    """Fixed-length integer sequences (B, L): x = seq[:, :-1], y = seq[:, 1:] where scored, else -1."""

    n_classes, causal, pad_id = 0, True, -1  # a language-model task over the task vocabulary
    val_split = "test"  # the split behind val_loss / val_acc
    train_eval = False  # also report accuracy on the training split (train_acc)
    exact_match = False  # also report whole-answer exact match (val_exact)
    perplexity = False  # also report exp(val_loss) (val_ppl)

    def __init__(self, name, vocab_size, seq_len):
        self.name, self.vocab_size, self.block_size = name, vocab_size, seq_len - 1

    @abstractmethod
    def scored(self, seqs):
        """(n, L-1) bool: is the prediction made at position t (of token t+1) scored?"""

    def xy(self, seqs):
        seqs = torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64))
        x, y = seqs[:, :-1], seqs[:, 1:].clone()
        y[~torch.from_numpy(self.scored(seqs.numpy()))] = -1
        return x.contiguous(), y

    @abstractmethod
    def train_rows(self, rng, n):
        """(n, L) int64 fresh training sequences drawn with rng."""

    @abstractmethod
    def split_rows(self, split):
        """(N, L) the fixed sequences of a split."""

    def get_batch(self, split, batch_size, seed=0):
        """A batch drawn from seed: fresh training sequences, or random rows of a fixed split."""
        rng = np.random.default_rng(seed)
        if split == "train":
            return self.xy(self.train_rows(rng, batch_size))
        rows = self.split_rows(split)
        return self.xy(rows[rng.integers(0, len(rows), batch_size)])

    def eval_batches(self, split, batch_size, rank=0, world_size=1):
        """The whole fixed split in batches; each process takes every world_size-th row."""
        rows = self.split_rows(split)[rank::world_size]
        for i in range(0, len(rows), batch_size):
            yield self.xy(rows[i:i + batch_size])

    def token_str(self, token):
        return str(token)

    def show(self, x, y, pred):
        """One line: the input, the true answer and the model's answer at the scored positions."""
        mask = y >= 0
        first = int(np.argmax(mask)) if mask.any() else len(x)
        words = lambda ts: " ".join(self.token_str(int(t)) for t in ts)
        truth, model = words(y[mask]), words(pred[mask])
        return f"{words(x[:first + 1])}  ->  truth: {truth}   model: {model}   {'ok' if truth == model else 'WRONG'}"


class StreamTask(Task):
    """Training sequences are generated fresh for every batch; the fixed test set is excluded."""

    def __init__(self, name, vocab_size, seq_len):
        super().__init__(name, vocab_size, seq_len)
        self.test = self.sample(np.random.default_rng(TEST_SEED), N_TEST)  # duplicates kept, as the reference
        self.test_hashes = np.unique(_row_hash(self.test))

    @abstractmethod
    def sample(self, rng, n):
        """(n, L) int64 sequences drawn from the task distribution."""

    def split_rows(self, split):
        if split != "test":
            raise ValueError(f"{self.name} has a fixed 'test' split only (training is a fresh stream)")
        return self.test

    def train_rows(self, rng, n):
        kept, have = [], 0
        for _ in range(1000):
            seqs = self.sample(rng, n)
            seqs = seqs[~np.isin(_row_hash(seqs), self.test_hashes)]  # never train on a test sequence
            kept.append(seqs)
            have += len(seqs)
            if have >= n:
                return np.concatenate(kept)[:n]
        raise ValueError(f"{self.name}: almost every sequence lies in the test set; choose a larger N")


class Addition(StreamTask):
    """rev(a) + rev(b) = rev(a+b) STOP PAD..., a and b N-digit numbers (TASKS.md 1.1), vocab 31:
    0-9 operand digits, 10 '+', 11 '=', 12 PAD, 20+d answer digit d, 30 STOP.
    Scored: every answer digit and STOP. The reference scores from the second answer digit on (its
    mask looks at the input token, so the first digit, predicted at '=', is skipped) and also scores
    the PAD after STOP."""

    PLUS, EQ, PAD, ANS, STOP = 10, 11, 12, 20, 30
    exact_match = True

    def __init__(self, n):
        self.n = n
        super().__init__(f"addition_{n}", 31, 3 * n + 4)

    def _number(self, rng, count):  # least-significant digit first; the leading digit is 1..9
        digits = rng.integers(0, 10, (count, self.n))
        digits[:, -1] = rng.integers(1, 10, count)
        return digits

    def sample(self, rng, count):
        N = self.n
        a, b = self._number(rng, count), self._number(rng, count)
        total = np.zeros((count, N + 1), np.int64)
        carry = np.zeros(count, np.int64)
        for i in range(N):  # schoolbook addition over the columns, all rows at once
            column = a[:, i] + b[:, i] + carry
            total[:, i], carry = column % 10, column // 10
        total[:, N] = carry
        seqs = np.full((count, 3 * N + 4), self.PAD, np.int64)
        seqs[:, :N], seqs[:, N], seqs[:, N + 1:2 * N + 1], seqs[:, 2 * N + 1] = a, self.PLUS, b, self.EQ
        seqs[:, 2 * N + 2:3 * N + 2] = total[:, :N] + self.ANS
        seqs[:, 3 * N + 2] = np.where(carry == 1, self.ANS + 1, self.STOP)
        seqs[:, 3 * N + 3] = np.where(carry == 1, self.STOP, self.PAD)
        return seqs

    def scored(self, seqs):
        return seqs[:, 1:] >= self.ANS  # the next token is an answer digit or STOP

    def token_str(self, token):
        return {self.PLUS: "+", self.EQ: "=", self.PAD: "_", self.STOP: "$"}.get(token, str(token % 10))


class Dyck(StreamTask):
    """s ? answer PAD..., s a bracket string of at most 2N characters (TASKS.md 1.3), vocab 4:
    0 PAD, 1 '(', 2 ')', 3 '?'; the answer is ')' if s is balanced else '('. Scored: the answer."""

    PAD, OPEN, CLOSE, QUERY = 0, 1, 2, 3

    def __init__(self, n):
        self.n = n
        super().__init__(f"dyck_{n}", 4, 2 * n + 3)

    def _balanced(self, rng, pairs):
        """The reference's recursion for all rows at once, with an explicit stack per row:
        gen(1) = (), gen(t) = ( gen(t-1) ) with probability 1/2, else gen(u) gen(t-u), u ~ U{1..t-1}."""
        count, width = len(pairs), 2 * self.n
        out, pos = np.zeros((count, width), np.int64), np.zeros(count, np.int64)
        stack = np.zeros((count, width + 2), np.int64)  # item k >= 1: gen(k) to expand; -1: a ')' to emit
        stack[:, 0], top = pairs, np.ones(count, np.int64)

        def emit(rows, token):
            out[rows, pos[rows]] = token
            pos[rows] += 1

        def push(rows, item):
            stack[rows, top[rows]] = item
            top[rows] += 1

        while (top > 0).any():
            rows = np.flatnonzero(top > 0)
            top[rows] -= 1
            item = stack[rows, top[rows]]
            emit(rows[item == -1], self.CLOSE)
            unit = rows[item == 1]
            emit(unit, self.OPEN)
            emit(unit, self.CLOSE)
            big, k = rows[item >= 2], item[item >= 2]
            wrap = rng.random(len(big)) < 0.5
            emit(big[wrap], self.OPEN)  # ( gen(k-1) )
            push(big[wrap], -1)
            push(big[wrap], k[wrap] - 1)
            split, k = big[~wrap], k[~wrap]  # gen(u) gen(k-u)
            u = 1 + (rng.random(len(split)) * (k - 1)).astype(np.int64)
            push(split, k - u)
            push(split, u)
        return out

    def sample(self, rng, count):
        N, rows = self.n, np.arange(count)
        mutate = rng.integers(0, 4, count)  # bit 0: swaps, bit 1: flips
        random_string = rng.random(count) < 1 / 3
        length = np.where(random_string, rng.integers(1, 2 * N + 1, count), 0)
        s = rng.integers(self.OPEN, self.CLOSE + 1, (count, 2 * N))
        pairs = rng.integers(1, N + 1, count)
        bal = ~random_string
        s[bal] = self._balanced(rng, pairs[bal])
        length[bal] = 2 * pairs[bal]
        mutate[bal & (rng.random(count) < 0.5)] = 0
        s[np.arange(2 * N) >= length[:, None]] = self.PAD
        swaps = np.where(mutate & 1, rng.geometric(0.5, count), 0)  # P(rep = k) = 2^-k
        for k in range(swaps.max(initial=0)):
            r = rows[swaps > k]
            p, q = (rng.random((2, len(r))) * length[r]).astype(np.int64)
            r, p, q = r[p < q], p[p < q], q[p < q]
            s[r, p], s[r, q] = s[r, q], s[r, p]
        flips = np.where(mutate & 2, rng.geometric(0.5, count), 0)
        flips *= np.where(rng.random(count) < 2 / 3, 2, 1)
        for k in range(flips.max(initial=0)):
            r = rows[flips > k]
            p = (rng.random(len(r)) * length[r]).astype(np.int64)
            s[r, p] = self.OPEN + self.CLOSE - s[r, p]
        depth = np.cumsum((s == self.OPEN).astype(np.int64) - (s == self.CLOSE), axis=1)
        balanced = (depth.min(1) >= 0) & (depth[:, -1] == 0)
        seqs = np.zeros((count, 2 * N + 3), np.int64)
        seqs[:, :2 * N] = s
        seqs[rows, length] = self.QUERY
        seqs[rows, length + 1] = np.where(balanced, self.CLOSE, self.OPEN)
        return seqs

    def scored(self, seqs):
        return seqs[:, :-1] == self.QUERY

    def token_str(self, token):
        return "_()?"[token]


class Retrieval(StreamTask):
    """k1 v1 k2 v2 ... kn vn q v PAD... with n ~ U{1..N} distinct keys (TASKS.md 1.2, condattend),
    vocab 512 = 2H: 0 PAD, values 1..H-1, key k is H+k, the query for key k is H+N+k.
    Scored: the value after the query, which needs content-based (input-dependent) attention."""

    def __init__(self, n, vocab_size=512):
        self.n, self.half = n, vocab_size // 2
        if 2 * n > self.half:
            raise ValueError(f"retrieval_N needs 2N <= {self.half}, got N={n}")
        super().__init__(f"retrieval_{n}", vocab_size, 2 * n + 3)

    def sample(self, rng, count):
        N, H, rows = self.n, self.half, np.arange(count)
        pairs = rng.integers(1, N + 1, count)
        keys = np.argsort(rng.random((count, N)), axis=1)  # a random permutation: distinct keys
        values = rng.integers(1, H, (count, N))  # values may repeat
        present = np.arange(N) < pairs[:, None]
        seqs = np.zeros((count, 2 * N + 3), np.int64)
        seqs[:, 0:2 * N:2] = np.where(present, H + keys, 0)
        seqs[:, 1:2 * N:2] = np.where(present, values, 0)
        asked = (rng.random(count) * pairs).astype(np.int64)  # uniform among the keys present
        seqs[rows, 2 * pairs] = H + N + keys[rows, asked]
        seqs[rows, 2 * pairs + 1] = values[rows, asked]
        return seqs

    def scored(self, seqs):
        return seqs[:, :-1] >= self.half + self.n  # the current token is the query

    def token_str(self, token):
        if token == 0:
            return "_"
        if token < self.half:
            return str(token)
        return f"k{token - self.half}" if token < self.half + self.n else f"?k{token - self.half - self.n}"


class Induction(StreamTask):
    """s s r, s a segment of n ~ U{ceil(N/2)..N} distinct random tokens, r random filler to length 2N
    (vocab 64, or 2N if larger). Scored: the 2nd..nth tokens of the repeat. The segment length varies,
    so the answer sits at no fixed offset: it must be found by content (an induction head)."""

    def __init__(self, n):
        self.n = n
        super().__init__(f"induction_{n}", max(64, 2 * n), 2 * n)

    def sample(self, rng, count):
        N, V = self.n, self.vocab_size
        length = rng.integers((N + 1) // 2, N + 1, count)[:, None]
        segment = np.argsort(rng.random((count, V)), axis=1)[:, :N]  # distinct tokens
        col = np.arange(2 * N)
        at = np.clip(np.where(col < length, col, col - length), 0, N - 1)  # index into the segment
        tokens = np.take_along_axis(segment, at, axis=1)
        return np.where(col < 2 * length, tokens, rng.integers(0, V, (count, 2 * N)))

    def scored(self, seqs):
        return self.repeat_mask(seqs)[:, :-1]

    def repeat_mask(self, seqs):
        """(n, L) bool: positions holding the 1st..(n-1)th token of the repeat (their next token is predictable)."""
        L = seqs.shape[1]
        length = self.segment_lengths(seqs)
        col = np.arange(L)
        return (col >= length[:, None]) & (col < 2 * length[:, None] - 1)

    def segment_lengths(self, seqs):
        """The segment length n of each row: the first position that repeats position 0."""
        return np.argmax((seqs[:, 1:] == seqs[:, :1]), axis=1) + 1


class TableTask(Task):
    """A fixed table of sequences [a, b, answer], split once by TEST_SEED; batches draw training rows."""

    def __init__(self, name, vocab_size, table, train_fraction):
        super().__init__(name, vocab_size, table.shape[1])
        table = table[np.random.default_rng(TEST_SEED).permutation(len(table))]
        n_train = int(train_fraction * len(table))
        self.rows = {"train": table[:n_train], "test": table[n_train:]}

    def split_rows(self, split):
        if split not in self.rows or not len(self.rows[split]):
            raise ValueError(f"{self.name} has splits: {', '.join(s for s in self.rows if len(self.rows[s]))}")
        return self.rows[split]

    def train_rows(self, rng, n):
        return self.rows["train"][rng.integers(0, len(self.rows["train"]), n)]

    def scored(self, seqs):
        scored = np.zeros((len(seqs), seqs.shape[1] - 1), bool)
        scored[:, -1] = True  # only the answer, predicted after reading a and b
        return scored


class ModAdd(TableTask):
    """[a, b, (a+b) mod P] for all P^2 pairs, vocab P, 95% train / 5% test (TASKS.md 1.5)."""

    train_eval = True

    def __init__(self, p):
        a, b = np.divmod(np.arange(p * p), p)
        super().__init__(f"modadd_{p}", p, np.stack([a, b, (a + b) % p], axis=1), 0.95)


class Memorize(TableTask):
    """[a, N+b, label] for all N^2 pairs with a random label in [0, N) (TASKS.md 1.6, hdmemorize with d=2),
    vocab 2N. There is nothing to generalize to: accuracy is measured on the training set."""

    val_split = "train"

    def __init__(self, n):
        a, b = np.divmod(np.arange(n * n), n)
        labels = np.random.default_rng(TEST_SEED).integers(0, n, n * n)
        super().__init__(f"memorize_{n}", 2 * n, np.stack([a, n + b, labels], axis=1), 1.0)


TASKS = {  # name -> (class, default N, smallest N)
    "addition": (Addition, 10, 1), "dyck": (Dyck, 30, 1), "retrieval": (Retrieval, 30, 1),
    "modadd": (ModAdd, 199, 2), "memorize": (Memorize, 512, 2), "induction": (Induction, 16, 2),
}
TASK_NAMES = ", ".join(f"{name}_{'P' if name == 'modadd' else 'N'}" for name in TASKS)


# ============================================================================ corpora: training side

CORPUS_TASKS = ("wikitext103", "wikitext2", "tinyshakespeare", "text", "yelp_polarity", "sst2")


def padded_vocab(n):
    return (n + 63) // 64 * 64  # a multiple of 64: friendlier matmul shapes (50257 -> 50304)


class TextTask:
    """Next-token prediction on windows of block_size tokens of data/<name>/{train,val,test}.bin: uint16
    streams with an end-of-text token between documents. The reference pads each WikiText line on
    its own to T tokens instead; packing spends no compute on padding."""

    n_classes, causal, pad_id = 0, True, -1
    train_eval = exact_match = False
    perplexity = True

    def __init__(self, name, folder, meta, block_size, eval_iters, eval_split):
        self.name, self.folder, self.meta = name, folder, meta
        self.vocab_size, self.block_size = padded_vocab(meta["vocab_size"]), block_size
        self.eval_iters, self.val_split = eval_iters, eval_split
        for split in ("train", eval_split):
            if split not in meta["tokens"]:
                raise ValueError(f"{folder} has no {split!r} split; valid: {', '.join(meta['tokens'])}")
            if meta["tokens"][split] <= block_size:
                raise ValueError(f"{folder} has {meta['tokens'][split]} {split} tokens; block_size={block_size} "
                                 f"needs more")
            path = os.path.join(folder, f"{split}.bin")
            size = os.path.getsize(path) if os.path.isfile(path) else -1
            if size != 2 * meta["tokens"][split]:  # a truncated or foreign file, not the one meta.json describes
                raise ValueError(f"{path} holds {max(size, 0) // 2} tokens, meta.json says {meta['tokens'][split]}; "
                                 f"prepare it again: python data.py {name}")

    def tokens(self, split):
        return np.memmap(os.path.join(self.folder, f"{split}.bin"), dtype=np.uint16, mode="r")  # fresh per batch

    def windows(self, data, starts):
        idx = starts[:, None] + np.arange(self.block_size + 1)  # (B, T+1)
        inside = idx < len(data)
        seqs = data[np.minimum(idx, len(data) - 1)].astype(np.int64)
        y = np.where(inside[:, 1:], seqs[:, 1:], -1)  # a short last window scores only real tokens
        return torch.from_numpy(seqs[:, :-1]), torch.from_numpy(y)

    def get_batch(self, split, batch_size, seed=0):
        data = self.tokens(split)
        return self.windows(data, np.random.default_rng(seed).integers(0, len(data) - self.block_size, batch_size))

    def eval_batches(self, split, batch_size, rank=0, world_size=1):
        """The test split: the whole stream in consecutive windows. Other splits: the same sample of
        eval_iters batches at every eval."""
        data = self.tokens(split)
        if split == "test":
            starts = np.arange(0, len(data) - 1, self.block_size)
        else:
            starts = np.random.default_rng(TEST_SEED).integers(0, len(data) - self.block_size,
                                                               self.eval_iters * batch_size)
        starts = starts[rank::world_size]
        for i in range(0, len(starts), batch_size):
            yield self.windows(data, starts[i:i + batch_size])


class ClassifyTask:
    """Sequence classification on data/<name>/{split}_x.npy (token ids, padded with pad_id to max_len)
    and {split}_y.npy (labels). The model reads the whole text at once (causal=False), as the paper's
    classifier, and pools its real tokens."""

    causal = False
    train_eval = exact_match = perplexity = False

    def __init__(self, name, folder, meta, block_size, eval_split):
        self.name, self.folder, self.meta = name, folder, meta
        self.vocab_size, self.n_classes, self.pad_id = padded_vocab(meta["vocab_size"]), meta["n_classes"], meta["pad_id"]
        if block_size > meta["max_len"]:
            raise ValueError(f"block_size={block_size} is longer than the {meta['max_len']} tokens kept by "
                             f"`python data.py {name}`; prepare again with --max_len={block_size}")
        self.block_size, self.val_split = block_size, eval_split
        for split in ("train", eval_split):
            if split not in meta["examples"]:
                raise ValueError(f"{folder} has no {split!r} split; valid: {', '.join(meta['examples'])}")

    def split(self, split):
        x = np.load(os.path.join(self.folder, f"{split}_x.npy"), mmap_mode="r", allow_pickle=False)
        y = np.load(os.path.join(self.folder, f"{split}_y.npy"), allow_pickle=False)
        return x, y

    def rows(self, x, y, rows):
        return torch.from_numpy(x[rows, :self.block_size].astype(np.int64)), torch.from_numpy(y[rows].astype(np.int64))

    def get_batch(self, split, batch_size, seed=0):
        x, y = self.split(split)
        return self.rows(x, y, np.sort(np.random.default_rng(seed).integers(0, len(y), batch_size)))

    def eval_batches(self, split, batch_size, rank=0, world_size=1):
        x, y = self.split(split)
        mine = np.arange(len(y))[rank::world_size]
        for i in range(0, len(mine), batch_size):
            yield self.rows(x, y, mine[i:i + batch_size])


def make_task(name, block_size=0, data_dir="data", eval_iters=20, eval_split="val"):
    """A task by its command-line name: algorithmic (addition_10, retrieval, ...) or a prepared corpus."""
    base, _, arg = name.partition("_")
    folder = os.path.join(data_dir, name)
    if name in CORPUS_TASKS or (base not in TASKS and os.path.isfile(os.path.join(folder, "meta.json"))):
        meta = read_meta(folder, name)
        if meta["kind"] == "lm":
            return TextTask(name, folder, meta, block_size or 256, eval_iters, eval_split)
        return ClassifyTask(name, folder, meta, block_size or meta["max_len"], eval_split)
    if base not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {TASK_NAMES}, {', '.join(CORPUS_TASKS)}, or the --name "
                         f"of a corpus prepared in {data_dir}/")
    cls, default, smallest = TASKS[base]
    if not arg:
        return cls(default)
    if not arg.isdigit() or int(arg) < smallest:
        raise ValueError(f"task {name!r}: {base}_N takes an integer N >= {smallest}")
    return cls(int(arg))


def read_meta(folder, name):
    path = os.path.join(folder, "meta.json")
    if not os.path.isfile(path):
        raise ValueError(f"{folder} is not prepared: run `python data.py {name}` "
                         f"(offline: add --src=PATH --bpe_dir=DIR)")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is unreadable ({type(e).__name__}); prepare it again: python data.py {name}")


# ============================================================================ corpora: preparation

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
TIKTOKEN_TIMEOUT = 30  # seconds for tiktoken to find or download the GPT-2 BPE files


class Tokenizer:
    """encode / decode with an end-of-text token: GPT-2 BPE (tiktoken) or raw UTF-8 bytes."""

    def __init__(self, name, bpe_dir=None):
        if name not in ("gpt2", "bytes"):
            raise ValueError(f"unknown tokenizer {name!r}; valid: gpt2, bytes")
        self.name = name
        if name == "bytes":
            self.n_vocab, self.eot, self.enc = 257, 256, None
            return
        self.enc = gpt2_encoding(bpe_dir or os.environ.get("MIXIT_BPE_DIR"))
        self.n_vocab, self.eot = self.enc.n_vocab, self.enc.eot_token

    def encode_batch(self, texts):
        if self.enc is None:
            return [list(t.encode("utf-8")) for t in texts]
        return self.enc.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)  # text, never specials

    def encode(self, text):
        return self.encode_batch([text])[0]

    def decode(self, ids):
        ids = [int(i) for i in ids if i != self.eot and i < self.n_vocab]
        if self.enc is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.enc.decode(ids)


def gpt2_encoding(bpe_dir):
    """GPT-2 BPE from bpe_dir/gpt2.tiktoken (offline), else tiktoken's own (TIKTOKEN_CACHE_DIR or download)."""
    import tiktoken
    hint = ("offline: pass --bpe_dir=DIR holding gpt2.tiktoken (or set MIXIT_BPE_DIR=DIR; a copy is in "
            "../shared/data/gpt2_bpe), or copy vocab.bpe and encoder.json into $TIKTOKEN_CACHE_DIR under "
            "tiktoken's cache names (recipe A of ../shared/data/README.md), or use --tokenizer=bytes")
    if not bpe_dir:
        return tiktoken_gpt2(hint)
    path = os.path.join(bpe_dir, "gpt2.tiktoken")
    if not os.path.isfile(path):
        raise ValueError(f"GPT-2 BPE: no gpt2.tiktoken in {bpe_dir}; {hint}")
    with open(path, "rb") as f:
        blob = f.read()
    if hashlib.sha256(blob).hexdigest() != GPT2_TIKTOKEN_SHA256:
        raise ValueError(f"GPT-2 BPE: {path} fails its sha256 check (expected {GPT2_TIKTOKEN_SHA256}); {hint}")
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in blob.splitlines())}
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def tiktoken_gpt2(hint, timeout=TIKTOKEN_TIMEOUT):
    """tiktoken.get_encoding('gpt2'), given up after timeout seconds: its download has no timeout of
    its own and can hang forever behind a silent network. A daemon thread never holds up the exit."""
    import tiktoken
    result = {}

    def load():
        try:
            result["enc"] = tiktoken.get_encoding("gpt2")
        except Exception as e:  # requests' errors, hash mismatches, ...
            result["error"] = type(e).__name__

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout)
    if "enc" not in result:
        reason = result.get("error", f"no answer within {timeout:g} s")
        raise ValueError(f"GPT-2 BPE could not be loaded: not in tiktoken's cache, and downloading it failed "
                         f"({reason}); {hint}")
    return result["enc"]


def _wikitext(url, md5, ext):
    names = {s: (f"wiki.{s}.{ext}", f"{s}.txt") for s in ("train", "valid", "test")}
    return dict(kind="lm", url=url, md5=md5, files=names, splits={"train": "train", "valid": "val", "test": "test"})


SOURCES = {  # public sources with their recorded checksums (torchtext's, and the shared data README's)
    "wikitext103": _wikitext("https://wikitext.smerity.com/wikitext-103-raw-v1.zip",
                             "0ca3512bd7a238be4a63ce7b434f8935", "raw"),
    "wikitext2": _wikitext("https://wikitext.smerity.com/wikitext-2-v1.zip",
                           "542ccefacc6c27f945fb54453812b3cd", "tokens"),
    "tinyshakespeare": dict(kind="lm", files={"input": ("input.txt",)}, splits={"input": "stream"},
                            url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
    # Yelp polarity: the public archive holds train.csv (560k) and test.csv (38k, evaluated as 'val'). The
    # star-rated copy in ../shared/data/yelp_reviews_stars has only dev.csv and test.csv (5k reviews each):
    # dev.csv trains and test.csv evaluates; meta.json records the files and the label rule.
    "yelp_polarity": dict(kind="classification", files={"train": ("train.csv", "dev.csv"), "test": ("test.csv",)},
                          splits={"train": "train", "test": "val"}, md5="620c8ae4bd5a150b730f1ba9a7c6a4d3",
                          url="https://drive.usercontent.google.com/download?id=0Bz8a_Dbh9QhbNUpYQ2N3SGlFaDg"
                              "&export=download&confirm=t", archive="yelp_review_polarity_csv.tar.gz"),
    "sst2": dict(kind="classification", files={"train": ("train.tsv",), "dev": ("dev.tsv",)},
                 splits={"train": "train", "dev": "val"}, url="https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
                 md5="9f81648d4199384278b86e315dac217c"),
    "text": dict(kind="lm", files=None, splits={"input": "stream"}),
}


USER_AGENT = "Mozilla/5.0 (compatible; mixit data.py)"  # some hosts refuse urllib's own (Python-urllib/3.x)


def download(url, path, md5=None, sha256=None):
    """Fetch url to path; the file must match its recorded checksum. A failure raises ValueError and
    keeps nothing."""
    tmp, expected = path + ".part", md5 or sha256
    try:
        digest = stream_to_file(url, tmp, hashlib.md5() if md5 else hashlib.sha256())
        if digest != expected:
            raise ValueError(f"{url} has checksum {digest}, not the recorded {expected}")
        os.replace(tmp, path)
    except OSError as e:  # urllib's errors, timeouts included
        raise ValueError(f"downloading {url} failed ({type(e).__name__}: {e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def stream_to_file(url, path, digest):
    """Copy url into path with a progress line on stderr; returns the hex digest of the bytes."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=30) as response, open(path, "wb") as f:
        total, done = int(response.headers.get("Content-Length") or 0), 0
        try:
            while chunk := response.read(1 << 20):
                f.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                print(f"\rdownloading {url}: {done / 1e6:.1f} MB" + (f" of {total / 1e6:.1f}" if total else ""),
                      end="", file=sys.stderr, flush=True)
        finally:
            print(file=sys.stderr)  # ends the progress line
    return digest.hexdigest()


ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")


def archive_members(path):
    """{basename: bytes} of the files inside a zip or tar archive."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return {os.path.basename(n): z.read(n) for n in z.namelist() if not n.endswith("/")}
    with tarfile.open(path) as t:
        return {os.path.basename(m.name): t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def find_files(src, wanted):
    """{role: (name, bytes)} for each role of wanted ({role: accepted basenames, preferred first}) found
    in src: a folder (searched recursively, archives in it opened) or an archive."""
    paths = sorted(glob.glob(os.path.join(src, "**", "*"), recursive=True)) if os.path.isdir(src) else [src]
    found = {}
    for path in filter(os.path.isfile, paths):
        found.setdefault(os.path.basename(path), path)
        if path.endswith(ARCHIVES):
            for name, blob in archive_members(path).items():
                found.setdefault(name, blob)
    files = {}
    for role, names in wanted.items():
        name = next((n for n in names if n in found), None)
        if name is not None:
            files[role] = name, found[name] if isinstance(found[name], bytes) else open(found[name], "rb").read()
    return files


def missing_dirs(path):
    """The folders that os.makedirs(path) would create, deepest first."""
    made = []
    while path and not os.path.isdir(path):
        made.append(path)
        path = os.path.dirname(path)
    return made


def fetch(dataset, spec, src, folder):
    """The source files of a dataset as {role: (name, bytes)}, and where they came from: --src, else
    folder/raw, else a download into folder/raw (on failure nothing is left, not even the folders)."""
    raw = os.path.join(folder, "raw")
    archive = spec.get("archive") or os.path.basename(spec["url"])
    needs = ", ".join(" or ".join(names) for names in spec["files"].values())
    needs += f" (or {archive})" if archive not in needs else ""
    if src:
        if os.path.isfile(src) and len(spec["files"]) == 1 and not src.endswith(ARCHIVES):
            return {role: (os.path.basename(src), open(src, "rb").read()) for role in spec["files"]}, src
        files = find_files(src, spec["files"])
        if len(files) < len(spec["files"]):
            raise ValueError(f"--src={src} lacks some of the files {dataset} needs: {needs}")
        return files, src
    files = find_files(raw, spec["files"]) if os.path.isdir(raw) else {}
    if len(files) == len(spec["files"]):
        return files, raw
    made = missing_dirs(raw)
    os.makedirs(raw, exist_ok=True)
    try:
        download(spec["url"], os.path.join(raw, archive), md5=spec.get("md5"), sha256=spec.get("sha256"))
        files = find_files(raw, spec["files"])
        if len(files) < len(spec["files"]):
            raise ValueError(f"{archive} lacks some of the files {dataset} needs")
    except ValueError as e:
        for path in made:
            os.rmdir(path)
        raise ValueError(f"{dataset}: no local copy, and {e}; put {needs} in {raw}/ or pass --src=PATH "
                         f"to a copy") from None
    return files, spec["url"]


def read_documents(src):
    """The documents of `text`: one file, or every file of a folder (sorted)."""
    paths = [src] if os.path.isfile(src) else sorted(
        p for p in glob.glob(os.path.join(src, "**", "*"), recursive=True)
        if os.path.isfile(p) and not os.path.basename(p).startswith("."))
    if not paths:
        raise ValueError(f"--src={src}: no text files found")
    return {os.path.relpath(p, src) if p != src else os.path.basename(p): open(p, "rb").read() for p in paths}


def wikitext_articles(text):
    """A WikiText split as articles: each starts at a level-1 heading line ' = Title = '."""
    return [a for a in re.split(r"(?m)^(?= = [^=].* = $)", text) if a.strip()]


def read_sst2(blob):
    """GLUE SST-2 TSV with a header, in either column order (sentence/content, label): texts, labels, rule."""
    rows = csv.reader(io.StringIO(blob.decode("utf-8")), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(rows)
    text_col = next(i for i, h in enumerate(header) if h in ("sentence", "content"))
    rows = [r for r in rows if r]
    return [r[text_col] for r in rows], [int(r[header.index("label")]) for r in rows], "label 0 negative, 1 positive"


def read_yelp(blob):
    """Yelp polarity CSV ("label","text" with 1 negative, 2 positive), or star-rated reviews
    (text,label1,"Review Stars: s") as in ../shared/data: 1-2 stars negative, 4-5 positive, 3 dropped.
    Returns texts, labels and the rule that made the labels."""
    rows = list(csv.reader(io.StringIO(blob.decode("utf-8"))))
    if rows[0][0] == "text":
        rated = [(r[0], float(r[2].split(":")[-1])) for r in rows[1:]]
        return ([t for t, s in rated if s != 3], [int(s >= 4) for t, s in rated if s != 3],
                "stars: 1-2 negative, 4-5 positive, 3 dropped")
    texts = [r[1].replace("\\n", "\n").replace('\\"', '"') for r in rows]
    return texts, [int(r[0]) - 1 for r in rows], "class 1 negative, 2 positive"


def encode_documents(tok, documents):
    """One uint16 stream: each document's tokens followed by the end-of-text token."""
    parts = []
    for i in range(0, len(documents), 1024):
        for ids in tok.encode_batch(documents[i:i + 1024]):
            parts.append(np.asarray(ids + [tok.eot], dtype=np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def encode_examples(tok, texts, max_len):
    """(n, max_len) uint16 token ids, truncated, padded with the end-of-text token; empty texts dropped."""
    ids = [row[:max_len] for row in tok.encode_batch(texts)]
    x = np.full((len(ids), max_len), tok.eot, dtype=np.uint16)
    for i, row in enumerate(ids):
        x[i, :len(row)] = row
    return x, np.array([len(row) > 0 for row in ids])


def save_atomic(path, array):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        if path.endswith(".npy"):
            np.save(f, array, allow_pickle=False)
        else:
            array.tofile(f)
    os.replace(tmp, path)


def prepare(dataset, src=None, tokenizer="gpt2", bpe_dir=None, out_dir="data", max_len=256, name=None):
    """Tokenize a corpus into out_dir/<name>: {train,val,test}.bin for language modeling, or
    {train,val}_{x,y}.npy for classification; meta.json last, so it marks a complete folder."""
    if dataset not in SOURCES:
        raise ValueError(f"unknown dataset {dataset!r}; valid: {', '.join(SOURCES)}")
    if max_len < 1:
        raise ValueError(f"--max_len must be positive, got {max_len}")
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValueError(f"--name={name!r}: a folder name of letters, digits, '_', '.' and '-'")
    if name is not None and name.partition("_")[0] in TASKS:
        raise ValueError(f"--name={name!r} would read as the algorithmic task {name.partition('_')[0]}_N; "
                         f"choose another name")
    spec, folder = SOURCES[dataset], os.path.join(out_dir, name or dataset)
    if dataset == "text" and not src:
        raise ValueError("text needs --src=PATH: a text file or a folder of text files")
    if src and not os.path.exists(src):
        raise ValueError(f"--src={src} does not exist")
    tok = Tokenizer(tokenizer, bpe_dir)
    if dataset == "text":
        files, origin = {path: (path, blob) for path, blob in read_documents(src).items()}, src
    else:
        files, origin = fetch(dataset, spec, src, folder)
    made = missing_dirs(folder)
    os.makedirs(folder, exist_ok=True)
    if os.path.exists(os.path.join(folder, "meta.json")):
        os.remove(os.path.join(folder, "meta.json"))  # a folder being rewritten is not prepared
    sources = {spec["splits"].get(role, role): {"file": file, "sha256": hashlib.sha256(blob).hexdigest()}
               for role, (file, blob) in files.items()}  # by split: train, val, test, or stream (text: by file)
    meta = {"dataset": dataset, "kind": spec["kind"], "tokenizer": tok.name, "vocab_size": tok.n_vocab,
            "eot": tok.eot, "source": origin, "source_files": sources}
    try:
        if spec["kind"] == "lm":
            meta["tokens"] = write_lm(tok, spec, files, folder)
        else:
            meta.update(max_len=max_len, n_classes=2, pad_id=tok.eot, labels=["negative", "positive"])
            meta["examples"], meta["label_rule"] = write_classification(tok, dataset, spec, files, folder, max_len)
    except ValueError:  # unreadable source files: a folder made here goes again
        if made:
            shutil.rmtree(made[-1])
        raise
    with open(os.path.join(folder, "meta.json.tmp"), "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(os.path.join(folder, "meta.json.tmp"), os.path.join(folder, "meta.json"))
    return folder, meta


def utf8(file, blob):
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{file} is not UTF-8 text (byte {e.start})") from None


def write_lm(tok, spec, files, folder):
    """{split}.bin token streams; returns {split: tokens}. A single stream (tinyshakespeare, text) is
    cut 90% train / 10% val; WikiText keeps its splits, one document per article."""
    if spec["splits"] == {"input": "stream"}:
        stream = encode_documents(tok, [blob.decode("utf-8", errors="replace") for _, blob in files.values()])
        cut = int(0.9 * len(stream))
        splits = {"train": stream[:cut], "val": stream[cut:]}
    else:
        splits = {spec["splits"][role]: encode_documents(tok, wikitext_articles(utf8(file, blob)))
                  for role, (file, blob) in files.items()}
    for split, tokens in splits.items():
        save_atomic(os.path.join(folder, f"{split}.bin"), tokens)
    return {split: int(len(tokens)) for split, tokens in splits.items()}


FORMATS = {"sst2": "UTF-8 tab-separated rows under a header naming label and sentence (or content)",
           "yelp_polarity": 'UTF-8 CSV rows "label","text" with label 1 or 2, or text,label1,"Review Stars: s" '
                            'under a header'}


def write_classification(tok, dataset, spec, files, folder, max_len):
    """{split}_x.npy (n, max_len) token ids and {split}_y.npy labels; returns {split: examples}, label rule."""
    reader = read_sst2 if dataset == "sst2" else read_yelp
    examples, rules = {}, set()
    for role, (file, blob) in files.items():
        split = spec["splits"][role]
        try:
            texts, labels, rule = reader(blob)
        except (ValueError, IndexError, StopIteration, csv.Error) as e:  # UnicodeDecodeError is a ValueError
            raise ValueError(f"{file} is not a {dataset} file ({type(e).__name__}: {e}); expected "
                             f"{FORMATS[dataset]}") from None
        if not set(labels) <= {0, 1}:
            raise ValueError(f"{file} has labels outside the two classes ({rule})")
        x, keep = encode_examples(tok, texts, max_len)
        save_atomic(os.path.join(folder, f"{split}_x.npy"), x[keep])
        save_atomic(os.path.join(folder, f"{split}_y.npy"), np.asarray(labels, dtype=np.uint8)[keep])
        examples[split] = int(keep.sum())
        rules.add(rule)
    return examples, "; ".join(sorted(rules))


PREPARE_OPTIONS = {"src": None, "tokenizer": "gpt2", "bpe_dir": None, "out_dir": "data", "max_len": 256, "name": None}


def main(argv):
    if not argv or argv[0].startswith("--"):
        raise ValueError(f"usage: python data.py DATASET [--key=value]; datasets: {', '.join(SOURCES)}")
    options = {}
    for arg in argv[1:]:
        key, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("--") or key not in PREPARE_OPTIONS or not eq:
            raise ValueError(f"bad option {arg!r}; valid: {', '.join(f'--{k}=...' for k in PREPARE_OPTIONS)}")
        if key == "max_len" and not value.isdigit():
            raise ValueError(f"--max_len takes a positive integer, got {value!r}")
        options[key] = int(value) if key == "max_len" else value
    folder, meta = prepare(argv[0], **options)
    counts = meta.get("tokens") or meta.get("examples")
    unit = "tokens" if meta["kind"] == "lm" else "examples"
    print(f"wrote {folder}: " + ", ".join(f"{split} {n:,} {unit}" for split, n in counts.items())
          + f" ({meta['tokenizer']}, vocab {meta['vocab_size']})")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
