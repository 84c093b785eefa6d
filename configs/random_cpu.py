# Claim 6, for context: the "random transformer" of Zhong & Andreas, where only the embeddings, the final
# norm and the head train (--freeze=blocks), under standard and under MixiT attention, on the algorithmic
# tasks of configs/arithmetic_cpu.py at the same width (its table holds the fully trained rows).
# Model: 2 layers, width 64, 4 heads (MixiT 16 heads).
# Training: 600 steps of 128 sequences, lr 3e-3.
#   python train.py configs/random_cpu.py --seeds=3
task = "addition_3,modadd_47,memorize_32,dyck_8"
out_dir = "out/random_cpu"
attn = "softmax,mixing"
freeze = "blocks"
n_layer = 2
n_embd = 64
n_head = 4
mixing_heads = "16"
batch_size = 128
max_iters = 600
eval_interval = 100
log_interval = 100
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
