"""
MixiT and its baselines in one file: which trainable parts of a transformer matter?
Dong, Noci, Khodak, Li, "Attention Retrieves, MLP Memorizes" / "Is Random Attention Sufficient for
Sequence Modeling?" (arXiv 2506.01115).

attn="softmax"         a Llama-style transformer: pre-RMSNorm, RoPE, causal softmax, SwiGLU, biases, untied head
attn="frozen_qk"       the same forward; W_Q, W_K (and their zero biases) stay at their random init
attn="mixing"          MixiT: each layer's attention is a fixed random (H, T, T) matrix; no W_Q, W_K or RoPE
attn="learned_mixing"  MixiT's matrix as a trained parameter: attention that learns but never reads its input
attn="mmsm"            one letter per layer (s softmax, f frozen_qk, m mixing, l learned_mixing): a hybrid
freeze="mlp"           every MLP stays at its init;  freeze="blocks": only the embeddings, final norm and head train
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

ATTNS = ("softmax", "frozen_qk", "mixing", "learned_mixing")
LETTERS = {"s": "softmax", "f": "frozen_qk", "m": "mixing", "l": "learned_mixing"}
MIXING = ("mixing", "learned_mixing")  # attention that never reads its input
FREEZES = ("", "mlp", "blocks")
QK_INITS = ("paper", "reference")
PARAMETRIZATIONS = ("auto", "mixit", "standard")
MIXIT_PARTS = ("residual", "activation", "multipliers", "positions")  # MixiT's parametrization, part by part
POOLS, PADS, CENTRINGS = ("mean", "last"), ("masked", "attended"), ("mean", "reference")  # classifier options
FIXED_HEADS = {"": "random", "mean": "the prefix mean", "previous": "the previous token"}  # MixiT's head 1
LOSS_CHUNK = 2 ** 27  # the loss's float32 logits made this many at a time (512 MiB: 2,668 positions of GPT-2 BPE)


@dataclass
class MixiTConfig:  # the paper's variants need only the fields down to mix_beta; study options follow them
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    attn: str = "softmax"  # softmax | frozen_qk | mixing | learned_mixing, or one letter per layer: "mmsm"
    freeze: str = ""  # "" | mlp (Frozen-MLP) | blocks (the random transformer)
    causal: bool = True
    n_classes: int = 0  # 0: a language model over the vocabulary; > 0: a sequence classifier
    pad_id: int = -1  # classifier: the padding token, never pooled
    seed: int = 0  # every random init: trained weights, frozen weights, mixing matrices
    bias: bool = True  # every projection has a bias, as in the reference trainers
    rope_theta: float = 10000.0
    init_std: float = 0.02  # every trained linear weight is N(0, init_std^2), as in the reference code
    qk_init: str = "paper"  # frozen_qk's frozen W_Q, W_K: paper N(0, 1/n_embd); reference N(0, init_std^2)
    parametrization: str = "auto"  # mixit | standard | auto: MixiT's when any layer mixes
    base_width: float = 512.0  # MixiT's parametrization: a linear of fan-in d is multiplied by sqrt(base_width / d)
    base_ffn: float = 1.0  # MixiT's parametrization: the down projection is multiplied by sqrt(base_ffn / 4d)
    skip: float = math.sqrt(0.5)  # MixiT's parametrization: h = skip*h + sqrt(1 - skip^2)*f(h)
    cminus: float = -1.0  # MixiT's parametrization: the shaped activation's slope is 1 + cminus/sqrt(d)
    mix_beta: float = 1.0  # mixing: scale of the centred noise around the identity
    # Study options (defaults: mixit's model; RESULTS.md's departures from the reference); what sets other values:
    standard_parts: str = ""  # these parts of MixiT's parametrization standard (MIXIT_PARTS): capacity_cpu, depth_cpu
    sigma_min: float = 0.0  # mixing: the noise std's lowest value (0: 1/sqrt(T d_h), the paper's): heads_cpu's comment
    fixed_head: str = ""  # mixing's head 1: "" random | mean (prefix mean) | previous (token): --express, *_cpu presets
    centring: str = "mean"  # non-causal mixing: rows centred on their mean | reference: row sum / (i+1): yelp_paper
    pool: str = "mean"  # classifier: mean of the real tokens | last: the last real token (the reference): yelp_paper
    pads: str = "masked"  # classifier: masked out of attention | attended, embedding held at 0 (reference): yelp_paper
    depth_alpha: float = 0.0  # > 0: every model h = h + (base_depth/n_layer)^alpha f(h), MixiT's A without I; with
    base_depth: float = 4.0  # base_depth, as the reference's LM launchers run MixiT (lm_paper's, lm_cpu's comments)
    @property
    def layer_attn(self):
        """Each layer's attention: attn in every layer, or one letter per layer ('mmsm'); else a ValueError."""
        if self.attn not in ATTNS and (len(self.attn) != self.n_layer or set(self.attn) - set(LETTERS)):
            raise ValueError(f"unknown attn {self.attn!r}; valid: {', '.join(ATTNS)}, or one letter per layer for "
                             f"n_layer={self.n_layer} (s softmax, f frozen_qk, m mixing, l learned_mixing)")
        return [self.attn] * self.n_layer if self.attn in ATTNS else [LETTERS[c] for c in self.attn]

    @property
    def mixit_param(self):
        """MixiT's parametrization: residual scaling, shaped activation, width multipliers, learned positions."""
        return self.parametrization == "mixit" or (self.parametrization == "auto" and
                                                   any(a in MIXING for a in self.layer_attn))

    def mixit_part(self, part):
        """One part of MixiT's parametrization: on where the parametrization is, unless standard_parts names it."""
        return self.mixit_param and part not in self.standard_parts.split(",")

    def __post_init__(self):
        """Validated as it is made: raise ValueError naming what is valid."""
        least = dict.fromkeys(("vocab_size", "block_size", "n_head", "n_embd"), 1) | {"n_layer": 0}
        for name, low in least.items():  # n_layer 0: embeddings, norm and head alone (a bigram, a bag of words)
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be {'positive' if low else '0 or more'}, got {getattr(self, name)}")
        for name, valid in (("freeze", FREEZES), ("qk_init", QK_INITS), ("parametrization", PARAMETRIZATIONS),
                            ("pool", POOLS), ("pads", PADS), ("centring", CENTRINGS), ("fixed_head", FIXED_HEADS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: "
                                 + ", ".join(repr(v) if v == "" else v for v in valid))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if any(a not in MIXING for a in self.layer_attn) and (self.n_embd // self.n_head) % 2:  # attn checked
            raise ValueError(f"rotary embeddings need an even head size, got {self.n_embd // self.n_head}")
        if self.fixed_head and self.n_head < 2:
            raise ValueError(f"fixed_head needs n_head >= 2 (head 0 is the sink, head 1 the fixed), got {self.n_head}")
        if bad := set(filter(None, self.standard_parts.split(","))) - set(MIXIT_PARTS):
            raise ValueError(f"unknown standard_parts {min(bad)!r}; valid: a comma list of " + ", ".join(MIXIT_PARTS))
        if self.seed < 0 or not 0.0 <= self.skip <= 1.0:
            raise ValueError(f"skip must lie in [0, 1] and seed be >= 0, got skip={self.skip}, seed={self.seed}")


# ----------------------------------------------------------------------------- fixed random numbers from integers

def hash32(x):
    """Mueller's 32-bit integer hash, for Python ints and int64 tensors alike (every product stays below 2^63)."""
    x = (x >> 16 ^ x) * 0x45D9F3B & 0xFFFFFFFF
    x = (x >> 16 ^ x) * 0x45D9F3B & 0xFFFFFFFF
    return x >> 16 ^ x


def seed_key(*ints):
    """One 32-bit key from a flat tuple of non-negative integers."""
    key = 0
    for i in ints:
        key = hash32(key ^ hash32(i))
    return key


def gaussian_pairs(index, key):
    """Two standard normals per index (..., 2) by Box-Muller on hashed uniforms: alike on any device or torch."""
    u1 = (hash32(index ^ hash32(key)) + 0.5) * 2.0 ** -32  # in (0, 1)
    angle = hash32(index ^ hash32(key + 1)) * (2 * math.pi * 2.0 ** -32)
    radius = torch.sqrt(-2 * torch.log(u1))
    return torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), -1)


