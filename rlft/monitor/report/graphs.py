"""Which graphs a set of runs gets, and their PNGs (matplotlib, Agg backend, imported here only).

Known metrics get named graphs in fixed sections (rewards, training, the stage's own, evaluation);
every other numeric metric still gets a graph under "Other metrics", grouped by its prefix, so a
stage that logs something new shows up without a change here."""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field

# Comparison: report/compare.py; Pipeline: report/pipeline.py
SECTIONS = ("Comparison", "Pipeline", "Rewards", "Training", "Stage", "Evaluation", "Other metrics")
NOT_PLOTTED = {"step", "epoch", "time", "stage", "reward_version", "total_flos", "train_runtime"}
HEALTH_STYLE = {"warning": ("#e0a000", "v"), "critical": ("#d62728", "v"), "rollback": ("#9467bd", "^")}


@dataclass
class Graph:
    slug: str
    title: str
    section: str
    series: list                     # metric keys
    labels: list                     # one per key
    help: str = ""
    png: bytes = field(default=b"", repr=False)


# (title, section, keys, help); a graph is made when any of its keys has a number in any run
KNOWN = [
    ("total_reward (mean)", "Rewards", ["reward"], "mean weighted total reward over the step's completions; should "
                                                   "rise"),
    ("total_reward_std", "Rewards", ["reward_std"], "spread of the total reward; usually falls as the policy gets "
                                                    "consistent"),
    ("sampled reward (mean)", "Rewards", ["sampled_reward_mean", "reward_mean", "kept_reward_mean"],
     "mean reward of the completions sampled for this round (and of those kept)"),
    ("sampled reward std", "Rewards", ["sampled_reward_std"], "spread of the sampled completions' rewards"),
    ("KL to the reference", "Training", ["kl_policy_ref", "kl"], "mean per-token KL(policy || reference)"),
    ("sampler vs learner KL", "Training", ["kl_sample_train_v1", "kl_sample_train_v2"],
     "v1 = mean(logp_sample - logp_train), v2 = mean of half squared log-ratio; stable below 0.01"),
    ("entropy", "Training", ["entropy"], "mean per-token policy entropy (nats); a collapse means deterministic "
                                         "outputs"),
    ("completion length", "Training", ["completion_length"], "mean completion length (tokens)"),
    ("grad norm", "Training", ["grad_norm"], "gradient norm before clipping"),
    ("learning rate", "Training", ["learning_rate"], "learning rate at the step"),
    ("KL coefficient", "Training", ["kl_coef"], "KL penalty coefficient (moves when adaptive_kl is on)"),
    ("loss", "Training", ["loss"], "training loss"),
    ("constant-reward groups", "Training", ["frac_constant_groups", "frac_unscored"],
     "fraction of groups whose completions all scored the same (no signal) and of completions with no score"),
    # preference stages (DPO / ORPO)
    ("reward margin", "Stage", ["rewards/margins"], "implicit reward of chosen minus rejected"),
    ("reward accuracy", "Stage", ["rewards/accuracies"], "fraction of pairs whose chosen answer has the higher "
                                                         "implicit reward"),
    ("chosen / rejected rewards", "Stage", ["rewards/chosen", "rewards/rejected"], "implicit rewards of each side"),
    ("log odds ratio", "Stage", ["log_odds_ratio", "nll_loss"], "ORPO's odds-ratio term and its NLL term"),
    # RS-SFT / AWR
    ("kept fraction", "Stage", ["kept_fraction", "frac_kept", "rs_sft/kept_fraction"], "fraction of samples kept for "
                                                                                       "SFT"),
    ("kept samples", "Stage", ["kept_count", "num_sampled"], "samples kept for SFT out of those drawn"),
    ("AWR weights", "Stage", ["weight_mean", "weight_max", "awr/weight_mean", "awr/weight_max"], "advantage weights"),
    ("effective sample size", "Stage", ["ess", "awr_ess", "awr/ess", "effective_sample_size"], "ESS of the AWR weights "
                                                                                               "as a fraction"),
    ("advantages", "Stage", ["advantage_mean", "advantage_std", "frac_clipped"], "advantage statistics (AWR, PPO) and "
                                                                                 "the fraction of clipped weights"),
    # PPO
    ("value loss", "Stage", ["value_loss", "ppo/value_loss"], "critic loss"),
    ("explained variance", "Stage", ["explained_variance", "ppo/explained_variance"], "how much of the returns' "
                                                                                      "variance the value head "
                                                                                      "explains"),
    ("policy loss", "Stage", ["policy_loss", "ppo/policy_loss"], "clipped PPO policy loss"),
    ("clip fraction / approx KL", "Stage",
     ["clipfrac", "approx_kl", "value_clipfrac", "ppo/clipfrac", "ppo/approx_kl"], "PPO update size"),
    ("value estimates", "Stage", ["value_mean"], "mean value-head estimate"),
    # async / streaming GRPO
    ("staleness", "Stage", ["async/staleness_mean", "async/staleness_max"],
     "training iterations between the weights that sampled a batch and the learner that trains it (0 = on-policy)"),
    ("dropped completions", "Stage", ["async/dropped"], "completions older than max_steps_off_policy, dropped and "
                                                        "re-sampled"),
    ("sampling vs learning time", "Stage", ["time/generation_s", "time/training_s", "async/wait_s"],
     "seconds per iteration spent sampling, learning, and waiting for samples"),
    ("overlap", "Stage", ["async/overlap_frac"], "fraction of sampling time that ran while the learner computed"),
    # episodes
    ("success rate", "Stage", ["success_rate", "episodes/success_rate"], "fraction of episodes that succeeded"),
    ("episode length", "Stage", ["episode_length", "episodes/length", "episodes/mean_length"], "turns per episode"),
]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "graph"


