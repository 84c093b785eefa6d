"""
MixiT and its baselines in one file: which trainable parts of a transformer matter?
Dong, Noci, Khodak, Li, "Attention Retrieves, MLP Memorizes" / "Is Random Attention Sufficient for
Sequence Modeling?" (arXiv 2506.01115).

attn="softmax"         a Llama-style transformer: pre-RMSNorm, RoPE, causal softmax, SwiGLU, biases,
                       an untied head
attn="frozen_qk"       the same forward; W_Q, W_K (and their zero biases) stay at their random init
attn="mixing"          MixiT: each layer's attention is a fixed random (H, T, T) matrix; no W_Q, W_K
                       or RoPE
attn="learned_mixing"  MixiT's matrix as a trained parameter: attention that learns but never reads
                       its input
attn="mmsm"            one letter per layer (s softmax, f frozen_qk, m mixing, l learned_mixing):
                       a hybrid
freeze="mlp"           every MLP stays at its init
freeze="blocks"        only the embeddings, the final norm and the head train

The paper's model comes first. Further down, a divider marks where the study's options and the
machinery (random numbers, the chunked loss, the KV cache, FLOP counts, generation) begin.
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

ATTNS = ("softmax", "frozen_qk", "mixing", "learned_mixing")
# attention that never reads its input
MIXING = ("mixing", "learned_mixing")
# A hybrid names each layer's attention by one letter.
LETTERS = {"s": "softmax", "f": "frozen_qk", "m": "mixing", "l": "learned_mixing"}


@dataclass(frozen=True)
class StudyOptions:
    """The study's departures from the paper, each at the paper's value by default."""
    # frozen_qk's frozen W_Q, W_K are drawn N(0, 1/n_embd) as the paper says | reference:
    # N(0, init_std^2), as the reference code does
    qk_init: str = "paper"
    # every projection has a bias, as in the reference trainers
    bias: bool = True
    # these parts of MixiT's parametrization made standard (MIXIT_PARTS)
    standard_parts: tuple = ()
    # mixing: the noise std's lowest value (0: the paper's 1/sqrt(T head_dim))
    sigma_min: float = 0.0
    # mixing's head 1: "" noise, as the paper | mean: the prefix mean | previous: the previous token
    fixed_head: str = ""
    # non-causal mixing: each row centred on its mean | reference: on its sum / (i + 1), as the
    # authors' code does
    centring: str = "mean"
    # a classifier reads the mean of its real tokens | last: its last real token, as the reference
    pool: str = "mean"
    # a classifier's padding is masked out of attention | attended: attention sees it, its
    # embedding held at 0, as the reference
    pads: str = "masked"
    # > 0: every model's residual stream h = h + (base_depth / n_layer)^depth_alpha f(h), and
    # MixiT's A without its I, as the reference's language-model launchers run MixiT
    depth_alpha: float = 0.0
    base_depth: float = 4.0


@dataclass
class MixiTConfig:
    """The model: the paper's fields, then the study's options in their own group."""
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    # softmax | frozen_qk | mixing | learned_mixing, or one letter per layer, as "mmsm"
    attn: str = "softmax"
    # what else keeps its random init: "" nothing | mlp (Frozen-MLP) | blocks (the random
    # transformer: only the embeddings, the final norm and the head train)
    freeze: str = ""
    causal: bool = True
    # 0: a language model over the vocabulary; more: a sequence classifier over n_classes
    n_classes: int = 0
    # a classifier's padding token, never pooled
    pad_id: int = -1
    # every random init comes from it: trained weights, frozen weights, mixing matrices
    seed: int = 0
    rope_theta: float = 10000.0
    # every trained linear weight is drawn N(0, init_std^2), as in the reference code
    init_std: float = 0.02
    # mixit: MixiT's parametrization (the next four fields) | standard | auto: MixiT's where any
    # layer mixes
    parametrization: str = "auto"
    # a linear layer of fan-in d has its output multiplied by sqrt(base_width / d)
    base_width: float = 512.0
    # the MLP's down projection has its output multiplied by sqrt(base_ffn / 4d)
    base_ffn: float = 1.0
    # the residual stream h = skip h + sqrt(1 - skip^2) f(h)
    skip: float = math.sqrt(0.5)
    # the shaped activation's slope is 1 + cminus / sqrt(d)
    cminus: float = -1.0
    # mixing: the scale of the centred noise around the identity
    mix_beta: float = 1.0
    study: StudyOptions = field(default_factory=StudyOptions)

    @property
    def layer_attn(self):
        """Each layer's attention: attn in every layer, or one letter per layer ('mmsm'); else a
        ValueError."""
        if self.attn in ATTNS:
            return [self.attn] * self.n_layer
        if len(self.attn) != self.n_layer or set(self.attn) - set(LETTERS):
            raise ValueError(f"unknown attn {self.attn!r}; valid: {', '.join(ATTNS)}, or one "
                             f"letter per layer for n_layer={self.n_layer} (s softmax, "
                             "f frozen_qk, m mixing, l learned_mixing)")
        return [LETTERS[c] for c in self.attn]

    @property
    def mixit_param(self):
        """MixiT's parametrization: residual scaling, shaped activation, width multipliers, learned
        positions."""
        if self.parametrization == "auto":
            return any(a in MIXING for a in self.layer_attn)
        return self.parametrization == "mixit"

    def mixit_part(self, part):
        """One part of MixiT's parametrization: on where the parametrization is, unless the study
        makes it standard."""
        return self.mixit_param and part not in self.study.standard_parts


# ------------------------------------------------------------------ MixiT's fixed random attention

def hash32(x):
    """Mueller's 32-bit integer hash, for Python ints and int64 tensors alike (every product stays
    below 2^63)."""
    for _ in range(2):
        x = (x >> 16 ^ x) * 0x45D9F3B & 0xFFFFFFFF
    return x >> 16 ^ x


def seed_key(*ints):
    """One 32-bit key from a flat tuple of non-negative integers."""
    key = 0
    for i in ints:
        key = hash32(key ^ hash32(i))
    return key


def gaussian_pairs(index, key):
    """Two standard normals per index (..., 2) by Box-Muller on hashed uniforms: alike on any device
    or torch."""
    # The + 0.5 keeps u1 inside (0, 1): log(0) would be infinite.
    u1 = (hash32(index ^ hash32(key)) + 0.5) * 2.0 ** -32
    angle = hash32(index ^ hash32(key + 1)) * (2 * math.pi * 2.0 ** -32)
    radius = torch.sqrt(-2 * torch.log(u1))
    return torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), -1)


def hashed_normals(i, cols, T, key):
    """MixiT's noise: standard normals at rows i (r, 1) and columns 0..cols-1 of a (T, T) matrix,
    each hashed from the key and its place alone (no random generator), so that the matrix is the
    same on every device and at any row chunking."""
    index = i * ((T + 1) // 2) + torch.arange((cols + 1) // 2, device=i.device)
    return gaussian_pairs(index, key).flatten(1)[:, :cols]


def noise_std(seed, h, low, high):
    """Head h's noise std sigma_h, uniform between low and high, from the seed."""
    uniform = hash32(seed_key(*seed, h, 0)) * 2.0 ** -32
    return low + uniform * (high - low)


