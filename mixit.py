"""
MixiT and its baselines in one file: which trainable parts of a transformer matter?
Dong, Noci, Khodak, Li, "Attention Retrieves, MLP Memorizes" / "Is Random Attention
Sufficient for Sequence Modeling?" (arXiv 2506.01115).

attn="softmax"   the paper's Llama-style transformer: pre-RMSNorm, RoPE, SwiGLU, biases, untied head
attn="frozen_qk" the same forward; W_Q, W_K and their biases stay at their random init
attn="mixing"    MixiT: every attention matrix is a fixed random (H, T, T) buffer; no W_Q, W_K, RoPE
freeze="mlp"     every MLP stays at init;  freeze="blocks": only embeddings, final norm and head train
"""
import ctypes
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

ATTNS = ("softmax", "frozen_qk", "mixing")
FREEZES = ("", "mlp", "blocks")
COLORS = {"softmax": "tab:blue", "frozen_qk": "tab:orange", "mixing": "tab:green"}  # every plot


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
    n_classes: int = 0  # 0: language-model head over the vocabulary; > 0: sequence classifier
    pad_id: int = -1  # classifier: padding token, left out of attention and pooling
    seed: int = 0  # seeds every random init: weights, frozen weights, mixing matrices
    bias: bool = True  # the reference trainers force attention_bias = mlp_bias = True
    rope_theta: float = 10000.0
    # Reference quirks (MODEL.md A.0.1-A.0.3). Defaults reproduce the reference's effective behaviour,
    # which produced the paper's numbers; the comment names the intended value.
    init_std: float = 0.02  # every linear is N(0, init_std^2); the comments intend 1.0 under mixing's multipliers
    base_width: float = 512.0  # mixing: linears with fan_in d are multiplied by sqrt(base_width / d)
    base_ffn: float = 1.0  # mixing: down-proj multiplier sqrt(base_ffn / 4d); never passed (1.0), intended 4*base_width
    skip: float = math.sqrt(0.5)  # mixing: h = s*h + sqrt(1-s^2)*f(h); sqrt(.5) algorithmic/classifier, 0.5 LM trainer
    cminus: float = -1.0  # mixing: shaped LeakyReLU slope 1 + cminus/sqrt(d) (utils.py -1, shell wrappers +1)
    mix_beta: float = 1.0  # mixing: scale of the centered noise around the identity

    def validate(self):
        """Raise ValueError naming what is valid; the training script turns it into one line."""
        if self.attn not in ATTNS:
            raise ValueError(f"unknown attn {self.attn!r}; valid: {', '.join(ATTNS)}")
        if self.freeze not in FREEZES:
            raise ValueError(f"unknown freeze {self.freeze!r}; valid: '', mlp, blocks")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.attn != "mixing" and (self.n_embd // self.n_head) % 2:
            raise ValueError(f"rotary embeddings need an even head size, got n_embd/n_head={self.n_embd // self.n_head}")
        if not 0.0 <= self.skip <= 1.0:
            raise ValueError(f"skip must lie in [0, 1], got {self.skip}")


def _generator(*key):
    """A torch.Generator seeded from integers, independent of the global RNG and of the other keys."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1, np.uint64)[0]))


def mixing_matrix(block_size, n_head, head_dim, causal=True, beta=1.0, seed=0):
    """MixiT's fixed attention, (n_head, T, T) float32 (MODEL.md A.4): A_h = I + beta*(N_h - rowmean(N_h))."""
    T, g = block_size, _generator(seed)
    lo, hi = 1 / math.sqrt(T * head_dim), 1 / math.sqrt(T)
    sigma = lo + torch.rand(n_head, 1, 1, generator=g, dtype=torch.float64) * (hi - lo)  # per-head std in [lo, hi]
    noise = torch.randn(n_head, T, T, generator=g, dtype=torch.float64) * sigma  # (H, T, T)
    if causal:
        noise = noise.tril()
        support = torch.arange(1, T + 1, dtype=torch.float64).view(T, 1)  # row i mixes positions j <= i
    else:
        # non-causal: center over the full row, so rows sum to 1 here too; the reference divides
        # the full-row sum by i+1 (MODEL.md A.4), which leaves its rows summing to anything
        support = torch.full((T, 1), float(T), dtype=torch.float64)
    noise = noise - noise.sum(-1, keepdim=True) / support  # remove the drift: the noise redistributes, rows sum to 1
    if causal:
        noise = noise.tril()
    A = torch.eye(T, dtype=torch.float64) + beta * noise  # identity plus small noise: signal propagates stably in depth
    A[0] = 0.0  # head 0 is the sink head: every token keeps half of itself and takes half of token 0
    A[0].diagonal().fill_(0.5)
    A[0, :, 0] = 0.5
    return A.float()


class Linear(nn.Linear):
    """nn.Linear whose output, bias included, is multiplied by a fixed width multiplier (the reference's ScaledLinear)."""

    def __init__(self, fan_in, fan_out, bias, mult=1.0):
        super().__init__(fan_in, fan_out, bias)
        self.mult = mult
        self._folded = (None, None)  # without autograd: (key, the folded weight and bias), reused while unchanged

    def folded(self, in_scale=1.0):
        """Weight and bias of x -> mult * (W (in_scale * x) + b): the constant factors are folded into the
        (small) weight instead of costing a pass over the (larger) activations. Without autograd (generation,
        evaluation) the folded copy is kept until the weights change: a decoded token would pay for it."""
        if self.mult * in_scale == 1.0 and (self.bias is None or self.mult == 1.0):
            return self.weight, self.bias
        w, b = self.weight, self.bias
        fold = lambda: (w * (self.mult * in_scale), None if b is None else b * self.mult)
        if torch.is_grad_enabled() or torch.compiler.is_compiling():
            self._folded = (None, None)
            return fold()
        key = (in_scale, w.data_ptr(), w._version, b is None or (b.data_ptr(), b._version),
               torch.is_inference_mode_enabled())
        if self._folded[0] != key:
            self._folded = (key, fold())
        return self._folded[1]

    def forward(self, x, in_scale=1.0):
        return F.linear(x, *self.folded(in_scale))


def rms_norm_cpu(x, weight, eps):
    """F.rms_norm (weight None: no gain) and its rstd (B, t, 1) in five passes over x; eps is a 0-dim tensor.
    The built-in one is a chain of more ops on CPU: slower for every size, and about twice as slow on the
    single row of a decoded token."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    rstd = torch.addcmul(eps, norm, norm, value=1 / x.size(-1)).rsqrt_()
    y = x * rstd
    return y if weight is None else y.mul_(weight), rstd


class RMSNormCPU(torch.autograd.Function):
    """rms_norm_cpu under autograd, with a backward of a few passes: the built-in one is a chain of six ops."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_cpu(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        xhat, dx, dw = x * rstd, None, None
        if ctx.needs_input_grad[0]:  # dx = rstd * (dy w - xhat mean(dy w xhat))
            gw = dy * weight
            dot = torch.linalg.vecdot(gw, xhat).unsqueeze(-1).div_(x.size(-1))
            dx = torch.addcmul(gw, xhat, dot, value=-1).mul_(rstd)
        if ctx.needs_input_grad[1]:
            dw = (dy * xhat).flatten(0, -2).sum(0)
        return dx, dw, None


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain, computed in float32 (eps 1e-6 as the reference)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_buffer("eps_t", torch.tensor(eps), persistent=False)  # for rms_norm_cpu

    def forward(self, x, gain=True):  # gain=False: the caller folded the gain into what follows
        weight = self.weight if gain else None
        if x.is_cpu and x.dtype == torch.float32 and not torch.compiler.is_compiling():
            if torch.is_grad_enabled() and gain:
                return RMSNormCPU.apply(x, weight, self.eps_t)
            return rms_norm_cpu(x, weight, self.eps_t)[0]
        return F.rms_norm(x.float(), (x.size(-1),), weight, self.eps).type_as(x)


class Rotary(nn.Module):
    """Llama rotary position embedding (rotate-half convention, theta 1e4) for positions [0, block_size)."""

    def __init__(self, head_dim, block_size, theta):
        super().__init__()
        inv_freq = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)  # (T, hd/2)
        cos, sin = angles.cos(), angles.sin()
        # full-width tables: rotate_half(x) * [sin, sin] == swap_halves(x) * [-sin, sin]
        self.register_buffer("cos", torch.cat((cos, cos), -1).unsqueeze(1), persistent=False)  # (T, 1, hd)
        self.register_buffer("sin", torch.cat((-sin, sin), -1).unsqueeze(1), persistent=False)

    def forward(self, x, pos, swapped=None):  # x (B, t, n, hd) at absolute positions pos .. pos+t-1, n heads
        t = x.size(1)
        cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]  # (t, 1, hd)
        if cos.dtype != x.dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        if swapped is None:  # [x2, x1]: one copy, where roll is three ops; generation's projection gives it
            swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
        return torch.addcmul(x * cos, swapped, sin)  # [x1, x2] * cos + [x2, x1] * sin


