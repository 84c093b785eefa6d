"""
Every picture and report: a comparison's table of final metrics (results.md), runs (runs.json), curves (compare.png)
and headline scores against training cost (cost.png); the pictures of sample.py's and bench.py's numbers.

  python report.py out/where_cpu                             # redo its results.md, runs.json, compare.png, cost.png
  python report.py out/where_cpu out/when_cpu --out_dir=out  # cost.png over every run of both
  python report.py configs/claims.py                         # every claim's verdict, from the stored runs
  python report.py configs/claims.py --runs_dir=out          # ... from your own runs of the same commands
"""
import functools
import json
import math
import os
import sys

import matplotlib
import numpy as np

matplotlib.use("Agg")  # drawing to files: no display needed
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

from common import ConfigError, check_writable, cli, configure, format_time, write_atomic
from mixit import ATTNS, FIXED_HEADS, LETTERS, MIXING

DEFAULTS = {"out_dir": "",  # where the files go; '': the folders' common parent (the folder itself, given one)
            "runs_dir": "assets/runs"}  # a claims file's comparisons: the stored summaries, or a folder of your own

# ----------------------------------------------------------------------------- reports of a comparison

def describe_model(m):
    """What tells variants apart: shape, heads, each layer's attention, the parametrization, frozen W_Q, W_K's init."""
    parts = [f"{m.n_layer} layers x {m.n_embd}, {m.n_head} heads"]
    if m.attn not in ATTNS:
        parts.append("layers " + " ".join(m.layer_attn))
    parts.append(f"MixiT parametrization (multipliers base {m.base_width:g}, skip {m.skip:.3g}, c- {m.cminus:g})"
                 if m.mixit_param else "standard parametrization")
    if m.mixit_param and m.standard_parts:
        parts.append(f"standard {m.standard_parts.replace(',', ', ')}")
    if "frozen_qk" in m.layer_attn:
        parts.append("frozen W_Q, W_K ~ " + ("N(0, 1/n)" if m.qk_init == "paper" else f"N(0, {m.init_std:g}^2)"))
    if m.fixed_head and any(a in MIXING for a in m.layer_attn):
        parts.append("mixing head 1 " + FIXED_HEADS[m.fixed_head])
    if m.sigma_min and any(a in MIXING for a in m.layer_attn):
        parts.append(f"noise std from {m.sigma_min:.3g}")
    if m.depth_alpha:
        parts.append(f"residual (base depth {m.base_depth:g} / layers)^{m.depth_alpha:g}")
    if m.n_classes:
        mixing = not m.causal and any(a in MIXING for a in m.layer_attn)
        parts.append(f"{m.pool} pooling, pads {m.pads}" + (f", {m.centring} centring" if mixing else ""))
    return ", ".join(parts)


def summarize(runs, histories):
    """Final metrics per (task, variant): mean and sample standard deviation (n - 1) over seeds."""
    groups = {}
    for run, history in zip(runs, histories):
        groups.setdefault((run["task"], run["variant"]), []).append((run, history[-1]))
    table = []
    for (task_name, variant), members in groups.items():
        finals = [f for _, f in members]
        keys = [k for k in finals[0] if not isinstance(finals[0][k], list) and k not in ("iter", "lr", "tokens")]
        table.append({"task": task_name, "variant": variant, "model": members[0][0]["model"], "seeds": len(finals),
                      "iter": finals[0]["iter"], **{k: mean_std([f[k] for f in finals]) for k in keys}})
    return table


# ----------------------------------------------------------------------------- the verdict rule: Welch's t

MATCH = 0.02  # a match: the difference's 90 % interval inside ± this (two one-sided tests at 5 % each)
DIRECTIONS = ("higher", "lower", "match", "fails")  # the other model against the first; fails: it stays at its floor
NOT_REPRODUCED = "not reproduced at this scale"
PLATEAU_GAP = 0.05  # seeds on two plateaus: a gap in their sorted values wider than this and 3 stds of either side
RULE_NOTE = (f"each score beside its floor (cleared: its one-sided 95 % bound beyond it), the difference other - first "
             f"with its 95 % interval and p (Welch's t), the steps, two plateaus, and the word for each direction (a "
             f"match: the 90 % interval inside ±{MATCH}; not shown: with the seeds a model that would decide it).")


