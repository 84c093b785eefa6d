# WikiText-2 language modeling on a laptop CPU: every variant at one small size, ~7 minutes each on 2 cores.
#   python data.py wikitext2 --src=../shared/data/wikitext-2 --bpe_dir=../shared/data/gpt2_bpe   # once
#   python train.py configs/lm_cpu.py --attn=all --out_dir=out/lm_cpu
# GPT-2 BPE (vocab padded to 50304), so at this width the embedding and head hold most parameters.
# val_ppl is exp(val_loss) on a fixed sample of eval_iters x batch_size windows of valid.txt;
# --eval_split=test scores the whole test stream instead (slower: every eval reads all of it).
task = "wikitext2"
eval_split = "val"
eval_iters = 20
n_layer = 4
n_embd = 256
n_head = 4
block_size = 128
batch_size = 16
max_iters = 600
eval_interval = 100
log_interval = 25
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 30
weight_decay = 0.01
beta2 = 0.99
device = "cpu"