def noise_head(T, sigma, key, causal=True, beta=1.0, device=None, rows=None, prefix_count=False):
    """One noise head less its identity, A_h - I = beta (N_h - rowmean N_h), at rows `rows` (a
    range; all T by default) over the columns they reach. The noise N_h = sigma * hashed normals
    sits where j <= i (causal, else everywhere); each row is centred on its mean over the entries
    it has, so the rows of A_h sum to 1. prefix_count: divide by i + 1 where not causal too."""
    rows = rows or range(T)
    # Causal rows reach the columns up to the last row only.
    cols = rows.stop if causal else T
    i = torch.arange(rows.start, rows.stop, device=device).view(-1, 1)
    future = (torch.arange(cols, device=device) > i) & causal
    noise = (sigma * hashed_normals(i, cols, T, key)).masked_fill(future, 0.0)
    # Row i has i + 1 entries where causal, else all T.
    count = i + 1 if causal or prefix_count else T
    return beta * (noise - noise.sum(-1, keepdim=True) / count).masked_fill(future, 0.0)


def sink_head(T, device=None):
    """Head 0, the sink head the authors' code adds, less its identity: A_0 = I/2 + (token 0)/2,
    every token keeps half of itself and takes half of token 0 (row 0 holds only its own half)."""
    eye = torch.eye(T, device=device)
    sink = eye / 2
    sink[1:, 0] = 0.5
    return sink - eye


# ------------------------------------------------------------------------- the three attentions

class Attention(nn.Module):
    """What every attention has: n_head heads of head_dim channels, and W_O after them."""

    def __init__(self, config, layer):
        super().__init__()
        self.kind = config.layer_attn[layer]
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.layer = layer
        self.causal = config.causal

    def heads(self, z):
        """(B, t, n * C) -> n tensors (B, H, t, hd)."""
        return z.unflatten(-1, (-1, self.head_dim)).transpose(1, 2).split(self.n_head, dim=1)


