# Beyond the paper: when must attention (and the MLP) learn, at the reference algorithmic runner's size (2 layers,
# width 512, 4 heads, 1,000 sequences a step, weight decay 1e-3, warmup 500, cosine: depth.py): Frozen-QK's W_Q, W_K,
# alone or with every MLP frozen too, start training at 0, 25, 50 or 75 % of the run, or never, on retrieval over up to
# 30 pairs, 10-digit addition and the reference's memorization table. Expected time on one GPU: not yet measured.
# Where mixit departs: lr 1e-3 and 10,000 steps (depth.py: 1e-2, 40,000), so that the study's 30 runs a seed fit a
# day; bf16 autocast on a GPU.
# Model: 2 layers, width 512, 4 heads, multipliers base 512.
# Training: 10,000 steps of 1,000 sequences, lr 1e-3.
#   python train.py configs/when_paper.py --seeds=3
task = "retrieval_30,addition_10,memorize_512"
out_dir = "out/when_paper"
attn = "frozen_qk"
freeze = ",mlp"
unfreeze_at = "0%,25%,50%,75%,never"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = ""  # MixiT (--attn=mixing) at n_head too: every layer with the same heads
base_width = 512.0
batch_size = 1000
max_iters = 10000
warmup_iters = 500
learning_rate = 1e-3
weight_decay = 1e-3
eval_interval = 500
log_interval = 100