def mixing_matrix(block_size, n_head, head_dim, causal=True, beta=1.0, seed=(0,), device=None, rows=128,
                  identity=True, centring="mean", fixed_head="", sigma_min=0.0):
    """MixiT's fixed attention less its identity, (n_head, T, T) float32: A_h - I where A_h = I + beta * (N_h -
    rowmean(N_h)), whose rows sum to 1; identity=False: A_h = beta * (N_h - rowmean(N_h)), std 1/sqrt(T) in every head.
    Head 0 is a sink; head 1 may be fixed_head's pattern. Built where it is used, rows at a time: no host copy."""
    T, pairs = block_size, (block_size + 1) // 2
    P, lo, hi = torch.zeros(n_head, T, T, device=device), sigma_min or 1 / math.sqrt(T * head_dim), 1 / math.sqrt(T)
    for h in range(1, n_head):
        sigma = lo + hash32(seed_key(*seed, h, 0)) * 2.0 ** -32 * (hi - lo) if identity else hi  # uniform in [lo, hi]
        for r in range(0, T, rows):
            r1 = min(r + rows, T)
            cols = r1 if causal else T
            i, j = torch.arange(r, r1, device=device).view(-1, 1), torch.arange(cols, device=device)
            future = (j > i) & causal  # causal: row i mixes the positions j <= i only
            index = i * pairs + torch.arange((cols + 1) // 2, device=device)  # N_h[i, j] is a function of (i, j)
            noise = sigma * gaussian_pairs(index, seed_key(*seed, h, 1)).flatten(1)[:, :cols]  # N(0, sigma^2)
            noise = noise.masked_fill(future, 0.0)
            n = i + 1 if causal or centring == "reference" else T  # the reference's non-causal rows: over i + 1
            centred = noise - noise.sum(-1, keepdim=True) / n  # the noise only redistributes
            P[h, r:r1, :cols] = beta * centred.masked_fill(future, 0.0)
    if not identity:  # A_h itself: the identity rides on the unscaled skip instead
        P[1:].diagonal(dim1=1, dim2=2).sub_(1.0)
    P[0].diagonal().fill_(-0.5)  # the sink head A_0 = I/2 + (token 0)/2: every token keeps half of itself
    P[0, 1:, 0] = 0.5  # and takes half of token 0 (row 0 holds only its own half)
    if fixed_head:  # head 1 a known pattern A_1: the prefix mean (a running count) or the previous token (a shift)
        P[1] = fixed_patterns(T, causal, device)[fixed_head] - torch.eye(T, device=device)
    return P


def fixed_patterns(T, causal=True, device=None):
    """FIXED_HEADS' patterns (T, T), rows summing to 1: the prefix mean (non-causal: the mean), the previous token."""
    eye, ones = torch.eye(T, device=device), torch.ones(T, T, device=device)
    mean = ones.tril() / ones.tril().sum(-1, keepdim=True) if causal else ones / T  # row i: positions 0..i (all)
    return {"mean": mean, "previous": eye[(torch.arange(T, device=device) - 1).clamp(min=0)]}  # row 0: itself


def mix(P, v):
    """(A - I) V: rows P (H, t, s) of each head's fixed matrix times v (B, H, s, hd), one product a head, its causal
    zeros included (on a GPU faster than skipping them; P @ v would copy P for every sequence)."""
    return torch.einsum("hts,bhsd->bhtd", P, v)


# ----------------------------------------------------------------------------- the model

class Linear(nn.Linear):
    """A linear layer whose output, bias included, is multiplied by a fixed width multiplier (1 but for MixiT)."""

    def __init__(self, fan_in, fan_out, bias, mult=1.0):
        super().__init__(fan_in, fan_out, bias)
        self.mult = mult

    def forward(self, x):
        return super().forward(x) * self.mult if self.mult != 1.0 else super().forward(x)  # sqrt(base / fan_in)


def width_mult(config, fan_in, base=None):  # MixiT's sqrt(base / fan_in): its layers keep their scale in width
    return math.sqrt((base or config.base_width) / fan_in) if config.mixit_part("multipliers") else 1.0


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain, computed in float32 (eps 1e-6 as Llama)."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x.float(), (x.size(-1),), self.weight, 1e-6).type_as(x)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention) for positions [0, block_size)."""

    def __init__(self, head_dim, block_size, theta):
        super().__init__()
        inv_freq = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos().repeat(1, 2), persistent=False)  # (T, hd)
        self.register_buffer("sin", angles.sin().repeat(1, 2), persistent=False)

    def forward(self, x, pos):  # x (B, H, t, hd) at positions pos .. pos+t-1, rotated in float32 (fused if compiled)
        cos, sin, dtype = self.cos[pos:pos + x.size(2)], self.sin[pos:pos + x.size(2)], x.dtype
        x1, x2 = (x := x.float()).chunk(2, dim=-1)
        return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(dtype)  # each pair of channels rotated by its angle