class SoftmaxAttention(Attention):
    """Softmax attention with rotary positions, softmax(Q K^T / sqrt(hd)) V. frozen_qk: the same,
    with W_Q and W_K kept at their random init while W_V trains."""

    def __init__(self, config, layer):
        super().__init__(config, layer)
        C = config.n_embd
        if self.kind == "softmax":
            # W_Q, W_K and W_V are one matmul: one kernel instead of three.
            self.qkv = nn.Linear(C, 3 * C, config.study.bias)
        else:
            # W_Q and W_K in one matmul, frozen, and W_V apart. The paper draws the frozen two
            # N(0, 1/C); qk_init=reference draws them N(0, init_std^2) like every other weight.
            self.qk = nn.Linear(C, 2 * C, config.study.bias).requires_grad_(False)
            if config.study.qk_init == "paper":
                self.qk.init_std = 1 / math.sqrt(C)
            self.v = nn.Linear(C, C, config.study.bias)
        self.rotary = Rotary(self.head_dim, config.block_size, config.rope_theta)
        self.o = ScaledLinear(config, C, C)

    def forward(self, x, cache=None, pad_mask=None):
        """x (B, t, C) at positions pos.. (pos: what the cache holds) -> (B, t, C)."""
        pos = 0 if cache is None else cache.pos
        q, k, v = self.qkv_heads(x, pos)
        if cache is not None:
            k = cache.write(cache.k, self.layer, k)
            v = cache.write(cache.v, self.layer, v)
        y = self.attend(q, k, v, pad_mask, pos)
        # The heads are laid side by side, then W_O mixes them.
        return self.o(y.transpose(1, 2).flatten(2))

    def qkv_heads(self, x, pos):
        """Queries and keys (rotated) and values of x (B, t, C), each (B, H, t, hd)."""
        if self.kind == "softmax":
            q, k, v = self.heads(self.qkv(x))
        else:
            q, k, v = self.heads(self.qk(x)) + self.heads(self.v(x))
        return self.rotary(q, pos), self.rotary(k, pos), v

    def attend(self, q, k, v, pad_mask, pos):
        """Queries q (B, H, t, hd) at positions pos.. against keys and values at 0..:
        (B, H, t, hd)."""
        t = q.size(2)
        # A classifier's queries read only the keys that are not padding.
        mask = None if pad_mask is None else pad_mask[:, None, None]
        # A single new query sees every cached key, so it needs no mask.
        causal = self.causal and t > 1
        if causal and pos:
            # New queries against all keys need the causal mask aligned to the bottom right.
            mask = torch.ones(t, pos + t, dtype=torch.bool, device=q.device).tril(pos)
            causal = False
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


class MixingAttention(Attention):
    """MixiT's attention, A V: a fixed random matrix A per head that never reads its input. No W_Q,
    W_K or positions; a classifier's masked pads carry no value."""

    def __init__(self, config, layer, device=None, mixing_dtype=torch.float32):
        super().__init__(config, layer)
        C = config.n_embd
        mixing_delta = self.fixed_matrix(config, (config.seed, 1, layer), device)
        # A - I is a function of the seed: rebuilt rather than saved, cast once to the compute
        # dtype.
        self.register_buffer("mixing", mixing_delta.to(mixing_dtype), persistent=False)
        self.v = ScaledLinear(config, C, C)
        self.o = ScaledLinear(config, C, C)

    def forward(self, x, cache=None, pad_mask=None):
        """x (B, t, C) at positions pos.. (pos: what the cache holds) -> (B, t, C)."""
        t = x.size(1)
        pos = 0 if cache is None else cache.pos
        v = self.v(x)
        if pad_mask is not None:
            # Padding carries no value, so a classifier's pads change nothing.
            v = v * pad_mask[..., None]
        (v,) = self.heads(v)
        if cache is not None:
            v = cache.write(cache.v, self.layer, v)
        # A V = V + (A - I) V. The buffer holds A - I: depth_alpha's A has no identity, and
        # V + (A - I) V rounds as every stored run did (A V would not). One product a head:
        # P @ v would copy P for every sequence.
        mixed = torch.einsum("hts,bhsd->bhtd", self.mixing_rows(pos, t).to(v.dtype), v)
        y = v[:, :, -t:] + mixed
        # The heads are laid side by side, then W_O mixes them.
        return self.o(y.transpose(1, 2).flatten(2))

    def fixed_matrix(self, config, seed, device):
        """A - I, (n_head, T, T) float32: head 0 the sink head, every other a noise head with
        sigma_h between 1/sqrt(T head_dim) and 1/sqrt(T). The study's version replaces this below
        (made a few rows at a time, with its departures)."""
        T = config.block_size
        heads = [sink_head(T, device)]
        for h in range(1, self.n_head):
            sigma = noise_std(seed, h, 1 / math.sqrt(T * self.head_dim), 1 / math.sqrt(T))
            key = seed_key(*seed, h, 1)
            heads.append(noise_head(T, sigma, key, config.causal, config.mix_beta, device))
        return torch.stack(heads)

    def mixing_rows(self, pos, t):
        """Rows pos..pos+t-1 of A - I, (H, t, pos+t): the same for every input."""
        return self.mixing[:, pos:pos + t, :pos + t]


