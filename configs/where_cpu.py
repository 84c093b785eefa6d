# Beyond the paper: where must attention read its input? Four layers of MixiT's fixed mixing, then one softmax
# layer at each depth in turn (smmm, msmm, mmsm, mmms), beside all-mixing and all-softmax, on in-context recall
# (retrieval_4), multi-query associative recall (mqar_3) and induction (induction_6). Every layer has the same width
# and heads; a hybrid takes MixiT's parametrization (residual scaling, shaped MLP, multipliers, learned positions),
# as train.py's parametrization=auto gives any model with a mixing layer. induction_layers: the best head's
# induction score in each layer, so the table says which layer formed the circuit.
# Model: 4 layers, width 64, 4 heads.
# Training: 600 steps of 64 sequences, lr 1e-3.
#   python train.py configs/where_cpu.py --seeds=3
# Then the other placements, each about as long:
#   python train.py configs/where_cpu.py --seeds=3 --attn=fmmm,mfmm,mmfm,mmmf --out_dir=out/where_frozen_cpu
#   python train.py configs/where_cpu.py --seeds=3 --attn=ssmm,smsm,smms,mssm,msms,mmss --out_dir=out/where_two_cpu
# Placement read apart from parametrization (auto gives ssss the standard one, every hybrid MixiT's): each in both
#   python train.py configs/where_cpu.py --seeds=3 --attn=mmmm,ssss,mssm,mfmm --parametrization=mixit \
#       --out_dir=out/where_mixit_cpu
#   python train.py configs/where_cpu.py --seeds=3 --attn=mmmm,ssss,mssm,mfmm --parametrization=standard \
#       --out_dir=out/where_standard_cpu
# Six more seeds of the two patterns whose spreads were too wide to call, in each parametrization:
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=ssss,mssm --seed=3 --seeds=6 --parametrization=mixit --out_dir=out/where_more_mixit
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=ssss,mssm --seed=3 --seeds=6 --parametrization=standard --out_dir=out/where_more_standard
# One softmax layer at each place, six more seeds:
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=smmm,msmm,mmsm,mmms --seed=3 --seeds=6 --out_dir=out/where_one_more
# The same for one Frozen-QK layer at each place, and for the other pairs of softmax layers:
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=fmmm,mfmm,mmfm,mmmf --seed=3 --seeds=6 --out_dir=out/where_frozen_more
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=ssmm,smsm,smms,msms,mmss --seed=3 --seeds=6 --out_dir=out/where_two_more
# and with head 1 of every mixing layer the previous token (what an induction circuit writes before it matches):
#   python train.py configs/where_cpu.py --task=retrieval_4 --attn=mfmm,mmfm,mmmf,mmmm --fixed_head=previous --seed=3 --seeds=6 --out_dir=out/where_previous
task = "retrieval_4,mqar_3,induction_6"
out_dir = "out/where_cpu"
attn = "mmmm,ssss,smmm,msmm,mmsm,mmms"
n_layer = 4
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
