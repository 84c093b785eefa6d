# Claim 1 at the paper's size, as the reference's algorithmic runner (depth.py) runs additionstream_10 (our
# addition_10, T = 34). Value by value, and where mixit departs:
#   2 layers, width 512: the README command and scripts/depth_array.sh. Heads: the standard model 4 (both), MixiT 64
#     (depth_array.sh sweeps 4, 32, 64 at widths 512 and 1,024: its largest at the README's width).
#   What trains: everything (the README's slurm example, weight_frozen=0). The README's python command and
#     depth_array.sh's default (weight_frozen=1) train the embeddings only: add --freeze=blocks for that model.
#   40,000 steps of 1,000 (the README command: max_steps 500 "epochs" x 80,000 / 1,000). depth_array.sh runs the
#     same 40M sequences as 312,500 steps of 128: --batch_size=128 --max_iters=312500.
#   AdamW lr 1e-2 (depth.py's global: no launcher overrides it; the slurm example's 5e-4 is never passed on), weight
#     decay 1e-3, warmup 500, cosine, clip 1.0; skip sqrt(0.5), c- = -1 (depth.py), multipliers base 512.
#   Departures: the model class is the launchers' Llama block (the README's python command builds its GPT-2 one);
#   addition scores every answer digit (the reference skips the first and scores the PAD after STOP); bf16 on a GPU.
# Model: 2 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/arithmetic_paper.py --attn=all --seeds=3         # one GPU
# dyckstream_40 (T = 83) trains on a 200,000-row "epoch": 500 x 200,000 / 1,000 = 100,000 steps (the README's
# slurm example: 300 x 200,000 / 256 = 234,375 steps of 256):
#   python train.py configs/arithmetic_paper.py --task=dyck_40 --max_iters=100000 --attn=all --seeds=3 \
#       --out_dir=out/dyck_paper
# modadd_exp.py: 4,000 pairs a step, lr 1e-3, warmup 50, 20,000 steps; p = 599 as the paper (the script's default
# is modadds_199; it builds a GPT-2 MixiT that trains its embeddings only, --freeze=blocks here):
#   python train.py configs/arithmetic_paper.py --task=modadd_599 --batch_size=4000 --learning_rate=1e-3 \
#       --warmup_iters=50 --max_iters=20000 --attn=all --seeds=3 --out_dir=out/modadd_paper
# memorization: configs/memorization_paper.py
task = "addition_10"
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