# Block builds attention that never reads its input from here; the study replaces mixing with its
# version and adds learned_mixing.
MIXING_ATTENTIONS = {"mixing": MixingAttention}


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention) for positions [0, block_size)."""

    def __init__(self, head_dim, block_size, theta):
        super().__init__()
        # The (T, hd) cosines and sines are made once: every forward reads them.
        inv_freq = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos().repeat(1, 2), persistent=False)
        self.register_buffer("sin", angles.sin().repeat(1, 2), persistent=False)

    def forward(self, x, pos):
        """x (B, H, t, hd) at positions pos.., each pair of channels rotated by its angle, in
        float32."""
        t = x.size(2)
        x32 = x.float()
        x1, x2 = x32.chunk(2, dim=-1)
        rotated = x32 * self.cos[pos:pos + t] + torch.cat((-x2, x1), dim=-1) * self.sin[pos:pos + t]
        return rotated.to(x.dtype)


# --------------------------------------------------------------------------- the rest of the model

class MLP(nn.Module):
    """SwiGLU, or MixiT's shaped gated MLP: a near-linear leaky ReLU gate of slope
    1 + cminus / sqrt(C), times the gain that keeps the variance (torch's
    calculate_gain('leaky_relu'))."""

    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        # W_G and W_U are one matmul: one kernel instead of two.
        self.gate_up = ScaledLinear(config, C, 8 * C)
        self.down = ScaledLinear(config, 4 * C, C, config.base_ffn)
        self.shaped = config.mixit_part("activation")
        self.slope = 1 + config.cminus / math.sqrt(C)
        self.gain = math.sqrt(2 / (1 + self.slope ** 2))

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        if self.shaped:
            return self.down(self.gain * F.leaky_relu(gate, self.slope) * up)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config, layer, device=None, mixing_dtype=torch.float32):
        super().__init__()
        kind = config.layer_attn[layer]
        self.norm1 = RMSNorm(config.n_embd)
        if kind in MIXING:
            self.attn = MIXING_ATTENTIONS[kind](config, layer, device, mixing_dtype)
        else:
            self.attn = SoftmaxAttention(config, layer)
        self.norm2 = RMSNorm(config.n_embd)
        self.mlp = MLP(config)
        # MixiT's residual scaling, h = skip_scale h + branch_scale f(h) with
        # skip_scale^2 + branch_scale^2 = 1, keeps the hidden norm constant in depth. Without it the
        # residual is a plain sum, or the study's depth_alpha scales the branch.
        study = config.study
        preserving = config.mixit_part("residual") and not study.depth_alpha
        self.skip_scale = config.skip if preserving else 1.0
        # With the study's depth_alpha at 0 this scale is 1: a plain sum.
        depth_scale = (study.base_depth / config.n_layer) ** study.depth_alpha
        self.branch_scale = math.sqrt(1 - config.skip ** 2) if preserving else depth_scale
        # Frozen-MLP keeps the MLP at its random init, the random transformer the whole block.
        if config.freeze == "mlp":
            self.mlp.requires_grad_(False)
        if config.freeze == "blocks":
            self.requires_grad_(False)

    def forward(self, x, cache=None, pad_mask=None):
        x = self.skip_scale * x + self.branch_scale * self.attn(self.norm1(x), cache, pad_mask)
        return self.skip_scale * x + self.branch_scale * self.mlp(self.norm2(x))


class ScaledLinear(nn.Linear):
    """MixiT's linear layer: its output, bias included, multiplied by the width multiplier
    sqrt(base / fan_in) (base_width unless given), so that the layers keep their scale as the width
    grows. The multiplier is 1 where the parametrization is standard."""

    def __init__(self, config, fan_in, fan_out, base=None, bias=True):
        super().__init__(fan_in, fan_out, bias and config.study.bias)
        scaled = config.mixit_part("multipliers")
        self.mult = math.sqrt((base or config.base_width) / fan_in) if scaled else 1.0

    def forward(self, x):
        if self.mult == 1.0:
            return super().forward(x)
        return super().forward(x) * self.mult


class RMSNorm(nn.RMSNorm):
    """RMSNorm with a learned gain, computed in float32 (eps 1e-6 as Llama)."""

    def __init__(self, dim):
        super().__init__(dim, eps=1e-6)

    def forward(self, x):
        return super().forward(x.float()).type_as(x)


# ------------------------------------------------------------------------ a classifier's tokens

def attended_pad(config):
    """The padding token where a classifier's attention sees its pads (pads=attended): its
    embedding is held at 0."""
    attended = config.n_classes and config.study.pads == "attended"
    return config.pad_id if attended and 0 <= config.pad_id < config.vocab_size else None


def classifier_masks(config, idx):
    """A classifier's real tokens (B, t), and the keys attention reads (None: every one); None for
    both in a language model."""
    if not config.n_classes:
        return None, None
    real = idx != config.pad_id
    return real, real if config.study.pads == "masked" else None


def pool(x, real, how):
    """(B, t, C) -> (B, C): the mean of the real tokens, or the last real token (the reference's
    classifier)."""
    if how == "last":
        last = (real * torch.arange(real.size(1), device=x.device)).amax(1)
        return x[torch.arange(len(x), device=x.device), last]
    keep = real.unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(1) / keep.sum(1).clamp(min=1)


class Transformer(nn.Module):
    """The paper's models: token embeddings (and MixiT's learned positions), n_layer blocks, a final
    norm and an untied head over the vocabulary or the classes."""

    def __init__(self, config, device=None, mixing_dtype=torch.float32):
        """The model on device: weights drawn on the host, MixiT's fixed matrices built on device in
        mixing_dtype."""
        super().__init__()
        self.config = config
        C = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, C, padding_idx=attended_pad(config))
        # MixiT's parametrization learns positions: its mixing layers have no RoPE.
        self.wpe = nn.Embedding(config.block_size, C) if config.mixit_part("positions") else None
        self.blocks = nn.ModuleList(Block(config, layer, device, mixing_dtype)
                                    for layer in range(config.n_layer))
        self.norm = RMSNorm(C)
        self.head = ScaledLinear(config, C, config.n_classes or config.vocab_size, bias=False)
        self.init_weights()
        self.to(device)

    def init_weights(self):
        """Every weight N(0, std^2) and every bias 0, drawn from config.seed in module order."""
        g = torch.Generator().manual_seed(seed_key(self.config.seed, 0))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = getattr(module, "init_std", self.config.init_std)
                nn.init.normal_(module.weight, 0.0, std, generator=g)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02, generator=g)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])

    def embed(self, idx, pos=0):
        """Tokens idx (B, t) at positions pos.. -> the residual stream (B, t, C)."""
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[pos:pos + idx.size(1)]
        # Under autocast the residual stream is kept in the autocast dtype, half the bytes: bfloat16
        # (float32's range), never float16 (it would overflow).
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))
        return x

    def forward(self, idx, targets=None, cache=None):
        """idx (B, t) -> (logits (B, t, V), or (B, n_classes) for a classifier; loss). With targets
        (-1 where unscored) only the loss is returned, as (None, loss): the logits are not kept once
        it is computed."""
        t = idx.size(1)
        pos = 0 if cache is None else cache.pos
        if pos + t > self.config.block_size:
            raise ValueError(f"sequence of {pos + t} tokens is longer than "
                             f"block_size={self.config.block_size}")
        real, pad_mask = classifier_masks(self.config, idx)
        x = self.embed(idx, pos)
        for block in self.blocks:
            x = block(x, cache, pad_mask)
        x = self.norm(x)
        if cache is not None:
            cache.pos += t
        if self.config.n_classes:
            x = pool(x, real, self.config.study.pool)
        if targets is None:
            return self.head(x), None
        return None, self.loss(x, targets)

    def loss(self, x, targets):
        """The mean cross-entropy of the head's logits on x against targets (-1: unscored)."""
        logits = self.head(x).float()
        return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=-1)


