# The paper's claims, each split into parts that one word answers, read by the verdict rule (report.verdict):
#   python report.py configs/claims.py                   # from the runs stored in assets/runs
#   python report.py configs/claims.py --runs_dir=out    # from your own runs of the COMMANDS below
# Not a train.py preset. A setting: (the part of the claim, what sets this setting apart, comparison folder, task,
# score, the first variant, the other, the claim's direction for the other against the first: higher | lower |
# match | fails (the other stays at its floor, the first clears its) | competitive (the other better than the midpoint
# of the first and the floor: more than half of the first's gain kept), and optionally a trained floor). A variant is
# a run label as results.md prints it, or (another folder, label); folders joined by + read as one (more seeds run
# later). Every setting compares equal steps. The floors:
# accuracy's chance level, the loss of a counted bigram, the induction score at init, 0 bits, or the trained floor
# named (the bag of words, a model of no layers, MixiT for competitive). A part named "why ..." is an intervention.
# Seeds: 5 where MixiT's fixed matrices move a run (few heads, modular addition) or a first look at 3 left a
# difference within twice the summed spreads (retrieval, Yelp, depth in the standard parametrization, capacity at
# 24,000 steps: extended after that look, not planned), 3 elsewhere.
H16, H64 = "mixing h=16", "mixing h=64"
RANDOM, MIXIT = "softmax freeze=blocks", "mixing h=16 freeze=blocks"  # embedding-only: every block frozen at init
MEAN, PREVIOUS = ("dyck_16_mean", H16), ("lm_cpu_previous", H16)  # MixiT with head 1 the prefix mean, previous byte
STD, MIX = " standard", " mixit"  # the depth runs' parametrizations
DEPTH_SETS = (("on Dyck-16, standard parametrization", "depth_L{}_standard", "dyck_16", STD),
              ("on Dyck-16, MixiT's parametrization", "depth_L{}_mixit", "dyck_16", MIX),
              ("on addition, each its own parametrization", "depth_add_L{}", "addition_3", ""))
