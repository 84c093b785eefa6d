# The paper's language-modeling setup (the MixiT README command): WikiText-103, 12 layers,
# width 512, 8 heads, context 256, AdamW lr 5e-4 with weight decay 0.01, 40,000 steps with 1,600 warmup
# (4%), 512 sequences per step, evaluated on the whole test split (the reference's eval split).
# Differences: GPT-2 BPE (the reference: a Llama tokenizer), packed windows instead of one padded line per
# sequence, and cosine decay to 0 instead of linear. Compare variants at the same settings.
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
block_size = 256
skip = 0.5  # the reference LM trainer's skip_scaling (MixiT residual s = 0.5, r = sqrt(0.75))
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