# ==================================================================================================
# A reader of the paper can stop here: nothing above uses what follows, and the study's departures
# above are marked as the study's. What follows is the study's mixing matrix (its departures, made a
# few rows at a time) and learned mixing, the checks and the flat fields of a config, and the
# machinery (the chunked loss, the KV cache, FLOP counts, generation, attention maps).
# ==================================================================================================

FREEZES = ("", "mlp", "blocks")
# MixiT's parametrization, part by part
MIXIT_PARTS = ("residual", "activation", "multipliers", "positions")
# what MixiT's head 1 holds
FIXED_HEADS = {"": "random", "mean": "the prefix mean", "previous": "the previous token"}
# the loss's float32 logits made this many at a time (512 MiB: 2,668 positions of GPT-2 BPE)
LOSS_CHUNK = 2 ** 27


def fixed_patterns(T, causal, device):
    """The patterns the study's fixed head 1 may hold (T, T), rows summing to 1: the prefix mean
    (non-causal: the mean), the previous token (row 0: itself)."""
    ones = torch.ones(T, T, device=device)
    # Row i spreads over positions 0..i where causal, else over all.
    spread = ones.tril() if causal else ones
    previous = torch.eye(T, device=device)[(torch.arange(T, device=device) - 1).clamp(min=0)]
    return {"mean": spread / spread.sum(-1, keepdim=True), "previous": previous}


