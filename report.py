"""
Every picture and report: a comparison's table of final metrics (results.md), runs (runs.json) and
curves (compare.png); the pictures of sample.py's and bench.py's numbers.

  python report.py out/where_cpu                # its results.md, runs.json and compare.png again
  python report.py configs/claims.py            # every claim's verdict, from the stored runs
  python report.py configs/claims.py --runs_dir=out   # ... from your own runs of its commands
"""
import functools
import json
import math
import os
import re
import sys

import matplotlib
import numpy as np

matplotlib.use("Agg")  # drawing to files: no display needed
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

from common import ConfigError, check_writable, cli, configure, format_time, write_atomic
from mixit import ATTNS, FIXED_HEADS, LETTERS, MIXING

DEFAULTS = {
    # where the files go; '': the comparison's folder itself
    "out_dir": "",
    # a claims file's comparisons: the stored summaries, or a folder of your own
    "runs_dir": "assets/runs"}

# --------------------------------------------------------------------- reports of a comparison

def describe_model(m):
    """What tells variants apart: shape, heads, each layer's attention, the parametrization,
    frozen W_Q, W_K's init, the study's options."""
    study = m.study
    parts = [f"{m.n_layer} layers x {m.n_embd}, {m.n_head} heads"]
    if m.attn not in ATTNS:
        parts.append("layers " + " ".join(m.layer_attn))
    if not m.mixit_param:
        parts.append("standard parametrization")
    else:
        parts.append(f"MixiT parametrization (multipliers base {m.base_width:g}, skip "
                     f"{m.skip:.3g}, c- {m.cminus:g})")
        if study.standard_parts:
            parts.append(f"standard {', '.join(study.standard_parts)}")
    if "frozen_qk" in m.layer_attn:
        parts.append("frozen W_Q, W_K ~ "
                     + ("N(0, 1/n)" if study.qk_init == "paper" else f"N(0, {m.init_std:g}^2)"))
    mixing = any(a in MIXING for a in m.layer_attn)
    if study.fixed_head and mixing:
        parts.append("mixing head 1 " + FIXED_HEADS[study.fixed_head])
    if study.sigma_min and mixing:
        parts.append(f"noise std from {study.sigma_min:.3g}")
    if study.depth_alpha:
        parts.append(f"residual (base depth {study.base_depth:g} / layers)^{study.depth_alpha:g}")
    if m.n_classes:
        pooling = f"{study.pool} pooling, pads {study.pads}"
        if mixing and not m.causal:
            pooling += f", {study.centring} centring"
        parts.append(pooling)
    return ", ".join(parts)


def tasks_of(runs):
    """The tasks of runs, in order, once each."""
    return list(dict.fromkeys(r["task"] for r in runs))


def summarize(runs, histories):
    """Final metrics per (task, variant): mean and sample standard deviation (n - 1) over seeds."""
    groups = {}
    for run, history in zip(runs, histories):
        # a variant's seeds share its model
        groups.setdefault((run["task"], run["variant"], run["model"]), []).append(history[-1])
    table = []
    for (task_name, variant, model), finals in groups.items():
        # each metric's mean and std: the numbers, not the lists nor the counters
        metrics = {k: mean_std([f[k] for f in finals]) for k, v in finals[0].items()
                   if not (isinstance(v, list) or k in "iter lr tokens samples".split())}
        table.append({"task": task_name, "variant": variant, "seeds": len(finals),
                      "iters": finals[0]["iter"], **metrics, "model": model})
    return table


# --------------------------------------------------------------------- the verdict rule: Welch's t

# a margin (a match, a hold, a score at its floor) sized to what the score can move: for a score
# with a ceiling (accuracy, an induction score) this share of the headroom from its floor to 1,
# 0.02 at a chance level of 1/3; else MARGIN in its unit: 0.02 nats (2 % in perplexity), or 0.02
# bits a parameter (a fiftieth of the paper's 1.05 from Frozen-MLP to MixiT)
SHARE = 0.03
MARGIN = 0.02
# a score's best value: a share of the headroom below 1, MARGIN above a loss's 0 nats
CEILINGS = {"val_acc": 1.0, "induction_score": 1.0, "val_loss": 0.0}
# a claim about a model's skill (kept, lost, matched, or clearing where the other fails) needs
# that model shown this many margins past its floor: the margin at most a fifth of the stake
STAKE = 5
# every one-sided test at ALPHA / 2, so a direction's yes and no together spend ALPHA, as a 95 %
# interval does, and every interval printed is one; a sample looked at k times: ALPHA / 2k
ALPHA = 0.05
# not shown: the seeds a model with which its word would come out this often at the next look,
# at the observed means and stds (seeds on two plateaus: by drawing DRAWS sets of the seeds)
POWER = 0.8
DRAWS = 400
# not shown: planned up to this many seeds a model
MOST_SEEDS = 100
# short of a floor, by lower_better: an accuracy below it, a loss above it
UNDER = ("below", "above")
# the other model against the first; fails: it stays at its floor
DIRECTIONS = ("higher", "lower", "match", "fails")
# every word a setting can read, and what a yes or no says of its claim
WORDS = ("yes", "no", "untestable", "not shown", "equal at every seed", "fixed by construction",
         "not reproduced at this scale", "out of reach")
SIDES = ("supports", "against")
# a verdict's two models and their floors where none are named
NAMES = ("the first", "the other", "its floor", "its floor")
# two plateaus: sorted per-seed values apart by more than this many margins and than 4 spreads
# (sample stds) of each side of two seeds or more
PLATEAU = 2.5
RULE_NOTE = (f"each score beside its floor (clears it; at it, within the margin; or below it, a "
             f"loss above it), the difference other - first with its 95 % interval and p (Welch's "
             f"t), the steps, two plateaus, the word for each direction (not reproduced where the "
             f"model it needs is not shown {STAKE} margins past its floor; not shown: the seeds a "
             f"model for {POWER:.0%} power at the next look), the margin and the stake.")


