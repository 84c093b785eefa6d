# Claim 3: MLPs carry memorization. Random labels for every pair (a, b): memorize_32 (1,024 pairs) and
# memorize_64 (4,096 pairs, the larger table), with the MLPs trainable or frozen at init, under standard
# attention and under MixiT's fixed attention. Accuracy is on the training table (nothing to generalize).
# Model: 2 layers, width 128, 4 heads (MixiT 16 heads, as the paper makes this claim with many heads).
# Training: 400 steps of 512 sequences, lr 3e-3.
#   python train.py configs/memorization_cpu.py --seeds=3
task = "memorize_32,memorize_64"
out_dir = "out/memorization_cpu"
attn = "softmax,mixing"
freeze = ",mlp"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "16"
batch_size = 512
max_iters = 400
eval_interval = 100
log_interval = 100
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
