# Claim 5: sentiment classification (Yelp polarity), the variants' accuracies side by side. The README's
# numbers come from a sample of star-rated reviews: 4,484 train and 4,455 test after dropping 3-star ones (the
# prepared meta.json says so; 74.4 % of the test reviews are positive, the chance level). The model reads the first
# 128 GPT-2 tokens of a review (non-causal), mean-pooled; MixiT's multipliers take the reference classifier's base, 1
# (train.py's default for classifiers): every MixiT linear's output times 1/sqrt(fan_in).
# Model: 2 layers, width 128, 4 heads (MixiT 16 heads), context 128, multipliers base 1.
# Training: 200 steps of 32 sequences, lr 1e-3.
#   python prepare.py yelp_polarity --src=PATH/yelp_reviews_stars --bpe_dir=PATH/gpt2_bpe   # once
#   python train.py configs/yelp_cpu.py --attn=all --seeds=3
# (without an offline copy, drop --src and --bpe_dir: prepare.py downloads the 560k/38k-review dataset.)
# Toward the reference's classifier, one change at a time, then all together, then budget and width:
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=softmax,mixing --pool=last --out_dir=out/yelp_cpu_last
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=softmax,mixing --pads=attended --out_dir=out/yelp_cpu_attended
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=mixing --centring=reference --out_dir=out/yelp_cpu_centring
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=softmax,mixing --learning_rate=5e-3 --out_dir=out/yelp_cpu_lr
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=softmax,mixing --pool=last --pads=attended \
#       --centring=reference --learning_rate=5e-3 --out_dir=out/yelp_cpu_reference
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=mixing --base_width=512 --out_dir=out/yelp_cpu_base512
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=mixing --mixing_heads=64 --out_dir=out/yelp_cpu_h64
#   python train.py configs/yelp_cpu.py --seeds=3 --attn=softmax,mixing --max_iters=800 --out_dir=out/yelp_cpu_long
# Attention apart from parametrization (each attention in each, MixiT's at base 1), and the bag-of-words floor (a
# model of 0 layers: embeddings, norm, mean pooling, head):
#   python train.py configs/yelp_cpu.py --seeds=3 --eval_interval=50 --attn=softmax,mixing --parametrization=standard --out_dir=out/yelp_std
#   python train.py configs/yelp_cpu.py --seeds=3 --eval_interval=50 --attn=softmax,mixing --parametrization=mixit --out_dir=out/yelp_mixit
#   python train.py configs/yelp_cpu.py --seeds=3 --eval_interval=50 --attn=softmax --n_layer=0 --out_dir=out/yelp_bow
# MixiT with head 1 the prefix mean (configs/arithmetic_cpu.py says why):
#   python train.py configs/yelp_cpu.py --attn=mixing --seeds=3 --fixed_head=mean --out_dir=out/yelp_cpu_mean
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