def mean_std(values):
    """The mean and sample std (n - 1) of per-seed values; one value: std 0, a level without spread."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def t_tail(t, df):
    """P(T > t) for t >= 0, Student's t with df >= 1 degrees of freedom: its density over x = t/u, u in (0, 1]."""
    u = np.linspace(1e-8, 1.0, 4001)
    x = t / u
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    y = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df)) * x / u  # the density times dx/du = t / u²
    return float((y[1:] + y[:-1]).sum() / 2 * (u[1] - u[0])) if t else 0.5  # the trapezoid rule


@functools.lru_cache(maxsize=None)
def t_quantile(p, df):
    """The t with P(T <= t) = p, for p >= 1/2: bisection on the tail."""
    lo, hi = 0.0, 1e3
    for _ in range(32):
        lo, hi = ((lo + hi) / 2, hi) if t_tail((lo + hi) / 2, df) > 1 - p else (lo, (lo + hi) / 2)
    return (lo + hi) / 2


def contrast(terms, conf):
    """Σ w·mean over independent samples, terms [(w, (mean, std, n))]: the value, its conf interval by Welch's t
    (Welch-Satterthwaite degrees of freedom; a level is a sample with std 0) and the two-sided p against 0."""
    value = sum(w * m for w, (m, _, _) in terms)
    parts = [((w * s) ** 2 / n, n) for w, (_, s, n) in terms]
    se = math.sqrt(sum(v for v, _ in parts))
    if se == 0:  # no sample has a spread: the value is exact
        return value, (value, value), float(value == 0)
    df = se ** 4 / sum(v ** 2 / (n - 1) for v, n in parts if v)
    half = t_quantile((1 + conf) / 2, df) * se
    return value, (value - half, value + half), 2 * t_tail(abs(value) / se, df)


def sample(values):  # per-seed values as (mean, std, n)
    return (*mean_std(values), len(values))


def bounds(terms, conf, flip=False):
    """The conf interval of a contrast, turned around (flip) where the claim's side is the lower one."""
    _, (lo, hi), _ = contrast(terms, conf)
    return (-hi, -lo) if flip else (lo, hi)


def decide(a, b, floors, direction, lower_better):
    """The word from two samples (mean, std, n) and their floors'. A score 'clears' its floor by the one-sided 95 %
    bound or stays 'at' it (below, or within MATCH); one the claim needs at its floor is not reproduced. higher, lower
    and competitive (b past the midpoint of a and its floor) read the 95 % interval (no: reversed beyond it), match the
    90 % one inside ±MATCH (no: wholly outside), fails: b at its floor while a clears its."""
    first, other = ("clears" if lo > 0 else "at" if hi < MATCH else None for lo, hi in
                    (bounds([(1, s), (-1, f)], 0.90, lower_better) for s, f in zip((a, b), floors)))
    if direction == "fails":
        return NOT_REPRODUCED if first != "clears" else {"clears": "no", "at": "yes"}.get(other, "not shown")
    if direction == "match":
        lo, hi = bounds([(1, b), (-1, a)], 0.90)
        word = "yes" if -MATCH < lo and hi < MATCH else "no" if lo >= MATCH or hi <= -MATCH else "not shown"
    else:
        terms = [(1, b), (-1, a)] if direction != "competitive" else [(1, b), (-.5, a), (-.5, floors[1])]
        lo, hi = bounds(terms, 0.95, direction == "lower" or direction == "competitive" and lower_better)
        word = "yes" if lo > 0 else "no" if hi < 0 else "not shown"
    return word if first == other == "clears" else f"{NOT_REPRODUCED} (the difference alone: {word})"


def verdict(scores, floors, steps, direction, lower_better=False, most=100):
    """The word for a claim on two models, the first and the other: their per-seed scores and floors, steps their
    budgets, direction the other's against the first (DIRECTIONS, or competitive). Equal budgets and two seeds each
    come first; not shown comes with the fewest seeds a model (up to most) that would decide it at the same spreads."""
    if steps[0] != steps[1]:
        return "unequal budgets"
    if min(map(len, scores)) < 2:
        return "spread unknown"
    (a, b), floors = map(sample, scores), list(map(sample, floors))
    word, n = decide(a, b, floors, direction, lower_better), max(a[2], b[2])
    at = lambda s, n: (s[0], s[1], n)  # a sample with n seeds
    while word == "not shown" and n < most:
        n += 1
        if decide(at(a, n), at(b, n), [at(f, n) for f in floors], direction, lower_better) != "not shown":
            return f"not shown ({n} seeds a model would decide it)"
    return word if word != "not shown" else f"not shown (more than {most} seeds a model at this spread)"


