# The paper's claims, each as the settings that test it, read by the verdict rule (report.verdict):
#   python report.py configs/claims.py                   # from the runs stored in assets/runs
#   python report.py configs/claims.py --runs_dir=out    # from your own runs of the COMMANDS below
# Not a train.py preset. A setting: (comparison folder, task, score, the first variant, the other, the claim's
# direction for the other against the first: higher | lower | match | fails, and optionally a trained floor). A
# variant is a run label as results.md prints it, or (another folder, label). Every setting compares equal steps.
# The floors: accuracy's chance level, the loss of a counted bigram, the induction score at init, 0 bits, or the
# trained floor named (the bag of words, a model of no layers).
# At 5 seeds where MixiT's fixed matrices move a run (few heads, modular addition) or a difference is within twice
# the summed spreads (retrieval, Yelp against the bag of words, depth in the standard parametrization, capacity at
# 24,000 steps), 3 elsewhere.
H16, H64 = "mixing h=16", "mixing h=64"
RANDOM, MIXIT = "softmax freeze=blocks", "mixing h=16 freeze=blocks"  # embedding-only: every block frozen at init
CLAIMS = {
    "MixiT matches the standard transformer on arithmetic and memorization": [
        ("heads_cpu", "addition_3", "val_acc", "softmax", H64, "match"),
        ("heads_cpu", "addition_3", "val_acc", "softmax", "mixing h=16", "match"),
        ("heads_6k", "addition_3", "val_acc", ("heads_6k_softmax", "softmax"), H64, "match"),  # 4 times the steps
        ("heads_6k", "addition_3", "val_acc", ("heads_6k_softmax", "softmax"), H16, "match"),
        ("modadd_47_6k", "modadd_47", "val_acc", "softmax", H16, "match"),
        ("modadd_97_6k", "modadd_97", "val_acc", "softmax", H16, "match"),
        ("modadd_47_24k", "modadd_47", "val_acc", "softmax", H16, "match"),
        ("modadd_97_24k", "modadd_97", "val_acc", "softmax", H16, "match"),
        ("dyck_16", "dyck_16", "val_acc", "softmax", H16, "match"),
        ("memorization_cpu", "memorize_32", "val_acc", "softmax", H16, "match"),
        ("memorization_cpu", "memorize_64", "val_acc", "softmax", H16, "match")],
    "MixiT needs many heads": [
        ("heads_cpu", "addition_3", "val_acc", "mixing h=1", "mixing h=4", "higher"),
        ("heads_cpu", "addition_3", "val_acc", "mixing h=4", "mixing h=16", "higher"),
        ("heads_cpu", "addition_3", "val_acc", "mixing h=16", H64, "higher")],
    "MixiT fails retrieval; Frozen-QK forms induction heads": [
        ("retrieval_cpu", "retrieval_6", "val_acc", "softmax", "frozen_qk", "match"),
        ("retrieval_cpu", "retrieval_6", "induction_score", "softmax", "frozen_qk", "match"),
        ("retrieval_cpu", "retrieval_6", "val_acc", "softmax", H16, "fails"),
        ("retrieval_cpu", "retrieval_6", "induction_score", "softmax", H16, "fails"),
        ("retrieval_cpu", "induction_8", "val_acc", "softmax", "frozen_qk", "match"),
        ("retrieval_cpu", "induction_8", "val_acc", "softmax", H16, "fails")],
    "MLPs carry memorization": [
        ("capacity_cpu", "memorize_128", "bits_per_param", "softmax", "softmax freeze=mlp", "lower"),
        ("memorization_cpu", "memorize_32", "val_acc", "softmax", "softmax freeze=mlp", "lower"),
        ("memorization_cpu", "memorize_64", "val_acc", "softmax", "softmax freeze=mlp", "lower"),
        ("memorization_cpu", "memorize_32", "val_acc", H16, "mixing h=16 freeze=mlp", "lower"),
        ("memorization_cpu", "memorize_64", "val_acc", H16, "mixing h=16 freeze=mlp", "lower")],
    "MixiT stores more bits per parameter than Frozen-MLP": [
        ("capacity_cpu", "memorize_128", "bits_per_param", "softmax freeze=mlp", H16, "higher"),
        ("capacity_mixit_24k", "memorize_128", "bits_per_param", ("capacity_frozen_mlp_24k", "softmax freeze=mlp"), H16,
         "higher")],  # 16 times the preset's steps
    "MixiT trains in depth; the random transformer does not": [
        ("depth_L16_standard", "dyck_16", "val_acc", RANDOM + " standard", MIXIT + " standard", "higher"),
        ("depth_L16_mixit", "dyck_16", "val_acc", RANDOM + " mixit", MIXIT + " mixit", "higher"),
        ("depth_L16_standard", "dyck_16", "val_acc", ("depth_L2_standard", RANDOM + " standard"),
         RANDOM + " standard", "lower"),  # from 2 layers to 16
        ("depth_L16_mixit", "dyck_16", "val_acc", ("depth_L2_mixit", RANDOM + " mixit"), RANDOM + " mixit", "lower")],
    "Frozen-QK is competitive on language modeling; MixiT trails": [
        ("lm_cpu", "wikitext2_bytes", "val_loss", "softmax", "frozen_qk", "higher"),
        ("lm_cpu", "wikitext2_bytes", "val_loss", "frozen_qk", H16, "higher"),
        ("lm_gpu", "wikitext2", "val_loss", "softmax", "frozen_qk", "higher", ("lm_gpu_bigram", "softmax")),
        ("lm_gpu", "wikitext2", "val_loss", "frozen_qk", "mixing", "higher", ("lm_gpu_bigram", "softmax"))],
    "MixiT matches the standard transformer on sentiment classification": [
        ("yelp_standard", "yelp_polarity", "val_acc", "softmax standard", H16 + " standard", "match",
         ("yelp_bow", "softmax")),
        ("yelp_standard", "yelp_polarity", "val_acc", "softmax standard", ("yelp_mixit", H16), "match",
         ("yelp_bow", "softmax"))],
}
DEPTH = "python train.py configs/depth_cpu.py --task=dyck_16 --freeze=blocks --batch_size=128 " \
        "--max_iters=600 --learning_rate=3e-3"
