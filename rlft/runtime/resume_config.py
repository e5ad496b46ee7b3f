"""A resume continues with the config the run started with: every changed key listed, the ones that would break
its checkpoints refused (RESUME_BREAKING, in rlft/rundir/resume_keys.py beside the keys free to change), the rest
only with --allow-config-change."""

from __future__ import annotations

import sys

from rlft.config.compose import flatten
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.errors import RunError
from rlft.rundir.folder import RunDir
from rlft.rundir.resume_keys import RESUME_BREAKING, config_changes, saved_config
from rlft.config.run_config import RunConfigError, read_run_config


def breaking_changes(run: RunDir, cfg: RlftConfig) -> list[str]:
    """Resume-breaking keys whose value differs from the run's saved config.yaml."""
    from rlft.config.schema import to_dict

    saved = saved_config(run.root)
    if saved is None:
        return []
    old = flatten(saved)
    new = flatten(to_dict(cfg))
    keys = RESUME_BREAKING + get_spec(cfg.stage).resume_breaking
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if k in old and old.get(k) != new.get(k)]


def _saved_settings(run: RunDir) -> dict | None:
    """The run's config.yaml (None when there is none); a RunError when it cannot be read as settings:
    resuming unchecked could continue checkpoints with settings they were not trained with."""
    try:
        return read_run_config(run.root, empty_ok=False)
    except RunConfigError as exc:
        if exc.missing:
            return None
        problem = f"is not readable YAML ({exc.why})" if exc.found is None else \
            f"holds {exc.found}, not the run's settings"
        raise RunError(f"cannot resume: {exc.path} {problem}. It records the settings the checkpoints were trained "
                       f"with: restore it, or delete it to resume with the current settings unchecked") from None


def check_resume_config(run: RunDir, cfg: RlftConfig, allow_change: bool, rank: int) -> dict:
    """The changed settings a resume goes on with ({key: (old, new)}); a RunError listing them when it may not."""
    old = _saved_settings(run)
    if old is None:
        return {}
    changes = config_changes(old, cfg)
    breaking = RESUME_BREAKING + get_spec(cfg.stage).resume_breaking
    listed = "".join(f"\n  {k}: {a!r} -> {b!r}" for k, a, b in changes)
    if any(k in breaking for k, _, _ in changes):
        raise RunError("cannot resume: these settings changed since the run started and would break its "
                       "checkpoints: " + "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changes if k in breaking)
                       + ". Start a new run (another train.output_dir) instead.")
    if changes and not allow_change:
        raise RunError(f"cannot resume {run.root}: {len(changes)} setting(s) changed since the run started:"
                       f"{listed}\nPass --allow-config-change to continue with the new values, or undo the changes.")
    if changes and rank == 0:
        print(f"rlft: resuming with a changed config (--allow-config-change):{listed}", file=sys.stderr)
    return {k: (a, b) for k, a, b in changes}
