# Claim 6 at the random-transformer paper's size (random_transformers experiment_stream.py and its README):
# embedding-only training on decimal addition, parenthesis balancing and needle-in-a-haystack retrieval,
# 2 layers, width 512 (the README passes wider models than the runner's d = 16), 4 heads, 1,000 sequences a step,
# AdamW lr 1e-3, weight decay 1e-3, warmup 500, cosine, 10,000 steps. MixiT with 64 heads: the MixiT reference's
# scripts/depth_array.sh runs embedding-only MixiT (its default weight_frozen=1) at 4, 32 and 64 heads.
# Where mixit departs: a Llama-style block (the random_transformers runner: GPT-2); bf16 autocast on a GPU.
# Model: 2 layers, width 512, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 10,000 steps of 1,000 sequences, lr 1e-3.
#   python train.py configs/random_paper.py --seeds=3                       # one GPU
task = "addition_10,dyck_30,retrieval_30"
out_dir = "out/random_paper"
attn = "softmax,mixing"
freeze = "blocks"
n_layer = 2
n_embd = 512
n_head = 4
mixing_heads = "64"
base_width = 512.0
batch_size = 1000
max_iters = 10000
warmup_iters = 500
learning_rate = 1e-3
weight_decay = 1e-3
eval_interval = 500
log_interval = 100
