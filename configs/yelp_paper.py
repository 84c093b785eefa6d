# The paper's Yelp polarity classifier (trainer_classifier.py), value by value, and where mixit departs:
#   Standard model: its README slurm command: 4 layers, width 512, 8 heads, context 256, AdamW lr 8e-4, 10,000 steps
#     of 256 reviews (128 x 2 GPUs), warmup 500 (max(4 %, 500)), weight decay 0.01 (the command says 0.07, but the
#     shell wrapper never passes it on), c- = -1, evaluated on the whole test split (our 'val') every 1,000 steps.
#   MixiT: the wrapper's sweep (scripts/train_classifier.sh), second command below: width 1,024, 256 heads, its
#     default lr 5e-3 and c- = +1, 6,000 steps of 256 (64 x 4 GPUs, run_train_classifier.sh's defaults).
#   Both: multipliers base 1 (the trainer never sets it), skip sqrt(0.5), non-causal; the reference pools the last
#     real token and attends to pads (pad = eos, its embedding held at 0), and centres a non-causal MixiT's rows
#     over i + 1 columns (rows off 1): the options pool, pads and centring, set to the reference's here.
#   Departures: GPT-2 BPE (the reference: Llama-2's tokenizer, with BOS), cosine decay instead of linear, bf16 on a
#     GPU; the reference's standard classifier runs causal under its transformers 4.51 (SDPA ignores is_causal=False
#     when no mask is passed): ours reads both ways.
# Model: 4 layers, width 512, 8 heads (MixiT 256 heads), context 256, multipliers base 1.
# Training: 10,000 steps of 256 sequences, lr 8e-4.
#   python prepare.py yelp_polarity                     # download (560k train / 38k test reviews)
#   python train.py configs/yelp_paper.py --attn=softmax --out_dir=out/yelp_paper                # one GPU
#   python train.py configs/yelp_paper.py --attn=mixing --n_embd=1024 --learning_rate=5e-3 --cminus=1.0 \
#       --max_iters=6000 --out_dir=out/yelp_paper_mixit
#   torchrun --standalone --nproc_per_node=2 train.py configs/yelp_paper.py --attn=softmax --out_dir=out/yelp_paper
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
pool = "last"
pads = "attended"
centring = "reference"
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
