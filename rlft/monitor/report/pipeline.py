"""`rlft report` on a pipeline folder: its stages' run folders (from pipeline_summary.json), overlaid on the usual
graphs, and one eval curve across the stages, each stage's evaluations placed after the steps of the stages before
it, with the stage boundaries marked. Stages whose evals sampled differently (their `eval_set` digests differ)
are drawn as separate pieces and the title says they do not compare."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from rlft.numeric import is_finite
from rlft import run_files

SUMMARY = run_files.PIPELINE_SUMMARY


@dataclass
class StageCurve:
    """One stage's piece of the pipeline eval curve: its label, where it starts on the shared step axis, and its
    eval points (shared step, mean reward)."""
    label: str
    offset: int
    steps: int
    points: list = field(default_factory=list)
    eval_set: str | None = None


def is_pipeline_folder(path: Path) -> bool:
    return path.is_dir() and (path / SUMMARY).is_file() and not (path / run_files.SUMMARY).is_file()


def stage_folders(path: Path) -> list[tuple[str, Path]]:
    """(label, run folder) of each stage of the pipeline at `path` that has a run folder, in order. A stage `dir`
    is taken as written, else relative to the pipeline folder or to the folder above it (how `pipeline run` names
    them: relative to where it ran)."""
    from rlft.monitor.report.load import ReportInputError

    try:
        data = json.loads((path / SUMMARY).read_text())
    except (OSError, ValueError) as exc:
        raise ReportInputError(f"{path / SUMMARY}: unreadable ({exc})") from None
    out = []
    for i, stage in enumerate(data.get("stages") or [] if isinstance(data, dict) else []):
        if not isinstance(stage, dict) or not isinstance(stage.get("dir"), str):
            continue
        label = f"{stage.get('index', i + 1)}-{stage.get('name') or stage.get('stage')}"
        found = _stage_dir(path, Path(stage["dir"]))
        if found is not None:
            out.append((label, found))
    if not out:
        raise ReportInputError(f"{path}: a pipeline folder whose stages have no run folders yet")
    return out


def _stage_dir(root: Path, written: Path) -> Path | None:
    candidates = [written] if written.is_absolute() else [root / written.name, written, root.parent / written]
    return next((c for c in candidates if (c / run_files.SUMMARY).is_file() or (c / run_files.METRICS).is_file()), None)


def stage_curves(runs) -> list[StageCurve]:
    """Each stage run's eval points on one step axis: eval.start at its first step, each eval row during training,
    eval.end at its last step; a stage begins where the one before ended (its `steps`, else its last logged step)."""
    curves, offset = [], 0
    for run in runs:
        ev = run.summary.get("eval") if isinstance(run.summary.get("eval"), dict) else {}
        start, end = (ev.get(k) if isinstance(ev.get(k), dict) else {} for k in ("start", "end"))
        logged = [r["step"] for r in [*run.metrics, *run.eval_metrics] if is_finite(r.get("step"))]
        steps = run.summary.get("steps") if is_finite(run.summary.get("steps")) else max(logged, default=0)
        points = [(offset, start["reward_mean"])] if is_finite(start.get("reward_mean")) else []
        points += [(offset + r["step"], r["eval_reward"]) for r in run.eval_metrics
                   if is_finite(r.get("step")) and is_finite(r.get("eval_reward")) and 0 < r["step"] < steps]
        if is_finite(end.get("reward_mean")):
            points.append((offset + steps, end["reward_mean"]))
        digest = end.get("eval_set") or start.get("eval_set")
        curves.append(StageCurve(run.name, offset, int(steps), points, digest if isinstance(digest, str) else None))
        offset += int(steps)
    return curves


def comparable(curves: list[StageCurve]) -> bool:
    """True when every stage with eval points measured the same eval (prompts, rewards and sampling)."""
    return len({c.eval_set for c in curves if c.points}) <= 1


def render_curve(curves: list[StageCurve], dpi: int = 90) -> bytes:
    """The pipeline eval curve as a PNG: one colour per stage, dashed lines at the boundaries with the stage
    names; one connected line when the stages compare, separate pieces when they do not."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(9.6, 3.3), dpi=dpi)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.88, bottom=0.14)
    ax.set_xlabel("step (stages one after another)", fontsize=8)
    ax.set_ylabel("eval reward", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    same = comparable(curves)
    trans = ax.get_xaxis_transform()
    previous_end = None
    for i, c in enumerate(curves):
        if i:
            ax.axvline(c.offset, color="#555555", linestyle="--", linewidth=1)
        ax.text(c.offset, 0.98, f" {c.label}", transform=trans, fontsize=7, va="top", color="#555555")
        if not c.points:
            continue
        xs, ys = [x for x, _ in c.points], [y for _, y in c.points]
        if same and previous_end is not None:  # the stages compare: join each to the one before
            ax.plot([previous_end[0], xs[0]], [previous_end[1], ys[0]], ":", color="#888888", linewidth=1)
        ax.plot(xs, ys, "-", marker=".", color=colors[i % len(colors)], linewidth=1.4, label=c.label)
        previous_end = (xs[-1], ys[-1])
    title = "eval reward across the pipeline"
    ax.set_title(title if same else title + " (stages evaluate differently: not comparable)", fontsize=10)
    if any(c.points for c in curves):
        ax.legend(fontsize=7, loc="lower right", framealpha=0.7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