def _numeric_keys(runs) -> list[str]:
    keys: dict = {}
    for run in runs:
        for row in run.metrics:
            for k, v in row.items():
                if k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_PLOTTED:
                    keys[k] = None
        for row in run.eval_metrics:
            for k, v in row.items():
                if k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_PLOTTED:
                    keys[k] = None
    return list(keys)


def plan_graphs(runs) -> list[Graph]:
    """The graphs these runs have data for, in report order."""
    keys = _numeric_keys(runs)
    present, used, graphs = set(keys), set(), []

    def add(title, section, series, help_text="", labels=None):
        slug = _slug(title)
        while any(g.slug == slug for g in graphs):
            slug += "_"
        graphs.append(Graph(slug, title, section, series, labels or series, help_text))
        used.update(series)

    for title, section, series, help_text in KNOWN[:2]:
        if present & set(series):
            add(title, section, [s for s in series if s in present], help_text)
    for k in keys:  # one graph per reward function: its mean over the step's completions
        m = re.fullmatch(r"rewards/(.+)/mean", k)
        if m and k not in used:
            add(f"reward: {m[1]}", "Rewards", [k], f"mean of `{m[1]}` over the step's completions (before weighting)")
    errors = [k for k in keys if re.fullmatch(r"rewards/.+/errors", k)]
    if errors and any(_any_nonzero(runs, k) for k in errors):
        add("reward errors", "Rewards", errors, "completions each reward function failed to score, per step",
            labels=[k.split("/")[1] for k in errors])
    used.update(errors)
    for title, section, series, help_text in KNOWN[2:]:
        found = [s for s in series if s in present and s not in used]
        if found:
            add(title, section, found, help_text)
    evals = [k for k in keys if k.startswith("eval_") and k not in used]
    for k in evals:
        add(k, "Evaluation", [k], "measured on the evaluation data")
    rest = [k for k in keys if k not in used]
    groups: dict = {}
    for k in rest:
        groups.setdefault(k.split("/", 1)[0], []).append(k)  # one graph per family keeps the count (and time) down
    for prefix, members in groups.items():
        for i in range(0, len(members), 6):
            chunk = members[i:i + 6]
            title = prefix if len(members) <= 6 else f"{prefix} ({i // 6 + 1})"
            labels = [m[len(prefix) + 1:] if m.startswith(prefix + "/") else m for m in chunk]
            add(title, "Other metrics", chunk, "", labels)
    return graphs


def _any_nonzero(runs, key) -> bool:
    return any(isinstance(r.get(key), (int, float)) and r.get(key) for run in runs for r in run.metrics)


def _points(rows, key):
    xs, ys = [], []
    for r in rows:
        v, s = r.get(key), r.get("step")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(s, (int, float)) and math.isfinite(v):
            xs.append(s)
            ys.append(v)
    return xs, ys


