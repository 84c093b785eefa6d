# Beyond the paper: where must attention read its input, at the width of the paper's algorithmic runs (512, 1,000
# sequences a step, AdamW lr 1e-3 with warmup 500 and cosine decay) on its retrieval task (retrieval_30), multi-query
# recall over up to 16 pairs and induction over 16-token segments: five layers of MixiT's fixed mixing with one
# softmax or Frozen-QK layer at each depth, and two softmax layers at each pair of depths, beside the uniform models.
# 5 layers: the paper's depth for its induction results. Expected time on one GPU: not yet measured.
# Where mixit departs: lr 1e-3 (the reference's runner uses 1e-2 for its two-layer models; a five-layer
# all-softmax model is the baseline that must train here); bf16 autocast on a GPU.
# Model: 5 layers, width 512, 8 heads, multipliers base 512.
# Training: 20,000 steps of 1,000 sequences, lr 1e-3.
#   python train.py configs/where_paper.py --seeds=3
# Placement apart from parametrization (auto gives sssss the standard one, every hybrid MixiT's):
#   python train.py configs/where_paper.py --seeds=3 --attn=mmmmm,sssss,mssmm,mfmmm --parametrization=mixit \
#       --out_dir=out/where_mixit_paper                                       # and --parametrization=standard
task = "retrieval_30,mqar_16,induction_16"
out_dir = "out/where_paper"
attn = ("mmmmm,sssss,smmmm,msmmm,mmsmm,mmmsm,mmmms,fmmmm,mfmmm,mmfmm,mmmfm,mmmmf,"
        "ssmmm,smsmm,smmsm,smmms,mssmm,msmsm,msmms,mmssm,mmsms,mmmss")
n_layer = 5
n_embd = 512
n_head = 8
mixing_heads = ""  # MixiT (--attn=mixing) at n_head too: every layer with the same heads
base_width = 512.0
batch_size = 1000
max_iters = 20000
warmup_iters = 500
learning_rate = 1e-3
weight_decay = 1e-3
eval_interval = 1000
log_interval = 100