def plateaus(values):
    """Seeds on two plateaus (PLATEAU_GAP; 4 seeds or more): how many land on each, and the values; else ''."""
    v = np.sort(values)
    k = int(np.argmax(np.diff(v))) + 1 if len(v) > 3 else 0
    if not k or v[k] - v[k - 1] <= max(PLATEAU_GAP, 3 * v[:k].std(), 3 * v[k:].std()):
        return ""
    values = ", ".join(f"{x:.3g}" for x in values)
    return f"{k} near {v[:k].mean():.3g}, {len(v) - k} near {v[k:].mean():.3g} ({values})"


def part_word(words, labels):
    """A part of a claim: its settings' one word, or each word with the settings (labels) that read it."""
    base = [w.split(" (")[0] for w in words]
    groups = {w: [lab for b, lab in zip(base, labels) if b == w] for w in dict.fromkeys(base)}
    return base[0] if len(groups) == 1 else "; ".join(f"{w} {' and '.join(labs)}" for w, labs in groups.items())


def rule_cells(first, other, metric, trained_floor=None, directions=DIRECTIONS):
    """What the rule reads of two models' runs (finals of one task) on metric: the two scores beside their floors
    (each run's logged level, 0 where the score has none, or a trained floor's per-seed scores), the difference with
    its interval (90 % for a match alone, else 95 %) and p, the steps, plateaus, and the word for each direction."""
    lower_better = metric == "val_loss"
    scores = [[r[metric] for r in runs] for runs in (first, other)]
    floors = [trained_floor or [r.get(LEVELS[metric][0], 0.0) if metric in LEVELS else 0.0 for r in runs]
              for runs in (first, other)]
    steps = [runs[0]["iter"] for runs in (first, other)]
    conf = 0.90 if directions == ("match",) else 0.95
    diff, (lo, hi), p = contrast([(1, sample(scores[1])), (-1, sample(scores[0]))], conf)
    interval = f" [{lo:+.3g}, {hi:+.3g}] {conf:.0%}, p {p:.2g}" if min(map(len, scores)) > 1 else " (one seed)"
    if directions == ("competitive",):  # the share of the first's gain over the floor that the other keeps
        (a, _), (b, _), (f, _) = mean_std(scores[0]), mean_std(scores[1]), mean_std(floors[1])
        interval += f"; keeps {(f - b) / (f - a):.0%} of the first's gain over the floor"
    shown = lambda s, f: f"{mean_std(s)[0]:.4g}" + (f" ± {mean_std(s)[1]:.2g}" if len(s) > 1 else "") + \
        f" ({'clears' if bounds([(1, sample(s)), (-1, sample(f))], 0.90, lower_better)[0] > 0 else 'not above'} " \
        f"{mean_std(f)[0]:.4g})"
    return {"scores (floors)": " / ".join(map(shown, scores, floors)), "difference [interval], p": f"{diff:+.3g}"
            + interval, "steps": " / ".join(f"{s:,}" for s in steps), "two plateaus": " / ".join(map(plateaus, scores))
            .strip(" /"), **{d: verdict(scores, floors, steps, d, lower_better) for d in directions}}


def rule_rows(finals):
    """results.md's reading of the rule: each variant against the first, per task, on the task's headline score."""
    rows = []
    for task_name in dict.fromkeys(r["task"] for r in finals):
        runs = [r for r in finals if r["task"] == task_name]
        variants = list(dict.fromkeys(r["variant"] for r in runs))
        of = lambda v: [r for r in runs if r["variant"] == v]
        rows += [{"task": task_name, "variant": v, "against": variants[0], "score": headline(runs[0]),
                  **rule_cells(of(variants[0]), of(v), headline(runs[0]))} for v in variants[1:]]
    return rows


