# Claim 3 at the paper's size, as the reference's memorization runner (hdmemorize_exp.py) ran it:
# hdmemorize_512_2_1.0 (our memorize_512: 262,144 pairs, 2.36 Mbit of labels; the runner hard-codes this task),
# 2 layers, width 128, 4 heads (the random_transformers runner's model, which the reference's runner copies), MixiT 64
# heads (scripts/depth_array.sh sweeps 4, 32, 64), 32,768 pairs a step, AdamW lr 5e-3 (the runner's string-comparison
# bug fixes it there), weight decay 1e-4, warmup 500, cosine, 20,000 steps; skip sqrt(0.5) (hdmemorize_exp.py).
# Where mixit departs: bf16 autocast on a GPU (the reference: fp32).
# Model: 2 layers, width 128, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 20,000 steps of 32,768 sequences, lr 5e-3.
#   python train.py configs/memorization_paper.py --seeds=3                 # one GPU
task = "memorize_512"
out_dir = "out/memorization_paper"
attn = "softmax,mixing"
freeze = ",mlp"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "64"
base_width = 512.0
skip = 0.5 ** 0.5
batch_size = 32768
max_iters = 20000
warmup_iters = 500
learning_rate = 5e-3
weight_decay = 1e-4
eval_interval = 500
log_interval = 100
