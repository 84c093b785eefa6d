# Claim: MLPs carry memorization (the paper's Table 4, bits per parameter at 2 layers: standard 2.98, Frozen-QK 2.25,
# MixiT 2.18, Frozen-MLP 1.13). A table of 128^2 = 16,384 random labels (115k bits) is more than a width-32 model
# (~40k trainable parameters) can hold at ~2 bits each, so bits_per_param (label bits held / trainable parameters)
# measures its capacity. lr 5e-3 and weight decay 1e-4 as the reference's memorization runner; 94 passes over the
# table.
# Model: 2 layers, width 32, 4 heads (MixiT 16 heads).
# Training: 1,500 steps of 1,024 sequences, lr 5e-3.
#   python train.py configs/capacity_cpu.py --seeds=3
# bits_ceiling: each variant's bits per parameter with the whole table held. MixiT at multiplier x1, and 4x longer:
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --base_width=32 --out_dir=out/capacity_cpu_x1
#   python train.py configs/capacity_cpu.py --seeds=3 --freeze= --max_iters=6000 --out_dir=out/capacity_cpu_long
# Frozen-MLP at 4x, and MixiT in the standard parametrization (attention apart from parametrization) at 1x and 4x:
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=softmax --freeze=mlp --max_iters=6000 --out_dir=out/capacity_frozen_mlp_6k
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --parametrization=standard --out_dir=out/capacity_mixit_std
# MixiT's parametrization with one part standard (residual, activation, multipliers or positions), e.g.:
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --standard_parts=activation --out_dir=out/capacity_part_activation
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --parametrization=standard --max_iters=6000 --out_dir=out/capacity_mixit_std_6k
# MixiT and Frozen-MLP, not at a plateau by 6,000 steps, at 16x:
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --max_iters=24000 --eval_interval=6000 --out_dir=out/capacity_mixit_24k
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=softmax --freeze=mlp --max_iters=24000 --eval_interval=6000 --out_dir=out/capacity_frozen_mlp_24k
# At 64x, and MixiT in the standard parametrization (not at a plateau by 6,000 steps) at 16x:
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --max_iters=96000 --eval_interval=24000 --out_dir=out/capacity_mixit_96k
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=softmax --freeze=mlp --max_iters=96000 --eval_interval=24000 --out_dir=out/capacity_frozen_mlp_96k
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --parametrization=standard --max_iters=24000 --eval_interval=6000 --out_dir=out/capacity_mixit_std_24k
# At 256x (MixiT and Frozen-MLP, not at a plateau by 64x; about 1.9 and 2.9 hours a seed on a 2-core CPU):
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= --max_iters=384000 --eval_interval=24000 --log_interval=6000 --out_dir=out/capacity_mixit_384k
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=softmax --freeze=mlp --max_iters=384000 --eval_interval=24000 --log_interval=6000 --out_dir=out/capacity_frozen_mlp_384k
# At 1,024x, where Frozen-MLP (+5.6 % from 64x to 256x) may level off: about 11 hours a seed on one core of a 2-core
# CPU, 1.6 on an H100 (add --device=cuda --dtype=float32, as measured there):
#   python train.py configs/capacity_cpu.py --seeds=3 --attn=softmax --freeze=mlp --max_iters=1536000 --eval_interval=24000 --log_interval=6000 --out_dir=out/capacity_frozen_mlp_1536k
task = "memorize_128"
out_dir = "out/capacity_cpu"
attn = "all"
freeze = ",mlp"
n_layer = 2
n_embd = 32
n_head = 4
mixing_heads = "16"
batch_size = 1024
max_iters = 1500
eval_interval = 500
log_interval = 500
learning_rate = 5e-3
weight_decay = 1e-4
warmup_iters = 100
device = "cpu"
