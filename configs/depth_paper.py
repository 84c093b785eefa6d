# Claim: MixiT stays trainable in depth where the embedding-only random transformer falls, at the paper's
# algorithmic scale (10-digit addition, width 512, batch 1,000, lr 1e-2, 40,000 steps as the reference's
# algorithmic runner) with 8 layers; --n_layer=16 for the paper's deeper point. MixiT with 64 heads (the
# reference's sweep). Expected time on one GPU: not yet measured.
#   python train.py configs/depth_paper.py --seeds=3
task = "addition_10"
out_dir = "out/depth_paper"
attn = "softmax,mixing"
freeze = ",blocks"
mixing_heads = "64"
n_layer = 8
n_embd = 512
n_head = 4
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
