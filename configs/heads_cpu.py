# Claim: MixiT needs many heads for arithmetic (the paper: decimal addition rises from 35 % to 92 % as MixiT's
# heads grow to 256). MixiT at 1, 4, 16 and 64 heads beside the standard transformer at 4, on 3-digit addition: a
# CPU-sized version of the reference's algorithmic runner (AdamW, cosine decay), head counts from its sweep (4, 32,
# 64) and around it.
# Model: 2 layers, width 64, 4 heads (MixiT 1, 4, 16, 64 heads).
# Training: 1,500 steps of 128 sequences, lr 3e-3.
#   python train.py configs/heads_cpu.py --seeds=3
# One head is the sink head alone. Each noise head's std is drawn in [1/sqrt(T d_h), 1/sqrt(T)], d_h = 64/H: more heads
# raise the lower end (at 64 heads every head has 1/sqrt(T)). The same sweep with that range held at 4 heads' (T = 12):
#   python train.py configs/heads_cpu.py --seeds=3 --attn=mixing --mixing_heads=4,16,64 --sigma_min=0.0722 --out_dir=out/heads_fixed_range
task = "addition_3"
out_dir = "out/heads_cpu"
attn = "softmax,mixing"
n_layer = 2
n_embd = 64
n_head = 4
mixing_heads = "1,4,16,64"
batch_size = 128
max_iters = 1500
eval_interval = 250
log_interval = 250
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
