# The paper's Yelp polarity classifier (the MixiT README slurm command): 4 layers, width 512,
# 8 heads, context 256, AdamW lr 8e-4, 10,000 steps, 256 reviews per step, warmup 500 (max(4%, 500)),
# weight decay 0.01 (the command says 0.07, but its shell wrapper never passes it on), evaluated on the
# whole test split (data.py's 'val' split of yelp_polarity) every 1,000 steps.
# Differences: GPT-2 BPE (the reference: a Llama tokenizer, with BOS) and mean pooling over the real tokens
# (the reference: the last real token); cosine decay to 0 instead of linear.
#   python prepare.py yelp_polarity                     # download (560k train / 38k test reviews)
#   python train.py configs/yelp_paper.py --attn=all --out_dir=out/yelp_paper                # one GPU
#   torchrun --standalone --nproc_per_node=2 train.py configs/yelp_paper.py --attn=all --out_dir=out/yelp_paper
# The step is batch_size x gradient_accumulation_steps = 128 x 2 = 256 reviews for 1 or 2 processes.
task = "yelp_polarity"
n_layer = 4
n_embd = 512
n_head = 8
block_size = 256
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
