# Claim 1: MixiT matches the standard transformer on arithmetic and memorization. Decimal addition
# (addition_3: 3-digit operands), modular addition (modadd_47: 95% of the 2,209 pairs train, 5% test),
# memorization of random labels (memorize_32) and parenthesis balancing (dyck_8). The paper's budgets are 20-300x
# larger (configs/arithmetic_paper.py).
# Model: 2 layers, width 64, 4 heads (MixiT 16 heads: the paper makes this claim with many heads, configs/heads_cpu.py).
# Training: 1,500 steps of 128 sequences, lr 3e-3.
#   python train.py configs/arithmetic_cpu.py --attn=all --seeds=3
task = "addition_3,modadd_47,memorize_32,dyck_8"
out_dir = "out/arithmetic_cpu"
n_layer = 2
n_embd = 64
n_head = 4
mixing_heads = "16"
batch_size = 128
max_iters = 1500
eval_interval = 250
log_interval = 250
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
