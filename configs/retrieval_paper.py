# Claim 2 at the paper's size (the reference's algorithmic runner): condattendstream_30 (our
# retrieval_30, vocab 512, T = 63) and the induction task, 2 layers, width 512, 4 heads, 1,000 sequences
# a step, AdamW lr 1e-2 (depth.py's global, which the README command never overrides), weight decay 1e-3,
# warmup 500, cosine, 40,000 steps (depth.py: max_steps 200 "epochs" x 200,000 / 1,000).
#   python train.py configs/retrieval_paper.py --attn=all --seeds=3          # one GPU
task = "retrieval_30,induction_16"
out_dir = "out/retrieval_paper"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "64"  # MixiT with many heads: retrieval fails all the same
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 500
log_interval = 100
