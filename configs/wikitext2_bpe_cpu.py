# WikiText-2 language modeling on a small CPU: every variant at one small size, about 6 minutes each on
# 2 cores (3.3 s per step; GPT-2 BPE, vocab padded to 50304, so at this width the embedding and the head
# hold most parameters and most of the compute). 205k training tokens: enough to rank nothing but gross
# failures; configs/lm_paper.py is the paper's setup.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --bpe_dir=PATH/gpt2_bpe   # once
#   python train.py configs/wikitext2_bpe_cpu.py --attn=all --out_dir=out/wikitext2_bpe_cpu
# val_ppl is exp(val_loss) on a fixed sample of eval_iters x batch_size windows of valid.txt;
# --eval_split=test scores the whole test stream at every eval instead (about 3 minutes each here).
task = "wikitext2"
eval_iters = 8
n_layer = 4
n_embd = 256
n_head = 4
block_size = 128
skip = 0.5  # the reference LM trainer's MixiT residual scaling (as configs/lm_paper.py)
batch_size = 16  # 2,048 tokens per step, 205k tokens in all
max_iters = 100
eval_interval = 25
log_interval = 25
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 10
weight_decay = 0.01
device = "cpu"
