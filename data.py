"""
Data for mixit: the algorithmic tasks, the tokenizer and the readers of corpora prepared by
prepare.py, the induction-head probes, and the evaluation of a model on a task (the metrics
train.py logs).

make_task(name) builds a task by its command-line name:
  addition_N   two N-digit numbers, digits reversed, and their sum      (arithmetic)
  dyck_N       is a bracket string of at most 2N characters balanced?  (structure)
  retrieval_N  in-context key -> value recall over up to N pairs       (retrieval; condattend)
  modadd_P     (a + b) mod P for all P^2 pairs, 95/5 train/test split  (arithmetic, in weights)
  memorize_N   random labels for all N^2 two-token inputs              (memorization)
  induction_N  a random segment followed by its repeat                 (induction heads)
  mqar_N       up to N key -> value pairs, then every key queried      (Zoology's MQAR)
  wikitext103, wikitext2, tinyshakespeare, text, yelp_polarity, sst2, or a prepare.py --name:
               the corpus prepared in data/<name>
A bare algorithmic name takes the default N. Every task gives batches (x, y) of LongTensors where
y = -1 at the positions that are not scored, and a fixed evaluation split that no training batch
repeats.
"""
import base64
import hashlib
import json
import math
import os
import threading
from functools import cache

import numpy as np
import torch

from common import Env
from mixit import cross_entropy_sum, fixed_patterns

# ============================================================================ algorithmic tasks

# The reference's seed for test sets and fixed tables, and its test-set size for streaming tasks.
TEST_SEED = 12345
N_TEST = 4000


def _row_hash(seqs):
    """A 64-bit hash per row (a random linear map mod 2^64); equal rows hash equally."""
    weights = np.random.default_rng(0).integers(1, 2 ** 62, size=seqs.shape[1], dtype=np.int64)
    weights |= 1
    with np.errstate(over="ignore"):
        return (seqs * weights).sum(1)


def distinct_per_row(values, absent):
    """How many distinct values each row of values holds, absent left out."""
    values = np.sort(values, axis=1)
    return ((values != absent) & (np.diff(values, axis=1, prepend=absent) != 0)).sum(1)


class Task:
    """Fixed-length integer sequences (B, L): x = seq[:, :-1], y = seq[:, 1:] where scored, else -1.
    By default a language model over the task's vocabulary. Each task defines scored(seqs), (n, L-1)
    bool: is the prediction made at position t (of token t+1) scored?; train_rows(rng, n), (n, L)
    int64 fresh training sequences drawn with rng; split_rows(split), (N, L) the fixed sequences of
    a split."""

    n_classes = 0
    causal = True
    pad_id = -1
    # The split behind val_loss and val_acc.
    val_split = "test"
    # What the task reports beyond val_loss and val_acc (the names of eval_metrics' scores).
    metrics = ()
    # Its induction score: 'induction' (on a segment and its repeat) or 'recall' (on its own
    # queries).
    probe = None

    def __init__(self, name, vocab_size, seq_len):
        self.name = name
        self.vocab_size = vocab_size
        self.block_size = seq_len - 1

    def xy(self, seqs):
        seqs = np.asarray(seqs, dtype=np.int64)
        y = np.where(self.scored(seqs), seqs[:, 1:], -1)
        return torch.from_numpy(np.ascontiguousarray(seqs[:, :-1])), torch.from_numpy(y)

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

    def chance(self):
        """Chance accuracy: the best answers that read no input, the most frequent k-th answer of
        the evaluation rows at each place k (Dyck: the majority answer; addition: the answer's
        format, the digits guessed)."""
        y = self.xy(self.split_rows(self.val_split))[1].numpy()
        scored = y >= 0
        place = np.cumsum(scored, 1)[scored] - 1
        answer = y[scored]
        counts = np.zeros((place.max() + 1, answer.max() + 1))
        np.add.at(counts, (place, answer), 1)
        return float(counts.max(1).sum() / len(answer))

    def key_of(self, tokens):
        """The key each token asks for (same shape; by default itself): its answer follows the
        key's first occurrence."""
        return tokens

    def show(self, x, y, pred):
        """One line: the input, the true answer and the model's answer at the scored positions."""

        def words(tokens):
            return " ".join(self.token_str(int(t)) for t in tokens)

        mask = y >= 0
        first = int(np.argmax(mask)) if mask.any() else len(x)
        truth = words(y[mask])
        model = words(pred[mask])
        return (f"{words(x[:first + 1])}  ->  truth: {truth}   model: {model}   "
                f"{'ok' if truth == model else 'WRONG'}")


class StreamTask(Task):
    """Training sequences are generated fresh for every batch; the fixed test set is excluded. Each
    stream task defines sample(rng, n), (n, L) int64 sequences drawn from the task distribution."""

    def __init__(self, name, vocab_size, seq_len):
        super().__init__(name, vocab_size, seq_len)
        # As in the reference, the test set keeps any duplicate sequences it draws.
        self.test = self.sample(np.random.default_rng(TEST_SEED), N_TEST)
        self.test_hashes = np.unique(_row_hash(self.test))

    def split_rows(self, split):
        if split != "test":
            raise ValueError(f"{self.name} has a fixed 'test' split only "
                             f"(training is a fresh stream)")
        return self.test

    def train_rows(self, rng, n):
        kept = []
        for _ in range(1000):
            seqs = self.sample(rng, n)
            # Never train on a test sequence.
            kept.append(seqs[~np.isin(_row_hash(seqs), self.test_hashes)])
            if sum(map(len, kept)) >= n:
                return np.concatenate(kept)[:n]
        raise ValueError(f"{self.name}: almost every sequence lies in the test set; "
                         f"choose a larger N")


