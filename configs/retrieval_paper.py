# Claim 2: MixiT fails retrieval; Frozen-QK forms induction heads. Value by value, from the reference's algorithmic
# runner (depth.py) as its README command and scripts/depth_array.sh run it, and where mixit departs:
#   condattendstream_30 (our retrieval_30: up to 30 pairs, vocab 512, T = 63); 2 layers, width 512, 4 heads (the
#     README command), MixiT 64 heads (depth_array.sh sweeps 4, 32, 64).
#   What trains: everything (weight_frozen=0, the README's slurm example); --freeze=blocks for the launchers' default.
#   100,000 steps of 1,000: the README command's max_steps 500 "epochs" x this task's 200,000-row epoch / 1,000
#     (depth_array.sh: the same 100M sequences as 781,250 steps of 128).
#   AdamW lr 1e-2 (depth.py's global), weight decay 1e-3, warmup 500, cosine; skip sqrt(0.5), c- = -1, base 512.
#   Also induction_16: our single-hop induction task, for the induction score (the paper's 16-hop induction over
#     5 layers is another task, not built in).
#   Departures: Frozen-QK's W_Q, W_K ~ N(0, 1/n), the paper's (the reference: 0.02, --qk_init=reference); bf16 on a GPU.
# Model: 2 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 100,000 steps of 1,000 sequences, lr 1e-2.
#   python train.py configs/retrieval_paper.py --attn=all --seeds=3          # one GPU
task = "retrieval_30,induction_16"
out_dir = "out/retrieval_paper"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "64"
base_width = 512.0
skip = 0.5 ** 0.5
cminus = -1.0
batch_size = 1000
max_iters = 100000
warmup_iters = 500
learning_rate = 1e-2
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
