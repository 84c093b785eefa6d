# Claim: MixiT stays trainable in depth, where the embedding-only random transformer (every block frozen at init,
# the embeddings and head trained) falls (the paper: from 100 % to about 23 % on decimal addition at 8-16 layers).
# 8 layers on 3-digit addition; both variants also fully trained and with frozen blocks, for reference. MixiT with
# 16 heads (the head count at which it solves addition at this width, configs/heads_cpu.py); the main job's settings.
# Model: 8 layers, width 64, 4 heads (MixiT 16 heads).
# Training: 1,000 steps of 64 sequences, lr 1e-3.
#   python train.py configs/depth_cpu.py --seeds=3
task = "addition_3"
out_dir = "out/depth_cpu"
attn = "softmax,mixing"
freeze = ",blocks"
n_layer = 8
n_embd = 64
n_head = 4
mixing_heads = "16"
batch_size = 64
max_iters = 1000
eval_interval = 250
log_interval = 250
learning_rate = 1e-3
warmup_iters = 50
device = "cpu"
