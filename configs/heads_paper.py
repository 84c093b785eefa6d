# Claim: MixiT needs many heads for arithmetic (the paper's Table 5: up to 256 heads). Value by value, from the
# reference's algorithmic runner (depth.py) with its README command and scripts/depth_array.sh, and where mixit departs:
#   10-digit addition, 2 layers, width 512; MixiT's heads 4, 32, 64 (depth_array.sh's sweep, which also runs them at
#     width 1,024: --n_embd=1024) and 256 (the paper's largest); the standard model 4 heads (both launchers).
#   What trains: everything (the README's slurm example, weight_frozen=0); depth_array.sh's default and the README's
#     python command train the embeddings only: --freeze=blocks.
#   40,000 steps of 1,000 (the README command's max_steps 500 x 80,000 / 1,000); depth_array.sh runs the same 40M
#     sequences as 312,500 steps of 128.
#   AdamW lr 1e-2 (depth.py's global), weight decay 1e-3, warmup 500, cosine; skip sqrt(0.5), c- = -1, base 512.
#   Departures: addition scores every answer digit; bf16 on a GPU (the reference: fp32).
# Model: 2 layers, width 512, 4 heads (MixiT 4, 32, 64, 256 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/heads_paper.py --seeds=3
task = "addition_10"
out_dir = "out/heads_paper"
attn = "softmax,mixing"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "4,32,64,256"
base_width = 512.0
skip = 0.5 ** 0.5
cminus = -1.0
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
