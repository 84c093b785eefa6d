# The paper's Yelp polarity classifier, as the reference's classifier trainer (trainer_classifier.py) and its README
# slurm command ran the standard model: 4 layers, width 512, 8 heads, context 256, AdamW lr 8e-4, 10,000 steps, 256
# reviews per step (128 x 2 GPUs), warmup 500 (max(4 %, 500)), weight decay 0.01 (the command says 0.07, but its
# shell wrapper never passes it on), c- = -1, skip sqrt(0.5), non-causal, evaluated on the whole test split (our
# 'val' split of yelp_polarity) every 1,000 steps. MixiT 256 heads: the wrapper's sweep runs MixiT with 256 heads
# (at width 1,024: the second command below); the classifier never sets the multipliers' base, so 1.
# Where mixit departs: GPT-2 BPE (the reference: Llama-2's tokenizer, with BOS), mean pooling over the real tokens
# (the reference: the last real token), cosine decay instead of linear, bf16 autocast on a GPU.
# Model: 4 layers, width 512, 8 heads (MixiT 256 heads), context 256, multipliers base 1.
# Training: 10,000 steps of 256 sequences, lr 8e-4.
#   python prepare.py yelp_polarity                     # download (560k train / 38k test reviews)
#   python train.py configs/yelp_paper.py --attn=all --out_dir=out/yelp_paper                # one GPU
#   python train.py configs/yelp_paper.py --attn=mixing --n_embd=1024 --out_dir=out/yelp_paper_mixit1024
#   torchrun --standalone --nproc_per_node=2 train.py configs/yelp_paper.py --attn=all --out_dir=out/yelp_paper
# The step is batch_size x gradient_accumulation_steps = 128 x 2 = 256 reviews for 1 or 2 processes.
task = "yelp_polarity"
n_layer = 4
n_embd = 512
n_head = 8
mixing_heads = "256"
block_size = 256
base_width = 1.0
skip = 0.5 ** 0.5
cminus = -1.0
batch_size = 128
gradient_accumulation_steps = 2
max_iters = 10000
warmup_iters = 500
learning_rate = 8e-4
min_lr = 0.0
weight_decay = 0.01
beta1 = 0.9
beta2 = 0.999
grad_clip = 1.0
eval_interval = 1000
log_interval = 100