def table(rows, columns):
    """A markdown table of rows (dicts): columns maps each heading to a key (or a function of the row)."""
    fmt = lambda v: "" if v is None else f"{v:,.0f}" if isinstance(v, float) and abs(v) >= 100 else \
        f"{v:.3g}" if isinstance(v, float) else str(v)
    get = lambda r, k: k(r) if callable(k) else r.get(k)
    return "\n".join(["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                     + ["| " + " | ".join(fmt(get(r, k)) for k in columns.values()) + " |" for r in rows]) + "\n"


def write_report(runs, histories, label, out_dir, env, seconds):
    """The report of train.py's runs (write_files), from the master process; label names a run's variant."""
    if env.master:
        runs = [{"task": r["task"], "variant": label(r), "attn": r["attn"], "freeze": r["freeze"],
                 "unfreeze_at": r["unfreeze_at"], "seed": r["seed"], "model": r["model"],
                 "run_dir": os.path.relpath(r["out_dir"], out_dir), "hardware": env.describe(), "seconds": seconds,
                 "step_samples": r["batch_size"] * r["gradient_accumulation_steps"]} for r in runs]
        write_files(runs, histories, out_dir)


def write_files(runs, histories, out_dir):
    """Print the comparison's table; write results.md, runs.json (each run's set-up, folder, metrics), the plots."""
    finals = [{**r, "samples": h[-1]["iter"] * r["step_samples"], **h[-1]} for r, h in zip(runs, histories)]
    summary = summarize(finals, histories)  # a row per (task, variant): each metric's mean ± std over seeds
    keys = list(dict.fromkeys(k for row in summary for k in row if isinstance(row[k], tuple)))
    cell = lambda k: lambda r: "" if k not in r else f"{r[k][0]:.4g}" + (f" ± {r[k][1]:.2g}" if r[k][1] else "")
    text = table(summary, {"task": "task", "variant": "variant", "seeds": "seeds", "iters": "iter",
                           **{k: cell(k) for k in keys}, "model": "model"})
    rules = rule_rows(finals)
    if rules:
        text += f"\nThe verdict rule on each variant against the first: {RULE_NOTE}\n\n" + \
            table(rules, {k: k for k in rules[0]})
    print("\n" + text, end="", flush=True)
    seeds = sorted({r["seed"] for r in finals})
    spread = f", mean ± sample std (n - 1) over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else ""
    header = f"# {', '.join(dict.fromkeys(r['task'] for r in finals))}\n\nFinal metrics{spread}. {len(finals)} runs " \
             f"in {format_time(finals[0]['seconds'])} on {finals[0]['hardware']}.\n\n"
    write_atomic(os.path.join(out_dir, "results.md"), lambda f: f.write((header + text).encode()))
    write_atomic(os.path.join(out_dir, "runs.json"), lambda f: f.write(json.dumps(finals, indent=1).encode()))
    print(f"wrote {os.path.join(out_dir, 'results.md')} and runs.json")
    plot_comparison(finals, histories, os.path.join(out_dir, "compare.png"))
    plot_cost(finals, os.path.join(out_dir, "cost.png"))


# ----------------------------------------------------------------------------- plots

COLORS = {"softmax": "tab:blue", "frozen_qk": "tab:orange", "mixing": "tab:green", "learned_mixing": "tab:red"}
PATTERN_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold", "navy", "teal",
                  "maroon", "lime", "magenta", "peru", "darkslategray", "khaki", "indigo"]  # hybrids, in turn
FREEZE_STYLES = {"": "-", "mlp": "--", "blocks": ":"}
PANELS = {  # a panel: the metric, what runs along x (iter, flops or time; final: the last eval's list), title, y label
    "val_acc": ("val_acc", "iter", "accuracy", "accuracy (fraction of answers)"),
    "val_loss": ("val_loss", "iter", "evaluation loss", "cross-entropy"),
    "induction_score": ("induction_score", "iter", "best head's induction score", "weight on the token after a match"),
    "acc_flops": ("val_acc", "flops", "accuracy against training FLOPs", "accuracy"),
    "acc_time": ("val_acc", "time", "accuracy against training time", "accuracy"),
    "val_acc_pos": ("val_acc_pos", "final", "final accuracy per answer position", "accuracy"),
    "val_acc_n": ("val_acc_n", "final", "final accuracy by number of pairs", "accuracy"),
    "val_acc_at": ("val_acc_at", "final", "final accuracy by the answer's place", "accuracy"),
    "induction_layers": ("induction_layers", "final", "final induction score per layer (best head)", "induction score")}
X_LABELS = {"iter": "optimizer step", "flops": "training FLOPs", "time": "training time (s)", "val_acc_pos":
            "answer position", "val_acc_n": "key-value pairs in the sequence", "induction_layers": "layer",
            "val_acc_at": "position of the query (the answer follows it)"}
LEVELS = {"val_acc": ("val_acc_chance", "dashed: chance"), "val_loss": ("val_loss_floor", "dashed: floor"),
          "induction_score": ("induction_init", "dashed: at init")}  # what each score reads with no skill
HEADLINES = {"val_acc": "final accuracy", "val_loss": "validation loss (nats per token)"}  # a score's axis label


def save(fig, path):
    """fig as a png at path, then closed; says so."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def variant_colors(runs):
    """A colour per variant: its attention's (a hybrid's from a palette), shaded where variants share one (heads)."""
    kind = lambda run: LETTERS.get(run["attn"][0]) if len(set(run["attn"])) == 1 else run["attn"]  # mmmm: mixing
    patterns = list(dict.fromkeys(kind(r) for r in runs if kind(r) not in COLORS))
    base = lambda r: COLORS.get(kind(r)) or PATTERN_COLORS[patterns.index(kind(r)) % len(PATTERN_COLORS)]
    groups = {}
    for run in runs:
        groups.setdefault(base(run), {}).setdefault(run["variant"], run)
    colors = {}
    for color, members in groups.items():
        for k, name in enumerate(members):
            darkness = 1.0 if len(members) == 1 else 0.35 + 0.65 * k / (len(members) - 1)
            colors[name] = tuple(1 - darkness * (1 - c) for c in matplotlib.colors.to_rgb(color))  # blended with white
            if len(members) > 4:  # too many shades to tell apart: a colour map instead
                colors[name] = plt.cm.viridis(k / (len(members) - 1))
    return colors


def plot_comparison(runs, histories, path):
    """A row per task, a panel per PANELS entry its runs measured (against FLOPs and time where runs unfreeze): a colour
    per variant, the mean over seeds in a band of ± the sample std (up to 6 variants), each score's LEVELS dashed."""
    tasks = list(dict.fromkeys(run["task"] for run in runs))
    cost = any(run["unfreeze_at"] != "never" for run in runs)
    panels = {t: [p for p, (key, x, *_) in PANELS.items() if (x not in ("flops", "time") or cost)
                  and any(key in h[-1] for r, h in zip(runs, histories) if r["task"] == t)] for t in tasks}
    ncols, colors = max(map(len, panels.values())), variant_colors(runs)
    fig, axes = plt.subplots(len(tasks), ncols, figsize=(5.2 * ncols, 3.6 * len(tasks)), squeeze=False)
    for row, task_name in zip(axes, tasks):
        curves = {}
        for run, history in zip(runs, histories):
            if run["task"] == task_name:
                curves.setdefault(run["variant"], (run, []))[1].append(history)
        for ax, panel in zip(row, panels[task_name]):
            key, x, title, ylabel = PANELS[panel]
            for name, (run, hs) in curves.items():
                values = np.array([h[-1][key] for h in hs] if x == "final" else [[m[key] for m in h] for h in hs])
                xs = np.arange(values.shape[1]) + (key == "val_acc_n") if x == "final" else \
                    np.mean([[m[x] for m in h] for h in hs], 0)  # measured times differ by seed: their mean
                mean = values.mean(0)
                ax.plot(xs, mean, FREEZE_STYLES[run["freeze"]], color=colors[name], label=name,
                        marker="o" if x == "final" else None)
                if len(hs) > 1 and len(curves) <= 6:  # more bands than that hide the curves
                    std = values.std(0, ddof=1)
                    ax.fill_between(xs, mean - std, mean + std, color=colors[name], alpha=0.2)
                level, note = LEVELS.get(key, (None, ""))
                if level in hs[0][-1]:  # what the score reads with no skill
                    ax.axhline(np.mean([h[-1][level] for h in hs]), ls="--", lw=1,
                               color="gray" if level != "induction_init" else colors[name])  # a task's, a variant's
                    title = f"{PANELS[panel][2]} ({note})"
            ax.set(title=f"{task_name}: {title}", ylabel=ylabel, xlabel=X_LABELS[key if x == "final" else x])
            if key != "val_loss":
                ax.set_ylim(-0.02, 1.02)
            if x == "final":
                ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in row[len(panels[task_name]):]:
            ax.axis("off")
    fig.tight_layout()
    save(fig, path)


