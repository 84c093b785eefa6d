# Claim: MixiT stays trainable in depth where the embedding-only random transformer falls. Value by value, from
# scripts/depth.sh (run by scripts/run_depth.sh), the reference's one launcher of deep models, and where mixit departs:
#   8 layers, width 512, MixiT 128 heads (depth.sh); the standard model 4 heads (depth_array.sh's, as depth.sh has
#     no standard-model setting); --n_layer=16 for the paper's deeper point.
#   What trains: everything (depth.sh's weight_frozen=0) and, beside it, the blocks frozen (the random transformer,
#     the runner's default weight_frozen=1).
#   40,000 steps of 1,000: depth.sh asks for 500 "epochs" x 80,000 / 1,000, through --train_steps, a flag the
#     runner's argument parser rejects (as written the launcher stops at once; this is what it meant).
#   AdamW lr 1e-2 (depth.py's global), weight decay 1e-3, warmup 500, cosine; skip sqrt(0.5), c- = -1 (depth.py),
#     multipliers base 512.
#   Departures: addition scores every answer digit; bf16 on a GPU (the reference: fp32).
# Model: 8 layers, width 512, 4 heads (MixiT 128 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/depth_paper.py --seeds=3
task = "addition_10"
out_dir = "out/depth_paper"
attn = "softmax,mixing"
freeze = ",blocks"
n_layer = 8
n_embd = 512
n_head = 4
mixing_heads = "128"
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