# a change (folder, label, folder, label): per seed, the first's score less the second's; the random transformer's fall
# from 2 to 16 layers on Dyck-16 in a parametrization
FALLS = {p: (f"depth_L2_{p}", RANDOM + s, f"depth_L16_{p}", RANDOM + s) for p, s in (("standard", STD), ("mixit", MIX))}
LM = "Frozen-QK is competitive on language modeling; MixiT trails"
RETRIEVAL = "retrieval_cpu+retrieval_more"  # a sixth seed of softmax and MixiT on retrieval_6
MORE = {(97, 6): "+modadd_97_6k_more"}  # a sixth seed of modular addition mod 97 at 6,000 steps
CLAIMS = {
    "MixiT matches the standard transformer on arithmetic and memorization": [
        ("on addition", "at 1,500 steps with 64 heads", "heads_cpu", "addition_3", "val_acc", "softmax", H64, "match"),
        ("on addition", "at 1,500 steps with 16 heads", "heads_cpu+heads_cpu_more", "addition_3", "val_acc", "softmax",
         H16, "match"),
        ("on addition", "at 6,000 steps with 64 heads", "heads_6k", "addition_3", "val_acc",
         ("heads_6k_softmax", "softmax"), H64, "match"),
        ("on addition", "at 6,000 steps with 16 heads", "heads_6k", "addition_3", "val_acc",
         ("heads_6k_softmax", "softmax"), H16, "match"),
        *[("on modular addition", f"for mod {p} at {k},000 steps", f"modadd_{p}_{k}k" + MORE.get((p, k), ""),
           f"modadd_{p}", "val_acc", "softmax", H16, "match") for k in (6, 24) for p in (47, 97)],
        ("on Dyck-16", "at 1,500 steps", "dyck_16", "dyck_16", "val_acc", "softmax", H16, "match"),
        ("on memorization", "of 1,024 labels", "memorization_cpu", "memorize_32", "val_acc", "softmax", H16, "match"),
        ("on memorization", "of 4,096 labels", "memorization_cpu", "memorize_64", "val_acc", "softmax", H16, "match"),
        ("why not on Dyck-16: a prefix-mean head built into MixiT raises it", "at 1,500 steps", "dyck_16", "dyck_16",
         "val_acc", H16, MEAN, "higher")],
    "MixiT needs many heads": [
        ("on addition at 1,500 steps", f"from {a} to {b} heads", "heads_cpu", "addition_3", "val_acc",
         f"mixing h={a}", f"mixing h={b}", "higher") for a, b in ((1, 4), (4, 16), (16, 64))],
    "MixiT fails retrieval; Frozen-QK forms induction heads": [
        ("MixiT does no better than chance", "on retrieval_6", RETRIEVAL, "retrieval_6", "val_acc", "softmax", H16, "fails"),
        ("MixiT does no better than chance", "on induction_8", "retrieval_cpu", "induction_8", "val_acc", "softmax", H16, "fails"),
        ("MixiT forms no induction head", "on retrieval_6", RETRIEVAL, "retrieval_6", "induction_score",
         "softmax", H16, "fails"),
        ("Frozen-QK matches softmax", "on retrieval_6", "retrieval_cpu", "retrieval_6", "val_acc", "softmax",
         "frozen_qk", "match"),
        ("Frozen-QK matches softmax", "on induction_8", "retrieval_cpu", "induction_8", "val_acc", "softmax",
         "frozen_qk", "match"),
        ("Frozen-QK forms an induction head as softmax does", "on retrieval_6", "retrieval_cpu", "retrieval_6",
         "induction_score", "softmax", "frozen_qk", "match"),
        ("why Frozen-QK retrieves: its frozen W_Q, W_K at N(0, 0.02²) instead keep it at chance", "on retrieval_6",
         "retrieval_cpu", "retrieval_6", "val_acc", "frozen_qk", ("retrieval_qk_reference", "frozen_qk"), "fails")],
    "MLPs carry memorization": [
        ("freezing the standard transformer's MLPs costs it", "in bits a parameter on 16,384 labels", "capacity_cpu",
         "memorize_128", "bits_per_param", "softmax", "softmax freeze=mlp", "lower"),
        *[(f"freezing {who}'s MLPs costs it", f"in accuracy on {n} labels", "memorization_cpu", f"memorize_{t}", "val_acc",
           v, f"{v} freeze=mlp", "lower") for who, v in (("the standard transformer", "softmax"), ("MixiT", H16))
          for t, n in ((32, "1,024"), (64, "4,096"))]],
    "MixiT stores more bits per parameter than Frozen-MLP": [
        ("on 16,384 labels", "at 1,500 steps", "capacity_cpu", "memorize_128", "bits_per_param", "softmax freeze=mlp",
         H16, "higher"),
        ("on 16,384 labels", "at 24,000 steps", "capacity_mixit_24k", "memorize_128", "bits_per_param",
         ("capacity_frozen_mlp_24k", "softmax freeze=mlp"), H16, "higher"),
        ("why MixiT trails at 1,500 steps: its parametrization", "all of it standard", "capacity_cpu", "memorize_128",
         "bits_per_param", H16, ("capacity_mixit_std", H16 + STD), "higher"),
        ("why MixiT trails at 1,500 steps: its parametrization", "its shaped activation alone standard",
         "capacity_cpu", "memorize_128", "bits_per_param", H16, ("capacity_part_activation", H16), "higher"),
        ("MixiT with only its shaped activation standard below Frozen-MLP", "at 1,500 steps", "capacity_cpu",
         "memorize_128", "bits_per_param", "softmax freeze=mlp", ("capacity_part_activation", H16), "lower"),
        ("MixiT in the standard parametrization above Frozen-MLP", "at 1,500 steps", "capacity_cpu+capacity_cpu_more",
         "memorize_128", "bits_per_param", "softmax freeze=mlp", ("capacity_mixit_std+capacity_mixit_std_more",
                                                                  H16 + STD), "higher")],
    "MixiT trains in depth; the random transformer does not": [
        *[("the random transformer stays at chance at 16 layers", what, folder.format(16), task, "val_acc", MIXIT + p,
           RANDOM + p, "fails") for what, folder, task, p in DEPTH_SETS],
        *[("the random transformer loses accuracy from 2 to 16 layers", what, folder.format(16), task, "val_acc",
           (folder.format(2), RANDOM + p), RANDOM + p, "lower") for what, folder, task, p in DEPTH_SETS],
        *[("MixiT holds from 2 to 16 layers", what, folder.format(16), task, "val_acc", (folder.format(2), MIXIT + p),
           MIXIT + p, "holds") for what, folder, task, p in DEPTH_SETS],
        *[("MixiT above the random transformer at 16 layers", what, folder.format(16), task, "val_acc", RANDOM + p,
           MIXIT + p, "higher") for what, folder, task, p in DEPTH_SETS],
        ("the random transformer falls further from 2 to 16 layers in MixiT's parametrization than in the standard one",
         "on Dyck-16", "depth_L16_mixit", "dyck_16", "val_acc", FALLS["standard"], FALLS["mixit"],
         "further"),
        ("why the random transformer falls further in MixiT's parametrization: its residual scaling, turned standard "
         "alone, raises it", "Dyck-16 at 16 layers", "depth_L16_mixit", "dyck_16", "val_acc", RANDOM + MIX,
         ("depth_part_residual", RANDOM + MIX), "higher")],
    LM: [
        ("Frozen-QK trails softmax", "on bytes", "lm_cpu", "wikitext2_bytes", "val_loss", "softmax", "frozen_qk",
         "higher"),
        ("Frozen-QK trails softmax", "in GPT-2 BPE", "lm_gpu", "wikitext2", "val_loss", "softmax", "frozen_qk",
         "higher",
         ("lm_gpu_bigram", "softmax")),
        ("Frozen-QK closes more than half of the gap from MixiT to softmax", "on bytes", "lm_cpu", "wikitext2_bytes",
         "val_loss", "softmax", "frozen_qk", "competitive", ("lm_cpu", H16)),
        ("Frozen-QK closes more than half of the gap from MixiT to softmax", "in GPT-2 BPE", "lm_gpu", "wikitext2",
         "val_loss", "softmax", "frozen_qk", "competitive", ("lm_gpu", "mixing")),
        ("MixiT trails Frozen-QK", "on bytes", "lm_cpu", "wikitext2_bytes", "val_loss", "frozen_qk", H16, "higher"),
        ("MixiT trails Frozen-QK", "in GPT-2 BPE", "lm_gpu", "wikitext2", "val_loss", "frozen_qk", "mixing", "higher",
         ("lm_gpu_bigram", "softmax")),
        ("why MixiT stays at the bigram: a previous-byte head built in takes it below", "on bytes", "lm_cpu",
         "wikitext2_bytes", "val_loss", PREVIOUS, H16, "fails"),
        ("MixiT with a previous-byte head below Frozen-QK", "on bytes", "lm_cpu+lm_cpu_more", "wikitext2_bytes",
         "val_loss", "frozen_qk", ("lm_cpu_previous+lm_cpu_previous_more", H16), "lower"),
        *[("MixiT below a model of no layers, in GPT-2 BPE at 6 x 128 and 600 steps", f"in {rows}", f"rows_{pipeline}",
           "wikitext2", "val_loss", (f"rows_{pipeline}_floor", "softmax"), "mixing", "lower")
          for pipeline, rows in (("packed", "packed windows (nanoGPT's)"), ("lines", "lines (the paper's rows)"))]],
    "MixiT matches the standard transformer on sentiment classification": [
        ("on Yelp polarity", "in the standard parametrization", "yelp_standard", "yelp_polarity", "val_acc",
         "softmax standard", H16 + " standard", "match", ("yelp_bow", "softmax")),
        ("on Yelp polarity", "in MixiT's parametrization", "yelp_standard", "yelp_polarity", "val_acc",
         "softmax standard", ("yelp_mixit", H16), "match", ("yelp_bow", "softmax"))],
}
# the parts whose yes goes against their claim: MixiT better than a model of no layers, or below Frozen-MLP
AGAINST = {"MixiT below a model of no layers, in GPT-2 BPE at 6 x 128 and 600 steps",
           "MixiT with only its shaped activation standard below Frozen-MLP"}