class KVCache:
    """Every layer's past keys and values for generation, written in place; a mixing layer keeps values only."""

    def __init__(self, n_layer, size):
        self.size, self.pos = size, 0  # pos: positions already cached; 0 starts a new sequence
        self.k, self.v = [None] * n_layer, [None] * n_layer

    def _write(self, bufs, layer, z):  # z (B, H, t, hd) at positions pos..pos+t-1 -> every position 0..pos+t-1
        if bufs[layer] is None or bufs[layer].shape[:2] != z.shape[:2] or bufs[layer].dtype != z.dtype:
            bufs[layer] = z.new_empty(z.size(0), z.size(1), self.size, z.size(3))
        bufs[layer][:, :, self.pos:self.pos + z.size(2)] = z
        return bufs[layer][:, :, :self.pos + z.size(2)]

    def update(self, layer, k, v):  # -> every cached key (None for mixing) and value
        return None if k is None else self._write(self.k, layer, k), self._write(self.v, layer, v)


class Attention(nn.Module):
    def __init__(self, config, layer, device=None, mixing_dtype=torch.float32):
        super().__init__()
        C, H = config.n_embd, config.n_head
        self.n_head, self.head_dim, self.layer, self.causal = H, C // H, layer, config.causal
        self.kind = config.layer_attn[layer]
        if self.kind == "softmax":
            self.qkv = Linear(C, 3 * C, config.bias)  # W_Q, W_K, W_V in one matmul
        elif self.kind == "frozen_qk":
            self.qk = Linear(C, 2 * C, config.bias)  # W_Q, W_K: frozen at init, apart from the trained W_V
            self.v = Linear(C, C, config.bias)
        else:
            P = mixing_matrix(config.block_size, H, self.head_dim, config.causal, config.mix_beta, (config.seed, 1,
                              layer), device, identity=not config.depth_alpha, centring=config.centring,
                              fixed_head=config.fixed_head, sigma_min=config.sigma_min)
            if self.kind == "learned_mixing":  # trained from MixiT's init, causal entries only (masked in use)
                self.mixing = nn.Parameter(P)
            else:  # fixed: a function of the seed, rebuilt rather than saved; cast once to the compute dtype
                self.register_buffer("mixing", P.to(mixing_dtype), persistent=False)
            self.v = Linear(C, C, config.bias, width_mult(config, C))
        if self.kind not in MIXING:
            self.rotary = Rotary(self.head_dim, config.block_size, config.rope_theta)
        self.o = Linear(C, C, config.bias, width_mult(config, C))

    def heads(self, z):  # (B, t, n*C) -> n tensors (B, H, t, hd)
        return z.unflatten(-1, (-1, self.head_dim)).transpose(1, 2).split(self.n_head, dim=1)

    def qkv_heads(self, x, pos):
        """Queries and keys (rotated) and values of x (B, t, C), each (B, H, t, hd)."""
        q, k, v = self.heads(self.qkv(x)) if self.kind == "softmax" else self.heads(self.qk(x)) + self.heads(self.v(x))
        return self.rotary(q, pos), self.rotary(k, pos), v

    def mixing_rows(self, pos, t):
        """Rows pos..pos+t-1 of the mixing matrix less its identity, (H, t, pos+t): the same for every input."""
        P = self.mixing[:, pos:pos + t, :pos + t]
        return P.tril(pos) if self.causal and self.kind == "learned_mixing" else P  # no gradient from the future

    def forward(self, x, cache=None, pad_mask=None):  # x (B, t, C)
        B, t, C = x.shape
        pos = 0 if cache is None else cache.pos
        if self.kind in MIXING:
            v = self.v(x)
            if pad_mask is not None:
                v = v * pad_mask.view(B, t, 1).to(v.dtype)  # padding carries no value
            (v,) = self.heads(v)
            if cache is not None:
                _, v = cache.update(self.layer, None, v)
            y = v[:, :, -t:] + mix(self.mixing_rows(pos, t).to(v.dtype), v)  # A V = V + (A - I) V
        else:
            q, k, v = self.qkv_heads(x, pos)
            if cache is not None:
                k, v = cache.update(self.layer, k, v)
            y = self.softmax_attention(q, k, v, pad_mask, pos)
        return self.o(y.transpose(1, 2).reshape(B, t, C))

    def softmax_attention(self, q, k, v, pad_mask, pos):  # q (B, H, t, hd) at positions pos.., k and v at 0..
        B, t = q.size(0), q.size(2)
        mask = None if pad_mask is None else pad_mask.view(B, 1, 1, t)  # the keys that are not padding
        causal = self.causal and t > 1  # a single new query sees every cached key
        if causal and pos:  # new queries pos.. against keys 0..: the causal mask aligned to the bottom right
            mask, causal = torch.ones(t, pos + t, dtype=torch.bool, device=q.device).tril(pos), False
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # flash on a GPU

    def weights(self, x, pad_mask=None):
        """The attention matrix this layer applies to x (B, t, C), as (B, H, t, t): what it gives the values I."""
        B, t, _ = x.shape
        if self.kind in MIXING:
            w = (torch.eye(t, device=x.device) + self.mixing_rows(0, t).float()).expand(B, -1, -1, -1)
            return w if pad_mask is None else w * pad_mask.view(B, 1, 1, t)  # masked padding carries nothing
        q, k, _ = self.qkv_heads(x, 0)
        one_hot = torch.eye(t, device=x.device, dtype=q.dtype).expand(B, self.n_head, t, t)  # each key's own value
        return self.softmax_attention(q, k, one_hot, pad_mask, 0)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        self.gate_up = Linear(C, 8 * C, config.bias, width_mult(config, C))  # W_G and W_U in one matmul
        self.down = Linear(4 * C, C, config.bias, width_mult(config, 4 * C, config.base_ffn))
        self.shaped = config.mixit_part("activation")
        self.slope = 1 + config.cminus / math.sqrt(C)  # shaped activation: near-linear, slope 1 + c/sqrt(d)
        self.gain = math.sqrt(2 / (1 + self.slope ** 2))  # its gain keeps the variance: calculate_gain('leaky_relu')

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, t, 4C) each
        if self.shaped:
            return self.down(self.gain * F.leaky_relu(gate, self.slope) * up)  # MixiT's shaped gated MLP
        return self.down(F.silu(gate) * up)  # SwiGLU