def _ema(ys, alpha):
    out, acc = [], None
    for y in ys:
        acc = y if acc is None else alpha * y + (1 - alpha) * acc
        out.append(acc)
    return out


def version_changes(rows) -> list[tuple[int, object]]:
    """(step, new version) wherever `reward_version` changes between consecutive rows."""
    out, last = [], None
    for r in rows:
        v = r.get("reward_version")
        if v is None or isinstance(v, float) and not math.isfinite(v):  # the page's JSON has no NaN
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)  # averaged by the trainer's logging into 2.0
        if last is not None and v != last:
            out.append((r.get("step"), v))
        last = v
    return out


def health_marks(run) -> dict:
    """Health events by kind -> steps: warning / critical firings and rollbacks."""
    marks = {"warning": [], "critical": [], "rollback": []}
    for e in run.health:
        step = e.get("step")
        if not isinstance(step, (int, float)):
            continue
        kind = "rollback" if e.get("rule") == "rollback" or e.get("action") == "rollback" and e.get("level") == "info" \
            else e.get("level")
        if kind in marks:
            marks[kind].append(step)
    return {k: sorted(set(v)) for k, v in marks.items()}


def render(graphs: list[Graph], runs, dpi: int = 90) -> None:
    """Draw each graph into its `png` (bytes)."""
    if not graphs:
        return
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors
    styles = ["-", "--", ":", "-."]
    marks = [health_marks(run) for run in runs]
    versions = [version_changes(run.metrics) for run in runs]
    fig, ax = plt.subplots(figsize=(6.4, 3.3), dpi=dpi)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.9, bottom=0.14)  # fixed margins: tight_layout doubles the cost
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    for g in graphs:
        # one Axes reused: removing the artists keeps its tick objects (ax.clear() rebuilds them, the main cost)
        for artist in [*ax.lines, *ax.collections, *ax.texts]:
            artist.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        n_lines = 0
        for ri, run in enumerate(runs):
            rows = run.eval_metrics if g.section == "Evaluation" else run.metrics
            for si, (key, label) in enumerate(zip(g.series, g.labels)):
                xs, ys = _points(rows, key)
                if not xs:
                    continue
                color = colors[(ri if len(runs) > 1 else si) % len(colors)]
                style = styles[si % len(styles)] if len(runs) > 1 else "-"
                name = ", ".join(x for x in ((run.name if len(runs) > 1 else ""),
                                             (label if len(g.series) > 1 else "")) if x) or None
                if len(xs) > 100:  # noisy: faint raw curve plus an exponential moving average
                    ax.plot(xs, ys, style, color=color, alpha=0.25, linewidth=0.8)
                    ax.plot(xs, _ema(ys, min(1.0, 20 / len(xs))), style, color=color, linewidth=1.6, label=name)
                else:
                    ax.plot(xs, ys, style, color=color, linewidth=1.4, marker="." if len(xs) < 40 else None,
                            label=name)
                n_lines += 1
        if not n_lines:
            g.png = b""
            continue
        trans = ax.get_xaxis_transform()
        shown = set()
        for ri, m in enumerate(marks):
            for kind, steps in m.items():
                if steps:
                    color, marker = HEALTH_STYLE[kind]
                    ax.scatter(steps, [0.0] * len(steps), transform=trans, marker=marker, s=28, color=color,
                               edgecolors=colors[ri % len(colors)] if len(runs) > 1 else "none", zorder=5,
                               clip_on=False, label=f"health: {kind}" if kind not in shown else None)
                    shown.add(kind)
        for ri, changes in enumerate(versions):
            for step, version in changes[:50]:
                ax.axvline(step, color="#555555", linestyle=":", linewidth=1)
                ax.text(step, 0.98, f" reward v{version}", transform=trans, fontsize=7, va="top", color="#555555")
        ax.relim()
        ax.autoscale_view()
        ax.set_title(g.title, fontsize=10)
        if n_lines > 1 or shown:
            many = sum(len(line.get_xdata()) for line in ax.lines) > 600  # "best" scans every point
            ax.legend(fontsize=7, loc="upper left" if many else "best", framealpha=0.7)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        g.png = buf.getvalue()
    plt.close(fig)
