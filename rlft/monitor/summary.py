"""`summary.json`: the one file that says how a run ended, written by every stage at the end (finished,
stopped, interrupted or failed) so scripts, pipelines and reports read a run without parsing logs;
and the same numbers as a table on the terminal (steps, wall time, first/last headline-metric means,
the best checkpoint, the report command). Everything here is computed from the run folder's files."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from rlft.numeric import is_finite
from rlft import run_files

# exit code of a stage -> status in summary.json
STATUS_BY_CODE = {0: "finished", 3: "stopped", 4: "stopped", 130: "interrupted", 143: "interrupted"}
WINDOW = 10  # logged steps averaged for "first", "last" and each checkpoint's score
# the metric a stage is judged by, and whether higher is better; the first one a run logged wins
HEADLINE = (("reward", True), ("sampled_reward_mean", True), ("reward_mean", True), ("eval_reward", True),
            ("rewards/margins", True), ("eval_loss", False), ("loss", False))


def status_for(code: int | None) -> str:
    return STATUS_BY_CODE.get(code, "failed") if code is not None else "failed"


def read_summary(path: Path) -> dict | None:
    """A run's summary.json, or None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return None
    return data if isinstance(data, dict) else None


def _rows(metrics_path: Path) -> list[dict]:
    rows = []
    if Path(metrics_path).is_file():
        for line in Path(metrics_path).read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a row cut by a kill mid-write
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _is_eval(row: dict) -> bool:
    return any(k.startswith("eval_") or k.startswith("eval/") for k in row)


def last_metrics(metrics_path: Path) -> dict[str, Any]:
    """The newest training row of metrics.jsonl (evaluation rows skipped), without `step`/`time`."""
    train = [r for r in _rows(metrics_path) if not _is_eval(r)]
    last = train[-1] if train else {}
    return {k: v for k, v in last.items() if k not in ("step", "time", "stage")}


