# Claim 2 at the paper's size, as the reference's algorithmic runner (depth.py) ran it: condattendstream_30 (our
# retrieval_30, vocab 512, T = 63), 2 layers, width 512, 4 heads (the README command), MixiT 64 heads
# (scripts/depth_array.sh sweeps 4, 32, 64), 1,000 sequences a step, AdamW lr 1e-2 (depth.py's global, which the README
# command never overrides), weight decay 1e-3, warmup 500, cosine, 40,000 steps (max_steps 200 "epochs" x 200,000 /
# 1,000); skip sqrt(0.5), c- = -1 (depth.py). Also induction_16: our single-hop induction task, for the induction
# score; the paper's 16-hop induction (5 layers) is another task, not built in.
# Where mixit departs: bf16 autocast on a GPU (the reference: fp32).
# Model: 2 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/retrieval_paper.py --attn=all --seeds=3          # one GPU
task = "retrieval_30,induction_16"
out_dir = "out/retrieval_paper"
n_layer = 2
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
eval_interval = 500
log_interval = 100
