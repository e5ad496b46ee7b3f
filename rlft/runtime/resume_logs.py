"""The run's logs when a resume trains steps again: their rows after the checkpoint's step go (they are written
anew), and a config changed with --allow-config-change is recorded beside the one it replaces."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rlft import run_files
from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.rundir.folder import RunDir


def drop_rows_after(path: Path, step: int) -> int:
    """Remove rows of steps after `step` from a jsonl log: a resumed run trains them again and writes them anew.
    A line cut short by a kill goes too. A whole line that is not a row with a numeric step is kept byte for
    byte (nothing of the user's is deleted; `rlft report` skips it) and counted in a warning."""
    if not path.is_file():
        return 0
    keep, dropped, odd, changed = [], 0, 0, False
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.strip():
            changed = True
            continue
        try:
            row = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            row = None
        if not line.endswith(b"\n"):
            if row is None:  # a line cut short by a kill: not a row
                dropped += 1
                continue
            line, changed = line + b"\n", True  # the next append would run on from it
        row_step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(row_step, (int, float)) or isinstance(row_step, bool) or row_step != row_step:
            odd += 1
            keep.append(line)
        elif row_step > step:
            dropped += 1
        else:
            keep.append(line)
    if odd:
        print(f"rlft: WARNING {odd} line(s) of {path.name} are not rows with a numeric step; kept as they are "
              f"(rlft report skips them)", file=sys.stderr)
    if dropped or changed:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(keep))
        os.replace(tmp, path)
    if dropped:
        print(f"rlft: removed {dropped} row(s) after step {step} from {path.name}: those steps run again",
              file=sys.stderr)
    return dropped


def resume_logs(run: RunDir, step: int, cfg: RlftConfig, composed: Composed, changed: bool) -> None:
    """The first step after the resume begins (everything has loaded): drop the logged rows of the steps it trains
    again and, when the config changed, keep the old one as config.step-<step>.yaml and write the new one."""
    for path in (run.metrics, run.completions, run.health, run.reward_logs):
        drop_rows_after(path, step)
    if changed:  # the run goes on with the new values: record them
        run.config.rename(run.root / run_files.config_at_step(step))
        from rlft.config.render import render_yaml

        run.config.write_text(f"# rlft resolved config; each key notes the layer that set it\n"
                              f"# changed at step {step} (--allow-config-change); before: "
                              f"{run_files.config_at_step(step)}\n{render_yaml(cfg, composed)}")