class Addition(StreamTask):
    """rev(a) + rev(b) = rev(a+b) STOP PAD..., a and b N-digit numbers, vocab 31: 0-9 operand
    digits, 10 '+', 11 '=', 12 PAD, 20+d answer digit d, 30 STOP. Scored: every answer digit and
    STOP. The reference's mask reads the input token, so it skips the first digit (predicted at
    '=') and scores the PAD after STOP."""

    PLUS = 10
    EQ = 11
    PAD = 12
    ANS = 20
    STOP = 30
    # The whole answer right, and each digit's place right.
    metrics = ("val_exact", "val_acc_pos")

    def __init__(self, n):
        self.n = n
        super().__init__(f"addition_{n}", 31, 3 * n + 4)

    def _number(self, rng, count):
        """(count, N) digits, least significant first; the leading digit is 1..9."""
        digits = rng.integers(0, 10, (count, self.n))
        digits[:, -1] = rng.integers(1, 10, count)
        return digits

    def sample(self, rng, count):
        N = self.n
        a = self._number(rng, count)
        b = self._number(rng, count)
        # Schoolbook addition over the columns, all rows at once.
        total = np.zeros((count, N), np.int64)
        carry = np.zeros(count, np.int64)
        for i in range(N):
            column = a[:, i] + b[:, i] + carry
            total[:, i] = column % 10
            carry = column // 10
        seqs = np.full((count, 3 * N + 4), self.PAD, np.int64)
        seqs[:, :N] = a
        seqs[:, N] = self.PLUS
        seqs[:, N + 1:2 * N + 1] = b
        seqs[:, 2 * N + 1] = self.EQ
        seqs[:, 2 * N + 2:3 * N + 2] = total + self.ANS
        seqs[:, 3 * N + 2] = np.where(carry == 1, self.ANS + 1, self.STOP)
        seqs[:, 3 * N + 3] = np.where(carry == 1, self.STOP, self.PAD)
        return seqs

    def scored(self, seqs):
        # The next token is an answer digit or STOP.
        return seqs[:, 1:] >= self.ANS

    def token_str(self, token):
        symbols = {self.PLUS: "+", self.EQ: "=", self.PAD: "_", self.STOP: "$"}
        return symbols.get(token, str(token % 10))


class Dyck(StreamTask):
    """s ? answer PAD..., s a bracket string of at most 2N characters, vocab 4:
    0 PAD, 1 '(', 2 ')', 3 '?'; the answer is ')' if s is balanced else '('. Scored: the answer."""

    PAD = 0
    OPEN = 1
    CLOSE = 2
    QUERY = 3

    def __init__(self, n):
        self.n = n
        super().__init__(f"dyck_{n}", 4, 2 * n + 3)

    def _balanced(self, rng, pairs):
        """The reference's recursion for all rows at once, with an explicit stack per row:
        gen(1) = (), gen(t) = ( gen(t-1) ) with probability 1/2, else gen(u) gen(t-u),
        u ~ U{1..t-1}."""
        count = len(pairs)
        width = 2 * self.n
        out = np.zeros((count, width), np.int64)
        pos = np.zeros(count, np.int64)
        # A stack item k >= 1 is a gen(k) still to expand; -1 is a ')' still to emit.
        stack = np.zeros((count, width + 2), np.int64)
        stack[:, 0] = pairs
        top = np.ones(count, np.int64)

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
            big = rows[item >= 2]
            k = item[item >= 2]
            # With probability 1/2 a gen(k) wraps gen(k-1) in a pair: ( gen(k-1) ).
            wrap = rng.random(len(big)) < 0.5
            emit(big[wrap], self.OPEN)
            push(big[wrap], -1)
            push(big[wrap], k[wrap] - 1)
            # Otherwise it splits in two: gen(u) gen(k-u).
            split = big[~wrap]
            k = k[~wrap]
            u = 1 + (rng.random(len(split)) * (k - 1)).astype(np.int64)
            push(split, k - u)
            push(split, u)
        return out

    def sample(self, rng, count):
        N = self.n
        rows = np.arange(count)
        # Bit 0 of mutate asks for swaps, bit 1 for flips.
        mutate = rng.integers(0, 4, count)
        random_string = rng.random(count) < 1 / 3
        length = np.where(random_string, rng.integers(1, 2 * N + 1, count), 0)
        brackets = rng.integers(self.OPEN, self.CLOSE + 1, (count, 2 * N))
        pairs = rng.integers(1, N + 1, count)
        from_grammar = ~random_string
        brackets[from_grammar] = self._balanced(rng, pairs[from_grammar])
        length[from_grammar] = 2 * pairs[from_grammar]
        mutate[from_grammar & (rng.random(count) < 0.5)] = 0
        brackets[np.arange(2 * N) >= length[:, None]] = self.PAD
        # A swap exchanges two brackets; a row that swaps makes k swaps with probability 2^-k.
        swaps = np.where(mutate & 1, rng.geometric(0.5, count), 0)
        for k in range(swaps.max(initial=0)):
            swapping = rows[swaps > k]
            pair = (rng.random((2, len(swapping))) * length[swapping]).astype(np.int64)
            # Only a pair drawn in order, left before right, is swapped.
            ordered = pair[0] < pair[1]
            swapping = swapping[ordered]
            pair = pair[:, ordered]
            # The two brackets of each pair trade places.
            brackets[swapping, pair] = brackets[swapping, pair[::-1]]
        # A flip turns one bracket around. Two thirds of the rows that flip make twice as many
        # flips.
        flips = np.where(mutate & 2, rng.geometric(0.5, count), 0)
        flips *= np.where(rng.random(count) < 2 / 3, 2, 1)
        for k in range(flips.max(initial=0)):
            flipping = rows[flips > k]
            at = (rng.random(len(flipping)) * length[flipping]).astype(np.int64)
            brackets[flipping, at] = self.OPEN + self.CLOSE - brackets[flipping, at]
        step = (brackets == self.OPEN).astype(np.int64) - (brackets == self.CLOSE)
        depth = np.cumsum(step, axis=1)
        balanced = (depth.min(1) >= 0) & (depth[:, -1] == 0)
        seqs = np.zeros((count, 2 * N + 3), np.int64)
        seqs[:, :2 * N] = brackets
        seqs[rows, length] = self.QUERY
        seqs[rows, length + 1] = np.where(balanced, self.CLOSE, self.OPEN)
        return seqs

    def scored(self, seqs):
        return seqs[:, :-1] == self.QUERY

    def token_str(self, token):
        return "_()?"[token]


