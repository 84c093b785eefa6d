# Beyond the paper: how much trained attention does language need, where, and when? Byte-level WikiText-2 (as
# lm_cpu), 4 layers: all-mixing, all-softmax, and one softmax layer at each depth among mixing layers (smmm .. mmms).
# Every layer of a pattern has the same width and heads (MixiT too); a hybrid takes MixiT's parametrization
# (parametrization=auto), all-softmax the standard one. induction_layers: the best head's induction score in each
# layer on repeated random tokens, beside the model's at init (induction_init).
# The budget: 4x lm_cpu's steps at an eighth of its tokens a step. At 32 sequences a step over 1,440 steps, all-softmax
# went 1.57 -> 1.42 nats per byte from step 720 on and all-mixing (16 heads) 2.37 -> 2.35: the gap was set by then.
# Model: 4 layers, width 64, 4 heads, context 64.
# Training: 720 steps of 16 sequences, lr 3e-3.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --tokenizer=bytes --name=wikitext2_bytes   # once
#   python train.py configs/hybrid_lm_cpu.py --seeds=3
# Where else: two softmax layers at each pair, and one Frozen-QK layer at the best single depth (the last):
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=ssmm,smsm,smms,mssm,msms,mmss --out_dir=out/hybrid_lm_two
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=mmmf --out_dir=out/hybrid_lm_frozen
# Placement read apart from parametrization: the ends and the best hybrid in the other parametrization
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=ssss --parametrization=mixit --out_dir=out/hybrid_lm_mixit
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=mmmm,mmms --parametrization=standard \
#       --out_dir=out/hybrid_lm_standard
# When: Frozen-QK's W_Q, W_K train from the start, from half way, or never; MixiT's matrices learned from half way
# or throughout (4 heads, as the patterns):
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=frozen_qk --unfreeze_at=0%,50%,never --out_dir=out/hybrid_lm_when
#   python train.py configs/hybrid_lm_cpu.py --seeds=3 --attn=learned_mixing --unfreeze_at=50%,never \
#       --out_dir=out/hybrid_lm_learned
task = "wikitext2_bytes"
out_dir = "out/hybrid_lm_cpu"
attn = "mmmm,ssss,smmm,msmm,mmsm,mmms"
eval_iters = 8
n_layer = 4
n_embd = 64
n_head = 4
mixing_heads = ""  # MixiT (--attn=mixing) at n_head too: every layer with the same heads
block_size = 64
skip = 0.5
batch_size = 16
max_iters = 720
eval_interval = 180
log_interval = 180
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 20
weight_decay = 0.01
device = "cpu"
