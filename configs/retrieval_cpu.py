# Claim 2: MixiT underperforms on retrieval because it cannot form induction heads; Frozen-QK forms them.
# In-context key->value recall (retrieval_6: up to 6 pairs, then a query) and induction (induction_8: a
# random segment, then its repeat), every variant at width 64, 800 steps of 128 sequences: 18 runs in
# under 10 minutes on 2 cores. The induction task also records the best head's prefix-matching (induction)
# score at every eval.
#   python train.py configs/retrieval_cpu.py --attn=all --seeds=3
#   python sample.py --out_dir=out/retrieval_cpu/induction_8-softmax-s0 --induction --attn_maps   # the heads
task = "retrieval_6,induction_8"
out_dir = "out/retrieval_cpu"
n_embd = 64
batch_size = 128
max_iters = 800
eval_interval = 100
log_interval = 100
learning_rate = 3e-3
warmup_iters = 50
device = "cpu"