def write_summary(path: Path, *, stage: str, status: str, steps: int, wall_s: float, last: dict[str, Any],
                  eval: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """Write summary.json atomically (a reader never sees half a file) and return what was written."""
    summary = {"stage": stage, "status": status, "steps": int(steps), "wall_s": round(float(wall_s), 3),
               "last": last, "eval": eval or {}, **extra}
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return summary


# -- headline numbers ------------------------------------------------------------------------------
def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def headline(rows: list[dict]) -> dict | None:
    """The headline metric's mean over the first and the last WINDOW logged steps (half the run when shorter)."""
    for metric, higher in HEADLINE:
        points = [(r["step"], r[metric]) for r in rows if is_finite(r.get(metric)) and is_finite(r.get("step"))]
        if points:
            w = min(WINDOW, max(1, len(points) // 2))
            return {"metric": metric, "higher_is_better": higher, "window": w,
                    "first_mean": _mean([v for _, v in points[:w]]), "last_mean": _mean([v for _, v in points[-w:]])}
    return None


def best_checkpoint(rows: list[dict], candidates: list[tuple[int, Path]], head: dict | None) -> dict | None:
    """Among saved models (step, folder), the one whose last WINDOW logged steps up to its step score best
    on the headline metric; ties go to the later one."""
    if not candidates:
        return None
    if head is None:
        step, path = max(candidates, key=lambda c: c[0])
        return {"path": str(path), "step": step, "metric": None, "value": None}
    metric, sign = head["metric"], 1 if head["higher_is_better"] else -1
    points = [(r["step"], r[metric]) for r in rows if is_finite(r.get(metric)) and is_finite(r.get("step"))]
    best = None
    for step, path in sorted(candidates, key=lambda c: c[0]):
        window = [v for s, v in points if s <= step][-WINDOW:]
        if not window:
            continue
        value = _mean(window)
        if best is None or sign * value >= sign * best["value"]:
            best = {"path": str(path), "step": step, "metric": metric, "value": value, "window": len(window)}
    return best


def best_by_eval(evals: list[dict], candidates: list[tuple[int, Path]], end: float | None,
                 steps: int | None) -> dict | None:
    """Among saved models, the one with the best eval reward (fresh samples of the held-out prompts) measured at
    its step; the final model is judged by eval.end. Ties go to the later one; None when no saved model has an
    eval of its own (then the training reward decides)."""
    at = {int(r["step"]): r["eval_reward"] for r in evals
          if is_finite(r.get("eval_reward")) and is_finite(r.get("step"))}
    if is_finite(end) and steps is not None:
        at[int(steps)] = end
    best = None
    for step, path in sorted(candidates, key=lambda c: c[0]):
        if step in at and (best is None or at[step] >= best["value"]):
            best = {"path": str(path), "step": step, "metric": "eval_reward", "value": at[step], "window": 1}
    return best


def report_command(run_root: Path) -> str:
    return f"rlft report {shlex.quote(str(run_root))}"


def run_numbers(run_root: Path, checkpoints: list[tuple[int, Path]] = (), *, best_by: str = "train_reward",
                eval_end: float | None = None, steps: int | None = None) -> dict[str, Any]:
    """The end-of-run fields summary.json adds to `last`: headline first/last means (and `reward` when the
    headline is the reward), the best of the saved models (`checkpoints`: (step, folder); by the training
    headline, or with best_by="eval" by the eval reward at each one's step), the report command."""
    rows = _rows(Path(run_root) / run_files.METRICS)
    train = [r for r in rows if not _is_eval(r)]
    evals = [r for r in rows if _is_eval(r)]
    head = headline(train) or headline(evals)
    best = best_by_eval(evals, list(checkpoints), eval_end, steps) if best_by == "eval" else None
    out: dict[str, Any] = {"headline": head,
                           "best_checkpoint": best or best_checkpoint(train or evals, list(checkpoints), head),
                           "report_command": report_command(run_root)}
    if head and head["metric"] == "reward":
        out["reward"] = {"first_mean": head["first_mean"], "last_mean": head["last_mean"], "window": head["window"]}
    sampling = async_numbers(train)
    if sampling:
        out["async"] = sampling
    return out


def async_numbers(rows: list[dict]) -> dict | None:
    """Streaming / async GRPO over the whole run: how stale the trained batches were, how many completions
    were dropped, and how much sampling overlapped learning; None for a run without them."""
    stale = [r["async/staleness_max"] for r in rows if is_finite(r.get("async/staleness_max"))]
    if not stale:
        return None
    col = lambda key: [r[key] for r in rows if is_finite(r.get(key))]  # noqa: E731
    return {"staleness_mean": _mean(col("async/staleness_mean")), "staleness_max": max(stale),
            "dropped": sum(col("async/dropped")), "overlap_frac": _mean(col("async/overlap_frac"))}


# -- the terminal table ----------------------------------------------------------------------------
def summary_lines(summary: dict, run_root: Path) -> list[tuple[str, str]]:
    """(label, value) rows of the end-of-train table."""
    def f(x):  # an eval part read back from a checkpoint or rounds.json may hold anything: only numbers show
        return f"{x:.4g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"

    of = f" of {summary['max_steps']}" if summary.get("max_steps") else ""
    wall = summary.get("wall_s") or 0.0
    lines = [("run", str(run_root)), ("status", f"{summary.get('status')} at step {summary.get('steps')}{of}"),
             ("wall time", f"{wall:.1f} s" if wall < 120 else f"{wall / 60:.1f} min")]
    head = summary.get("headline")
    if head:
        w = f"{head['window']} steps" if head["window"] > 1 else "step"
        lines.append((head["metric"], f"{f(head['first_mean'])} (first {w}) -> {f(head['last_mean'])} (last {w})"))
    ev = summary.get("eval") if isinstance(summary.get("eval"), dict) else {}
    start, end = (ev.get(k) if isinstance(ev.get(k), dict) else {} for k in ("start", "end"))
    if start or end:
        lines.append(("eval reward", f"{f(start.get('reward_mean'))} (start) -> {f(end.get('reward_mean'))} (end)"))
    sampling = summary.get("async")
    if sampling:
        lines.append(("sampling ahead", f"staleness {f(sampling['staleness_mean'])} mean, "
                                        f"{f(sampling['staleness_max'])} max; "
                                        f"{f(sampling['dropped'])} completions dropped; overlap "
                                        f"{f(sampling['overlap_frac'])}"))
    best = summary.get("best_checkpoint")
    if best:
        score = (f" ({best['metric']} {f(best['value'])} over its last {best.get('window')} steps)"
                 if best.get("metric") else "")
        lines.append(("best checkpoint", f"{best['path']}{score}"))
    lines.append(("report", summary.get("report_command", report_command(run_root))))
    return lines


# Rows a user copies (a path, a command): printed after the table on lines of their own that never wrap, so a
# narrow terminal or a long path cannot split them.
_COPYABLE = ("run", "best checkpoint", "report")


def print_summary(summary: dict, run_root: Path, console=None) -> None:
    """The table on stderr (Rich), then the paths and the report command unwrapped."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(stderr=True)
    table = Table(title="rlft run summary", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows = summary_lines(summary, run_root)
    for label, value in rows:
        if label not in _COPYABLE:
            table.add_row(label, value)
    console.print(table)
    for label, value in rows:
        if label in _COPYABLE:
            console.print(Text.assemble((f"{label}: ", "bold"), value), soft_wrap=True)