class KVCache:
    """Past keys and values per layer for generation; MixiT needs values only (its weights are fixed).
    Each layer's buffer holds `size` (block_size) positions, allocated at the first write of a sequence
    and written in place: a decoded token copies only itself, not the past (torch.cat would)."""

    def __init__(self, n_layer, size, keys=True):
        self.size = size
        self.k = [None] * n_layer if keys else None
        self.v = [None] * n_layer
        self.pos = 0  # number of positions already cached; 0 starts a new sequence in the same buffers

    def _write(self, bufs, layer, z):  # z (B, H, t, hd) at positions pos .. pos+t-1; returns positions 0 .. pos+t-1
        buf, end = bufs[layer], self.pos + z.size(2)
        if self.pos == 0 and (buf is None or buf.shape[:2] != z.shape[:2] or buf.size(3) != z.size(3)
                              or buf.dtype != z.dtype or buf.device != z.device):
            buf = bufs[layer] = z.new_empty(z.size(0), z.size(1), self.size, z.size(3))
        buf[:, :, self.pos:end] = z
        return buf[:, :, :end]

    def update(self, layer, k, v):  # k, v (B, H, t, hd); returns every cached k (None for MixiT) and v
        return None if self.k is None else self._write(self.k, layer, k), self._write(self.v, layer, v)