def mixing_matrix(T, n_head, head_dim, causal=True, beta=1.0, seed=(0,), device=None,
                  study=StudyOptions(), rows=128):
    """MixiT's A - I as the model builds it (MixingAttention.fixed_matrix reads as the paper), with
    the study's departures, made `rows` rows at a time on the device that uses it: the hashed
    noise's temporaries stay small at long T."""
    mixing_delta = torch.zeros(n_head, T, T, device=device)
    mixing_delta[0] = sink_head(T, device)
    sigma_high = 1 / math.sqrt(T)
    # The study's sigma_min may raise the noise std's lower end.
    sigma_low = study.sigma_min or 1 / math.sqrt(T * head_dim)
    if study.depth_alpha:
        # depth_alpha drops the identity, A_h = beta (N_h - rowmean N_h): its unscaled skip carries
        # the token itself, and every head takes the top std.
        sigma_low = sigma_high
    # centring=reference divides each row's sum by i + 1 where not causal too.
    prefix_count = study.centring == "reference"
    for h in range(1, n_head):
        sigma = noise_std(seed, h, sigma_low, sigma_high)
        key = seed_key(*seed, h, 1)
        for first in range(0, T, rows):
            last = min(first + rows, T)
            chunk = range(first, last)
            noise = noise_head(T, sigma, key, causal, beta, device, chunk, prefix_count)
            mixing_delta[h, first:last, :noise.size(1)] = noise
    if study.depth_alpha:
        mixing_delta[1:].diagonal(dim1=1, dim2=2).sub_(1.0)
    if study.fixed_head:
        # Head 1 holds a known pattern instead of noise, to test what one head can do.
        pattern = fixed_patterns(T, causal, device)[study.fixed_head]
        mixing_delta[1] = pattern - torch.eye(T, device=device)
    return mixing_delta


class StudyMixingAttention(MixingAttention):
    """MixiT's attention as the model builds it: A - I from mixing_matrix."""

    def fixed_matrix(self, config, seed, device):
        return mixing_matrix(config.block_size, self.n_head, self.head_dim, config.causal,
                             config.mix_beta, seed, device, config.study)


MIXING_ATTENTIONS["mixing"] = StudyMixingAttention


class LearnedMixingAttention(StudyMixingAttention):
    """learned_mixing: MixiT's matrix A - I as a trained parameter from the same init, its causal
    entries only: attention that learns but never reads its input."""

    def __init__(self, config, layer, device=None, mixing_dtype=None):
        # A trained matrix stays float32, whatever the compute dtype, as every parameter does.
        super().__init__(config, layer, device)
        self.mixing = nn.Parameter(self.mixing)

    def mixing_rows(self, pos, t):
        rows = super().mixing_rows(pos, t)
        # The future gets no gradient, so it stays 0.
        return rows.tril(pos) if self.causal else rows


MIXING_ATTENTIONS["learned_mixing"] = LearnedMixingAttention


def flat_args(args):
    """A config's fields in one flat dict, as train.py's options name them, from asdict(config) or
    a checkpoint's model_args. Checkpoints written before the study's options had their own group
    hold them flat, and standard_parts as a comma string."""
    flat = dict(args)
    flat.update(flat.pop("study", {}))
    parts = flat.get("standard_parts", ())
    if isinstance(parts, str):
        flat["standard_parts"] = tuple(filter(None, parts.split(",")))
    return flat


