# Claim: MixiT needs many heads for arithmetic, at the paper's algorithmic scale: 10-digit addition, width 512,
# 2 layers, batch 1,000, lr 1e-2, 500 warmup steps, weight decay 1e-3, cosine decay, 40,000 steps (the reference's
# algorithmic runner and its README command); MixiT's heads 4, 32, 64 (the reference's sweep) and 256 (the paper's
# largest), the standard transformer at 4. Expected time on one GPU: not yet measured.
#   python train.py configs/heads_paper.py --seeds=3
task = "addition_10"
out_dir = "out/heads_paper"
attn = "softmax,mixing"
mixing_heads = "4,32,64,256"
n_layer = 2
n_embd = 512
n_head = 4
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