class Retrieval(StreamTask):
    """k1 v1 k2 v2 ... kn vn q v PAD... with n ~ U{1..N} distinct keys (the reference's
    condattend), vocab 512 = 2H: 0 PAD, values 1..H-1, key k is H+k, its query H+N+k.
    Scored: the value after the query (content-based attention)."""

    probe = "recall"
    # Half the vocabulary: values below it, keys and queries from it on.
    half = 256

    def __init__(self, n):
        self.n = n
        if 2 * n > self.half:
            raise ValueError(f"retrieval_N needs 2N <= {self.half}, got N={n}")
        super().__init__(f"retrieval_{n}", 2 * self.half, 2 * n + 3)

    def sample(self, rng, count):
        N = self.n
        H = self.half
        rows = np.arange(count)
        pairs = rng.integers(1, N + 1, count)
        # A random permutation gives distinct keys; values may repeat.
        keys = np.argsort(rng.random((count, N)), axis=1)
        values = rng.integers(1, H, (count, N))
        present = np.arange(N) < pairs[:, None]
        seqs = np.zeros((count, 2 * N + 3), np.int64)
        seqs[:, 0:2 * N:2] = np.where(present, H + keys, 0)
        seqs[:, 1:2 * N:2] = np.where(present, values, 0)
        # The key asked for is uniform among the keys present.
        asked = (rng.random(count) * pairs).astype(np.int64)
        seqs[rows, 2 * pairs] = H + N + keys[rows, asked]
        seqs[rows, 2 * pairs + 1] = values[rows, asked]
        return seqs

    def scored(self, seqs):
        # The current token is the query.
        return seqs[:, :-1] >= self.half + self.n

    def token_str(self, token):
        if token < self.half:
            return str(token) if token else "_"
        key = token - self.half
        return f"k{key}" if key < self.n else f"?k{key - self.n}"

    def key_of(self, tokens):
        # Query H+N+k asks for key H+k.
        return np.where(tokens >= self.half + self.n, tokens - self.n, tokens)

    def chance(self):
        """Guessing among the distinct values of the context: recall that knows the answer is one
        of them, not which (0 marks a place with no pair)."""
        return float(np.mean(1 / distinct_per_row(self.test[:, 1:2 * self.n:2], absent=0)))