def mixit_config(args):
    """The MixiTConfig of flat fields (flat_args), checked: a ValueError names what is valid where
    a field is not."""
    flat = flat_args(args)
    study = {k: flat.pop(k) for k in StudyOptions.__dataclass_fields__ if k in flat}
    config = MixiTConfig(**flat, study=StudyOptions(**study))
    check_config(config)
    return config


def check_config(config):
    """Raise a ValueError naming what is valid where a field is not."""
    for name in ("vocab_size", "block_size", "n_head", "n_embd"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")
    # n_layer 0: embeddings, norm and head alone (a bigram, a bag of words)
    if config.n_layer < 0:
        raise ValueError(f"n_layer must be 0 or more, got {config.n_layer}")
    valid_values = {"freeze": FREEZES, "qk_init": ("paper", "reference"),
                    "parametrization": ("auto", "mixit", "standard"), "pool": ("mean", "last"),
                    "pads": ("masked", "attended"), "centring": ("mean", "reference"),
                    "fixed_head": FIXED_HEADS}
    fields = flat_args(asdict(config))
    for name, valid in valid_values.items():
        if fields[name] not in valid:
            raise ValueError(f"unknown {name} {fields[name]!r}; valid: "
                             + ", ".join(repr(v) if v == "" else v for v in valid))
    if config.n_embd % config.n_head:
        raise ValueError(f"n_embd={config.n_embd} must be divisible by n_head={config.n_head}")
    head_dim = config.n_embd // config.n_head
    # (layer_attn checks attn)
    if any(a not in MIXING for a in config.layer_attn) and head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head size, got {head_dim}")
    if config.study.fixed_head and config.n_head < 2:
        raise ValueError("fixed_head needs n_head >= 2 (head 0 is the sink, head 1 the fixed), "
                         f"got {config.n_head}")
    unknown_parts = set(config.study.standard_parts) - set(MIXIT_PARTS)
    if unknown_parts:
        raise ValueError(f"unknown standard_parts {min(unknown_parts)!r}; valid: a comma list of "
                         + ", ".join(MIXIT_PARTS))
    if config.seed < 0 or not 0.0 <= config.skip <= 1.0:
        raise ValueError(f"skip must lie in [0, 1] and seed be >= 0, got skip={config.skip}, "
                         f"seed={config.seed}")


# ---------------------------------------------------------------------------------- the machinery

class KVCache:
    """Every layer's past keys and values for generation, written in place; a mixing layer keeps
    values only."""

    def __init__(self, n_layer, size):
        self.size = size
        # pos counts the positions already cached; 0 starts a new sequence.
        self.pos = 0
        self.k = [None] * n_layer
        self.v = [None] * n_layer

    def write(self, bufs, layer, z):
        """z (B, H, t, hd) at positions pos.. written into this layer's keys (bufs=self.k) or values
        (self.v) -> every position 0..pos+t-1. A new sequence (pos 0) gets new buffers."""
        end = self.pos + z.size(2)
        if self.pos == 0:
            bufs[layer] = z.new_empty(*z.shape[:2], self.size, z.size(3))
        bufs[layer][:, :, self.pos:end] = z
        return bufs[layer][:, :, :end]


def cross_entropy_sum(logits_of, x, targets, vocab, chunk=LOSS_CHUNK):
    """The cross-entropy of logits_of(x) (..., vocab) against targets (...) (-1: unscored), summed:
    about chunk logits at a time (0: all at once), each chunk's float32 logits made again in the
    backward pass, never kept: the memory of one chunk, not of all."""
    x = x.flatten(0, -2)
    targets = targets.flatten()

    def chunk_loss(xs, ts):
        return F.cross_entropy(logits_of(xs).float(), ts, ignore_index=-1, reduction="sum")

    rows = max(1, chunk // vocab) if chunk else len(x)
    if rows >= len(x):
        return chunk_loss(x, targets)
    loss = 0
    for xs, ts in zip(x.split(rows), targets.split(rows)):
        # Without gradients checkpoint only calls chunk_loss.
        loss = loss + checkpoint(chunk_loss, xs, ts, use_reentrant=False)
    return loss


def param_groups(params, weight_decay):
    """AdamW's groups: matrices decay, vectors (biases, norm gains) do not."""
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


class MixiT(Transformer):
    """The paper's models with what the scripts use around them: the chunked loss, parameter
    counts, the optimizer, FLOP counts, generation and attention maps."""
    # The loss's logits are made this many at a time (0: all at once), to bound their memory.
    loss_chunk = LOSS_CHUNK

    def loss(self, x, targets):
        """The paper's loss, its logits made loss_chunk at a time; 0 with no target scored."""
        loss = cross_entropy_sum(self.head, x, targets, self.head.out_features, self.loss_chunk)
        return loss / (targets >= 0).sum().clamp(min=1)

    def get_num_params(self, non_embedding=True, trainable=False):
        """Parameters (fixed mixing matrices are buffers, not parameters); non_embedding leaves out
        wte and wpe."""
        skip = {id(e.weight) for e in (self.wte, self.wpe) if e is not None and non_embedding}
        return sum(p.numel() for p in self.parameters()
                   if id(p) not in skip and (p.requires_grad or not trainable))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """Fused AdamW over the trainable parameters only: frozen weights get no state and no
        weight decay."""
        groups = param_groups([p for p in self.parameters() if p.requires_grad], weight_decay)
        fused = device_type in ("cpu", "cuda")
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    def flops_per_token(self, seq_len=None):
        """Training (forward and backward) matmul FLOPs per token of a seq_len sequence, as each
        layer computes them (no weight gradient for a frozen weight or a fixed matrix); causal
        attention counts the (T+1)/2 positions a query sees on average."""
        cfg = self.config
        T = seq_len or cfg.block_size
        # One token's row of a (T, T) x (T, C) product costs this much.
        row_flops = 2 * cfg.n_embd * ((T + 1) / 2 if cfg.causal else T)
        flops = 0.0
        for module in self.modules():
            if isinstance(module, nn.Linear) and not (module is self.head and cfg.n_classes):
                # The forward, the input's gradient, and the weight's where it trains.
                passes = 3 if module.weight.requires_grad else 2
                flops += 2 * module.weight.numel() * passes
        for block in self.blocks:
            if block.attn.kind in MIXING:
                # A V; backward A^T dY, and dY V^T where A trains
                flops += row_flops * (3 if block.attn.mixing.requires_grad else 2)
            else:
                # Q K^T and P V; backward twice that
                flops += row_flops * 6
        return flops

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Continue idx (B, t) by max_new_tokens tokens sampled among the top_k most likely (all if
        None; 1: greedy). With use_cache a token costs one position while the sequence fits
        block_size, and gives the same tokens; past it each token recomputes the last block_size
        tokens (MixiT's matrices and positions are absolute)."""
        if self.config.n_classes or not self.config.causal:
            raise ValueError("generate needs a causal language model (n_classes=0, causal=True)")
        T = self.config.block_size
        cache = KVCache(self.config.n_layer, T) if use_cache else None
        for _ in range(max_new_tokens):
            # A full window is computed again from position 0 (the positions are absolute); else
            # the newest token alone.
            if cache is not None and cache.pos == T:
                cache.pos = 0
            newest = cache is not None and cache.pos > 0
            logits, _ = self(idx[:, -1:] if newest else idx[:, -T:], cache=cache)
            logits = logits[:, -1].float() / temperature
            if top_k is not None:
                kth = logits.topk(min(top_k, logits.size(-1))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, -math.inf)
            if top_k == 1:
                next_token = logits.argmax(-1)
            else:
                next_token = logits.softmax(-1).multinomial(1).view(-1)
            idx = torch.cat((idx, next_token[:, None]), dim=1)
        return idx

    @torch.no_grad()
    def attention_maps(self, idx):
        """(n_layer, B, n_head, t, t): each layer's attention on idx (B, t), a classifier's masked
        pads at weight 0."""
        B, t = idx.shape
        _, pad_mask = classifier_masks(self.config, idx)
        eye = torch.eye(t, device=idx.device)
        x = self.embed(idx)
        maps = []
        for block in self.blocks:
            attn = block.attn
            if attn.kind in MIXING:
                weights = (eye + attn.mixing_rows(0, t).float()).expand(B, -1, -1, -1)
                # Masked padding carries nothing, so its columns are 0.
                weights = weights if pad_mask is None else weights * pad_mask[:, None, None]
            else:
                q, k, _ = attn.qkv_heads(block.norm1(x), 0)
                # Softmax attention with one-hot values returns its weights themselves.
                one_hot = eye.to(q.dtype).expand(B, attn.n_head, t, t)
                weights = attn.attend(q, k, one_hot, pad_mask, 0)
            maps.append(weights)
            x = block(x, None, pad_mask)
        return torch.stack(maps)