COMMANDS = {  # what made each folder (each writes out/FOLDER): on a 2-core CPU, one thread a run, or one GPU (lm_gpu)
    "heads_cpu": "python train.py configs/heads_cpu.py --seeds=5",
    "heads_6k_softmax": "python train.py configs/heads_cpu.py --seeds=5 --attn=softmax --max_iters=6000 "
                        "--eval_interval=1500 --out_dir=out/heads_6k_softmax",
    "heads_6k": "python train.py configs/heads_cpu.py --seeds=5 --attn=mixing --mixing_heads=16,64 --max_iters=6000 "
                "--eval_interval=1500 --out_dir=out/heads_6k",
    **{f"modadd_{p}_{k}k": f"python train.py configs/arithmetic_cpu.py --seeds=5 --task=modadd_{p} --attn=softmax,mixing "
                           f"--max_iters={k}000{' --eval_interval=6000' * (k == 24)} --out_dir=out/modadd_{p}_{k}k"
       for p in (47, 97) for k in (6, 24)},
    "dyck_16": "python train.py configs/arithmetic_cpu.py --seeds=3 --task=dyck_16 --attn=softmax,mixing "
               "--out_dir=out/dyck_16",
    "memorization_cpu": "python train.py configs/memorization_cpu.py --seeds=3",
    "retrieval_cpu": "python train.py configs/retrieval_cpu.py --seeds=5",
    "capacity_cpu": "python train.py configs/capacity_cpu.py --seeds=3",
    **{f"capacity_{name}_24k": f"python train.py configs/capacity_cpu.py --seeds=5 {variant} --max_iters=24000 "
                              f"--eval_interval=6000 --out_dir=out/capacity_{name}_24k"
       for name, variant in (("mixit", "--attn=mixing --freeze="), ("frozen_mlp", "--attn=softmax --freeze=mlp"))},
    **{f"depth_L{n}_{p}": f"{DEPTH} --seeds={5 if p == 'standard' else 3} --n_layer={n} --parametrization={p} "
                          f"--out_dir=out/depth_L{n}_{p}"
       for n in (2, 16) for p in ("standard", "mixit")},
    "lm_cpu": "python train.py configs/lm_cpu.py --attn=all --seeds=3",
    "lm_gpu": "python train.py configs/lm_gpu.py --attn=all --seeds=3",
    "lm_gpu_bigram": "python train.py configs/lm_gpu.py --attn=softmax --n_layer=0 --seeds=3 --out_dir=out/lm_gpu_bigram",
    "yelp_standard": "python train.py configs/yelp_cpu.py --attn=softmax,mixing --parametrization=standard --seeds=5 "
                     "--out_dir=out/yelp_standard",
    "yelp_mixit": "python train.py configs/yelp_cpu.py --attn=mixing --seeds=3 --out_dir=out/yelp_mixit",
    "yelp_bow": "python train.py configs/yelp_cpu.py --attn=softmax --n_layer=0 --seeds=5 --out_dir=out/yelp_bow",
}
