"""
Data for mixit.

make_task(name) builds a task by its command-line name:
  addition_N   two N-digit numbers, digits reversed, and their sum      (arithmetic)
  dyck_N       is a bracket string of at most 2N characters balanced?  (structure)
  retrieval_N  in-context key -> value recall over up to N pairs       (retrieval; the reference's condattend)
  modadd_P     (a + b) mod P for all P^2 pairs, 95/5 train/test split  (arithmetic, in weights)
  memorize_N   random labels for all N^2 two-token inputs              (memorization; scored on the training set)
  induction_N  a random segment followed by its repeat                 (the classic induction-head task)
A bare name takes the default N. Every task gives next-token batches (x, y) of LongTensors where
y = -1 at the positions that are not scored, and a fixed test split that no training batch repeats.
"""
import numpy as np
import torch

TEST_SEED = 12345  # the reference's seed for test sets and fixed tables
N_TEST = 4000  # the reference's test-set size for streaming tasks


def _row_hash(seqs):
    """A 64-bit hash per row (a random linear map mod 2^64); equal rows hash equally."""
    weights = np.random.default_rng(0).integers(1, 2 ** 62, size=seqs.shape[1], dtype=np.int64) | 1
    with np.errstate(over="ignore"):
        return (seqs * weights).sum(1)


class Task:
    """Fixed-length integer sequences (B, L): x = seq[:, :-1], y = seq[:, 1:] where scored, else -1."""

    n_classes, causal, pad_id = 0, True, -1  # a language-model task over the task vocabulary
    val_split = "test"  # the split behind val_loss / val_acc
    train_eval = False  # also report accuracy on the training split (train_acc)
    exact_match = False  # also report whole-answer exact match (val_exact)

    def __init__(self, name, vocab_size, seq_len):
        self.name, self.vocab_size, self.block_size = name, vocab_size, seq_len - 1

    def scored(self, seqs):
        """(n, L-1) bool: is the prediction made at position t (of token t+1) scored?"""
        raise NotImplementedError

    def xy(self, seqs):
        seqs = torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64))
        x, y = seqs[:, :-1], seqs[:, 1:].clone()
        y[~torch.from_numpy(self.scored(seqs.numpy()))] = -1
        return x.contiguous(), y

    def train_rows(self, rng, n):
        raise NotImplementedError

    def split_rows(self, split):
        raise NotImplementedError

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

    def sample(self, rng, n):
        """(n, L) int64 sequences drawn from the task distribution."""
        raise NotImplementedError

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


def make_task(name):
    """A task by its command-line name, e.g. addition_10 or retrieval (default N)."""
    base, _, arg = name.partition("_")
    if base not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {TASK_NAMES}")
    cls, default, smallest = TASKS[base]
    if not arg:
        return cls(default)
    if not arg.isdigit() or int(arg) < smallest:
        raise ValueError(f"task {name!r}: {base}_N takes an integer N >= {smallest}")
    return cls(int(arg))
