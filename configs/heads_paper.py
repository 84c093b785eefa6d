# Claim: MixiT needs many heads for arithmetic, at the reference algorithmic runner's scale: 10-digit addition, 2
# layers, width 512, 1,000 sequences a step, lr 1e-2, 500 warmup steps, weight decay 1e-3, cosine decay, 40,000
# steps (depth.py and its README command); MixiT's heads 4, 32, 64 (scripts/depth_array.sh) and 256 (the paper's
# largest, Table 5); the standard transformer at 4; skip sqrt(0.5), c- = -1 (depth.py).
# Where mixit departs: addition scores every answer digit; bf16 autocast on a GPU (the reference: fp32).
# Model: 2 layers, width 512, 4 heads (MixiT 4, 32, 64, 256 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/heads_paper.py --seeds=3
task = "addition_10"
out_dir = "out/heads_paper"
attn = "softmax,mixing"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "4,32,64,256"
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
