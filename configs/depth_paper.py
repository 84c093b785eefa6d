# Claim: MixiT stays trainable in depth where the embedding-only random transformer falls, at the reference
# algorithmic runner's scale (10-digit addition, width 512, 1,000 sequences a step, lr 1e-2, warmup 500, weight decay
# 1e-3, cosine, 40,000 steps: depth.py and its README command) with 8 layers; --n_layer=16 for the paper's deeper
# point. MixiT 64 heads (scripts/depth_array.sh sweeps 4, 32, 64); skip sqrt(0.5), c- = -1 (depth.py).
# Where mixit departs: addition scores every answer digit; bf16 autocast on a GPU (the reference: fp32).
# Model: 8 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/depth_paper.py --seeds=3
task = "addition_10"
out_dir = "out/depth_paper"
attn = "softmax,mixing"
freeze = ",blocks"
n_layer = 8
n_embd = 512
n_head = 4
mixing_heads = "64"
base_width = 512.0
skip = 0.5 ** 0.5
cminus = -1.0
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
