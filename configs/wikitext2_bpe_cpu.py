# WikiText-2 language modeling on a small CPU: every variant at one small size, about 6 minutes each on
# 2 cores (GPT-2 BPE, vocab padded to 50304, so at this width the embedding and the head hold most parameters and
# most of the compute). 205k training tokens: enough to rank nothing but gross failures; configs/lm_paper.py is the
# paper's setup. MixiT's residual scaling s = 0.5 as the reference's LM trainer.
# Model: 4 layers, width 256, 4 heads (MixiT 16 heads), context 128.
# Training: 100 steps of 16 sequences, lr 2e-3.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --bpe_dir=PATH/gpt2_bpe   # once
#   python train.py configs/wikitext2_bpe_cpu.py --attn=all --out_dir=out/wikitext2_bpe_cpu
# val_ppl is exp(val_loss) on a fixed sample of eval_iters x batch_size windows of valid.txt;
# --eval_split=test scores the whole test stream at every eval instead (about 3 minutes each here).
task = "wikitext2"
eval_iters = 8
n_layer = 4
n_embd = 256
n_head = 4
mixing_heads = "16"
block_size = 128
skip = 0.5
batch_size = 16
max_iters = 100
eval_interval = 25
log_interval = 25
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 10
weight_decay = 0.01
device = "cpu"
