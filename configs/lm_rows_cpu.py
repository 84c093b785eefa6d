# Does MixiT's place against a model of no layers depend on the language-modeling pipeline? The same small model in
# both: packed (the default, nanoGPT's: the token stream in random windows) and lines (the paper's: each WikiText
# line tokenized alone, cut to the context, padded, the padding never scored; a third of the lines are empty and
# the rest average under 50 tokens here, so a step scores about a third as many tokens). WikiText-2 in GPT-2 BPE.
# val_loss is nats per token on each pipeline's own fixed validation sample (windows or lines), so the two pipelines'
# losses are not compared with each other: each model against the model of no layers in the same pipeline.
# MixiT's residual scaling s = 0.5 as the reference's LM trainer.
# Model: 6 layers, width 128, 8 heads (MixiT 8 heads), context 128.
# Training: 600 steps of 8 sequences, lr 1e-3.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --bpe_dir=PATH/gpt2_bpe   # once (drop --src to download)
#   python train.py configs/lm_rows_cpu.py --attn=mixing --seeds=3 --out_dir=out/rows_packed
#   python train.py configs/lm_rows_cpu.py --attn=mixing --seeds=3 --lm_rows=lines --out_dir=out/rows_lines
# The floor, a model of no layers (token embedding, norm, head), and softmax, at the same budget:
#   python train.py configs/lm_rows_cpu.py --attn=softmax --n_layer=0 --seeds=3 --out_dir=out/rows_packed_floor
#   python train.py configs/lm_rows_cpu.py --attn=softmax --n_layer=0 --seeds=3 --lm_rows=lines --out_dir=out/rows_lines_floor
#   python train.py configs/lm_rows_cpu.py --attn=softmax --seeds=3 --out_dir=out/rows_packed_softmax
#   python train.py configs/lm_rows_cpu.py --attn=softmax --seeds=3 --lm_rows=lines --out_dir=out/rows_lines_softmax
task = "wikitext2"
attn = "softmax,mixing"
eval_iters = 25
n_layer = 6
n_embd = 128
n_head = 8
mixing_heads = ""
block_size = 128
skip = 0.5
batch_size = 8
max_iters = 600
eval_interval = 50
log_interval = 50
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 60
weight_decay = 0.01
device = "cpu"
