# The paper's language-modeling setup, as the reference's LM trainer (trainer.py) and its README command run it,
# value by value, and where mixit departs:
#   WikiText-103, 12 layers, width 512, 8 heads for every variant, MixiT included (the command's one --n_head),
#   context 256, 512 sequences a step, AdamW lr 5e-4, weight decay 0.01, 40,000 steps, warmup max(4 %, 500) = 1,600,
#   fp32 weights, evaluated on the whole test split (the reference's eval split); MixiT's parametrization:
#   skip_scaling 0.5 and c- = -1 (trainer.py's defaults), multipliers base 512.
# Its slurm launchers (scripts/run_train.sh -> train.sh) run another MixiT: depth_alpha = 1.0 (every model's residual
# h + (4/12) f(h), MixiT's matrix without its identity, noise std 1/sqrt(T) in every head) and c- = +1, for 80,000
# steps of 512 (the README's slurm example), with Llama-2's tokenizer (train.sh never passes --llama3):
#   python train.py configs/lm_paper.py --attn=mixing --depth_alpha=1.0 --cminus=1.0 --max_iters=80000 \
#       --warmup_iters=3200 --out_dir=out/lm_paper_launcher
# Departures: GPT-2 BPE (the reference: Llama-3.2's tokenizer with --llama3, else Llama-2's; losses per token are not
# comparable across tokenizers), packed windows instead of one padded line per sequence (--lm_rows=lines takes the
# reference's rows), cosine decay instead of linear, bf16 autocast on a GPU.
# Model: 12 layers, width 512, 8 heads (MixiT 8 heads), context 256, multipliers base 512.
# Training: 40,000 steps of 512 sequences, lr 5e-4.
#   python prepare.py wikitext103                       # download; offline: --src=DIR with wiki.{train,valid,test}.raw
#   python train.py configs/lm_paper.py --attn=mixing --out_dir=out/lm_paper     # one GPU: 8 micro-batches a step
#   torchrun --standalone --nproc_per_node=8 train.py configs/lm_paper.py --attn=all --out_dir=out/lm_paper
# The step is batch_size x gradient_accumulation_steps = 64 x 8 = 512 sequences (131k tokens) for any number
# of processes that divides 8; lower batch_size and raise gradient_accumulation_steps if memory is short.
task = "wikitext103"
eval_split = "test"
n_layer = 12
n_embd = 512
n_head = 8
mixing_heads = "8"
block_size = 256
base_width = 512.0
skip = 0.5
cminus = -1.0
batch_size = 64
gradient_accumulation_steps = 8
max_iters = 40000
warmup_iters = 1600
learning_rate = 5e-4
min_lr = 0.0
weight_decay = 0.01
beta1 = 0.9
beta2 = 0.999
grad_clip = 1.0
eval_interval = 400
log_interval = 100
