"""A run's resolved config.yaml as a config layer file beside it (`rlft eval` on a run, `rlft rewards try
--from-run`): the run's own model, data, rewards and sampling settings."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rlft.config.compose import RUN_CONFIG_LAYER
from rlft.errors import RunError
from rlft.posttrain.target import run_config


EVAL_CONFIG_NAME = RUN_CONFIG_LAYER  # compose names its problems after the run's config.yaml


def eval_config_file(run_root: Path, stage: str) -> Path:
    """The run's resolved config.yaml cut to what eval reads (model, data, rewards, train, the stage's own
    section, its `eval:` sampling), written beside it so relative paths keep their meaning; the caller deletes it."""
    import yaml

    from rlft.config.stages import SPECS

    data = run_config(run_root)
    keep = {"model", "data", "rewards", "train", "lora", "eval", SPECS[stage].section if stage in SPECS else stage}
    path = run_root / EVAL_CONFIG_NAME
    if path.is_symlink():  # planted in the run folder: writing through it would replace whatever it points to
        raise RunError(f"{path} is a symbolic link (to {os.readlink(path)}): rlft writes the run's config there for "
                       f"this command and does not write through links; remove the link")
    # a new file (O_EXCL: never an existing file or link) renamed over the name: a link or hard link planted there
    # after the check is replaced, never written through
    fd, tmp = tempfile.mkstemp(prefix=f"{EVAL_CONFIG_NAME}.", suffix=".tmp", dir=run_root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(yaml.safe_dump(escaped({k: v for k, v in data.items() if k in keep}), sort_keys=False))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def escaped(settings: dict) -> dict:
    """The run's resolved settings as a config layer: a `${...}` left in a value is text the user escaped (`\\${..}`)
    when the run started, so it is escaped again rather than interpolated a second time (rewards[].kwargs reach
    the reward verbatim and never interpolate)."""
    def walk(node, verbatim=False):
        if isinstance(node, dict):
            return {k: walk(v, verbatim) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, verbatim) for v in node]
        return node.replace("${", "\\${") if isinstance(node, str) and not verbatim else node

    def reward(item):
        return {k: walk(v, verbatim=k == "kwargs") for k, v in item.items()} if isinstance(item, dict) else walk(item)

    return {k: [reward(item) for item in v] if k == "rewards" and isinstance(v, list) else walk(v)
            for k, v in settings.items()}
