"""
MixiT and its baselines in one file: which trainable parts of a transformer matter?
Dong, Noci, Khodak, Li, "Attention Retrieves, MLP Memorizes" / "Is Random Attention Sufficient for
Sequence Modeling?" (arXiv 2506.01115).

attn="softmax"    a Llama-style transformer: pre-RMSNorm, RoPE, causal softmax attention, SwiGLU, biases, untied head
attn="frozen_qk"  the same forward; W_Q, W_K (and their zero biases) stay at their random init
attn="mixing"     MixiT: each layer's attention is a fixed random (H, T, T) matrix; no W_Q, W_K or RoPE
freeze="mlp"      every MLP stays at its init;  freeze="blocks": only the embeddings, final norm and head train
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

ATTNS = ("softmax", "frozen_qk", "mixing")
FREEZES = ("", "mlp", "blocks")
QK_INITS = ("paper", "reference")


@dataclass
class MixiTConfig:
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    attn: str = "softmax"  # softmax | frozen_qk | mixing
    freeze: str = ""  # "" | mlp | blocks
    causal: bool = True
    n_classes: int = 0  # 0: a language model over the vocabulary; > 0: a sequence classifier
    pad_id: int = -1  # classifier: the padding token, left out of attention and pooling
    seed: int = 0  # every random init: trained weights, frozen weights, mixing matrices
    bias: bool = True  # every projection has a bias, as in the reference trainers
    rope_theta: float = 10000.0
    init_std: float = 0.02  # every trained linear weight is N(0, init_std^2), as in the reference code
    qk_init: str = "paper"  # frozen_qk's frozen W_Q, W_K: paper N(0, 1/n_embd); reference N(0, init_std^2)
    base_width: float = 512.0  # mixing: a linear of fan-in d is multiplied by sqrt(base_width / d)
    base_ffn: float = 1.0  # mixing: the down projection is multiplied by sqrt(base_ffn / 4d)
    skip: float = math.sqrt(0.5)  # mixing: h = skip*h + sqrt(1 - skip^2)*f(h)
    cminus: float = -1.0  # mixing: the shaped activation's slope is 1 + cminus/sqrt(d)
    mix_beta: float = 1.0  # mixing: scale of the centred noise around the identity

    def validate(self):
        """Raise ValueError naming what is valid."""
        for name, valid in (("attn", ATTNS), ("freeze", FREEZES), ("qk_init", QK_INITS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: "
                                 + ", ".join(repr(v) if v == "" else v for v in valid))
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must be zero or positive, got {self.seed}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.attn != "mixing" and (self.n_embd // self.n_head) % 2:
            raise ValueError(f"rotary embeddings need an even head size, got n_embd/n_head={self.n_embd // self.n_head}")
        if not 0.0 <= self.skip <= 1.0:
            raise ValueError(f"skip must lie in [0, 1], got {self.skip}")


def generator(*key):
    """A torch.Generator seeded by a flat tuple of non-negative integers (numpy's SeedSequence hash of them), apart
    from the global RNG: the same fixed random parts on every process and in every version."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1, np.uint64)[0]))


def mixing_matrix(block_size, n_head, head_dim, causal=True, beta=1.0, seed=(0,)):
    """MixiT's fixed attention, (n_head, T, T) float32: A_h = I + beta * (N_h - rowmean(N_h)), head 0 a sink."""
    T, g = block_size, generator(*seed)
    lo, hi = 1 / math.sqrt(T * head_dim), 1 / math.sqrt(T)
    sigma = lo + torch.rand(n_head, 1, 1, generator=g, dtype=torch.float64) * (hi - lo)  # each head's std in [lo, hi]
    noise = torch.randn(n_head, T, T, generator=g, dtype=torch.float64).mul_(sigma)  # (H, T, T), in place: T may be 4k
    if causal:
        noise.tril_()
        support = torch.arange(1, T + 1, dtype=torch.float64).view(T, 1)  # row i mixes the positions j <= i
    else:
        support = torch.full((T, 1), float(T), dtype=torch.float64)
    noise.sub_(noise.sum(-1, keepdim=True) / support)  # centring: the noise only redistributes, rows sum to 1
    if causal:
        noise.tril_()
    A = noise.mul_(beta)
    A.diagonal(dim1=1, dim2=2).add_(1.0)  # identity plus small noise: stable signal in depth
    A[0] = 0.0  # the sink head: every token keeps half of itself and takes half of token 0
    A[0].diagonal().fill_(0.5)
    A[0, :, 0] = 0.5
    return A.float()


class Linear(nn.Linear):
    """A linear layer whose output, bias included, is multiplied by a fixed width multiplier (1 but for MixiT)."""

    def __init__(self, fan_in, fan_out, bias, mult=1.0):
        super().__init__(fan_in, fan_out, bias)
        self.mult = mult

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        return y if self.mult == 1.0 else y * self.mult  # width multiplier sqrt(base / fan_in)


def width_mult(config, fan_in, base=None):  # MixiT's sqrt(base / fan_in): its layers keep their scale in width
    return math.sqrt((config.base_width if base is None else base) / fan_in) if config.attn == "mixing" else 1.0


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain, computed in float32 (eps 1e-6 as Llama)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x.float(), (x.size(-1),), self.weight, self.eps).type_as(x)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention) for positions [0, block_size)."""

    def __init__(self, head_dim, block_size, theta):
        super().__init__()
        inv_freq = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos().repeat(1, 2), persistent=False)  # (T, hd)
        self.register_buffer("sin", angles.sin().repeat(1, 2), persistent=False)

    def forward(self, x, pos):  # x (B, H, t, hd) at positions pos .. pos+t-1
        t = x.size(2)
        cos, sin = self.cos[pos:pos + t].to(x.dtype), self.sin[pos:pos + t].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin  # each pair of channels rotated by its angle


class KVCache:
    """Past keys and values of every layer for generation, preallocated for block_size positions and written
    in place; MixiT keeps values only (its attention needs no keys)."""

    def __init__(self, n_layer, size, keys=True):
        self.size, self.pos = size, 0  # pos: positions already cached; 0 starts a new sequence
        self.k = [None] * n_layer if keys else None
        self.v = [None] * n_layer

    def _write(self, bufs, layer, z):  # z (B, H, t, hd) at positions pos..pos+t-1 -> every position 0..pos+t-1
        if bufs[layer] is None or bufs[layer].shape[:2] != z.shape[:2] or bufs[layer].dtype != z.dtype:
            bufs[layer] = z.new_empty(z.size(0), z.size(1), self.size, z.size(3))
        bufs[layer][:, :, self.pos:self.pos + z.size(2)] = z
        return bufs[layer][:, :, :self.pos + z.size(2)]

    def update(self, layer, k, v):  # -> every cached key (None for MixiT) and value
        return None if self.k is None else self._write(self.k, layer, k), self._write(self.v, layer, v)


class Attention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        C, H = config.n_embd, config.n_head
        self.n_head, self.head_dim, self.layer, self.causal, self.attn = H, C // H, layer, config.causal, config.attn
        if config.attn == "softmax":
            self.qkv = Linear(C, 3 * C, config.bias)  # W_Q, W_K, W_V in one matmul
        elif config.attn == "frozen_qk":
            self.qk = Linear(C, 2 * C, config.bias)  # W_Q, W_K: frozen at init, apart from the trained W_V
            self.v = Linear(C, C, config.bias)
        else:  # the fixed random attention, a buffer: saved in checkpoints, moved by .to(device)
            self.register_buffer("mixing", mixing_matrix(config.block_size, H, self.head_dim, config.causal,
                                                         config.mix_beta, seed=(config.seed, 1, layer)))
            self.v = Linear(C, C, config.bias, width_mult(config, C))
        if config.attn != "mixing":
            self.rotary = Rotary(self.head_dim, config.block_size, config.rope_theta)
        self.o = Linear(C, C, config.bias, width_mult(config, C))

    def heads(self, z):  # (B, t, n*C) -> n tensors (B, H, t, hd)
        B, t, _ = z.shape
        return z.view(B, t, -1, self.head_dim).transpose(1, 2).split(self.n_head, dim=1)

    def qkv_heads(self, x, pos):
        """Queries and keys (rotated) and values of x (B, t, C), each (B, H, t, hd)."""
        if self.attn == "softmax":
            q, k, v = self.heads(self.qkv(x))
        else:
            (q, k), (v,) = self.heads(self.qk(x)), self.heads(self.v(x))
        return self.rotary(q, pos), self.rotary(k, pos), v

    def forward(self, x, cache=None, pad_mask=None):  # x (B, t, C)
        B, t, C = x.shape
        pos = 0 if cache is None else cache.pos
        if self.attn == "mixing":
            v = self.v(x)
            if pad_mask is not None:
                v = v * pad_mask.view(B, t, 1).to(v.dtype)  # padding carries no value
            (v,) = self.heads(v)
            if cache is not None:
                _, v = cache.update(self.layer, None, v)
            A = self.mixing[:, pos:pos + t, :pos + t]  # (H, t, t'): the same for every input, rows pos..pos+t-1
            y = torch.einsum("hts,bhsd->bhtd", A, v)  # fixed mixing: one matmul per head for the whole batch
        else:
            q, k, v = self.qkv_heads(x, pos)
            if cache is not None:
                k, v = cache.update(self.layer, k, v)
            mask = None if pad_mask is None else pad_mask.view(B, 1, 1, t)  # the keys that are not padding
            causal = self.causal and t > 1  # a single new query sees every cached key
            if causal and pos:  # new queries pos.. against keys 0..: the causal mask aligned to the bottom right
                mask, causal = torch.ones(t, pos + t, dtype=torch.bool, device=x.device).tril(pos), False
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # flash on a GPU
        return self.o(y.transpose(1, 2).reshape(B, t, C))

    def weights(self, x):
        """The attention matrix this layer applies to x (B, t, C), as (B, H, t, t)."""
        B, t, _ = x.shape
        if self.attn == "mixing":
            return self.mixing[:, :t, :t].expand(B, -1, -1, -1)
        q, k, _ = self.qkv_heads(x, 0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if self.causal:
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return scores.softmax(-1)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        self.gate_up = Linear(C, 8 * C, config.bias, width_mult(config, C))  # W_G and W_U in one matmul
        self.down = Linear(4 * C, C, config.bias, width_mult(config, 4 * C, config.base_ffn))
        self.shaped = config.attn == "mixing"
        self.slope = 1 + config.cminus / math.sqrt(C)  # shaped activation: near-linear, slope 1 + c/sqrt(d)
        self.gain = math.sqrt(2 / (1 + self.slope ** 2))  # its gain keeps the variance: calculate_gain('leaky_relu')

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, t, 4C) each
        if self.shaped:
            return self.down(self.gain * F.leaky_relu(gate, self.slope) * up)  # MixiT's shaped gated MLP
        return self.down(F.silu(gate) * up)  # SwiGLU


class Block(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.norm1, self.attn = RMSNorm(config.n_embd), Attention(config, layer)
        self.norm2, self.mlp = RMSNorm(config.n_embd), MLP(config)
        # residual scaling: s^2 + r^2 = 1 keeps the hidden norm constant in depth (MixiT); a plain sum otherwise
        self.s = config.skip if config.attn == "mixing" else 1.0
        self.r = math.sqrt(1 - self.s ** 2) if config.attn == "mixing" else 1.0

    def forward(self, x, cache=None, pad_mask=None):
        x = self.s * x + self.r * self.attn(self.norm1(x), cache, pad_mask)
        return self.s * x + self.r * self.mlp(self.norm2(x))


class MixiT(nn.Module):
    def __init__(self, config):
        super().__init__()
        config.validate()
        self.config = config
        C = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = nn.Embedding(config.block_size, C) if config.attn == "mixing" else None  # MixiT has no RoPE
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.norm = RMSNorm(C)
        self.head = Linear(C, config.n_classes or config.vocab_size, False, width_mult(config, C))  # untied
        self.init_weights()
        for module in self.frozen_modules():
            module.requires_grad_(False)

    def init_weights(self):
        """Every weight N(0, std^2) and every bias 0, drawn from config.seed in module order."""
        g, cfg = generator(self.config.seed, 0), self.config
        frozen_qk = {id(b.attn.qk) for b in self.blocks if cfg.attn == "frozen_qk" and cfg.qk_init == "paper"}
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = 1 / math.sqrt(module.in_features) if id(module) in frozen_qk else cfg.init_std  # N(0, 1/n)
                nn.init.normal_(module.weight, 0.0, std, generator=g)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02, generator=g)

    def frozen_modules(self):
        """The modules that keep their random init: W_Q and W_K, the MLPs, or whole blocks."""
        frozen = []
        for block in self.blocks:
            if self.config.attn == "frozen_qk":
                frozen.append(block.attn.qk)
            if self.config.freeze == "mlp":
                frozen.append(block.mlp)
            if self.config.freeze == "blocks":
                frozen.append(block)
        return frozen

    def embed(self, idx, pos=0):
        x = self.wte(idx)  # (B, t, C)
        if self.wpe is not None:
            x = x + self.wpe.weight[pos:pos + idx.size(1)]  # learned absolute positions
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))  # the residual stream in the autocast dtype
        return x

    def forward(self, idx, targets=None, cache=None):
        """idx (B, t) -> (logits (B, t, V), or (B, n_classes) for a classifier; loss). With targets (-1 where
        unscored) only the loss is returned, as (None, loss): the logits are not kept once it is computed."""
        t, pos = idx.size(1), 0 if cache is None else cache.pos
        if pos + t > self.config.block_size:
            raise ValueError(f"sequence of {pos + t} tokens is longer than block_size={self.config.block_size}")
        pad_mask = (idx != self.config.pad_id) if self.config.n_classes else None  # (B, t)
        x = self.embed(idx, pos)
        for block in self.blocks:
            x = block(x, cache, pad_mask)
        x = self.norm(x)
        if cache is not None:
            cache.pos += t
        if self.config.n_classes:
            keep = pad_mask.unsqueeze(-1).to(x.dtype)  # (B, t, 1)
            x = (x * keep).sum(1) / keep.sum(1).clamp(min=1)  # mean over the real tokens, (B, C)
        logits = self.head(x)
        if targets is None:
            return logits, None
        return None, F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=-1)

    def get_num_params(self, non_embedding=True, trainable=False):
        """Parameters (the mixing matrices are buffers, not parameters); non_embedding leaves out wte and wpe."""
        skip = {id(e.weight) for e in (self.wte, self.wpe) if e is not None} if non_embedding else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip and (p.requires_grad or not trainable))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """Fused AdamW over the trainable parameters only: frozen weights get no state and no weight decay."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},  # matrices
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # biases, norms
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type in ("cpu", "cuda"))

    def flops_per_token(self, seq_len=None, training=True):
        """Matmul FLOPs per token of a seq_len sequence, as this variant computes them: MixiT has no W_Q, W_K or
        QK^T and needs no gradient of its fixed matrices; frozen weights need no weight gradient. Causal
        attention counts the (T+1)/2 positions a query sees on average."""
        cfg = self.config
        T = seq_len or cfg.block_size
        seen = (T + 1) / 2 if cfg.causal else T
        fwd = bwd = 0.0
        for module in self.modules():
            if isinstance(module, nn.Linear) and not (module is self.head and cfg.n_classes):
                w = module.weight.numel()
                fwd += 2 * w
                bwd += 2 * w + (2 * w if module.weight.requires_grad else 0)  # input gradient (+ weight gradient)
        if cfg.attn == "mixing":  # A @ V forward; backward only A^T @ dY
            fwd += cfg.n_layer * 2 * cfg.n_embd * seen
            bwd += cfg.n_layer * 2 * cfg.n_embd * seen
        else:  # QK^T and PV forward, twice that backward
            fwd += cfg.n_layer * 4 * cfg.n_embd * seen
            bwd += cfg.n_layer * 8 * cfg.n_embd * seen
        return fwd + bwd if training else fwd

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Continue idx (B, t) by max_new_tokens tokens; top_k=1 is greedy. With use_cache a new token costs one
        position and gives the same tokens. Past block_size the window keeps its last block_size tokens."""
        if self.config.n_classes or not self.config.causal:
            raise ValueError("generate needs a causal language model (n_classes=0, causal=True)")
        T = self.config.block_size
        cache = KVCache(self.config.n_layer, T, keys=self.config.attn != "mixing") if use_cache else None
        for _ in range(max_new_tokens):
            if cache is not None and 0 < cache.pos < T:
                logits, _ = self(idx[:, -1:], cache=cache)  # the newest token only
            else:  # the first step, or a full window: (re)compute the last block_size tokens
                if cache is not None:
                    cache.pos = 0
                logits, _ = self(idx[:, -T:], cache=cache)
            idx = torch.cat((idx, sample_next(logits[:, -1], temperature, top_k)[:, None]), dim=1)
        return idx

    @torch.no_grad()
    def attention_maps(self, idx):
        """The attention each layer applies to idx (B, t), as (n_layer, B, n_head, t, t); MixiT's fixed matrices.
        A classifier's padding keys get weight 0, as in forward."""
        B, t = idx.shape
        pad_mask = (idx != self.config.pad_id) if self.config.n_classes else None
        x, maps = self.embed(idx), []
        for block in self.blocks:
            w = block.attn.weights(block.norm1(x))  # (B, H, t, t)
            if pad_mask is not None:
                w = w * pad_mask.view(B, 1, 1, t).to(w.dtype)
                if self.config.attn != "mixing":  # the softmax over the real keys only
                    w = w / w.sum(-1, keepdim=True).clamp(min=1e-30)
            maps.append(w)
            x = block(x, None, pad_mask)
        return torch.stack(maps)


def sample_next(logits, temperature=1.0, top_k=None):
    """The next tokens (B,) for logits (B, V): the argmax for top_k=1, else a sample from the top_k (all if None)."""
    if top_k == 1:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < v[:, -1:], -float("inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1).view(-1)
