"""`summary.json`: the one file that says how a run ended, written by every stage at the end (finished,
stopped, interrupted or failed) so scripts, pipelines and reports read a run without parsing logs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# exit code of a stage -> status in summary.json
STATUS_BY_CODE = {0: "finished", 3: "stopped", 4: "stopped", 130: "interrupted", 143: "interrupted"}


def status_for(code: int | None) -> str:
    return STATUS_BY_CODE.get(code, "failed") if code is not None else "failed"


def last_metrics(metrics_path: Path) -> dict[str, Any]:
    """The newest training row of metrics.jsonl (evaluation rows skipped), without `step`/`time`."""
    if not Path(metrics_path).is_file():
        return {}
    last: dict[str, Any] = {}
    for line in Path(metrics_path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut by a kill mid-write
        if isinstance(row, dict) and not any(k.startswith("eval_") or k.startswith("eval/") for k in row):
            last = row
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
