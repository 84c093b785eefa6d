# Claim 5: sentiment classification (Yelp polarity), the variants' accuracies side by side. The README's
# numbers come from a sample of star-rated reviews: 4,484 train and 4,455 test after dropping 3-star ones (the
# prepared meta.json says so). The model reads the first 128 GPT-2 tokens of a review (non-causal), mean-pooled;
# MixiT's multipliers take the reference classifier's base, 1 (train.py's default for classifiers): every MixiT
# linear's output times 1/sqrt(fan_in).
# Model: 2 layers, width 128, 4 heads (MixiT 16 heads), context 128, multipliers base 1.
# Training: 200 steps of 32 sequences, lr 1e-3.
#   python prepare.py yelp_polarity --src=PATH/yelp_reviews_stars --bpe_dir=PATH/gpt2_bpe   # once
#   python train.py configs/yelp_cpu.py --attn=all --seeds=3
# (without an offline copy, drop --src and --bpe_dir: prepare.py downloads the 560k/38k-review dataset.)
task = "yelp_polarity"
out_dir = "out/yelp_cpu"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "16"
block_size = 128
batch_size = 32
max_iters = 200  # 6,400 reviews, 1.4 epochs
eval_interval = 100  # the whole test split (4,455 reviews)
log_interval = 50
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 20
weight_decay = 0.01
device = "cpu"