class Induction(StreamTask):
    """s s r: a segment s of n ~ U{ceil(N/2)..N} distinct random tokens, random filler r to length
    2N (vocab max(64, 2N)). Scored: the repeat's 2nd..nth tokens; n varies, so they sit at no fixed
    offset (an induction head's task)."""

    metrics = ("val_acc_pos",)
    probe = "induction"

    def __init__(self, n):
        self.n = n
        super().__init__(f"induction_{n}", max(64, 2 * n), 2 * n)

    def sample(self, rng, count):
        N = self.n
        V = self.vocab_size
        length = rng.integers((N + 1) // 2, N + 1, count)[:, None]
        segment = np.argsort(rng.random((count, V)), axis=1)[:, :N]
        # Each column's index into the segment: the segment, its repeat, then filler.
        col = np.arange(2 * N)
        at = np.clip(np.where(col < length, col, col - length), 0, N - 1)
        tokens = np.take_along_axis(segment, at, axis=1)
        return np.where(col < 2 * length, tokens, rng.integers(0, V, (count, 2 * N)))

    def scored(self, seqs):
        """The positions holding the 1st..(n-1)th token of the repeat: their next token is
        predictable."""
        length = self.segment_lengths(seqs)[:, None]
        col = np.arange(seqs.shape[1] - 1)
        return (col >= length) & (col < 2 * length - 1)

    def segment_lengths(self, seqs):
        """The segment length n of each row: the first position that repeats position 0."""
        return np.argmax((seqs[:, 1:] == seqs[:, :1]), axis=1) + 1

    def chance(self):
        """Guessing among the segment's tokens not yet repeated: the repeat read without matching
        it to its copy."""
        scored = self.scored(self.test)
        # k counts the segment's tokens repeated so far: 1 at the repeat's 2nd token.
        k = np.cumsum(scored, 1)[scored]
        return float(np.mean(1 / (np.repeat(self.segment_lengths(self.test), scored.sum(1)) - k)))


class MQAR(StreamTask):
    """k1 v1 ... kn vn q1 a1 ... qn an PAD... to length 4N (Zoology's multi-query associative
    recall), n ~ U{1..N} pairs with distinct keys, vocab 512: 0 PAD, keys 1..255, values
    256..511 (value v is VALUE+v). The queries are the n keys again, each once, in a random order.
    Scored: every answer, the value that followed the queried key."""

    PAD = 0
    VALUE = 256
    metrics = ("val_acc_pos",)
    probe = "recall"

    def __init__(self, n):
        if n >= self.VALUE:
            raise ValueError(f"mqar_N needs distinct keys, N <= {self.VALUE - 1}, got N={n}")
        self.n = n
        super().__init__(f"mqar_{n}", 2 * self.VALUE, 4 * n)

    def sample(self, rng, count):
        N = self.n
        VALUE = self.VALUE
        pairs = rng.integers(1, N + 1, count)
        present = np.arange(N) < pairs[:, None]
        # Keys are distinct and uniform among all keys; values may repeat.
        keys = 1 + np.argsort(rng.random((count, VALUE - 1)), axis=1)[:, :N]
        values = rng.integers(VALUE, 2 * VALUE, (count, N))
        seqs = np.zeros((count, 4 * N), np.int64)
        seqs[:, 0:2 * N:2] = np.where(present, keys, self.PAD)
        seqs[:, 1:2 * N:2] = np.where(present, values, self.PAD)
        # The n present pairs, shuffled; query i of a row sits at 2n + 2i.
        order = np.argsort(np.where(present, rng.random((count, N)), 2.0), axis=1)
        rows, i = np.nonzero(present)
        at = 2 * pairs[rows] + 2 * i
        seqs[rows, at] = np.take_along_axis(keys, order, axis=1)[rows, i]
        seqs[rows, at + 1] = np.take_along_axis(values, order, axis=1)[rows, i]
        return seqs

    def scored(self, seqs):
        # A row holds 4n tokens, then padding; the scored positions hold a query.
        pairs = (seqs != self.PAD).sum(1, keepdims=True) // 4
        col = np.arange(seqs.shape[1] - 1)
        return (col % 2 == 0) & (col >= 2 * pairs) & (col < 4 * pairs)

    def token_str(self, token):
        if token == self.PAD:
            return "_"
        return f"k{token}" if token < self.VALUE else str(token - self.VALUE)

    def chance(self):
        """Guessing by elimination: each answer among the distinct values of the keys not yet
        queried."""
        scored = self.scored(self.test)
        pairs = scored.sum(1)
        # Each row's answers, in query order.
        answers = np.full((len(self.test), self.n), -1)
        answers[np.arange(self.n) < pairs[:, None]] = self.test[:, 1:][scored]
        shares = [1 / distinct_per_row(answers[:, i:], absent=-1)[pairs > i] for i in range(self.n)]
        return float(np.concatenate(shares).mean())


class TableTask(Task):
    """A fixed table of sequences [a, b, answer], split once by TEST_SEED; batches draw training
    rows. Only the answer is scored, predicted after reading a and b."""

    def __init__(self, name, vocab_size, table, train_fraction):
        super().__init__(name, vocab_size, table.shape[1])
        table = table[np.random.default_rng(TEST_SEED).permutation(len(table))]
        n_train = int(train_fraction * len(table))
        self.splits = {"train": table[:n_train], "test": table[n_train:]}

    def split_rows(self, split):
        if split not in self.splits or not len(self.splits[split]):
            raise ValueError(f"{self.name} has splits: "
                             f"{', '.join(s for s in self.splits if len(self.splits[s]))}")
        return self.splits[split]

    def train_rows(self, rng, n):
        rows = self.splits["train"]
        return rows[rng.integers(0, len(rows), n)]

    def scored(self, seqs):
        scored = np.zeros((len(seqs), seqs.shape[1] - 1), bool)
        scored[:, -1] = True
        return scored


class ModAdd(TableTask):
    """[a, b, (a+b) mod P] for all P^2 pairs, vocab P, 95% train / 5% test."""

    metrics = ("train_acc",)

    def __init__(self, p):
        a, b = np.divmod(np.arange(p * p), p)
        super().__init__(f"modadd_{p}", p, np.stack([a, b, (a + b) % p], axis=1), 0.95)


class Memorize(TableTask):
    """[a, N+b, label] for all N^2 pairs with a random label in [0, N) (the reference's
    hdmemorize, d=2), vocab 2N. There is nothing to generalize to: accuracy is measured on the
    training set, and its capacity is the label bits it holds."""

    val_split = "train"
    metrics = ("bits_per_param", "bits_ceiling")

    def __init__(self, n):
        a, b = np.divmod(np.arange(n * n), n)
        labels = np.random.default_rng(TEST_SEED).integers(0, n, n * n)
        super().__init__(f"memorize_{n}", 2 * n, np.stack([a, n + b, labels], axis=1), 1.0)


# Each task's name -> (class, default N, smallest N). Below the smallest N the test set holds
# almost every sequence.
TASKS = {
    "addition": (Addition, 10, 2), "dyck": (Dyck, 30, 4), "retrieval": (Retrieval, 30, 2),
    "modadd": (ModAdd, 199, 2), "memorize": (Memorize, 512, 2), "induction": (Induction, 16, 2),
    "mqar": (MQAR, 16, 1),
}
TASK_NAMES = ", ".join(f"{name}_{'P' if name == 'modadd' else 'N'}" for name in TASKS)


# ============================================================================ tokenizer and corpora

CORPUS_TASKS = ("wikitext103", "wikitext2", "tinyshakespeare", "text", "yelp_polarity", "sst2")
TOKENIZERS = ("gpt2", "bytes")
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""")
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
# Seconds for tiktoken to find or download the GPT-2 BPE files.
TIKTOKEN_TIMEOUT = 30


def padded_vocab(n):
    # A multiple of 64 gives friendlier matmul shapes (50257 -> 50304).
    return (n + 63) // 64 * 64


class Tokenizer:
    """encode / decode with an end-of-text token: GPT-2 BPE (tiktoken) or raw UTF-8 bytes."""

    def __init__(self, name, bpe_dir=None):
        if name not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {name!r}; valid: {', '.join(TOKENIZERS)}")
        self.name = name
        self.enc = None
        # Raw bytes: 256 byte values and the end-of-text token.
        self.n_vocab = 257
        self.eot = 256
        if name != "bytes":
            self.enc = gpt2_encoding(bpe_dir or os.environ.get("MIXIT_BPE_DIR"))
            self.n_vocab = self.enc.n_vocab
            self.eot = self.enc.eot_token

    def encode_batch(self, texts):
        if self.enc is None:
            return [list(t.encode("utf-8")) for t in texts]
        # Ordinary text only, never special tokens.
        return self.enc.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)

    def decode(self, ids):
        ids = [int(i) for i in ids if i != self.eot and i < self.n_vocab]
        if self.enc is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.enc.decode(ids)


def gpt2_encoding(bpe_dir):
    """GPT-2 BPE from bpe_dir/gpt2.tiktoken (offline), else tiktoken's own (TIKTOKEN_CACHE_DIR or
    download)."""
    import tiktoken
    hint = ("offline: pass --bpe_dir=DIR holding gpt2.tiktoken (or set MIXIT_BPE_DIR=DIR), or copy "
            "vocab.bpe and encoder.json into $TIKTOKEN_CACHE_DIR under tiktoken's cache names, or "
            "use --tokenizer=bytes")
    if not bpe_dir:
        return tiktoken_gpt2(hint)
    path = os.path.join(bpe_dir, "gpt2.tiktoken")
    if not os.path.isfile(path):
        raise ValueError(f"GPT-2 BPE: no gpt2.tiktoken in {bpe_dir}; {hint}")
    blob = open(path, "rb").read()
    if hashlib.sha256(blob).hexdigest() != GPT2_TIKTOKEN_SHA256:
        raise ValueError(f"GPT-2 BPE: {path} fails its sha256 check "
                         f"(expected {GPT2_TIKTOKEN_SHA256}); {hint}")
    # Each line of the file is a token in base64 and its rank.
    lines = (line.split() for line in blob.splitlines())
    ranks = {base64.b64decode(token): int(rank) for token, rank in lines}
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def tiktoken_gpt2(hint, timeout=TIKTOKEN_TIMEOUT):
    """tiktoken.get_encoding('gpt2'), given up after timeout seconds: its download has no timeout
    of its own and can hang forever behind a silent network. A daemon thread never holds up the
    exit."""
    import tiktoken
    result = {}

    def load():
        try:
            result["enc"] = tiktoken.get_encoding("gpt2")
        except Exception as e:
            # requests' errors, hash mismatches and the like.
            result["error"] = type(e).__name__

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout)
    if "enc" not in result:
        reason = result.get("error", f"no answer within {timeout:g} s")
        raise ValueError(f"GPT-2 BPE could not be loaded: not in tiktoken's cache, and downloading "
                         f"it failed ({reason}); {hint}")
    return result["enc"]


def encode_examples(tok, texts, max_len):
    """(n, max_len) uint16 token ids, truncated, padded with the end-of-text token; empty texts
    dropped."""
    ids = [row[:max_len] for row in tok.encode_batch(texts)]
    x = np.full((len(ids), max_len), tok.eot, dtype=np.uint16)
    for i, row in enumerate(ids):
        x[i, :len(row)] = row
    return x, np.array([len(row) > 0 for row in ids])


class TextTask:
    """Next-token prediction on data/<name>, in one of two kinds of rows. Packed: block_size
    windows of {split}.bin, uint16 token streams with an end-of-text token between documents
    (nanoGPT's). Lines: each a row of {split}_lines.bin (a WikiText line tokenized alone: the
    paper's), cut to block_size tokens and padded with end-of-text tokens, never scored."""

    n_classes = 0
    causal = True
    pad_id = -1
    # Perplexity per token; induction heads form on text.
    metrics = ("val_ppl",)
    probe = "induction"
    # Its tokens and FLOPs count the tokens it predicts (padding is no text).
    counts_scored = True

    def __init__(self, name, folder, meta, block_size, eval_iters, eval_split, lm_rows="packed"):
        self.name = name
        self.folder = folder
        self.meta = meta
        self.lm_rows = lm_rows
        self.vocab_size = padded_vocab(meta["vocab_size"])
        self.block_size = block_size
        self.eval_iters = eval_iters
        self.val_split = eval_split
        self.suffix = "_lines" if lm_rows == "lines" else ""
        if lm_rows == "lines" and "lines" not in meta:
            raise ValueError(f"{folder} holds no lines (WikiText prepared by this version has "
                             f"them): prepare it again, python prepare.py {meta['dataset']}, "
                             f"or use --lm_rows=packed")
        for split in ("train", eval_split):
            if split not in meta["tokens"]:
                raise ValueError(f"{folder} has no {split!r} split; "
                                 f"valid: {', '.join(meta['tokens'])}")
            if meta["tokens"][split] <= block_size:
                raise ValueError(f"{folder}: only {meta['tokens'][split]} {split} tokens "
                                 f"for block_size={block_size}")
            # Refuse a token file that is missing, truncated or not the one meta.json describes.
            path = os.path.join(folder, f"{split}{self.suffix}.bin")
            size = self.size(split)
            truncated = not os.path.isfile(path) or os.path.getsize(path) != 2 * size
            if truncated or (lm_rows == "lines"
                             and len(self.starts(split)) != meta["lines"][split] + 1):
                raise ValueError(f"{path} holds "
                                 f"{os.path.getsize(path) // 2 if os.path.isfile(path) else 0} "
                                 f"tokens (or its .npy other lines), meta.json says {size}; "
                                 f"prepare it again: python prepare.py {name}")

    def tokens(self, split):
        # A fresh memmap for every batch.
        path = os.path.join(self.folder, f"{split}{self.suffix}.bin")
        return np.memmap(path, dtype=np.uint16, mode="r")

    @cache
    def starts(self, split):
        """Where each line starts in {split}_lines.bin, and where the last ends (lines + 1; none if
        unreadable)."""
        try:
            return np.load(os.path.join(self.folder, f"{split}_lines.npy"), allow_pickle=False)
        except (OSError, ValueError):
            return np.zeros(0, np.int64)

    def size(self, split):
        """The tokens in the split's file."""
        return self.meta["line_tokens" if self.lm_rows == "lines" else "tokens"][split]

    # Counted once per task and batch size: every run of a comparison reads it.
    @cache
    def loss_floor(self, batch_size):
        """What a model that reads only the last token earns: a bigram counted on the training split
        (add-one smoothing), its cross-entropy in nats per token on the tokens the models are scored
        on (eval_batches): -log (c(a, b) + 1) / (c(a) + V)."""
        V = self.meta["vocab_size"]
        train = self.tokens("train")
        batches = zip(*self.eval_batches(self.val_split, batch_size))
        x, y = (torch.cat(t).flatten().numpy() for t in batches)
        # Each scored pair (a, b) as one integer, a * V + b.
        a = x[y >= 0]
        wanted = a * V + y[y >= 0]
        codes, counts = np.unique(train[:-1].astype(np.int64) * V + train[1:], return_counts=True)
        at = np.minimum(np.searchsorted(codes, wanted), len(codes) - 1)
        # c(a, b) and c(a) on the training split.
        seen = np.where(codes[at] == wanted, counts[at], 0)
        contexts = np.bincount(train[:-1], minlength=V)[a]
        return float(np.mean(np.log(contexts + V) - np.log(seen + 1)))

    def units(self, split):
        """How many rows the split offers: its lines, or the starts of a full window."""
        if self.lm_rows == "lines":
            return len(self.starts(split)) - 1
        return self.size(split) - self.block_size

    def windows(self, split, units):
        """x (B, T) from each unit on: a line up to its end (at most T tokens), or the window from
        token unit of the stream; past that end the end-of-text token. y: the next token where it
        lies before the end, else -1."""
        data = self.tokens(split)
        T = self.block_size
        if self.lm_rows == "lines":
            bounds = self.starts(split)
            starts = bounds[units]
            ends = np.minimum(bounds[units + 1], starts + T)
        else:
            starts = units
            ends = len(data)
        idx = starts[:, None] + np.arange(T + 1)
        inside = idx < np.reshape(ends, (-1, 1))
        seqs = data[np.minimum(idx, len(data) - 1)]
        seqs = np.where(inside, seqs, self.meta["eot"]).astype(np.int64)
        y = np.where(inside[:, 1:], seqs[:, 1:], -1)
        return torch.from_numpy(seqs[:, :-1]), torch.from_numpy(y)

    def get_batch(self, split, batch_size, seed=0):
        units = np.random.default_rng(seed).integers(0, self.units(split), batch_size)
        return self.windows(split, units)

    def eval_batches(self, split, batch_size, rank=0, world_size=1):
        """The test split whole (every line, or the stream in consecutive windows); any other
        split, the same eval_iters batches of lines or windows at every evaluation."""
        if split != "test":
            rng = np.random.default_rng(TEST_SEED)
            units = rng.integers(0, self.units(split), self.eval_iters * batch_size)
        elif self.lm_rows == "lines":
            units = np.arange(self.units(split))
        else:
            # Consecutive windows: each starts where the last one's inputs end.
            units = np.arange(0, self.size(split) - 1, self.block_size)
        units = units[rank::world_size]
        for i in range(0, len(units), batch_size):
            yield self.windows(split, units[i:i + batch_size])


class ClassifyTask:
    """Sequence classification on data/<name>/{split}_x.npy (token ids padded with pad_id to
    max_len) and _y.npy (labels): as the paper's classifier, the model reads the whole text at
    once (causal=False) and pools its tokens."""

    causal = False
    # How far its log-odds move with the input.
    metrics = ("val_margin_std",)
    probe = None

    def __init__(self, name, folder, meta, block_size, eval_split):
        self.name = name
        self.folder = folder
        self.vocab_size = padded_vocab(meta["vocab_size"])
        self.n_classes = meta["n_classes"]
        self.pad_id = meta["pad_id"]
        if block_size > meta["max_len"]:
            raise ValueError(f"block_size={block_size} is longer than the {meta['max_len']} tokens "
                             f"kept by `python prepare.py {name}`; prepare again with "
                             f"--max_len={block_size}")
        self.block_size = block_size
        self.val_split = eval_split
        for split in ("train", eval_split):
            if split not in meta["examples"]:
                raise ValueError(f"{folder} has no {split!r} split; "
                                 f"valid: {', '.join(meta['examples'])}")

    def arrays(self, split):
        """The split's token ids (read as needed) and its labels."""
        path = os.path.join(self.folder, split)
        x = np.load(f"{path}_x.npy", mmap_mode="r", allow_pickle=False)
        return x, np.load(f"{path}_y.npy", allow_pickle=False)

    def batch(self, x, y, rows):
        x = torch.from_numpy(x[rows, :self.block_size].astype(np.int64))
        return x, torch.from_numpy(y[rows].astype(np.int64))

    def get_batch(self, split, batch_size, seed=0):
        x, y = self.arrays(split)
        rows = np.random.default_rng(seed).integers(0, len(y), batch_size)
        return self.batch(x, y, np.sort(rows))

    def chance(self):
        """The majority class's share of the evaluation split."""
        y = self.arrays(self.val_split)[1]
        return float(np.bincount(y).max() / len(y))

    def loss_floor(self, batch_size):
        """What a model that reads no input earns: the training split's class shares, their loss on
        the evaluation's (every evaluation reads the whole split, whatever its batch_size)."""
        train = self.arrays("train")[1]
        val = self.arrays(self.val_split)[1]
        return float(-np.log(np.bincount(train, minlength=self.n_classes)[val] / len(train)).mean())

    def eval_batches(self, split, batch_size, rank=0, world_size=1):
        x, y = self.arrays(split)
        mine = np.arange(len(y))[rank::world_size]
        for i in range(0, len(mine), batch_size):
            yield self.batch(x, y, mine[i:i + batch_size])


def make_task(name, block_size=0, data_dir="data", eval_iters=20, eval_split="val",
              lm_rows="packed"):
    """A task by its command-line name: algorithmic (addition_10, retrieval, ...) or a prepared
    corpus (a language model's in lm_rows: packed windows, or lines)."""
    base, _, arg = name.partition("_")
    folder = os.path.join(data_dir, name)
    prepared = os.path.isfile(os.path.join(folder, "meta.json"))
    if name in CORPUS_TASKS or (base not in TASKS and prepared):
        meta = read_meta(folder, name)
        if meta["kind"] == "lm":
            return TextTask(name, folder, meta, block_size or 256, eval_iters, eval_split, lm_rows)
        if lm_rows == "packed":
            return ClassifyTask(name, folder, meta, block_size or meta["max_len"], eval_split)
    if lm_rows != "packed":
        raise ValueError(f"lm_rows={lm_rows} reads the lines of a language-model corpus "
                         f"(WikiText); {name} is none")
    if base not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {TASK_NAMES}, {', '.join(CORPUS_TASKS)}, "
                         f"or the --name of a corpus prepared in {data_dir}/")
    cls, default, smallest = TASKS[base]
    if not arg:
        return cls(default)
    if not arg.isdigit() or int(arg) < smallest:
        raise ValueError(f"task {name!r}: {base}_N takes an integer N >= {smallest}")
    return cls(int(arg))