def headline(final):
    """The score a run is judged by: a language model's validation loss (it has no chance level), else accuracy."""
    return "val_loss" if "val_ppl" in final and "val_acc_chance" not in final else "val_acc"


def plot_cost(finals, path):
    """Each run's headline score against training FLOPs and time per sample: a colour per variant, a marker per task."""
    colors, tasks = variant_colors(finals), list(dict.fromkeys(r["task"] for r in finals))
    markers = {task: "os^DvP*Xh<>p"[k % 12] for k, task in enumerate(tasks)}
    scores = list(dict.fromkeys(map(headline, finals)))
    fig, axes = plt.subplots(len(scores), 2, figsize=(12, 4.6 * len(scores)), squeeze=False, layout="constrained")
    for row, score in zip(axes, scores):
        runs, label = [r for r in finals if headline(r) == score], HEADLINES[score]
        for ax, (what, cost) in zip(row, (("training FLOPs", lambda r: r["flops"]),
                                          ("training time per sample (ms)", lambda r: 1e3 * r["time"] / r["samples"]))):
            for r in runs:
                ax.scatter(cost(r), r[score], color=colors[r["variant"]], marker=markers[r["task"]], s=28, alpha=0.85)
            floor = LEVELS[score][0]
            for level in {r[floor] for r in runs if floor in r}:  # each task's chance level or loss floor
                ax.axhline(level, color="gray", ls="--", lw=1)
            costs = [cost(r) for r in runs]  # on a log scale where they span more than a decade: labelled ticks
            ax.set(xscale="log" if max(costs) > 10 * min(costs) else "linear", xlabel=what, ylabel=label,
                   title=f"{label.split(' (')[0]} against {what}")
            if score == "val_acc":
                ax.set_ylim(-0.02, 1.02)
            ax.tick_params(axis="x", which="minor", labelbottom=False)
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in colors.items()]
    handles += [plt.Line2D([], [], color="black", marker=m, ls="", label=t) for t, m in markers.items()]
    fig.legend(handles=handles, loc="outside right upper", fontsize=7, ncols=1 + len(handles) // 25)
    save(fig, path)


def plot_attention_maps(maps, labels, path, title):
    """A layers x heads grid of heatmaps of maps (L, H, t, t), queries down and keys across, one colour bar."""
    L, H, t, _ = maps.shape
    signed = maps.min() < 0  # MixiT's fixed matrices are no probabilities: a diverging scale around 0
    vmax = float(np.abs(maps).max()) if signed else 1.0
    cell = 2.6 if labels is None else max(2.6, 0.17 * t + 0.9)
    fig, axes = plt.subplots(L, H, figsize=(cell * H + 1.5, cell * L + 0.8), squeeze=False, layout="constrained")
    for (l, h), ax in np.ndenumerate(axes):
        im = ax.imshow(maps[l, h], cmap="RdBu_r" if signed else "Blues", vmin=-vmax if signed else 0.0, vmax=vmax)
        ax.set_title(f"layer {l}, head {h}", fontsize=10)
        if labels is not None:
            ax.set_xticks(range(t), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(t), labels, fontsize=7)
        if l == L - 1:
            ax.set_xlabel("key (attended to)")
        if h == 0:
            ax.set_ylabel("query")
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    save(fig, path)


def plot_induction(scores, path, title):
    """A layers x heads heatmap of induction scores on a 0..1 colour scale, each cell annotated."""
    L, H = scores.shape
    fig, ax = plt.subplots(figsize=(1.0 * H + 2.5, 0.8 * L + 1.5), layout="constrained")
    im = ax.imshow(scores, cmap="viridis", vmin=0.0, vmax=1.0)
    for (l, h), v in np.ndenumerate(scores):
        ax.text(h, l, f"{v:.2f}", ha="center", va="center", color="black" if v > 0.6 else "white", fontsize=9)
    ax.set(xticks=range(H), yticks=range(L), xlabel="head", ylabel="layer", title=title)
    fig.colorbar(im, ax=ax, label="induction score")
    save(fig, path)


def plot_propagation(stats, width, path):
    """Token covariance (log scale) and similarity against depth at init, mean ± std: stats {network: (mean, std)}."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for (name, (mean, std)), color in zip(stats.items(), (COLORS["mixing"], "tab:gray", "tab:olive", COLORS["softmax"])):
        for k, ax in enumerate(axes):
            ax.plot(mean[:, k], color=color, label=name)
            ax.fill_between(range(len(mean)), mean[:, k] - std[:, k], mean[:, k] + std[:, k], color=color, alpha=0.2)
    for ax, what in zip(axes, ("covariance", "cosine similarity")):
        ax.set(xlabel="layer", ylabel=f"mean token {what}", title=f"token {what} at init, width {width}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_yscale("log")
    save(fig, path)


def plot_express(rows, path):
    """sample.py --express=init: each pattern's residual against the number of heads, a panel per pattern, a colour
    per variant, solid at the shorter length and dashed at the longer."""
    patterns = [k for k in rows[0] if k not in ("T", "heads", "variant")]
    colors = dict(zip(dict.fromkeys(r["variant"] for r in rows), (COLORS["mixing"], "tab:olive", COLORS["softmax"],
                                                                 COLORS["frozen_qk"])))
    lengths = sorted({r["T"] for r in rows})
    fig, axes = plt.subplots(1, len(patterns), figsize=(4.2 * len(patterns), 3.8), layout="constrained")
    for ax, pattern in zip(axes, patterns):
        for (variant, color), T in ((vc, T) for vc in colors.items() for T in lengths):
            points = [(r["heads"], r[pattern]) for r in rows if r["variant"] == variant and r["T"] == T]
            ax.plot(*zip(*points), "o-" if T == lengths[0] else "s--", color=color, label=f"{variant}, T={T}")
        ax.set(xscale="log", xlabel="heads", ylabel="residual (0: formed, 1: nothing of it)", ylim=(-0.02, 1.02),
               title=pattern)
        heads = sorted({r["heads"] for r in rows})
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    save(fig, path)


def plot_sweep(points, shape, path):
    """bench.py's context sweep (sweep_points; shape: a row): tokens/s against T; mixing's speed-up, the FLOP ratio."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    Ts = [p["T"] for p in points]
    for a in dict.fromkeys(k for p in points for k in p if k in COLORS):
        ax.plot(Ts, [p.get(a) for p in points], "o-", color=COLORS[a], label=a)
    if "speed_ratio" in points[0]:
        ax2.plot(Ts, [p["speed_ratio"] for p in points], "o-", color=COLORS["mixing"], label="measured speed ratio")
        ax2.plot(Ts, [p["flop_ratio"] for p in points], "s--", color="gray", label="FLOP ratio softmax / mixing")
    ax.set(ylabel="training tokens/s", ylim=(0, None), title=f"{shape['n_layer']} layers, width {shape['n_embd']}, "
           f"{shape['tokens_per_step']:,} tokens per step")
    ax2.set(ylabel="mixing over softmax", title="MixiT's speed-up")
    for a in (ax, ax2):
        a.set(xscale="log", xlabel="context length T")
        a.set_xticks(Ts, [str(T) for T in Ts])
        a.minorticks_off()
        a.grid(alpha=0.3)
        if a.lines:
            a.legend()
    fig.tight_layout()
    save(fig, path)


# ----------------------------------------------------------------------------- the script: finished comparisons

def read_json(path, lines=False):
    """A JSON file of a comparison (lines: a JSON value a line); a missing, unreadable or empty one is a ConfigError."""
    try:
        with open(path) as f:
            value = [json.loads(line) for line in f] if lines else json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path} ({e.strerror if isinstance(e, OSError) else e}); a finished "
                          f"train.py comparison's folder holds it") from None
    if not value:
        raise ConfigError(f"{path} is empty; a finished train.py comparison's folder holds its runs")
    return value


