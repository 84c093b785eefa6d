# SST-2 sentiment classification on a small CPU, at Yelp's model and budget (configs/yelp_cpu.py): every variant at
# one small size, under 5 minutes each on 2 cores. The model reads the whole sentence (non-causal) and mean-pools its
# real tokens; MixiT's multipliers take the reference classifier's base, 1 (train.py's default for classifiers).
# Model: 2 layers, width 128, 4 heads (MixiT 16 heads), context 64, multipliers base 1.
# Training: 200 steps of 32 sequences, lr 1e-3.
#   python prepare.py sst2 --src=PATH/sst2 --bpe_dir=PATH/gpt2_bpe   # once (train + dev)
#   python train.py configs/sst2_cpu.py --attn=all --out_dir=out/sst2_cpu
# val_acc is the accuracy on the whole GLUE dev split (872 sentences, 50.9% positive).
# Each attention in each parametrization (MixiT's at base 1), and the bag of words (a model of 0 layers):
#   python train.py configs/sst2_cpu.py --seeds=3 --attn=softmax,mixing --parametrization=standard --out_dir=out/sst2_std
#   python train.py configs/sst2_cpu.py --seeds=3 --attn=softmax,mixing --parametrization=mixit --out_dir=out/sst2_mixit
#   python train.py configs/sst2_cpu.py --seeds=3 --n_layer=0 --attn=softmax --out_dir=out/sst2_bow
task = "sst2"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "16"
block_size = 64  # the longest SST-2 sentence is 64 GPT-2 tokens
batch_size = 32
max_iters = 200
eval_interval = 50
log_interval = 50
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 20
weight_decay = 0.01
device = "cpu"
