# Claim: MixiT stays trainable in depth, where the embedding-only random transformer (every block frozen at init,
# the embeddings and head trained) falls (the paper: from 100 % to about 23 % on decimal addition at 8-16 layers).
# 8 layers on 3-digit addition; both variants also fully trained and with frozen blocks, for reference. MixiT with
# 16 heads (the head count at which it solves addition at this width, configs/heads_cpu.py); the main job's settings.
# Model: 8 layers, width 64, 4 heads (MixiT 16 heads).
# Training: 1,000 steps of 64 sequences, lr 1e-3.
#   python train.py configs/depth_cpu.py --seeds=3
# The embedding-only comparison in depth, where a 2-layer random transformer learns its task (addition does not at
# CPU widths: 0.48 at width 256 after 1,000 steps, its chance level 0.33): Dyck-16 at 2, 4, 8 and 16 layers:
#   python train.py configs/depth_cpu.py --seeds=3 --task=dyck_16 --freeze=blocks --n_layer=2 --batch_size=128 \
#       --max_iters=600 --learning_rate=3e-3 --out_dir=out/depth_dyck_cpu/L2        # and L4, L8, L16 with --n_layer
# The same with MixiT's head 1 the prefix mean (--fixed_head=mean), which a random softmax layer forms at init:
#   python train.py configs/depth_cpu.py --seeds=3 --task=dyck_16 --freeze=blocks --attn=mixing --fixed_head=mean \
#       --n_layer=2 --batch_size=128 --max_iters=600 --learning_rate=3e-3 --out_dir=out/depth_dyck_mean/L2  # L4-L16
# The random transformer at 16 layers in MixiT's parametrization with one of its parts standard (residual,
# activation, multipliers or positions), e.g.:
#   python train.py configs/depth_cpu.py --seeds=3 --task=dyck_16 --freeze=blocks --batch_size=128 --max_iters=600 \
#       --learning_rate=3e-3 --n_layer=16 --parametrization=mixit --attn=softmax --standard_parts=residual \
#       --out_dir=out/depth_part_residual
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
