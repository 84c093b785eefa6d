# Beyond the paper: when must attention and the MLPs learn? Frozen-QK's W_Q, W_K, alone or with every MLP also frozen
# at init, start training at 0, 25, 50 or 75 % of the run, or never, on in-context recall (retrieval_4), decimal
# addition (addition_3) and memorization (memorize_32). A late start saves their weight gradients until then:
# accuracy against training FLOPs and time (compare.png, runs.json) answers whether it pays.
# Model: 2 layers, width 64, 4 heads.
# Training: 600 steps of 64 sequences, lr 1e-3.
#   python train.py configs/when_cpu.py --seeds=3
# When against how long: the MLPs (and W_Q, W_K) train 450 steps in every run, starting at step 0, 150, 450 or 1,350:
#   python train.py configs/when_cpu.py --seeds=3 --task=memorize_32 --freeze=mlp --unfreeze_at=0 --max_iters=450 --out_dir=out/when_equal/at0
#   python train.py configs/when_cpu.py --seeds=3 --task=memorize_32 --freeze=mlp --unfreeze_at=150 --max_iters=600 --out_dir=out/when_equal/at150
#   python train.py configs/when_cpu.py --seeds=3 --task=memorize_32 --freeze=mlp --unfreeze_at=450 --max_iters=900 --out_dir=out/when_equal/at450
#   python train.py configs/when_cpu.py --seeds=3 --task=memorize_32 --freeze=mlp --unfreeze_at=1350 --max_iters=1800 --out_dir=out/when_equal/at1350
task = "retrieval_4,addition_3,memorize_32"
out_dir = "out/when_cpu"
attn = "frozen_qk"
freeze = ",mlp"
unfreeze_at = "0%,25%,50%,75%,never"
n_layer = 2
n_embd = 64
n_head = 4
mixing_heads = ""  # MixiT (--attn=mixing) at n_head too: every layer with the same heads
batch_size = 64
max_iters = 600
eval_interval = 150
log_interval = 150
learning_rate = 1e-3
warmup_iters = 50
device = "cpu"