def claims_report(path, runs_dir):
    """The claims file's every setting read by the rule from its comparison's runs.json under runs_dir, each claim's
    word, and each comparison's command, machine and training time (its runs' sum): markdown."""
    namespace, settings, verdicts, used = {}, [], [], {}
    try:
        exec(open(path).read(), namespace)
        claims, commands = namespace["CLAIMS"], namespace["COMMANDS"]
    except Exception as e:
        raise ConfigError(f"claims file {path} failed ({type(e).__name__}: {e}); it sets CLAIMS and COMMANDS, as "
                          f"configs/claims.py does") from None

    def runs(folder, task_name, variant):  # a variant's finals; of another comparison: (its folder, the variant)
        folder, variant = variant if isinstance(variant, tuple) else (folder, variant)
        if folder not in used:  # folders joined by +: the runs of several commands (more seeds of one)
            used[folder] = [r for f in folder.split("+") for r in read_json(os.path.join(runs_dir, f, "runs.json"))]
        found = [r for r in used[folder] if r["task"] == task_name and r["variant"] == variant]
        if not found:
            held = "; ".join(sorted({f"{r['task']}: {r['variant']}" for r in used[folder]}))
            raise ConfigError(f"{folder} holds no runs of {variant!r} on {task_name}; it holds {held}")
        return found

    name = lambda v: "{1} ({0})".format(*v) if isinstance(v, tuple) else v  # a variant as the tables show it

    for claim, rows in claims.items():
        parts = {}
        for part, label, folder, task_name, metric, first, other, direction, *floor in rows:  # floor: a trained one
            trained = [r[metric] for r in runs(folder, task_name, floor[0])] if floor else None
            cells = rule_cells(runs(folder, task_name, first), runs(folder, task_name, other), metric, trained,
                               (direction,))
            parts.setdefault(part, []).append((cells[direction], label))
            settings.append({"claim": claim, "part": f"{part}, {label}", "comparison": f"{folder}: {task_name}, "
                             f"{metric}" + (f", floor {name(floor[0])}" if floor else ""), "first / other":
                             f"{name(first)} / {name(other)}", **{k: v for k, v in cells.items() if k != direction},
                             "the claim": direction, "word": cells[direction]})
        verdicts += [{"claim": claim, "part": part, "verdict": part_word(*zip(*read))} for part, read in parts.items()]
    commands = [{"comparison": f, "command": "; ".join(f"`{commands[p]}`" if p in commands else "none given" for p in
                                                     f.split("+")), "runs": len(finals),
                 "machine": finals[0]["hardware"], "training time": format_time(sum(r["time"] for r in finals))}
                for f, finals in used.items()]
    return "\n".join(table(rows, {k: k for k in rows[0]}) for rows in (verdicts, settings, commands))


