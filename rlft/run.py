"""The run folder every stage writes: resolved config, metrics, completions, checkpoints, final model.

    <train.output_dir>/
      config.yaml         resolved config, each key with the layer that set it
      metrics.jsonl       one JSON object per logged step
      completions.jsonl   sampled completions with each reward's score (sampling stages)
      health.jsonl        every health-rule firing (written, possibly empty, by every stage)
      checkpoints/        rolling, resumable checkpoints (checkpoint-<step>)
      final/              PEFT adapter (or full model) + tokenizer
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rlft.config.compose import Composed
from rlft.config.render import render_yaml
from rlft.config.schema import RlftConfig


@dataclass
class RunOptions:
    resume: bool = False
    overwrite: bool = False
    verbose: bool = False


class RunError(Exception):
    """A run cannot start or continue; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def completions(self) -> Path:
        return self.root / "completions.jsonl"

    @property
    def health(self) -> Path:
        return self.root / "health.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.root / "final"

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoints whose save finished (rlft writes its marker last), oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.glob("checkpoint-*") if (p / COMPLETE_MARKER).is_file()]
        return sorted(found, key=checkpoint_step)


COMPLETE_MARKER = "rlft_complete"


def checkpoint_step(path: Path) -> int:
    """The step of `checkpoint-<step>`, -1 for any other name."""
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def default_output_dir(stage: str) -> str:
    return f"runs/{stage}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_run_dir(cfg: RlftConfig, opts: RunOptions) -> RunDir:
    """The run folder's preconditions (--resume needs one, a new run needs none), checked without
    writing anything, so a run that fails to start leaves nothing behind."""
    if cfg.train.output_dir is None:
        cfg.train.output_dir = default_output_dir(cfg.stage)
    run = RunDir(Path(cfg.train.output_dir))
    if os.environ.get("RLFT_LAUNCHED"):  # the launching process already checked it
        return run
    exists = run.root.exists() and any(run.root.iterdir())
    if opts.resume and opts.overwrite:
        raise RunError("--resume and --overwrite contradict each other; pick one")
    if opts.resume:
        if not exists:
            raise RunError(f"nothing to resume: run folder {run.root} does not exist or is empty "
                           f"(drop --resume to start a new run)")
    elif exists and not opts.overwrite:
        raise RunError(f"run folder {run.root} already exists and is not empty: pass --resume to continue it "
                       f"or --overwrite to replace it (or set train.output_dir)")
    return run


def prepare_run_dir(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> RunDir:
    """Create (or reopen for --resume) the run folder and write config.yaml; called once the model and
    data have loaded."""
    run = check_run_dir(cfg, opts)
    if os.environ.get("RLFT_LAUNCHED"):  # the launching process already created it
        run.root.mkdir(parents=True, exist_ok=True)
        run.checkpoints.mkdir(exist_ok=True)
        return run
    if not opts.resume and run.root.exists() and any(run.root.iterdir()):
        shutil.rmtree(run.root)  # --overwrite (check_run_dir refused otherwise)
    run.root.mkdir(parents=True, exist_ok=True)
    run.checkpoints.mkdir(exist_ok=True)
    text = render_yaml(cfg, composed)
    if not opts.resume or not run.config.exists():
        run.config.write_text(f"# rlft resolved config; each key notes the layer that set it\n{text}")
    return run
