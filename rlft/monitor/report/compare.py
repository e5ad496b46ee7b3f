"""What the report adds over the per-metric graphs: the eval curve with its spread over prompts (mean ± std, and
pass@k when the eval sampled k per prompt), and, for several runs, a comparison (the shared curves first, the
config keys that differ, the final numbers side by side). Reads only RunData (no torch); matplotlib is imported
when a curve is drawn."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from rlft.numeric import is_finite

# the curves a side-by-side shows first when every compared run logged them
SHARED = ("reward", "eval_reward", "kl_policy_ref", "loss")


@dataclass
class EvalPoint:
    step: float
    mean: float
    std: float | None
    pass_at_k: float | None


def _num(x) -> float | None:
    return float(x) if is_finite(x) else None


def eval_points(run) -> list[EvalPoint]:
    """The run's evaluations in step order: summary.json's start (step 0) and end (the last step) around the eval
    rows of metrics.jsonl (`eval_reward`, `eval_prompt_std`, `eval_pass_at_k`); at a step with both, the
    summary's start or end wins (it is the run's own account of its first and last eval)."""
    by_step: dict = {}
    for row in run.eval_metrics:
        step, mean = _num(row.get("step")), _num(row.get("eval_reward"))
        if step is not None and mean is not None:
            by_step[step] = EvalPoint(step, mean, _num(row.get("eval_prompt_std")), _num(row.get("eval_pass_at_k")))
    ev = run.summary.get("eval") if isinstance(run.summary.get("eval"), dict) else {}
    last = _num(run.summary.get("steps"))
    for key, step in (("start", 0.0), ("end", last)):
        part = ev.get(key)
        if isinstance(part, dict) and step is not None and _num(part.get("reward_mean")) is not None:
            by_step[step] = EvalPoint(step, _num(part["reward_mean"]), _num(part.get("prompt_std")),
                                      _num(part.get("pass_at_k")))
    return [by_step[s] for s in sorted(by_step)]


def eval_k(run) -> int | None:
    """Samples per prompt of the run's eval (summary.json's `k`), which makes its pass rate pass@k."""
    ev = run.summary.get("eval") if isinstance(run.summary.get("eval"), dict) else {}
    for key in ("end", "start"):
        k = (ev.get(key) or {}).get("k") if isinstance(ev.get(key), dict) else None
        if type(k) is int and k > 0:
            return k
    return None


def has_spread(runs) -> bool:
    return any(p.std is not None for run in runs for p in eval_points(run))


def render_eval_spread(runs, dpi: int = 90) -> bytes:
    """One PNG: per run the eval mean with a band of ± the std over prompts, and pass@k dashed."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(6.4, 3.3), dpi=dpi)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.9, bottom=0.14)
    for ri, run in enumerate(runs):
        pts = eval_points(run)
        if not pts:
            continue
        color = colors[ri % len(colors)]
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        xs = [p.step for p in pts]
        ax.plot(xs, [p.mean for p in pts], "-", color=color, marker=".", linewidth=1.4, label=f"{prefix}mean")
        band = [p for p in pts if p.std is not None]
        if band:
            ax.fill_between([p.step for p in band], [p.mean - p.std for p in band], [p.mean + p.std for p in band],
                            color=color, alpha=0.18, linewidth=0, label=f"{prefix}± std over prompts")
        passes = [p for p in pts if p.pass_at_k is not None]
        k = eval_k(run)
        if passes and k:
            ax.plot([p.step for p in passes], [p.pass_at_k for p in passes], "--", color=color, linewidth=1.2,
                    label=f"{prefix}pass@{k}")
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    ax.set_title("eval reward: mean ± std over prompts", fontsize=10)
    ax.legend(fontsize=7, loc="best", framealpha=0.7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def eval_spread_graph(runs, section: str):
    from rlft.monitor.report.graphs import Graph

    ks = sorted({k for k in map(eval_k, runs) if k})
    help_text = ("the held-out eval at the start, during training and at the end: the mean reward, a band of one "
                 "standard deviation of the per-prompt means (how unevenly prompts are solved)"
                 + (f", and pass@{'/'.join(map(str, ks))} (dashed): the share of prompts with a sample that passes"
                    if ks else ""))
    return Graph("eval_spread", "eval reward (mean ± std over prompts)", section,
                 ["eval_reward", "eval_prompt_std", "eval_pass_at_k"], ["mean", "std", "pass@k"], help_text,
                 render_eval_spread(runs))


def shared_keys(runs) -> list[str]:
    """Of SHARED, the metrics every run logged (eval_reward: in its eval rows)."""
    def has(run, key):
        rows = run.eval_metrics if key.startswith("eval_") else run.metrics
        return any(_num(r.get(key)) is not None for r in rows)
    return [k for k in SHARED if all(has(run, k) for run in runs)]


def _flatten(node, prefix="") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def flat_run_config(path: Path) -> dict | None:
    """The run's resolved config.yaml as dotted keys, or None where it is missing, unreadable or empty."""
    from rlft.config.run_config import RunConfigError, read_run_config

    try:
        return _flatten(read_run_config(path, empty_ok=False))
    except RunConfigError:
        return None


# keys that differ between any two runs by construction, not by choice
NOT_COMPARED = ("train.output_dir", "train.run_name", "train.logging_dir")


def config_diff(runs) -> list[tuple[str, list]]:
    """(key, value per run) for each config key whose value is not the same in every run (missing = absent)."""
    configs = [flat_run_config(run.path) for run in runs]
    if any(c is None for c in configs):
        return []
    missing = object()
    keys = sorted(set().union(*configs))
    out = []
    for k in keys:
        if k in NOT_COMPARED:
            continue
        vals = [c.get(k, missing) for c in configs]
        if any(v != vals[0] for v in vals[1:]):
            out.append((k, ["(absent)" if v is missing else v for v in vals]))
    return out


def final_numbers(run) -> dict:
    """The numbers a comparison lines up: steps, the last training reward, the last KL and loss, the end eval."""
    def last(key):
        return next((v for v in (_num(r.get(key)) for r in reversed(run.metrics)) if v is not None), None)
    pts = eval_points(run)
    end = pts[-1] if pts else None
    return {"steps": _num(run.summary.get("steps")) or last("step"),
            "reward": last("reward") if last("reward") is not None else last("sampled_reward_mean"),
            "kl_policy_ref": last("kl_policy_ref"), "loss": last("loss"),
            "eval_start": pts[0].mean if pts else None, "eval_end": end.mean if end else None,
            "eval_end_std": end.std if end else None, "eval_end_pass": end.pass_at_k if end else None,
            "k": eval_k(run)}