def main(argv):
    """One comparison folder: its report again, from its runs' metrics.jsonl; several: the cost plot of all runs; a
    claims file: every claim's verdict from the runs under runs_dir."""
    config = configure(DEFAULTS, [a for a in argv if a.startswith("--")], files=False)
    folders = [a for a in argv if not a.startswith("--")]
    if folders and folders[0].endswith(".py"):
        return print(claims_report(folders[0], config["runs_dir"]), end="")
    if not folders:
        raise ConfigError("name the folders of finished train.py comparisons: python report.py DIR [DIR ...]")
    out = config["out_dir"] or os.path.relpath(os.path.commonpath([os.path.abspath(f) for f in folders]))
    runs = [read_json(os.path.join(folder, "runs.json")) for folder in folders]
    check_writable(out)
    if len(folders) > 1:
        print(f"{sum(map(len, runs))} runs of {len(folders)} comparisons")
        plot_cost([r for rs in runs for r in rs], os.path.join(out, "cost.png"))
    elif "run_dir" not in runs[0][0]:
        raise ConfigError(f"{folders[0]}/runs.json names no run folders (an older train.py wrote it); run its "
                          f"train.py command again with --init_from=resume")
    else:
        write_files(runs[0], [read_json(os.path.join(folders[0], r["run_dir"], "metrics.jsonl"), lines=True)
                              for r in runs[0]], out)


if __name__ == "__main__":
    sys.exit(cli(main, sys.argv[1:]))
