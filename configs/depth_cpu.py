# Claim: MixiT stays trainable in depth, where the embedding-only random transformer (every block frozen at init,
# the embeddings and head trained) falls (the paper: from 100 % to about 23 % on decimal addition at 8-16 layers).
# 8 layers on 3-digit addition; both variants also fully trained and with frozen blocks, for reference. MixiT with
# 16 heads (the head count at which it solves addition at this width, configs/heads_cpu.py).
#   python train.py configs/depth_cpu.py --seeds=3
task = "addition_3"
out_dir = "out/depth_cpu"
attn = "softmax,mixing"
freeze = ",blocks"
mixing_heads = "16"
n_layer = 8
n_embd = 64
n_head = 4
batch_size = 128
max_iters = 1500
eval_interval = 250
log_interval = 250
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
