# Claim 4 where every model can clear its floor: WikiText-2 in GPT-2 BPE on one GPU, the three variants at one size,
# one head count (6) for every variant, MixiT included, as the paper uses one (8) for all. Floors: the counted bigram
# on the models' own evaluation sample (val_loss_floor in the logs; add-one smoothed over GPT-2's 50,257 tokens, so
# weak) and a model of no
# layers trained at the same budget (below). 1,000 steps of 32 x 256 tokens: 8.2M tokens, 3.3 passes over the 2.4M
# training tokens. MixiT's residual scaling s = 0.5 as configs/lm_paper.py. Cost, one NVIDIA H200 (bf16, eager): 3
# seeds of each variant in 2 min 56 s of wall time as three processes side by side; the floor's 3 seeds in 48 s.
# It departs from the paper's setup (configs/lm_paper.py) in size: WikiText-2, not 103; 6 layers of 384, not 12 of
# 512; 8.2M training tokens, not 5.2B.
# Model: 6 layers, width 384, 6 heads (MixiT 6 heads), context 256.
# Training: 1,000 steps of 32 sequences, lr 1e-3.
#   python prepare.py wikitext2 --src=PATH/wikitext-2 --bpe_dir=PATH/gpt2_bpe   # once (drop --src to download)
#   python train.py configs/lm_gpu.py --attn=all --seeds=3
# The floor that reads only the last token, trained at the same budget (a model of no layers):
#   python train.py configs/lm_gpu.py --attn=softmax --n_layer=0 --seeds=3 --out_dir=out/lm_gpu_bigram
task = "wikitext2"
out_dir = "out/lm_gpu"
eval_iters = 20
n_layer = 6
n_embd = 384
n_head = 6
mixing_heads = ""
block_size = 256
skip = 0.5
batch_size = 32
max_iters = 1000
eval_interval = 250
log_interval = 250
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 100
weight_decay = 0.01
compile = False  # eager, as measured: small models, and no compile wait
