# Beyond the paper: learned or input-dependent? MixiT's fixed mixing, the same matrices trained (learned_mixing:
# attention that learns but never reads its input, the Synthesizer's trainable random attention) and softmax
# attention, at equal width and heads, on decimal addition, memorization, in-context recall and multi-query recall.
# Model: 2 layers, width 64, 4 heads (MixiT 4 heads: equal heads).
# Training: 1,200 steps of 64 sequences, lr 1e-3.
#   python train.py configs/learned_cpu.py --seeds=3
# Fixed against learned mixing at 16 heads, where fixed mixing works (configs/heads_cpu.py):
#   python train.py configs/learned_cpu.py --seeds=3 --attn=mixing,learned_mixing --n_head=16 --mixing_heads= --out_dir=out/learned_h16
task = "addition_3,memorize_32,retrieval_4,mqar_3"
out_dir = "out/learned_cpu"
attn = "mixing,learned_mixing,softmax"
n_layer = 2
n_embd = 64
n_head = 4
mixing_heads = ""
batch_size = 64
max_iters = 1200
eval_interval = 200
log_interval = 200
learning_rate = 1e-3
warmup_iters = 50
device = "cpu"
