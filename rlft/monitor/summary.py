"""summary.json and the end-of-train table: steps, wall time, first/last headline-metric means, the best
checkpoint and the report command. Computed from the run folder's files (metrics.jsonl and the
checkpoints the caller names), so it needs no trainer state; other fields already in summary.json
(e.g. `eval`) are kept."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

WINDOW = 10  # logged steps averaged for "first", "last" and each checkpoint's score
# the metric a stage is judged by, and whether higher is better; the first one a run logged wins
HEADLINE = (("reward", True), ("eval_reward", True), ("rewards/margins", True), ("eval_loss", False), ("loss", False))


def _rows(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def headline(rows: list[dict]) -> dict | None:
    """The headline metric's mean over the first and the last WINDOW logged steps."""
    for metric, higher in HEADLINE:
        points = [(r["step"], r[metric]) for r in rows if _finite(r.get(metric)) and _finite(r.get("step"))]
        if points:
            w = min(WINDOW, max(1, len(points) // 2))
            return {"metric": metric, "higher_is_better": higher, "window": w,
                    "first_mean": _mean([v for _, v in points[:w]]), "last_mean": _mean([v for _, v in points[-w:]])}
    return None


def best_checkpoint(rows: list[dict], candidates: list[tuple[int, Path]], head: dict | None) -> dict | None:
    """Among saved models (step, path), the one whose last WINDOW logged steps up to its step score best
    on the headline metric; ties go to the later one."""
    if not candidates:
        return None
    if head is None:
        step, path = max(candidates, key=lambda c: c[0])
        return {"path": str(path), "step": step, "metric": None, "value": None}
    metric, sign = head["metric"], 1 if head["higher_is_better"] else -1
    points = [(r["step"], r[metric]) for r in rows if _finite(r.get(metric)) and _finite(r.get("step"))]
    best = None
    for step, path in sorted(candidates, key=lambda c: c[0]):
        window = [v for s, v in points if s <= step][-WINDOW:]
        if not window:
            continue
        value = _mean(window)
        if best is None or sign * value >= sign * best["value"]:
            best = {"path": str(path), "step": step, "metric": metric, "value": value, "window": len(window)}
    return best


def report_command(run_root: Path) -> str:
    return f"rlft report {shlex.quote(str(run_root))}"


def write_summary(run_root: Path, *, stage: str, status: str, steps: int, wall_s: float,
                  checkpoints: list[tuple[int, Path]] = (), max_steps: int | None = None) -> dict:
    """Compute the end-of-run numbers, merge them into `<run>/summary.json` (atomically) and return them.
    `checkpoints`: (step, folder) of each complete checkpoint and of final/, best-first choice among them."""
    run_root = Path(run_root)
    rows = [r for r in _rows(run_root / "metrics.jsonl") if not any(k.startswith("eval_") for k in r)]
    evals = [r for r in _rows(run_root / "metrics.jsonl") if any(k.startswith("eval_") for k in r)]
    head = headline(rows) or headline(evals)
    path = run_root / "summary.json"
    try:
        summary = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        summary = {}
    last = {k: v for k, v in (rows[-1] if rows else {}).items() if _finite(v) and k != "step"}
    summary.update({"stage": stage, "status": status, "steps": steps, "wall_s": round(wall_s, 2), "last": last,
                    "headline": head, "best_checkpoint": best_checkpoint(rows or evals, list(checkpoints), head),
                    "report_command": report_command(run_root)})
    if max_steps:
        summary["max_steps"] = max_steps
    if head and head["metric"] == "reward":
        summary["reward"] = {"first_mean": head["first_mean"], "last_mean": head["last_mean"], "window": head["window"]}
    tmp = path.with_name("summary.json.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)
    return summary


def summary_lines(summary: dict, run_root: Path) -> list[tuple[str, str]]:
    """(label, value) rows of the end-of-train table."""
    def f(x):
        return "-" if x is None else f"{x:.4g}"

    of = f" of {summary['max_steps']}" if summary.get("max_steps") else ""
    wall = summary.get("wall_s") or 0.0
    lines = [("run", str(run_root)), ("status", f"{summary.get('status')} at step {summary.get('steps')}{of}"),
             ("wall time", f"{wall:.1f} s" if wall < 120 else f"{wall / 60:.1f} min")]
    head = summary.get("headline")
    if head:
        lines.append((head["metric"], f"{f(head['first_mean'])} (first {head['window']} steps) -> "
                                      f"{f(head['last_mean'])} (last {head['window']} steps)"))
    ev = summary.get("eval") or {}
    if ev.get("start") or ev.get("end"):
        lines.append(("eval reward", f"{f((ev.get('start') or {}).get('reward_mean'))} (start) -> "
                                     f"{f((ev.get('end') or {}).get('reward_mean'))} (end)"))
    best = summary.get("best_checkpoint")
    if best:
        score = f" ({best['metric']} {f(best['value'])} over its last {best.get('window')} steps)" if best.get("metric") else ""
        lines.append(("best checkpoint", f"{best['path']}{score}"))
    lines.append(("report", summary.get("report_command", report_command(run_root))))
    return lines


def print_summary(summary: dict, run_root: Path, console=None) -> None:
    """The table on stderr (Rich)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlft run summary", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, value in summary_lines(summary, run_root):
        table.add_row(label, value)
    (console or Console(stderr=True)).print(table)