DEPTH = "python train.py configs/depth_cpu.py --task=dyck_16 --freeze=blocks --batch_size=128 " \
        "--max_iters=600 --learning_rate=3e-3"
# Looks: a folder whose seeds were added after its words were first read is read at ALPHA over its
# looks (Bonferroni), wherever a setting reads it; each holds its seeds counted at each look (seeds
# 0-2 at the first, 3-4 at the second: (3, 5)).
FIVE = (3, 5)  # 3 seeds, then 2 more
ONE_MORE = (3, 4)  # 3 seeds, then 1 more
LOOKS = {RETRIEVAL: (3, 5, 6), "heads_cpu+heads_cpu_more": (5, 15),
         "modadd_97_6k+modadd_97_6k_more": (5, 6),
         **dict.fromkeys(("retrieval_cpu", "yelp_standard", "yelp_bow", "depth_L2_standard",
                          "depth_L16_standard", "capacity_mixit_24k", "capacity_frozen_mlp_24k"), FIVE),
         **dict.fromkeys(("capacity_cpu+capacity_cpu_more", "capacity_mixit_std+capacity_mixit_std_more",
                          "lm_cpu+lm_cpu_more", "lm_cpu_previous+lm_cpu_previous_more"), ONE_MORE)}
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
    **{f"depth_add_L{n}": f"python train.py configs/depth_cpu.py --seeds=3 --freeze=blocks --n_layer={n} "
                          f"--out_dir=out/depth_add_L{n}" for n in (2, 16)},
    "dyck_16_mean": "python train.py configs/arithmetic_cpu.py --seeds=3 --task=dyck_16 --attn=mixing "
                    "--fixed_head=mean --out_dir=out/dyck_16_mean",
    "capacity_mixit_std": "python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= "
                          "--parametrization=standard --out_dir=out/capacity_mixit_std",
    "capacity_part_activation": "python train.py configs/capacity_cpu.py --seeds=3 --attn=mixing --freeze= "
                                "--standard_parts=activation --out_dir=out/capacity_part_activation",
    "retrieval_qk_reference": "python train.py configs/retrieval_cpu.py --task=retrieval_6 --attn=frozen_qk "
                              "--qk_init=reference --seeds=3 --out_dir=out/retrieval_qk_reference",
    "depth_part_residual": f"{DEPTH} --seeds=3 --n_layer=16 --parametrization=mixit --attn=softmax "
                           "--standard_parts=residual --out_dir=out/depth_part_residual",
    "lm_cpu": "python train.py configs/lm_cpu.py --attn=all --seeds=3",
    # more seeds of a setting the rule read as not shown, planned from the seeds it asked for (a second variant where
    # a command must write runs.json, which needs two runs)
    "heads_cpu_more": "python train.py configs/heads_cpu.py --seed=5 --seeds=10 --attn=softmax,mixing "
                      "--mixing_heads=16 --out_dir=out/heads_cpu_more",
    "modadd_97_6k_more": "python train.py configs/arithmetic_cpu.py --seed=5 --seeds=1 --task=modadd_97 "
                         "--attn=softmax,mixing --max_iters=6000 --out_dir=out/modadd_97_6k_more",
    "retrieval_more": "python train.py configs/retrieval_cpu.py --seed=5 --seeds=1 --task=retrieval_6 "
                      "--attn=softmax,mixing --out_dir=out/retrieval_more",
    "capacity_cpu_more": "python train.py configs/capacity_cpu.py --seed=3 --seeds=1 --attn=softmax --freeze=,mlp "
                         "--out_dir=out/capacity_cpu_more",
    "capacity_mixit_std_more": "python train.py configs/capacity_cpu.py --seed=3 --seeds=1 --attn=mixing --freeze=,mlp "
                               "--parametrization=standard --out_dir=out/capacity_mixit_std_more",
    "lm_cpu_more": "python train.py configs/lm_cpu.py --seed=3 --seeds=1 --attn=frozen_qk,mixing "
                   "--out_dir=out/lm_cpu_more",
    "lm_cpu_previous_more": "python train.py configs/lm_cpu.py --seed=3 --seeds=1 --attn=mixing,softmax "
                            "--fixed_head=previous --out_dir=out/lm_cpu_previous_more",
    "lm_cpu_previous": "python train.py configs/lm_cpu.py --attn=mixing --seeds=3 --fixed_head=previous "
                       "--out_dir=out/lm_cpu_previous",
    "lm_gpu": "python train.py configs/lm_gpu.py --attn=all --seeds=3",
    "lm_gpu_bigram": "python train.py configs/lm_gpu.py --attn=softmax --n_layer=0 --seeds=3 --out_dir=out/lm_gpu_bigram",
    **{f"rows_{p}{f}": f"python train.py configs/lm_rows_cpu.py --attn={a} --seeds=3" + " --lm_rows=lines" * (p == "lines")
       + f" --out_dir=out/rows_{p}{f}" for p in ("packed", "lines") for f, a in (("", "mixing"),
                                                                                ("_floor", "softmax --n_layer=0"))},
    "yelp_standard": "python train.py configs/yelp_cpu.py --attn=softmax,mixing --parametrization=standard --seeds=5 "
                     "--out_dir=out/yelp_standard",
    "yelp_mixit": "python train.py configs/yelp_cpu.py --attn=mixing --seeds=3 --out_dir=out/yelp_mixit",
    "yelp_bow": "python train.py configs/yelp_cpu.py --attn=softmax --n_layer=0 --seeds=5 --out_dir=out/yelp_bow",
}