class CausalMix(torch.autograd.Function):
    """y = A @ v for lower-triangular A (H, t, t) and v (H, t, N), in row blocks that skip the zero upper
    triangle: row block i reads only the columns up to its end, about half the dense FLOPs at long t.
    Backward needs only dv = A^T @ dy (A is fixed), with the same saving."""

    @staticmethod
    def forward(ctx, A, v, block):
        ctx.save_for_backward(A)
        ctx.block = block
        t = v.size(1)
        return torch.cat([torch.bmm(A[:, r:r + block, :r + block], v[:, :r + block]) for r in range(0, t, block)], 1)

    @staticmethod
    def backward(ctx, dy):
        (A,), block, t = ctx.saved_tensors, ctx.block, dy.size(1)
        A = A.to(dy.dtype)
        dv = torch.cat([torch.bmm(A[:, c:, c:c + block].transpose(1, 2), dy[:, c:]) for c in range(0, t, block)], 1)
        return None, dv, None


class Attention(nn.Module):
    mix_block = 128  # causal mixing over more than 2 blocks of this many rows skips the zero upper triangle

    def __init__(self, config, layer):
        super().__init__()
        C, H = config.n_embd, config.n_head
        self.n_head, self.head_dim, self.layer = H, C // H, layer
        self.causal, self.attn = config.causal, config.attn
        mult = math.sqrt(config.base_width / C) if config.attn == "mixing" else 1.0  # ScaledLinear
        if config.attn == "mixing":
            # the fixed matrices: a persistent buffer, so checkpoints carry them and .to(device) moves them
            A = mixing_matrix(config.block_size, H, self.head_dim, config.causal, config.mix_beta,
                              seed=(config.seed, 1, layer))
            self.register_buffer("mixing", A)  # (H, T, T)
            self._cast = (None, None)  # (key, the buffer in the compute dtype)
        else:
            self.qk = Linear(C, 2 * C, config.bias)  # W_Q, W_K fused; frozen at init under frozen_qk
            self.rotary = Rotary(self.head_dim, config.block_size, config.rope_theta)
        self.v = Linear(C, C, config.bias, mult)
        self.o = Linear(C, C, config.bias, mult)

    def mixing_as(self, dtype):
        """The fixed matrices in the compute dtype, cast once per dtype, device and buffer version, not per step."""
        A = self.mixing
        if A.dtype == dtype or torch.compiler.is_compiling():
            return A.to(dtype)
        key = (dtype, A.device, A.data_ptr(), A._version, torch.is_inference_mode_enabled())
        if self._cast[0] != key:
            self._cast = (key, A.to(dtype))
        return self._cast[1]

    def forward(self, x, cache=None, pad_mask=None):  # x (B, t, C)
        B, t, C = x.shape
        H, hd = self.n_head, self.head_dim
        pos = 0 if cache is None else cache.pos
        split = lambda z: z.view(B, t, H, hd).transpose(1, 2)  # (B, H, t, hd)
        if self.attn == "mixing":
            v = self.v(x)
            if pad_mask is not None:
                v = v * pad_mask.view(B, t, 1).to(v.dtype)  # padding carries no value
            A = self.mixing_as(v.dtype)
            if cache is not None:  # decoding: rows pos.. of A against every cached value
                _, v = cache.update(self.layer, None, split(v))
                y = (A[:, pos:pos + t, :pos + t] @ v).transpose(1, 2)  # causal rows need only their prefix
            else:  # fixed, input-independent mixing: one GEMM per head for the whole batch
                v = v.view(B, t, H, hd).permute(2, 1, 0, 3).reshape(H, t, B * hd)
                A = A[:, :t, :t]
                if self.causal and t > 2 * self.mix_block:
                    y = CausalMix.apply(A, v, self.mix_block)
                else:
                    y = torch.bmm(A, v)  # (H, t, B * hd)
                y = y.view(H, t, B, hd).permute(2, 1, 0, 3)
        else:
            qk = self.rotary(self.qk(x).view(B, t, 2 * H, hd), pos)  # q and k rotated together
            q, k = qk.transpose(1, 2).split(H, dim=1)  # (B, H, t, hd) views
            v = split(self.v(x))
            if cache is not None:
                k, v = cache.update(self.layer, k, v)
            mask = None if pad_mask is None else pad_mask.view(B, 1, 1, t)  # keys that are not padding
            causal = self.causal and t > 1  # a single new query attends to every cached key
            if causal and pos:  # is_causal aligns to the top left: queries pos.. need the mask aligned to the right
                mask, causal = torch.ones(t, pos + t, dtype=torch.bool, device=x.device).tril(pos), False
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # flash on GPU
            y = y.transpose(1, 2)
        return self.o(y.reshape(B, t, C))

    def weights(self, x):
        """The attention matrix this layer applies to x (B, t, C), as (B, H, t, t), for analysis."""
        B, t, C = x.shape
        if self.attn == "mixing":
            return self.mixing[:, :t, :t].expand(B, -1, -1, -1)
        q, k = self.rotary(self.qk(x).view(B, t, 2 * self.n_head, self.head_dim), 0).transpose(1, 2).split(self.n_head, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if self.causal:
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return scores.softmax(-1)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        mixing = config.attn == "mixing"
        self.up = Linear(C, 8 * C, config.bias, math.sqrt(config.base_width / C) if mixing else 1.0)  # gate, up
        self.down = Linear(4 * C, C, config.bias, math.sqrt(config.base_ffn / (4 * C)) if mixing else 1.0)
        self.shaped = mixing
        # shaped activation: LeakyReLU of slope 1 + c/sqrt(d) is near-linear, keeping the covariance stable in depth
        self.slope = 1 + config.cminus / math.sqrt(C)
        self.gain = math.sqrt(2 / (1 + self.slope ** 2))  # torch.nn.init.calculate_gain('leaky_relu', slope)
        self.in_scale = self.gain if mixing else 1.0  # of the down projection

    def forward(self, x):  # x (B, t, C)
        w, b = self.up.folded()
        (w_gate, w_up), (b_gate, b_up) = w.chunk(2), (None, None) if b is None else b.chunk(2)
        gate, up = F.linear(x, w_gate, b_gate), F.linear(x, w_up, b_up)  # (B, t, 4C) each: no 8C tensor to split
        return self.down(self.act(gate) * up, in_scale=self.in_scale)

    def act(self, gate):  # shaped: the gain is a constant factor, folded into the down projection as in_scale
        return F.leaky_relu(gate, self.slope) if self.shaped else F.silu(gate)


class Block(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.norm1 = RMSNorm(config.n_embd)
        self.attn = Attention(config, layer)
        self.norm2 = RMSNorm(config.n_embd)
        self.mlp = MLP(config)
        # residual scaling: s^2 + r^2 = 1 keeps the hidden norm constant with depth (MixiT); plain sum otherwise
        self.s = config.skip if config.attn == "mixing" else 1.0
        self.r = math.sqrt(1 - self.s ** 2) if config.attn == "mixing" else 1.0

    def residual(self, x, f):  # s*x + r*f: one pass when s = r = 1 (1.0 * x still costs a pass), else two
        return x + f if self.s == self.r == 1.0 else torch.add(x * self.s, f, alpha=self.r)

    def forward(self, x, cache=None, pad_mask=None):
        x = self.residual(x, self.attn(self.norm1(x), cache, pad_mask))
        return self.residual(x, self.mlp(self.norm2(x)))


class MixiT(nn.Module):
    def __init__(self, config):
        super().__init__()
        config.validate()
        self.config = config
        C, mixing = config.n_embd, config.attn == "mixing"
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = nn.Embedding(config.block_size, C) if mixing else None  # MixiT has no RoPE
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.norm = RMSNorm(C)
        out = config.n_classes or config.vocab_size
        self.head = Linear(C, out, False, math.sqrt(config.base_width / C) if mixing else 1.0)  # untied
        self._init_weights()
        for module in self.frozen_modules():
            module.requires_grad_(False)

    def _init_weights(self):
        """Every weight N(0, std^2), biases 0, norms 1, drawn from config.seed in a fixed order."""
        g = _generator(self.config.seed, 0)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, self.config.init_std, generator=g)
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
                frozen.append(block)  # the reference also freezes the final norm (MODEL.md A.7); ours trains
        return frozen

    def forward(self, idx, targets=None, cache=None):
        """idx (B, t) -> logits (B, t, V), or (B, n_classes) for a classifier; targets == -1 are ignored."""
        B, t = idx.shape
        pos = 0 if cache is None else cache.pos
        if pos + t > self.config.block_size:
            raise ValueError(f"sequence of {pos + t} tokens is longer than block_size={self.config.block_size}")
        x = self.wte(idx)  # (B, t, C)
        if self.wpe is not None:
            x = x + self.wpe.weight[pos:pos + t]  # learned absolute positions
        pad_mask = (idx != self.config.pad_id) if self.config.n_classes else None  # (B, t)
        for block in self.blocks:
            x = block(x, cache, pad_mask)
        x = self.norm(x)
        if cache is not None:
            cache.pos += t
        if self.config.n_classes:
            keep = pad_mask.unsqueeze(-1).to(x.dtype)  # (B, t, 1)
            x = (x * keep).sum(1) / keep.sum(1).clamp(min=1)  # mean over the real tokens, (B, C)
        logits = self.head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=-1)
        return logits, loss

    def get_num_params(self, non_embedding=True, trainable=False):
        """Parameters (the mixing buffers are not parameters); non_embedding leaves out wte and wpe."""
        skip = {id(e.weight) for e in (self.wte, self.wpe) if e is not None} if non_embedding else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip and (p.requires_grad or not trainable))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW over the trainable parameters only (frozen weights get no state and are never touched), with
        the fused kernel of one update for every parameter on CPU and CUDA."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},  # matrices
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # biases, norms
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type in ("cpu", "cuda"))

    def flops_per_token(self, seq_len=None, training=True):
        """Matmul FLOPs per token of a seq_len sequence, counting what this variant really computes:
        MixiT has no W_Q/W_K and no QK^T, and needs no gradient of its fixed matrices; frozen weights
        need no weight gradient. Causal attention counts the (T+1)/2 positions a query really sees."""
        cfg = self.config
        T = seq_len or cfg.block_size
        seen = (T + 1) / 2 if cfg.causal else T  # mean number of positions each query mixes
        fwd = bwd = 0.0
        for module in self.modules():
            if isinstance(module, nn.Linear) and not (module is self.head and cfg.n_classes):
                w = module.weight.numel()
                fwd += 2 * w
                bwd += 2 * w + (2 * w if module.weight.requires_grad else 0)  # input grad (+ weight grad)
        if cfg.attn == "mixing":  # A @ V forward; backward only A^T @ dY
            fwd += cfg.n_layer * 2 * cfg.n_embd * seen
            bwd += cfg.n_layer * 2 * cfg.n_embd * seen
        else:  # QK^T and PV forward; backward twice that
            fwd += cfg.n_layer * 4 * cfg.n_embd * seen
            bwd += cfg.n_layer * 8 * cfg.n_embd * seen
        return fwd + bwd if training else fwd

    def estimate_mfu(self, tokens_per_iter, dt, peak):
        """Model FLOPs utilization of a training iteration of tokens_per_iter tokens taking dt seconds."""
        if not peak:
            return None
        return self.flops_per_token() * tokens_per_iter / dt / peak

    def _decode_weights(self):
        """What _decode needs per layer, its weights as (W^T, b) pairs for x @ W^T + b with every constant factor
        folded in: the norm gains, the width multipliers, the MLP gain, the residual scale r, 1/sqrt(head_dim) of
        the queries. W_Q, W_K and W_V are stacked with W_Q and W_K once more, their output halves swapped per head:
        one product gives q, k, v and the [x2, x1] of the rotary embedding. A copy of the weights, once per generate."""
        def pack(w, b, in_scale=None, out_scale=1.0):  # w (out, in) -> (in, out), contiguous
            w = w * out_scale if in_scale is None else w * in_scale * out_scale
            return w.t().contiguous(), None if b is None else b * out_scale

        C, hd = self.config.n_embd, self.config.n_embd // self.config.n_head
        swap = lambda z: z.unflatten(0, (-1, 2, hd // 2)).flip(1).flatten(0, 2)  # rows [x1, x2] -> [x2, x1] per head
        layers = []
        for block in self.blocks:
            attn, mlp = block.attn, block.mlp
            w, b = attn.v.folded()
            rotary = None
            if attn.attn != "mixing":  # [W_Q / sqrt(hd); W_K; W_V; swapped W_Q / sqrt(hd); swapped W_K]: (5C, C)
                wqk, bqk = attn.qk.folded()
                scale = torch.cat((torch.full((C,), hd ** -0.5), torch.ones(C))).to(wqk)  # the queries' rows
                wqk = wqk * scale[:, None]
                w = torch.cat((wqk, w, swap(wqk)))
                b = None if b is None else torch.cat((bqk * scale, b, swap(bqk * scale)))
                rotary = attn.rotary
            layers.append((attn, rotary, mlp.act, block.s, pack(w, b, block.norm1.weight),
                           pack(*attn.o.folded(), out_scale=block.r), pack(*mlp.up.folded(), block.norm2.weight),
                           pack(*mlp.down.folded(mlp.in_scale), out_scale=block.r)))
        return layers, pack(*self.head.folded(), self.norm.weight)

    def _decode(self, idx, cache, weights):
        """Logits (B, V) of the tokens idx (B,) at position cache.pos, which it advances: forward(idx[:, None],
        cache) written flat over _decode_weights, the same function up to rounding. A decoded token is a chain of
        matrix-vector products and smaller ops, each costing mostly its own overhead: this runs half as many
        ops as forward, and no module calls."""
        linear = lambda x, wb: x @ wb[0] if wb[1] is None else torch.addmm(wb[1], x, wb[0])
        pos, (layers, head) = cache.pos, weights
        x = F.embedding(idx, self.wte.weight)  # (B, C)
        B, C = x.shape
        H = self.config.n_head
        hd = C // H
        if self.wpe is not None:
            x = x + self.wpe.weight[pos]
        norm = lambda x: self.norm(x, gain=False)  # every norm is the same but for its gain, folded into the weights
        for attn, rotary, act, s, qkv, o, up, down in layers:
            z = linear(norm(x), qkv)
            if rotary is None:  # MixiT: row pos of its fixed matrices against every cached value
                _, v = cache.update(attn.layer, None, z.view(B, H, 1, hd))
                y = attn.mixing_as(v.dtype)[:, pos:pos + 1, :pos + 1] @ v  # (B, H, 1, hd)
            else:
                qk, v, swapped = z.view(B, 1, 5 * H, hd).split_with_sizes((2 * H, H, 2 * H), 2)
                q, k = rotary(qk, pos, swapped).transpose(1, 2).split_with_sizes((H, H), 1)  # (B, H, 1, hd)
                v = v.transpose(1, 2)
                k, v = cache.update(attn.layer, k, v)  # (B, H, pos+1, hd)
                # one query: two matrix-vector products per head beat SDPA's setup; q carries the scale
                y = torch.bmm(torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)).softmax(-1), v.flatten(0, 1))
            x = torch.add(linear(y.view(B, C), o), x, alpha=s)  # r folded into o; x keeps its dtype under autocast
            gate, u = linear(norm(x), up).split_with_sizes((4 * C, 4 * C), 1)
            x = torch.add(linear(act(gate).mul_(u), down), x, alpha=s)
        cache.pos += 1
        return linear(norm(x), head)

    @staticmethod
    def _sample(logits, temperature, top_k):
        """The next tokens (B,) for logits (B, V): the argmax for top_k=1 (what sampling the top-1 token gives),
        else a sample from the top_k (all if None) at this temperature."""
        if top_k == 1:
            return logits.argmax(-1)
        logits = logits.float() / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits = logits.masked_fill(logits < v[:, -1:], -float("inf"))
        return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1).view(-1)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Continue idx (B, t) by max_new_tokens sampled tokens; top_k=1 is greedy (argmax). With use_cache each
        new token costs one position (keys and values cached; values only for MixiT) and gives the same tokens.
        Past block_size the window is cropped to its last block_size tokens and recomputed, as nanoGPT does."""
        if self.config.n_classes or not self.config.causal:
            raise ValueError("generate needs a causal language model (n_classes=0, causal=True)")
        (B, t), T = idx.shape, self.config.block_size
        out = idx.new_empty(B, t + max_new_tokens)  # outside inference mode: the caller gets a normal tensor
        out[:, :t] = idx
        cache = KVCache(self.config.n_layer, T, keys=self.config.attn != "mixing") if use_cache else None
        # a decoding step's ops are too small to share: on CPU it runs on one thread, which also spares it the
        # wait for a second one that another process holds (a step took ms instead of 0.4 ms)
        threads = torch.get_num_threads() if use_cache and idx.device.type == "cpu" else None
        try:
            with torch.inference_mode():  # no autograd bookkeeping per op: a decoded token is mostly overhead
                weights = self._decode_weights() if use_cache and max_new_tokens > 1 else None
                for end in range(t, t + max_new_tokens):
                    decoding = cache is not None and 0 < cache.pos < T
                    if threads:
                        torch.set_num_threads(1 if decoding else threads)
                    if decoding:
                        logits = self._decode(out[:, end - 1], cache, weights)  # the newest token at cache.pos
                    else:  # first step, or the window is full: crop to block_size and (re)build the cache
                        if cache is not None:
                            cache.pos = 0
                        start = max(0, end - T)
                        logits = self(out[:, start:end], cache=cache)[0][:, -1]
                    out[:, end] = self._sample(logits, temperature, top_k)
        finally:
            if threads:
                torch.set_num_threads(threads)
        return out

    @torch.no_grad()
    def attention_maps(self, idx):
        """The attention weights each layer applies to idx (B, t), as (n_layer, B, n_head, t, t); for
        MixiT its fixed matrices. A classifier's padding keys get weight 0, as in forward."""
        B, t = idx.shape
        x = self.wte(idx)  # (B, t, C)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))
        pad_mask = (idx != self.config.pad_id) if self.config.n_classes else None  # (B, t)
        maps = []
        for block in self.blocks:
            w = block.attn.weights(block.norm1(x))  # (B, H, t, t)
            if pad_mask is not None:
                w = w * pad_mask.view(B, 1, 1, t).to(w.dtype)  # mixing: padding carries no value
                if self.config.attn != "mixing":  # softmax over the real keys only
                    w = w / w.sum(-1, keepdim=True).clamp(min=1e-30)
            maps.append(w)
            x = block(x, None, pad_mask)
        return torch.stack(maps)  # (L, B, H, t, t)


