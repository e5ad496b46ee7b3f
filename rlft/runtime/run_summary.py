"""summary.json and the closing lines for how a run ended."""

from __future__ import annotations

import sys
import time

from rlft.rundir.folder import RunDir, checkpoint_step
from rlft import run_files


def write_run_summary(run: RunDir, stage: str, code: int | None, *, error: str | None, steps: int,
                      max_steps: int | None, started: float, eval_numbers: dict,
                      distributed: dict | None = None, best_by: str = "train_reward") -> None:
    """Never lets a write failure hide the run's own outcome."""
    from rlft.monitor.summary import last_metrics, print_summary, run_numbers, status_for, write_summary

    extra = {"exit_code": code if code is not None else 1}
    if error:
        extra["error"] = error[:2000]
    if max_steps:
        extra["max_steps"] = max_steps
    if distributed is not None:
        extra["distributed"] = distributed
    saved = [(checkpoint_step(p), p) for p in run.complete_checkpoints()]
    if run.final.is_dir():
        saved.append((steps, run.final))
    try:
        summary = write_summary(run.root / run_files.SUMMARY, stage=stage, status=status_for(code), steps=steps,
                                wall_s=time.monotonic() - started, last=last_metrics(run.metrics), eval=eval_numbers,
                                **extra, **run_numbers(run.root, saved, best_by=best_by, steps=steps,
                                                       eval_end=(eval_numbers.get("end") or {}).get("reward_mean")))
    except OSError as e:
        print(f"rlft: could not write summary.json: {e}", file=sys.stderr)
        return
    try:
        print_summary(summary, run.root)
    except (OSError, ValueError):  # a closed terminal must not turn a finished run into a failure
        pass