def read_meta(folder, name):
    path = os.path.join(folder, "meta.json")
    if not os.path.isfile(path):
        raise ValueError(f"{folder} is not prepared: run `python prepare.py {name}` "
                         f"(offline: add --src=PATH --bpe_dir=DIR)")
    try:
        return json.load(open(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is unreadable ({type(e).__name__}); "
                         f"prepare it again: python prepare.py {name}")


# ============================================================================ induction-head probes

def in_eval(model, fn, *args):
    """fn(*args) with model in eval mode and no gradients; the model gets its train/eval mode
    back."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return fn(*args)
    finally:
        model.train(training)


def repeated_tokens(config, n_seqs, seg_len=None, seed=0, device=None):
    """(n_seqs, 2*seg_len): a segment of distinct random tokens (never pad_id), then its exact
    repeat."""
    vocab = config.vocab_size - (0 <= config.pad_id < config.vocab_size)
    seg_len = seg_len or min(config.block_size // 2, 32, vocab)
    if not 1 <= seg_len <= min(config.block_size // 2, vocab):
        raise ValueError(f"seg_len={seg_len}: two copies must fit block_size={config.block_size} "
                         f"and the tokens must be distinct")
    # Each sequence's segment is the seg_len tokens with the most noise (n, V): distinct tokens.
    noise = torch.rand(n_seqs, config.vocab_size, generator=torch.Generator().manual_seed(seed))
    if config.pad_id >= 0:
        noise[:, config.pad_id] = -1.0
    segment = noise.topk(seg_len, dim=-1).indices
    return segment.repeat(1, 2).to(device)


def prefix_matching_score(attn, seg_len):
    """Induction score of attention (..., T, T) on a repeated segment: the mean weight from
    i = seg_len + j to j + 1."""
    # The diagonal of the weights from i to i - seg_len + 1, (..., T - seg_len + 1), read at
    # i = seg_len .. 2 seg_len - 1.
    stripe = attn.diagonal(offset=1 - seg_len, dim1=-2, dim2=-1)
    return stripe[..., 1:seg_len + 1].float().mean(-1)


def named_patterns(T, device=None):
    """Fixed causal attention patterns (T, T) a layer may need, each row a distribution over the
    positions it reads: the prefix mean (a running count, as Dyck's balance), the previous token,
    the first token and the identity. The first two are MixiT's fixed heads' patterns."""
    fixed = fixed_patterns(T, True, device)
    first = torch.zeros(T, T, device=device)
    first[:, 0] = 1.0
    return {"prefix mean": fixed["mean"], "previous token": fixed["previous"], "first token": first,
            "identity": torch.eye(T, device=device)}


def pattern_residuals(maps, patterns):
    """How well a layer's heads span each pattern P, min_c ||sum_h c_h A_h - P|| / ||P||:
    0 when a mix of the heads is P, 1 when it holds nothing of it. maps (..., H, T, T) holds one
    layer's heads; returns {name: (...)}, float64 (computed on the CPU: MPS has no float64)."""
    # A column per head (..., T*T, H), a column per pattern (..., T*T, K).
    heads = maps.cpu().double().flatten(-2).transpose(-1, -2)
    targets = torch.stack([p.cpu().double().flatten() for p in patterns.values()], -1)
    targets = targets.expand(*heads.shape[:-1], targets.size(-1))
    residual = heads @ torch.linalg.lstsq(heads, targets).solution - targets
    share = residual.norm(dim=-2) / targets.norm(dim=-2)
    return {name: share[..., k] for k, name in enumerate(patterns)}


def induction_scores(model, n_seqs=64, seg_len=None, seed=0, env=Env()):
    """(n_layer, n_head) prefix-matching score of every head on repeated random segments, each
    process taking every world_size-th."""
    # The repeated segments (n, 2s) go where the model is; their maps are (L, n, H, 2s, 2s).
    idx = repeated_tokens(model.config, n_seqs, seg_len, seed, model.wte.weight.device)
    maps = in_eval(model, model.attention_maps, idx[env.rank::env.world_size])
    return env.all_reduce(prefix_matching_score(maps, idx.size(1) // 2).sum(1)).cpu() / n_seqs


def recall_scores(model, task, n_seqs=256, env=Env()):
    """(n_layer, n_head) associative-recall score: the mean weight from each scored position t of
    the test sequences to the token right after the first earlier occurrence of its key
    (task.key_of), the value it recalls. Each process takes every world_size-th row."""
    mine = slice(env.rank, None, env.world_size)
    scored = task.scored(task.test[:n_seqs])
    x = task.test[:n_seqs][mine, :-1]
    # Each scored position (row, t), M of them, and where its key occurs before t, found (M, T).
    rows, t = np.nonzero(scored[mine])
    found = (x[rows] == task.key_of(x[rows, t])[:, None]) & (np.arange(x.shape[1]) < t[:, None])
    if not found.any(1).all():
        raise ValueError(f"recall_scores: {task.name} scores a position whose key does not occur "
                         f"before it")
    maps = in_eval(model, model.attention_maps, torch.from_numpy(x).to(model.wte.weight.device))
    # (n, T, T, L, H), read at each scored position and the token after its key.
    maps = maps.permute(1, 3, 4, 0, 2)
    rows, t, source = (torch.from_numpy(a).to(maps.device) for a in (rows, t, found.argmax(1) + 1))
    return env.all_reduce(maps[rows, t, source].sum(0)).cpu() / int(scored.sum())


# ============================================================================ evaluation

@torch.no_grad()
def evaluate(model, task, split, batch_size, env):
    """Loss, accuracy (per answer, and by the answer's place in its row), exact match, the margin's
    spread."""
    # The totals are float64, but float32 on MPS, which has no float64.
    total = torch.float32 if env.device_type == "mps" else torch.float64
    # Loss, answers, right answers, answered rows, exact rows, margin, margin squared.
    sums = torch.zeros(7, dtype=total, device=env.device)
    # Right answers and answers at each place k among a row's answers.
    tallies = torch.zeros(2, task.block_size + 1, dtype=total, device=env.device)
    # A model of the tokens has no margin.
    margin = torch.zeros(1, device=env.device)
    for x, y in task.eval_batches(split, batch_size, env.rank, env.world_size):
        x, y = env.to_device(x, y)
        with env.autocast():
            logits, _ = model(x)
        if y.dim() == 1:
            # A classifier gives one answer per row; its margin is the log-odds of class 1
            # against class 0.
            margin = logits[:, 1].to(total) - logits[:, 0]
            logits = logits.unsqueeze(1)
            y = y.unsqueeze(1)
        scored = y >= 0
        right = (logits.argmax(-1) == y) & scored
        answered = scored.any(-1)
        loss = cross_entropy_sum(lambda z: z, logits, y, logits.size(-1))
        exact = (right == scored).all(-1) & answered
        sums += torch.stack([loss, scored.sum(), right.sum(), answered.sum(), exact.sum(),
                             margin.sum(), margin.square().sum()])
        place = scored.cumsum(-1)[scored] - 1
        tallies.index_add_(1, place, torch.stack([right[scored], scored[scored]]).to(total))
    loss, answers, right, rows, exact, margin, margin_sq = env.all_reduce(sums).tolist()
    hits, counts = env.all_reduce(tallies).tolist()
    # An evaluation that scores no token has no loss: nan, which is never the best.
    loss = loss / answers if answers else math.nan
    rows = max(rows, 1)
    return {"loss": loss, "acc": right / max(answers, 1), "exact": exact / rows,
            "margin_std": math.sqrt(max(margin_sq / rows - (margin / rows) ** 2, 0.0)),
            "acc_pos": [h / c for h, c in zip(hits, counts) if c]}


def induction_metrics(model, task, env):
    """Has an induction head formed, and where? The best head's score (or recall score), overall
    and per layer."""
    if task.probe == "induction":
        scores = induction_scores(model, seed=TEST_SEED, env=env)
    else:
        scores = recall_scores(model, task, env=env)
    return {"induction_score": scores.max().item(),
            "induction_layers": scores.max(1).values.tolist()}


# Loss and accuracy with the least skill.
LEVELS = ("val_loss_floor", "val_acc_chance")


def chance_metrics(model, task, env, batch_size):
    """What the scores read with no skill, measured at init: loss floor, chance accuracy,
    induction score, margin."""
    metrics = {}
    if hasattr(task, "loss_floor"):
        # The master computes the floor once and hands it to the others.
        metrics["val_loss_floor"] = env.from_master(env.master and task.loss_floor(batch_size))
    if hasattr(task, "chance"):
        metrics["val_acc_chance"] = task.chance()
    # A model of 0 layers has no attention to probe.
    if task.probe and model.blocks:
        metrics["induction_init"] = induction_metrics(model, task, env)["induction_score"]
    if "val_margin_std" in task.metrics:
        at_init = eval_metrics(model, task, batch_size, env)
        metrics["val_margin_std_init"] = at_init["val_margin_std"]
    return metrics


def eval_metrics(model, task, batch_size, env, chance=None):
    """The metrics of an evaluation: loss, accuracy, task.metrics, induction scores, and
    chance_metrics' levels beside them."""
    chance = chance or {}

    def run(split):
        return in_eval(model, evaluate, model, task, split, batch_size, env)

    def bits_per_param(loss):
        # Rows x (log2 N - loss in bits): the label bits held, per trainable parameter.
        held = max(0.0, math.log2(task.vocab_size // 2) - loss / math.log(2))
        bits = len(task.split_rows("train")) * held
        return bits / model.get_num_params(non_embedding=False, trainable=True)

    val = run(task.val_split)
    # The scores a task may ask for, computed only when it does. bits_ceiling is the bits of the
    # whole table held; val_margin_std, how far a classifier's log-odds move with the input.
    scores = {"val_exact": lambda: val["exact"],
              "train_acc": lambda: run("train")["acc"],
              "val_ppl": lambda: math.exp(min(val["loss"], 50.0)),
              "val_acc_pos": lambda: val["acc_pos"],
              "bits_per_param": lambda: bits_per_param(val["loss"]),
              "bits_ceiling": lambda: bits_per_param(0.0),
              "val_margin_std": lambda: val["margin_std"]}
    metrics = {"val_loss": val["loss"], "val_acc": val["acc"],
               **{k: chance[k] for k in LEVELS if k in chance}}
    metrics.update({name: scores[name]() for name in task.metrics})
    if task.probe and model.blocks:
        metrics.update(induction_metrics(model, task, env))
    # What was read at init goes last, beside the score it measures.
    return {**metrics, **chance}