def mean_std(values):
    """The mean and sample std (n - 1) of per-seed values; one value, or all equal: std 0."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(set(values)) > 1 else 0.0


def sample(values):  # per-seed values as (mean, std, n)
    return (*mean_std(values), len(values))


def t_tail(t, df):
    """P(T > t) for t >= 0, Student's t with df >= 1 degrees of freedom: its density over
    x = t + v / (1 - v), v in [0, 1), by the trapezoid rule."""
    v = np.linspace(0.0, 1.0 - 1e-9, 4001)
    x = t + v / (1 - v)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    # the density times dx/dv
    y = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df)) / (1 - v) ** 2
    return float((y[1:] + y[:-1]).sum() / 2 * (v[1] - v[0]))


@functools.cache
def t_quantile(p, df):
    """The t with P(T <= t) = p, for p >= 1/2: bisection on the tail."""
    lo, hi = 0.0, 1e3
    for _ in range(32):
        mid = (lo + hi) / 2
        if t_tail(mid, df) > 1 - p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def contrast(terms):
    """Σ w·mean over independent samples, terms [(w, (mean, std, n))]: its value, standard error
    and Welch-Satterthwaite degrees of freedom (a level is a sample with std 0; a contrast of levels
    alone is exact, se 0)."""
    value = sum(w * m for w, (m, _, _) in terms)
    parts = [((w * s) ** 2 / n, n) for w, (_, s, n) in terms]
    se = math.sqrt(sum(v for v, _ in parts))
    df = se ** 4 / sum(v ** 2 / (n - 1) for v, n in parts if v) if se else math.inf
    return value, se, df


def neg(c):
    return -c[0], *c[1:]


def p_above(c, bound=0.0, power=0.0):
    """The one-sided p of 'contrast c lies above bound' by Welch's t; with power, the p it would
    have where it passed that often (its statistic less t's power quantile). An exact contrast
    (se 0) is 0 above the bound, 1 below it and undecided (nan) on it."""
    value, se, df = c
    if not se:
        return math.nan if value == bound else float(value < bound)
    t = (value - bound) / se
    if power:
        t -= t_quantile(power, df)
    if t >= 0:
        return t_tail(t, df)
    return 1 - t_tail(-t, df)


def within(c, margin):  # two one-sided claims: c inside ±margin
    return [(c, -margin), (neg(c), -margin)]


def over_floor(score, floor, lower_better):
    """A sample's skill, a contrast: its score less its floor's (a loss: its floor's less it)."""
    sign = -1 if lower_better else 1
    return contrast([(sign, score), (-sign, floor)])


def headroom(floor, ceiling):
    """What a score can move from its floor to its ceiling, and its margin: SHARE of it below a
    ceiling of 1, else MARGIN in the score's unit."""
    room = abs(ceiling - floor)
    return room, SHARE * room if ceiling == 1 else MARGIN


def yes_or_no(c, bound=0):
    """The two one-sided claims on contrast c: yes, above bound; no, below it."""
    return [("yes", [(c, bound)]), ("no", [(neg(c), -bound)])]


def readings(a, b, floors, direction, lower_better, margin, names):
    """The words a direction can give, in order: (word, its one-sided claims [(contrast, bound):
    above bound]). a, b: the first and other samples; lower_better: a loss; further: the other's
    change past the first's."""
    difference = contrast([(1, b), (-1, a)])
    if direction in ("higher", "lower", "further"):
        claimed = neg(difference) if direction == "lower" else difference
        equal = (f"no: equal within ±{margin:.2g}", within(difference, margin))
        return yes_or_no(claimed) + [equal]
    if direction == "match":
        return [("yes", within(difference, margin)), ("no", [(difference, margin)]),
                ("no", [(neg(difference), margin)])]
    # the other's gain over the first, the way the score improves
    gain = neg(difference) if lower_better else difference
    if direction == "holds":
        return yes_or_no(gain, -margin)
    if direction == "fails":
        skill = over_floor(b, floors[1], lower_better)
        return [(f"yes: at {names[3]}", within(skill, margin)), ("no", [(skill, 0)]),
                (f"yes: {UNDER[lower_better]} {names[3]}", [(neg(skill), 0)])]
    # competitive: the other past the midpoint of the first and the floor, the way the score
    # improves
    kept = contrast([(1, b), (-0.5, a), (-0.5, floors[1])])
    return yes_or_no(neg(kept) if lower_better else kept)


def first_word(words, looks=1, power=0.0):
    """The first word whose claims all hold, each at ALPHA / 2 over the looks, and its p (its
    claims' largest, scaled to ALPHA); or not shown and the smallest p of its words. With power:
    the first that would hold that often."""
    ps = []
    for word, claims in words:
        # with power: each of k claims at 1 - (1 - power) / k, so that all hold together that often
        p = 2 * looks * max(p_above(c, bound, 1 - (1 - power) / len(claims) if power else 0.0)
                            for c, bound in claims)
        if p < ALPHA:
            return word, p
        ps.append(p)
    return "not shown", min(1.0, *ps)


def floor_status(score, floor, looks, lower_better, margin):
    """A sample's score against its floor's: at it (within ±margin), clears it, short of it, or
    near it (none of them shown)."""
    skill = over_floor(score, floor, lower_better)
    words = [("at", within(skill, margin)), ("clears", [(skill, 0)]),
             (UNDER[lower_better], [(neg(skill), 0)])]
    return first_word(words, looks)[0].replace("not shown", "near")


def needed(direction, lower_better):
    """The model a claim needs shown STAKE margins past its floor: the one claimed better (1), else
    the first (0), whose skill is lost, kept or matched."""
    return int(direction == ("higher", "lower")[lower_better])


def word_looks(looks, direction):
    """The looks a word is read at, of each model's (its floor's counted in): the other's where
    the word reads it alone (fails), else the most."""
    return looks[1] if direction == "fails" else max(looks)


def constant_bound(n, value, looks, ceiling):
    """n seeds all at value: the exact one-sided bound (Clopper-Pearson, at ALPHA / 2 over the
    looks) on the share of seeds that would score otherwise."""
    level = ALPHA / 2 / looks
    side = "below" if value == ceiling else "off it"
    return f"{n} of {n} at {value:.4g}: at most {100 - 100 * level ** (1 / n):.0f} % of seeds " \
           f"{side}, {100 - 100 * level:.4g} %"


def decide(a, b, floors, direction, lower_better, looks, ceiling, names=NAMES, power=0.0):
    """The word on two samples (mean, std, n) and their floors', and its p scaled to ALPHA (None:
    no test); looks: each model's. Two equal
    constants: untestable at the ceiling, else equal at every seed. The model the claim needs
    shown STAKE margins past its floor: out of reach where the headroom is not that much, else
    any word not reproduced where it is not shown so; a decisive word names each model that does
    not clear its floor."""
    need = needed(direction, lower_better)
    room, margin = headroom(floors[need][0], ceiling)
    read = word_looks(looks, direction)
    word, p = first_word(readings(a, b, floors, direction, lower_better, margin, names), read,
                         power)
    if a[1] == b[1] == 0 and a[0] == b[0] and direction not in ("fails", "competitive"):
        bound = constant_bound(min(a[2], b[2]), a[0], read, ceiling)
        if a[0] == ceiling:
            return f"untestable: both at the ceiling at every seed ({bound})", None
        word = f"equal at every seed ({bound})"
        p = None
    # a change's floor is no change: no model's skill is at stake
    if direction == "further":
        return word, p
    stake = STAKE * margin
    if room <= stake:
        return f"out of reach: {names[need]}'s floor is {room:.3g} from the ceiling, the stake " \
               f"{stake:.3g} (the difference alone: {word})", p
    skill = over_floor((a, b)[need], floors[need], lower_better)
    # with power: the gate passes that often too
    if word != "not shown" and 2 * looks[need] * p_above(skill, stake, power) >= ALPHA:
        return f"not reproduced at this scale: {names[need]} is not shown {stake:.3g} past its " \
               f"floor (the difference alone: {word})", p
    # only a decisive word (a test, not fails) names a model that does not clear its floor
    if p is None or word == "not shown" or direction == "fails":
        return word, p
    status = [floor_status(s, f, k, lower_better, margin) for s, f, k in zip((a, b), floors, looks)]
    short = ", ".join(f"{n} {s} {f}" for n, f, s in zip(names, names[2:], status) if s != "clears")
    if short:
        word += f" — {short}"
    return word, p


def verdict(scores, floors, steps, direction, lower_better=False, looks=(1, 1), names=NAMES,
            own_floor=False, ceiling=math.inf):
    """The word on two models (per-seed scores, floors; steps: budgets; direction: the other's
    against the first; looks: each model's) and its p scaled to ALPHA (None: no
    test), at equal budgets and two seeds each; not shown: the seeds for POWER at the next look."""
    if steps[0] != steps[1]:
        return "unequal budgets", None
    if min(map(len, scores)) < 2:
        return "spread unknown", None
    if own_floor and scores[1] == floors[1]:
        return "fixed by construction: the same at init and trained, at every seed " \
               "(not tested)", None
    a, b, *floors = map(sample, [*scores, *floors])
    word, p = decide(a, b, floors, direction, lower_better, looks, ceiling, names)
    if word != "not shown":
        return word, p
    split = any(plateaus(s, PLATEAU * headroom(f[0], ceiling)[1]) for s, f in zip(scores, floors))
    later = tuple(k + 1 for k in looks)

    def planned(n):  # the word that comes out with POWER at n seeds a model, at the next look
        resized = [(*f[:2], n) for f in floors]
        if not split:
            return decide((*a[:2], n), (*b[:2], n), resized, direction, lower_better, later,
                          ceiling, power=POWER)[0]
        # seeds on two plateaus: the word most draws of n of the observed seeds give
        rng = np.random.default_rng(n)
        words = [decide(*[sample(rng.choice(s, n)) for s in scores], resized, direction,
                        lower_better, later, ceiling)[0]
                 for _ in range(DRAWS)]
        likely = max(words, key=words.count)
        return likely if words.count(likely) >= POWER * DRAWS else "not shown"

    # the fewest seeds whose word (not reproduced: none yet) comes out with POWER, by bisection
    # (planned(n) is monotone), from the next look's: a model's most, one more where both have it
    lo = max(a[2], b[2]) - (a[2] != b[2])
    hi = MOST_SEEDS + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if not planned(mid).startswith("not "):
            hi = mid
        else:
            lo = mid
    power = f"≥ {POWER:.0%} power at look {word_looks(later, direction)}" \
        + ", by drawing the seeds" * split
    if hi > MOST_SEEDS:
        return f"not shown (more than {MOST_SEEDS} seeds a model for {power})", p
    return f"not shown ({hi} seeds a model for {power})", p


def plateau_span(side):
    """How many seeds a plateau holds and the range of their values."""
    low = f"{side[0]:.3g}"
    high = f"{side[-1]:.3g}"
    return f"{len(side)} at {low}" + (f"-{high}" if high != low else "")


def plateaus(values, gap=PLATEAU * MARGIN):
    """Seeds on two plateaus (4 seeds or more): a gap in the sorted values wider than gap (PLATEAU
    margins) and than 4 spreads (sample stds) of each side of two seeds or more: how many land on
    each, the values."""
    n = len(values)
    if n < 4:
        return ""
    ordered = np.sort(values)
    gaps = {}
    for k in range(1, n):
        sides = [side for side in (ordered[:k], ordered[k:]) if len(side) > 1]
        apart = ordered[k] - ordered[k - 1]
        # a plateau is tight: its spread under a quarter of the gap
        if apart > max([gap] + [4 * side.std(ddof=1) for side in sides]):
            gaps[k] = apart
    if not gaps:
        return ""
    # the widest gap (the first of equals)
    split = max(gaps, key=gaps.get)
    seeds = ", ".join(f"{x:.3g}" for x in values)
    return f"{plateau_span(ordered[:split])}, {plateau_span(ordered[split:])} ({seeds})"


def part_word(words, labels):
    """A part of a claim: its settings' one word, or each word with the settings (labels) that read
    it."""
    # less a closing note: seeds, the difference alone
    base = [re.sub(r" \([^()]*\)$", "", w) for w in words]
    groups = {w: [lab for b, lab in zip(base, labels) if b == w] for w in dict.fromkeys(base)}
    if len(groups) == 1:
        return base[0]
    return "; ".join(f"{w} {' and '.join(labs)}" for w, labs in groups.items())


def word_counts(words, against):
    """How many settings support their claim and how many go against it (a yes, or a no where the
    setting's yes goes against it), then how many read each other word, in WORDS' order:
    'supports 3, against 1, not shown 4'."""
    names = [re.match("(" + "|".join(WORDS) + r")\b", w).group() for w in words]
    names = [SIDES[(n == "no") != flip] if n in WORDS[:2] else n for n, flip in zip(names, against)]
    return ", ".join(f"{n} {names.count(n)}" for n in SIDES + WORDS[2:] if n in names + [*SIDES])


def difference_cell(a, b, floor, directions, looks, p):
    """other - first with its interval at 1 - ALPHA / looks and p: the two-sided p, or the p of a
    single direction's word, beside the quantity that word reads where it is another (fails:
    other - floor; competitive: other - (first + floor) / 2, and the share of the first's gain
    over the floor the other keeps)."""
    c = contrast([(1, b), (-1, a)])
    shown = f"{c[0]:+.3g} (one seed)"
    if min(a[2], b[2]) > 1:
        if len(directions) > 1:
            p = min(1.0, 2 * min(p_above(c), p_above(neg(c))))
        quantity = {"fails": ("other - floor", [(1, b), (-1, floor)]),
                    "competitive": ("other - (first + floor) / 2",
                                    [(1, b), (-.5, a), (-.5, floor)])}
        # no test (two constants, a score fixed by construction): no interval
        shown = f"{c[0]:+.3g} (no test)"
        if p is not None:
            shown = f"{interval(c, looks)}, p {p:.2g}"
            if directions[0] in quantity:
                label, terms = quantity[directions[0]]
                shown = f"{c[0]:+.3g}; {label}: {interval(contrast(terms), looks)}, p {p:.2g}"
    if directions != ("competitive",):
        return shown
    # (b - fb) / (a - fb), its interval from the standard error of b - fb - share (a - fb)
    gain = a[0] - floor[0]
    share = (b[0] - floor[0]) / gain
    _, se, df = contrast([(1, b), (share - 1, floor), (-share, a)])
    spread = t_quantile(0.975, df) * se / abs(gain) if se else 0.0
    return f"{shown}; keeps {share:.0%} [{share - spread:.0%}, {share + spread:.0%}] of the " \
           f"first's gain"


def interval(c, looks):
    """A contrast's value and its interval at 1 - ALPHA / looks."""
    conf = 1 - ALPHA / looks
    half = t_quantile((1 + conf) / 2, c[2]) * c[1] if c[1] else 0.0
    return f"{c[0]:+.3g} [{c[0] - half:+.3g}, {c[0] + half:+.3g}] {100 * conf:.3g}%"


def rule_cells(first, other, metric, trained_floor=None, directions=DIRECTIONS, looks=(1, 1),
               names=NAMES):
    """Two models' finals on metric (looks: each model's): each score beside its floor (a trained
    one named names[2]), the difference, steps, words; and the last direction's p (None: none)."""
    lower_better = metric == "val_loss"
    ceiling = CEILINGS.get(metric, math.inf)
    scores = [[r[metric] for r in runs] for runs in (first, other)]
    level = LEVELS.get(metric, [None])[0]
    levels = [[r.get(level, 0.0) for r in runs] for runs in (first, other)]
    floors = [trained_floor or logged for logged in levels]
    samples = list(map(sample, scores + floors))
    steps = [runs[0]["iter"] for runs in (first, other)]
    own = not trained_floor and level == "induction_init"
    floor_name = names[2] if trained_floor else FLOOR_NAMES[metric]
    named = (*names[:2], *[f"its floor, {floor_name} {f[0]:.4g}" for f in samples[2:]])
    words = {d: verdict(scores, floors, steps, d, lower_better, looks, named, own, ceiling)
             for d in directions}
    direction = directions[-1]
    word, p = words[direction]
    read = word_looks(looks, direction)
    evidence = difference_cell(*samples[:2], samples[3], directions, read, p)
    need = needed(direction, lower_better)
    room, margin = headroom(samples[need + 2][0], ceiling)
    stake = STAKE * margin
    skill = over_floor(samples[need], samples[need + 2], lower_better)
    gate = min(1.0, 2 * looks[need] * p_above(skill, stake))
    # not reproduced or not shown, the model it needs not shown past the stake: that evidence too
    if word.startswith("not ") and gate >= ALPHA and direction != "further":
        evidence += f"; {named[need]} - floor: {interval(skill, looks[need])} (needs > " \
                    f"{stake:.3g}), p {gate:.2g}"
    shown = []
    for values, floor, logged, score, floor_sample, k in zip(scores, floors, levels, samples,
                                                             samples[2:], looks):
        # a score that is its own floor at every seed: at it
        status = "at" if own and values == floor else \
            floor_status(score, floor_sample, k, lower_better, margin)
        if trained_floor and status == UNDER[lower_better] and floor_status(
                score, sample(logged), k, lower_better, headroom(logged[0], ceiling)[1]) == "at":
            status = f"at {logged[0]:.4g}, {status}"
        if score[2] > 1 and not score[1]:
            status = f"{constant_bound(score[2], score[0], k, ceiling)}; {status}"
        spread = f" ± {score[1]:.2g}" if score[2] > 1 else ""
        shown.append(f"{score[0]:.4g}{spread} ({status} {floor_sample[0]:.4g})")
    stakes = f"±{margin:.3g}"
    if direction != "further":
        stakes += f", stake {stake:.3g}"
    # a stake against the headroom, where the score has a ceiling
    if room < math.inf:
        stakes += f" of {room:.3g}"
    return {"scores (floors)": " / ".join(shown),
            "difference [interval], p": evidence,
            "steps": " / ".join(f"{s:,}" for s in steps),
            "two plateaus": " / ".join(plateaus(v, PLATEAU * margin) for v in scores).strip(" /"),
            **{d: w for d, (w, _) in words.items()},
            "margin, stake": stakes}, p


def headline(final):
    """The score a run is judged by: a language model's validation loss (it has no chance level),
    else accuracy."""
    return "val_loss" if "val_ppl" in final and "val_acc_chance" not in final else "val_acc"


def rule_rows(finals):
    """results.md's reading of the rule: each variant against the first, per task, on the task's
    headline score."""
    rows = []
    for task_name in tasks_of(finals):
        runs = {}
        for r in finals:
            if r["task"] == task_name:
                runs.setdefault(r["variant"], []).append(r)
        first, *others = runs
        score = headline(runs[first][0])
        for variant in others:
            cells, _ = rule_cells(runs[first], runs[variant], score, names=(first, variant))
            rows.append({"task": task_name, "variant": variant, "against": first, "score": score,
                         **cells})
    return rows


def format_cell(value):
    """A table cell: a number at 3 digits (at 100 or more: whole, with commas), a (mean, std) as
    mean ± std (no ± where the std is 0), nothing for None."""
    if isinstance(value, tuple):
        mean, std = value
        return f"{mean:.4g}" + (f" ± {std:.2g}" if std else "")
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return "" if value is None else str(value)


def table(rows, columns=None):
    """A markdown table of rows (dicts): columns maps each heading to a key (or a function of the
    row); none given: each key of the first row, its own heading."""
    columns = columns or {k: k for k in rows[0]}
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [key(row) if callable(key) else row.get(key) for key in columns.values()]
        lines.append("| " + " | ".join(map(format_cell, cells)) + " |")
    return "\n".join(lines) + "\n"


def write_report(runs, histories, label, out_dir, env, seconds):
    """The report of train.py's runs (write_files), from the master process; label names a run's
    variant."""
    if env.master:
        runs = [{"task": r["task"], "variant": label(r),
                 **{k: r[k] for k in ("attn", "freeze", "unfreeze_at", "seed", "model")},
                 "run_dir": os.path.relpath(r["out_dir"], out_dir), "hardware": env.describe(),
                 "seconds": seconds,
                 "step_samples": r["batch_size"] * r["gradient_accumulation_steps"]} for r in runs]
        write_files(runs, histories, out_dir)


def write_text(path, text):
    """A text file written whole, atomically."""
    write_atomic(path, lambda f: f.write(text.encode()))


def write_files(runs, histories, out_dir):
    """Print the comparison's table; write results.md, runs.json (each run's set-up, folder,
    metrics), the plots."""
    finals = [{**r, "samples": h[-1]["iter"] * r["step_samples"], **h[-1]}
              for r, h in zip(runs, histories)]
    # a row per (task, variant): each metric's mean ± std over seeds
    summary = summarize(finals, histories)
    # a column per key, in the order the rows first hold them (a task's own metrics after the
    # first's), the model last
    columns = {k: k for row in summary for k in row if k != "model"}
    text = table(summary, {**columns, "model": "model"})
    rules = rule_rows(finals)
    if rules:
        text += f"\nThe verdict rule on each variant against the first: {RULE_NOTE}\n\n"
        text += table(rules)
    print("\n" + text, end="", flush=True)
    seeds = sorted({r["seed"] for r in finals})
    spread = f", mean ± sample std (n - 1) over seeds {', '.join(map(str, seeds))}" \
        if len(seeds) > 1 else ""
    tasks = ", ".join(tasks_of(finals))
    header = f"# {tasks}\n\nFinal metrics{spread}. {len(finals)} runs in " \
             f"{format_time(finals[0]['seconds'])} on {finals[0]['hardware']}.\n\n"
    write_text(os.path.join(out_dir, "results.md"), header + text)
    write_text(os.path.join(out_dir, "runs.json"), json.dumps(finals, indent=1))
    print(f"wrote {os.path.join(out_dir, 'results.md')} and runs.json")
    plot_comparison(finals, histories, os.path.join(out_dir, "compare.png"))


# --------------------------------------------------------------------- plots

COLORS = {"softmax": "tab:blue", "frozen_qk": "tab:orange", "mixing": "tab:green",
          "learned_mixing": "tab:red"}
FREEZE_STYLES = {"": "-", "mlp": "--", "blocks": ":"}
# a panel: the metric, what runs along x (iter, flops or time; final: the last eval's list), the
# title, the y label, the x label
PANELS = [
    ("val_acc", "iter", "accuracy", "accuracy (fraction of answers)", "optimizer step"),
    ("val_loss", "iter", "evaluation loss", "cross-entropy", "optimizer step"),
    ("induction_score", "iter", "best head's induction score", "weight on the token after a match",
     "optimizer step"),
    ("val_acc", "flops", "accuracy against training FLOPs", "accuracy", "training FLOPs"),
    ("val_acc", "time", "accuracy against training time", "accuracy", "training time (s)"),
    ("val_acc_pos", "final", "final accuracy per answer position", "accuracy", "answer position"),
    ("induction_layers", "final", "final induction score per layer (best head)",
     "induction score", "layer")]
# what each score reads with no skill
# what each score's logged level is, named where a word reads it
FLOOR_NAMES = {"val_acc": "chance", "val_loss": "the bigram", "induction_score": "at init",
               "bits_per_param": "no table held"}
LEVELS = {"val_acc": ("val_acc_chance", "dashed: chance"),
          "val_loss": ("val_loss_floor", "dashed: floor"),
          "induction_score": ("induction_init", "dashed: at init")}


def save(fig, path):
    """fig as a png at path, then closed; says so."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def style_axes(ax, fraction, **labels):
    """ax's labels (Axes.set), a light grid, and y from 0 to 1 where it shows a fraction."""
    ax.set(**labels)
    if fraction:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)


def variant_colors(runs):
    """A colour per variant: its attention's where it is the one variant of a kind in COLORS; the
    others (hybrids, variants that differ in heads or freezing) each a colour of tab20b, in turn."""
    kinds = {}
    for run in runs:
        attn = run["attn"]
        # a run's attention: its one kind (mmmm: mixing), or a hybrid's letters
        kinds[run["variant"]] = LETTERS[attn[0]] if len(set(attn)) == 1 else attn
    others = [name for name, kind in kinds.items()
              if kind not in COLORS or list(kinds.values()).count(kind) > 1]
    colors = {name: COLORS[kind] for name, kind in kinds.items() if name not in others}
    for k, name in enumerate(others):
        # tab20b holds none of COLORS' colours: its five hues first, then each a shade lighter
        colors[name] = plt.cm.tab20b(k % 5 * 4 + k // 5 % 4)
    return colors


def plot_comparison(runs, histories, path):
    """A row per task, a panel per PANELS entry its runs measured (against FLOPs and time where runs
    unfreeze): a colour per variant, the mean over seeds in a band of ± the sample std (up to 6
    variants), each score's LEVELS dashed."""
    tasks = tasks_of(runs)
    cost = any(run["unfreeze_at"] != "never" for run in runs)
    panels = {}
    for task_name in tasks:
        # a panel's metric and x: panel[0] and panel[1]; runs: finals, each its last metrics
        panels[task_name] = [panel for panel in PANELS
                             if (panel[1] not in ("flops", "time") or cost)
                             and any(panel[0] in r for r in runs if r["task"] == task_name)]
    ncols = max(map(len, panels.values()))
    colors = variant_colors(runs)
    fig, axes = plt.subplots(len(tasks), ncols, figsize=(5.2 * ncols, 3.6 * len(tasks)),
                             squeeze=False)
    for row, task_name in zip(axes, tasks):
        curves = {}
        for run, history in zip(runs, histories):
            if run["task"] == task_name:
                curves.setdefault(run["variant"], (run, []))[1].append(history)
        for ax, panel in zip(row, panels[task_name]):
            plot_panel(ax, task_name, panel, curves, colors)
        for ax in row[len(panels[task_name]):]:
            ax.axis("off")
    fig.tight_layout()
    save(fig, path)


def plot_panel(ax, task_name, panel, curves, colors):
    """One panel of plot_comparison: each variant's curves {variant: (a run, its seeds'
    histories)}."""
    key, x, title, ylabel, xlabel = panel
    final = x == "final"
    for name, (run, hs) in curves.items():
        values = np.array([h[-1][key] if final else [m[key] for m in h] for h in hs])
        # measured times differ by seed: their mean
        xs = np.arange(values.shape[1]) if final else np.mean([[m[x] for m in h] for h in hs], 0)
        mean = values.mean(0)
        ax.plot(xs, mean, FREEZE_STYLES[run["freeze"]], color=colors[name], label=name,
                marker="o" if final else None)
        if len(hs) > 1 and len(curves) <= 6:  # more bands than that hide the curves
            std = values.std(0, ddof=1)
            ax.fill_between(xs, mean - std, mean + std, color=colors[name], alpha=0.2)
        level, note = LEVELS.get(key, (None, ""))
        if level in hs[0][-1]:
            # what the score reads with no skill: a task's level in gray, a variant's own (at init)
            # in its colour
            ax.axhline(np.mean([h[-1][level] for h in hs]), ls="--", lw=1,
                       color="gray" if level != "induction_init" else colors[name])
            title = f"{panel[2]} ({note})"
    style_axes(ax, key != "val_loss", title=f"{task_name}: {title}", ylabel=ylabel, xlabel=xlabel)
    if final:
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)


def plot_attention_maps(maps, labels, path, title):
    """A layers x heads grid of heatmaps of maps (L, H, t, t), queries down and keys across, one
    colour bar."""
    L, H, t, _ = maps.shape
    # MixiT's fixed matrices are no probabilities: a diverging scale around 0, for softmax too
    vmax = float(np.abs(maps).max())
    cell = 2.6 if labels is None else max(2.6, 0.17 * t + 0.9)
    fig, axes = plt.subplots(L, H, figsize=(cell * H + 1.5, cell * L + 0.8), squeeze=False,
                             layout="constrained")
    for (l, h), ax in np.ndenumerate(axes):
        im = ax.imshow(maps[l, h], cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(f"layer {l}, head {h}")
        if labels is not None:
            ax.set_xticks(range(t), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(t), labels, fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    fig.supxlabel("position read")
    fig.supylabel("reading position")
    fig.suptitle(title)
    save(fig, path)


def plot_induction(scores, path, title):
    """A layers x heads heatmap of induction scores on a 0..1 colour scale, each cell annotated."""
    L, H = scores.shape
    fig, ax = plt.subplots(figsize=(H + 2.5, 0.8 * L + 1.5), layout="constrained")
    im = ax.imshow(scores, cmap="viridis", vmin=0.0, vmax=1.0)
    for (l, h), v in np.ndenumerate(scores):
        ax.text(h, l, f"{v:.2f}", ha="center", va="center", color="black" if v > 0.6 else "white")
    ax.set(xticks=range(H), yticks=range(L), xlabel="head", ylabel="layer", title=title)
    fig.colorbar(im, ax=ax, label="induction score")
    save(fig, path)


def plot_propagation(stats, width, path):
    """Token covariance (log scale) and similarity against depth at init, mean ± std: stats
    {network: (mean, std)}."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    # MixiT's colour as in COLORS, its two ablations', a random transformer's as softmax's
    palette = ("tab:green", "tab:gray", "tab:olive", "tab:blue")
    for (name, (mean, std)), color in zip(stats.items(), palette):
        # covariance on the left, similarity on the right
        for ax, m, s in zip(axes, mean.T, std.T):
            ax.plot(m, color=color, label=name)
            ax.fill_between(range(len(m)), m - s, m + s, color=color, alpha=0.2)
    for ax, what in zip(axes, ("covariance", "cosine similarity")):
        style_axes(ax, False, xlabel="layer", ylabel=f"mean token {what}",
                   title=f"token {what} at init, width {width}")
        ax.legend(fontsize=8)
    axes[0].set_yscale("log")
    save(fig, path)


def plot_express(rows, path):
    """sample.py --express=init: each pattern's residual against the number of heads, a panel per
    pattern, a colour per variant, solid at the shorter length and dashed at the longer."""
    patterns = [k for k in rows[0] if k not in ("T", "heads", "variant")]
    # mixing's, softmax's and frozen_qk's colours as in COLORS
    palette = ("tab:green", "tab:olive", "tab:blue", "tab:orange")
    lengths = sorted({r["T"] for r in rows})
    heads = sorted({r["heads"] for r in rows})
    fig, axes = plt.subplots(1, len(patterns), figsize=(4.2 * len(patterns), 3.8),
                             layout="constrained")
    for ax, pattern in zip(axes, patterns):
        for variant, color in zip(dict.fromkeys(r["variant"] for r in rows), palette):
            for T in lengths:
                points = [(r["heads"], r[pattern]) for r in rows
                          if r["variant"] == variant and r["T"] == T]
                ax.plot(*zip(*points), "o-" if T == lengths[0] else "s--", color=color,
                        label=f"{variant}, T={T}")
        style_axes(ax, True, xscale="log", xlabel="heads",
                   ylabel="residual (0: formed, 1: nothing of it)", title=pattern)
        ax.set_xticks(heads, heads)
        ax.minorticks_off()
    axes[0].legend(fontsize=7)
    save(fig, path)


# ------------------------------------------------------------- the script: finished comparisons

def read_json(path, lines=False):
    """A JSON file of a comparison (lines: a JSON value a line); a missing, unreadable or empty one
    is a ConfigError."""
    try:
        with open(path) as f:
            value = [json.loads(line) for line in f] if lines else json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path} ({e.strerror if isinstance(e, OSError) else e}); a "
                          f"finished train.py comparison's folder holds it") from None
    if not value:
        raise ConfigError(f"{path} is empty; a finished train.py comparison's folder holds its "
                          f"runs")
    return value


def variant_label(variant):
    """A variant as the tables show it: its label, or (another folder, its label) as 'label
    (folder)'."""
    if isinstance(variant, tuple):
        return " - ".join(f"{variant[k + 1]} ({variant[k]})" for k in range(0, len(variant), 2))
    return variant


def find_runs(loaded, runs_dir, folder, task_name, variant):
    """A variant's finals in folder, or variant is (another folder, its label); loaded: the runs of
    each folder read so far, by folder."""
    if isinstance(variant, tuple):
        folder, variant = variant
    if folder not in loaded:
        # folders joined by +: the runs of several commands (more seeds of one)
        loaded[folder] = [r for f in folder.split("+")
                          for r in read_json(os.path.join(runs_dir, f, "runs.json"))]
    found = [r for r in loaded[folder] if r["task"] == task_name and r["variant"] == variant]
    if not found:
        held = "; ".join(sorted({f"{r['task']}: {r['variant']}" for r in loaded[folder]}))
        raise ConfigError(f"{folder} holds no runs of {variant!r} on {task_name}; it holds {held}")
    return found


def variant_runs(find, variant, metric):
    """A variant's finals (find: find_runs in the setting's folder); a change, (folder, label,
    folder, label): per seed, the first's score less the second's, its floor no change (0)."""
    if not (isinstance(variant, tuple) and len(variant) == 4):
        return find(variant)
    less = {r["seed"]: r[metric] for r in find(variant[2:])}
    return [{**r, metric: r[metric] - less[r["seed"]], LEVELS[metric][0]: 0.0}
            for r in find(variant[:2])]


def read_setting(claim, setting, loaded, runs_dir, looked):
    """One setting of a claim read by the rule (each sample at ALPHA over its own looks): its row of
    the settings table and its word's p scaled to ALPHA (None: no test)."""
    # floor: a trained one, its variant
    part, label, folder, task_name, metric, first, other, direction, *floor = setting
    find = functools.partial(find_runs, loaded, runs_dir, folder, task_name)
    variants = (first, other, *floor)
    models = [variant_runs(find, v, metric) for v in variants]
    # each sample's looks: of its folder's seed counts by look, those its seeds reach (a change:
    # its first folder's); each model's, its trained floor's counted in
    looks = [sum(c <= len(runs) for c in looked.get(v[0] if isinstance(v, tuple) else folder, [0]))
             for v, runs in zip(variants, models)]
    looks = (max([looks[0], *looks[2:]]), max(looks[1:]))
    trained = [r[metric] for r in models[2]] if floor else None
    names = [variant_label(v) for v in variants]
    cells, p = rule_cells(*models[:2], metric, trained, (direction,), looks, names)
    word = cells.pop(direction)
    comparison = f"{folder}: {task_name}, {metric}"
    if floor:
        comparison += f", floor {names[2]}"
    read = word_looks(looks, direction)
    row = {"claim": claim, "part": f"{part}, {label}", "comparison": comparison,
           "first / other": " / ".join(names[:2]),
           "looks": f"{read}: at α {ALPHA / read:.3g}" if read > 1 else "1",
           **cells, "the claim": direction, "word": word}
    return row, p


def claims_report(path, runs_dir):
    """The claims file's every setting read by the rule from its comparison's runs.json under
    runs_dir (at ALPHA over its LOOKS), each part's word, each claim's words under Holm's correction
    within it (AGAINST: parts whose yes goes against it), each comparison's command: markdown."""
    namespace = {}
    try:
        exec(open(path).read(), namespace)
        claims = namespace["CLAIMS"]
        commands = namespace["COMMANDS"]
        looked = namespace.get("LOOKS", {})
        against = namespace.get("AGAINST", ())
    except Exception as e:
        raise ConfigError(f"claims file {path} failed ({type(e).__name__}: {e}); it sets CLAIMS "
                          f"and COMMANDS, as configs/claims.py does") from None
    loaded = {}
    verdicts = []
    settings = []
    holm_rows = []
    for claim, rows in claims.items():
        decided = 0
        read = [read_setting(claim, setting, loaded, runs_dir, looked) for setting in rows]
        # Holm's family: every setting the claim tested (constants and fixed scores aside)
        ranks = holm([(p, k) for k, (_, p) in enumerate(read) if p is not None])
        parts = {}
        dropped = []
        for k, (row, _) in enumerate(read):
            part, label = rows[k][:2]
            word = row["word"]
            row["Holm: rank, level"] = "aside: no test"
            if k in ranks:
                rank, level, kept = ranks[k]
                row["Holm: rank, level"] = f"{rank} of {len(ranks)}, {level:.2g}"
                decisive = bool(re.match(r"(yes|no)\b", word))
                decided += decisive
                # a decided word that Holm's correction does not keep says so in its part
                if decisive and not kept:
                    word += ", not kept by Holm"
                    dropped.append(f"{part}, {label}")
            parts.setdefault(part, []).append((word, label))
            settings.append(row)
        verdicts += [{"claim": claim, "part": part, "verdict": part_word(*zip(*words))}
                     for part, words in parts.items()]
        holm_rows.append({"claim": claim, "settings": len(rows),
                          "tested: Holm's family": len(ranks),
                          "words decided": decided, "kept by Holm": decided - len(dropped),
                          "dropped": "; ".join(dropped),
                          "the settings' words": word_counts([row["word"] for row, _ in read],
                                                             [s[0] in against for s in rows])})
    made = commands_table(loaded, commands, looked)
    return "\n".join(map(table, (verdicts, settings, holm_rows, made)))


def commands_table(loaded, commands, looked):
    """Each comparison read: the commands that made it, its seeds by look, runs, machine and
    training time (its runs' sum)."""
    made = []
    for folder, finals in loaded.items():
        command = "; ".join(f"`{commands[f]}`" if f in commands else "none given"
                            for f in folder.split("+"))
        # seeds 0, 1, ... in looks of these cumulative counts
        counts = looked.get(folder, [len({r["seed"] for r in finals})])
        seeds = []
        for look, (start, end) in enumerate(zip([0, *counts], counts)):
            span = f"{start}"
            if end - start > 1:
                span = f"{start}-{end - 1}"
            seeds.append(f"{span} (look {look + 1})")
        made.append({"comparison": folder, "command": command, "seeds, by look": ", ".join(seeds),
                     "runs": len(finals), "machine": finals[0]["hardware"],
                     "training time": format_time(sum(r["time"] for r in finals))})
    return made


def holm(family):
    """Holm's step-down over a family of (p scaled to ALPHA, key): each key's rank, level (ALPHA
    over the members from it on) and whether it is kept (it and every smaller p below its level)."""
    ranks = {}
    kept = True
    for i, (p, key) in enumerate(sorted(family)):
        level = ALPHA / (len(family) - i)
        kept = kept and p < level
        ranks[key] = (i + 1, level, kept)
    return ranks


def main(argv):
    """One comparison folder: its report again, from its runs' metrics.jsonl; a claims file: every
    claim's verdict from the runs under runs_dir."""
    config = configure(DEFAULTS, [a for a in argv if a.startswith("--")], files=False)
    names = [a for a in argv if not a.startswith("--")]
    if len(names) != 1:
        raise ConfigError("name one folder of a finished train.py comparison "
                          "(python report.py DIR) or a claims file (python report.py CLAIMS.py)")
    folder = names[0]
    if folder.endswith(".py"):
        return print(claims_report(folder, config["runs_dir"]), end="")
    out = config["out_dir"] or os.path.relpath(folder)
    runs = read_json(os.path.join(folder, "runs.json"))
    check_writable(out)
    if "run_dir" not in runs[0]:
        raise ConfigError(f"{folder}/runs.json names no run folders (an older train.py wrote it); "
                          f"run its train.py command again with --init_from=resume")
    histories = [read_json(os.path.join(folder, r["run_dir"], "metrics.jsonl"), lines=True)
                 for r in runs]
    write_files(runs, histories, out)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
