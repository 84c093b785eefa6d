# Claim 2: MixiT underperforms on retrieval because it cannot form induction heads; Frozen-QK (frozen W_Q, W_K drawn
# from N(0, 1/n), the paper's init) forms them. In-context key->value recall (retrieval_6: up to 6 pairs, then a
# query) and induction (induction_8: a random segment, then its repeat; single-hop, not the paper's 16-hop task).
# At lr 1e-3 the standard transformer solves both at every seed, while at lr 3e-3 it can stall near 0.41 on
# retrieval (an optimization plateau that all variants share). induction_score is the best head's weight on the token
# after the earlier match (retrieval: from the query to the value after its key).
# Model: 2 layers, width 128, 4 heads (MixiT 16 heads, as for arithmetic).
# Training: 1,000 steps of 64 sequences, lr 1e-3.
#   python train.py configs/retrieval_cpu.py --seeds=3
#   python sample.py --out_dir=out/retrieval_cpu/retrieval_6-frozen_qk-s0 --induction --attn_maps   # the heads
task = "retrieval_6,induction_8"
out_dir = "out/retrieval_cpu"
n_layer = 2
n_embd = 128
n_head = 4
mixing_heads = "16"
batch_size = 64
max_iters = 1000
eval_interval = 250
log_interval = 250
learning_rate = 1e-3
warmup_iters = 50
device = "cpu"
