# Claim 3: MLPs carry memorization. Random labels for every pair (a, b): memorize_32 (1,024 pairs) and
# memorize_64 (4,096 pairs, the larger table), with the MLPs trainable or frozen at init, under standard
# attention and under MixiT's fixed attention. Accuracy is on the training table (nothing to generalize).
#   python train.py configs/memorization_cpu.py --seeds=3
task = "memorize_32,memorize_64"
out_dir = "out/memorization_cpu"
attn = "softmax,mixing"
freeze = ",mlp"
mixing_heads = "16"  # MixiT with many heads, as the paper makes this claim
batch_size = 512
max_iters = 400
eval_interval = 100
log_interval = 100
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
