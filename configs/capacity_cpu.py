# Claim: MLPs carry memorization (the paper's Table 4, bits per parameter at 2 layers: standard 2.98, Frozen-QK 2.25,
# MixiT 2.18, Frozen-MLP 1.13). A table of 256^2 = 65,536 random labels (524k bits) is more than a width-32 model
# can hold, so the metric bits_per_param (label bits held / trainable parameters) measures its capacity.
# Settings: batch 4,096, lr 5e-3 and weight decay 1e-4 (the reference's memorization runner), 2,000 steps.
#   python train.py configs/capacity_cpu.py --seeds=3
task = "memorize_256"
out_dir = "out/capacity_cpu"
attn = "all"
freeze = ",mlp"
mixing_heads = "16"
n_embd = 32
n_head = 4
batch_size = 4096
max_iters = 2000
eval_interval = 500
log_interval = 500
learning_rate = 5e-3
weight_decay = 1e-4
warmup_iters = 100
device = "cpu"
