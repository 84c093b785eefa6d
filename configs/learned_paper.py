# Beyond the paper: learned or input-dependent, at the reference algorithmic runner's size (2 layers, width 512, 1,000
# sequences a step, weight decay 1e-3, warmup 500, cosine, 40,000 steps: depth.py): fixed mixing, the same matrices
# trained, and softmax attention, all with 64 heads (equal heads: the most of depth_array.sh's MixiT sweep), on
# 10-digit addition, the reference's memorization table, retrieval over up to 30 pairs and multi-query recall over up
# to 16. Expected time on one GPU: not yet measured.
# Where mixit departs: lr 1e-3 (depth.py: 1e-2, at which a 64-head softmax model is untested); bf16 autocast on a GPU.
# Model: 2 layers, width 512, 64 heads (MixiT 64 heads), multipliers base 512.
# Training: 40,000 steps of 1,000 sequences, lr 1e-3.
#   python train.py configs/learned_paper.py --seeds=3
task = "addition_10,memorize_512,retrieval_30,mqar_16"
out_dir = "out/learned_paper"
attn = "mixing,learned_mixing,softmax"
n_layer = 2
n_embd = 512
n_head = 64
mixing_heads = "64"
base_width = 512.0
batch_size = 1000
max_iters = 40000
warmup_iters = 500
learning_rate = 1e-3
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