class Block(nn.Module):
    def __init__(self, config, layer, device=None, mixing_dtype=torch.float32):
        super().__init__()
        self.norm1, self.attn = RMSNorm(config.n_embd), Attention(config, layer, device, mixing_dtype)
        self.norm2, self.mlp = RMSNorm(config.n_embd), MLP(config)
        # residual scaling h = s h + r f(h): s^2 + r^2 = 1 keeps the hidden norm constant in depth (MixiT), a plain sum
        # otherwise; depth_alpha > 0 (the reference's LM launchers): s = 1 and r = (base_depth / n_layer)^alpha
        preserving, alpha = config.mixit_part("residual") and not config.depth_alpha, config.depth_alpha
        self.s = config.skip if preserving else 1.0
        self.r = math.sqrt(1 - self.s ** 2) if preserving else (config.base_depth / config.n_layer) ** alpha

    def forward(self, x, cache=None, pad_mask=None):
        x = self.s * x + self.r * self.attn(self.norm1(x), cache, pad_mask)
        return self.s * x + self.r * self.mlp(self.norm2(x))


def cross_entropy_sum(logits_of, x, targets, vocab, chunk=LOSS_CHUNK):
    """The cross-entropy of logits_of(x) (..., vocab) against targets (...) (-1: unscored), summed: about chunk logits
    at a time (0: all at once), each chunk's float32 logits made again in the backward pass, never kept: the memory
    of one chunk, not of all."""
    x, targets = x.flatten(0, -2), targets.flatten()
    part = lambda xs, ts: F.cross_entropy(logits_of(xs).float(), ts, ignore_index=-1, reduction="sum")
    rows = max(1, chunk // vocab) if chunk else len(x)
    if rows >= len(x):
        return part(x, targets)
    return sum(checkpoint(part, xs, ts, use_reentrant=False) if torch.is_grad_enabled() else part(xs, ts)
               for xs, ts in zip(x.split(rows), targets.split(rows)))


def param_groups(params, weight_decay):
    """AdamW's groups: matrices decay, vectors (biases, norm gains) do not."""
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


class MixiT(nn.Module):
    def __init__(self, config, device=None, mixing_dtype=torch.float32):
        """The model on device: weights drawn on the host, MixiT's fixed matrices built on device in mixing_dtype."""
        super().__init__()
        self.config, C = config, config.n_embd
        attended = config.n_classes and config.pads == "attended" and 0 <= config.pad_id < config.vocab_size
        self.wte = nn.Embedding(config.vocab_size, C, padding_idx=config.pad_id if attended else None)  # pads at 0
        self.wpe = nn.Embedding(config.block_size, C) if config.mixit_part("positions") else None  # learned positions
        self.blocks = nn.ModuleList(Block(config, layer, device, mixing_dtype) for layer in range(config.n_layer))
        self.norm = RMSNorm(C)
        self.head = Linear(C, config.n_classes or config.vocab_size, False, width_mult(config, C))  # untied
        self.loss_chunk = LOSS_CHUNK  # 0: the loss over every position's logits at once
        self.init_weights()
        for block in self.blocks:  # what keeps its random init: frozen_qk's W_Q and W_K, the MLPs, or whole blocks
            frozen = [block.attn.qk] if block.attn.kind == "frozen_qk" else []
            for module in frozen + {"": [], "mlp": [block.mlp], "blocks": [block]}[config.freeze]:
                module.requires_grad_(False)
        self.to(device)

    def init_weights(self):
        """Every weight N(0, std^2) and every bias 0, drawn from config.seed in module order."""
        g, cfg = torch.Generator().manual_seed(seed_key(self.config.seed, 0)), self.config
        frozen_qk = {id(b.attn.qk) for b in self.blocks if b.attn.kind == "frozen_qk" and cfg.qk_init == "paper"}
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = 1 / math.sqrt(module.in_features) if id(module) in frozen_qk else cfg.init_std  # N(0, 1/n)
                nn.init.normal_(module.weight, 0.0, std, generator=g)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02, generator=g)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])

    def embed(self, idx, pos=0):
        x = self.wte(idx)  # (B, t, C)
        if self.wpe is not None:
            x = x + self.wpe.weight[pos:pos + idx.size(1)]  # learned absolute positions
        if torch.is_autocast_enabled(x.device.type):  # the residual stream in the autocast dtype: half the bytes
            x = x.to(torch.get_autocast_dtype(x.device.type))  # bfloat16 (float32's range), never float16 (overflow)
        return x

    def forward(self, idx, targets=None, cache=None):
        """idx (B, t) -> (logits (B, t, V), or (B, n_classes) for a classifier; loss). With targets (-1 where
        unscored) only the loss is returned, as (None, loss): the logits are not kept once it is computed."""
        t, pos = idx.size(1), 0 if cache is None else cache.pos
        if pos + t > self.config.block_size:
            raise ValueError(f"sequence of {pos + t} tokens is longer than block_size={self.config.block_size}")
        real = idx != self.config.pad_id if self.config.n_classes else None  # a classifier's (B, t) real tokens
        pad_mask = real if self.config.pads == "masked" else None  # the keys attention reads (None: every one)
        x = self.embed(idx, pos)
        for block in self.blocks:
            x = block(x, cache, pad_mask)
        x = self.norm(x)
        if cache is not None:
            cache.pos += t
        if self.config.n_classes:
            x = self.pool(x, real)
        if targets is None:
            return self.head(x), None
        loss = cross_entropy_sum(self.head, x, targets, self.head.out_features, self.loss_chunk)
        return None, loss / (targets >= 0).sum().clamp(min=1)  # the mean over the scored targets; 0 with none

    def pool(self, x, real):
        """(B, t, C) -> (B, C): the mean of the real tokens, or the last real token (the reference's classifier)."""
        if self.config.pool == "last":
            last = torch.where(real, torch.arange(real.size(1), device=x.device), 0).amax(1)  # (B,)
            return x[torch.arange(x.size(0), device=x.device), last]
        keep = real.unsqueeze(-1).to(x.dtype)  # (B, t, 1)
        return (x * keep).sum(1) / keep.sum(1).clamp(min=1)

    def get_num_params(self, non_embedding=True, trainable=False):
        """Parameters (fixed mixing matrices are buffers, not parameters); non_embedding leaves out wte and wpe."""
        skip = {id(e.weight) for e in (self.wte, self.wpe) if e is not None} if non_embedding else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip and (p.requires_grad or not trainable))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """Fused AdamW over the trainable parameters only: frozen weights get no state and no weight decay."""
        groups = param_groups([p for p in self.parameters() if p.requires_grad], weight_decay)
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type in ("cpu", "cuda"))

    def flops_per_token(self, seq_len=None, training=True):
        """Matmul FLOPs per token of a seq_len sequence, as each layer computes them (no weight gradient for a frozen
        weight or a fixed matrix); causal attention counts the (T+1)/2 positions a query sees on average."""
        cfg, T = self.config, seq_len or self.config.block_size
        core = 2 * cfg.n_embd * ((T + 1) / 2 if cfg.causal else T)  # one token's row of a (T, T) x (T, C) product
        fwd = bwd = 0.0
        for module in self.modules():
            if isinstance(module, nn.Linear) and not (module is self.head and cfg.n_classes):
                w = 2 * module.weight.numel()
                fwd, bwd = fwd + w, bwd + w * (2 if module.weight.requires_grad else 1)  # input (+ weight) gradient
        for block in self.blocks:  # Q K^T, P V, twice that backward; mixing: A V, A^T dY (+ dY V^T if trained)
            mixing = block.attn.kind in MIXING
            fwd += core * (1 if mixing else 2)
            bwd += core * ((2 if block.attn.mixing.requires_grad else 1) if mixing else 4)
        return fwd + bwd if training else fwd

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Continue idx (B, t) by max_new_tokens tokens sampled among the top_k most likely (all if None; 1: greedy).
        With use_cache a token costs one position while the sequence fits block_size, and gives the same tokens; past
        it each token recomputes the last block_size tokens (MixiT's matrices and positions are absolute)."""
        if self.config.n_classes or not self.config.causal:
            raise ValueError("generate needs a causal language model (n_classes=0, causal=True)")
        T = self.config.block_size
        cache = KVCache(self.config.n_layer, T) if use_cache else None
        for _ in range(max_new_tokens):
            newest = cache is not None and 0 < cache.pos < T  # the newest token only; else (re)compute the last T
            if cache is not None and not newest:
                cache.pos = 0  # the first step, or a full window
            logits, _ = self(idx[:, -1:] if newest else idx[:, -T:], cache=cache)
            logits = logits[:, -1].float() / temperature  # (B, V)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1)))[0][:, -1:]  # (B, 1)
                logits = logits.masked_fill(logits < kth, -math.inf)
            next_token = logits.argmax(-1) if top_k == 1 else torch.multinomial(F.softmax(logits, dim=-1), 1).view(-1)
            idx = torch.cat((idx, next_token[:, None]), dim=1)
        return idx

    @torch.no_grad()
    def attention_maps(self, idx):
        """(n_layer, B, n_head, t, t): each layer's attention on idx (B, t), a classifier's masked pads at weight 0."""
        pad_mask = idx != self.config.pad_id if self.config.n_classes and self.config.pads == "masked" else None
        x, maps = self.embed(idx), []
        for block in self.blocks:
            maps.append(block.attn.weights(block.norm1(x), pad_mask))  # (B, H, t, t)
            x = block(x, None, pad_mask)
        return torch.stack(maps)

