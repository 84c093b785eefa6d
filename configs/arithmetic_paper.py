# Claim 1 at the paper's size, as the reference's algorithmic runner (depth.py) ran it: additionstream_10 (our
# addition_10, T = 34) and dyckstream_40 (dyck_40, T = 83). Where each value comes from:
#   2 layers, width 512, 4 heads for the standard model: the README command and scripts/depth_array.sh;
#   MixiT 64 heads: depth_array.sh sweeps 4, 32 and 64 heads for MixiT (64: the most, where it does best);
#   1,000 sequences a step: the task files; 40,000 steps: max_steps 500 "epochs" x 80,000 / 1,000;
#   AdamW lr 1e-2 (depth.py's global, never overridden), weight decay 1e-3, warmup 500, cosine to 0, clip 1.0;
#   MixiT's parametrization: skip sqrt(0.5) and c- = -1 (depth.py), multipliers base 512.
# Where mixit departs: addition scores every answer digit (the reference skips the first and scores the PAD after
# STOP); bf16 autocast on a GPU (the reference: fp32).
# Model: 2 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/arithmetic_paper.py --attn=all --seeds=3         # one GPU
# The table tasks of the claim have their own runners; the same file with their settings:
#   modadds_199 (modadd_exp.py: 4,000 pairs a step, lr 1e-3, warmup 50, 20,000 steps):
#   python train.py configs/arithmetic_paper.py --task=modadd_199 --batch_size=4000 --learning_rate=1e-3 \
#       --warmup_iters=50 --max_iters=20000 --attn=all --seeds=3 --out_dir=out/modadd_paper
#   memorization: configs/memorization_paper.py
task = "addition_10,dyck_40"
out_dir = "out/arithmetic_paper"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "64"
base_width = 512.0
skip = 0.5 ** 0.5
cminus = -1.0
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
grad_clip = 1.0
eval_interval = 500
log_interval = 100