# ---------------------------------------------------------------------------- hardware

def tune_cpu_malloc():
    """Let glibc serve large tensors from its heap and keep freed memory for reuse. By default every block of
    32 MiB or more is a fresh mmap that page-faults on first touch and is unmapped on free: on the 2-core
    VM this was measured, a 32 MiB elementwise op took 13-17 ms instead of 1.7, and the small-LM preset
    trained 10% slower. Process-wide (memory is not returned to the OS); call once before training on CPU.
    Returns False where it does not apply (no glibc)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 1 << 30) and mallopt(M_TRIM_THRESHOLD, 1 << 30))


# dense tensor-core peak TFLOP/s (bf16/fp16, tf32) by device name; the first substring that matches wins
GPU_PEAK_TFLOPS = [
    ("H100 PCIe", 756, 378), ("H100 NVL", 835, 418), ("H100", 989, 494), ("GH200", 989, 494), ("H200 NVL", 835, 418),
    ("H200", 989, 494), ("H800", 989, 494), ("B200", 2250, 1100), ("A100", 312, 156), ("A800", 312, 156),
    ("L40S", 362, 183), ("L40", 181, 90.5), ("L4", 121, 60), ("A10", 125, 62.5), ("RTX 4090", 165, 82.6),
    ("RTX 3090", 71, 35.6), ("V100", 125, 15.7), ("T4", 65, 8.1),
]
_measured_peak, _peak_operands = {}, {}


def peak_flops(device, dtype=torch.float32, seconds=2.0):
    """Peak FLOP/s of a device for matmuls in dtype: a datasheet table for GPUs (fp32 means TF32), measured
    on CPUs (1024^3 matmuls for about `seconds`), None when unknown. A CPU's rate is that of back-to-back
    groups of matmuls of about 0.1 s, as a training step is timed by the mean of several: a single call's
    fastest time would count the rare moments a shared machine is quiet. The figure is the best rate seen in
    this process: a later call with seconds > 0 measures again, so that a peak taken while a neighbour held
    the cores is replaced; seconds=0 returns the figure as it stands."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, low, tf32 in GPU_PEAK_TFLOPS:
            if key in name:
                return 1e12 * (tf32 if dtype == torch.float32 else low)
        return None
    if device.type != "cpu":
        return None
    key = (torch.get_num_threads(), dtype)
    if key not in _measured_peak or seconds > 0:
        n = 1024
        if dtype not in _peak_operands:  # kept: measuring again allocates nothing (bench.py reads the peak RSS)
            _peak_operands[dtype] = torch.randn(3, n, n).to(dtype).unbind()
        a, b, out = _peak_operands[dtype]
        # a @ b^T through the linears' own kernel (bf16 on an AVX2 CPU: 19 GFLOP/s; torch.mm's path: 0.9)
        matmul = lambda: torch.ops.aten.linear.out(a, b, None, out=out)
        matmul()  # warm-up
        t0 = time.perf_counter()
        matmul()
        calls = max(1, round(0.1 / (time.perf_counter() - t0)))  # per group
        best, start = float("inf"), time.perf_counter()
        for group in range(8):
            t0 = time.perf_counter()
            for _ in range(calls):
                matmul()
            best = min(best, (time.perf_counter() - t0) / calls)
            if group >= 1 and time.perf_counter() - start > seconds:
                break
        _measured_peak[key] = max(_measured_peak.get(key, 0.0), 2 * n ** 3 / best)
    return _measured_peak[key]
