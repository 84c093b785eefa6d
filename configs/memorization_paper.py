# Claim 3 at the paper's size, as the reference's memorization runner (hdmemorize_exp.py) runs it, value by value,
# and where mixit departs:
#   hdmemorize_512_2_1.0 (our memorize_512: 262,144 pairs, 2.36 Mbit of labels; the runner hard-codes this task).
#   2 layers, width 128: the paper's Table 4 divides by 790,400 trainable parameters, exactly a 2-layer standard model
#     of width 128 at vocab 1,024 (the runner builds its model from --n_embd/--n_layer, default 512 and 4; its own
#     n_embd = 128 only names the run). 4 heads; MixiT 64 (depth_array.sh sweeps 4, 32, 64).
#   What trains: everything; the runner's default weight_frozen=1 trains lm_head alone on the Llama block (its name
#     list misses embed_tokens).
#   32,768 pairs a step, AdamW lr 5e-3 (its string-comparison bug fixes it there), weight decay 1e-4, warmup 500,
#     cosine; 20,000 steps (its default max_steps; depth_array.sh, the one launcher, passes 500: --max_iters=500);
#     skip sqrt(0.5), base 512.
#   Departures: bf16 on a GPU (the reference: fp32).
# Model: 2 layers, width 128, 4 heads (MixiT 64 heads), multipliers base 512.
# Training: 20,000 steps of 32,768 sequences, lr 5e-3.
#   python train.py configs/memorization_paper.py --seeds=3                 # one GPU
task = "memorize_512"
out_dir = "out/memorization_paper"
attn = "all"
freeze = ",mlp"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "64"
base_width = 512.0
skip = 0.5 ** 0.5
batch_size = 32768
max_iters = 20000
warmup_iters = 500
learning_rate = 5e-3
weight_decay = 1e-4
eval_interval = 500
log_interval = 100
