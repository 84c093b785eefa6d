# Claim 4: on language modeling Frozen-QK is competitive with the standard transformer and MixiT trails.
# Byte-level WikiText-2 (vocab 257, padded to 320) so that a 2-core CPU spends its time in the blocks, not
# in a 50k-word head (737k tokens a run). val_ppl is per byte, on a fixed sample of the validation split.
# MixiT's residual scaling s = 0.5 as the reference's LM trainer (configs/lm_paper.py).
# Model: 4 layers, width 128, 4 heads (MixiT 16 heads), context 128.
# Training: 180 steps of 32 sequences, lr 3e-3.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --tokenizer=bytes --name=wikitext2_bytes   # once
#   python train.py configs/lm_cpu.py --attn=all --seeds=3
# MixiT as the reference's LM launchers run it (depth_alpha 1: residual h + (4/4) f(h) here, no identity in the
# matrix; then with their c- = +1 too):
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --depth_alpha=1.0 --out_dir=out/lm_cpu_alpha
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --depth_alpha=1.0 --cminus=1.0 --out_dir=out/lm_cpu_launcher
# (without an offline copy, drop --src: prepare.py downloads WikiText-2.) configs/wikitext2_bpe_cpu.py is the
# GPT-2 BPE version of this run, configs/lm_paper.py the paper's setup.
# MixiT with head 1 the prefix mean (configs/arithmetic_cpu.py says why):
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --fixed_head=mean --out_dir=out/lm_cpu_mean
# and with head 1 the previous token (the pattern the trained softmax model forms and MixiT's heads cannot):
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --fixed_head=previous --out_dir=out/lm_cpu_previous
# At other learning rates:
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --learning_rate=1e-3 --min_lr=1e-4 --out_dir=out/lm_cpu_lr1e-3
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --learning_rate=1e-2 --min_lr=1e-3 --out_dir=out/lm_cpu_lr1e-2
# In bf16 autocast, the dtype a GPU run takes (here on the CPU):
#   python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --dtype=bfloat16 --out_dir=out/lm_cpu_bf16
# The floor, a model of 0 layers (byte embedding, norm, head: a bigram) at the same budget; every run logs the counted
# bigram's loss as val_loss_floor:
#   python train.py configs/lm_cpu.py --attn=softmax --n_layer=0 --seeds=3 --out_dir=out/lm_bigram
task = "wikitext2_bytes"
out_dir = "out/lm_cpu"
eval_iters = 8
n_layer = 4
n_embd = 128
n_head = 4
mixing_heads = "16"
block_size = 128
skip = 0.5
batch_size = 32
max_iters = 180
eval_interval = 45
log_interval = 45
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 20
weight_decay = 0.01
device = "cpu"
