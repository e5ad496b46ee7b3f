"""Carrying out a resume plan: damaged checkpoints moved aside with a warning, the refusal raised, the resume
announced; and the rlft state of the checkpoint chosen."""

from __future__ import annotations

import sys
from pathlib import Path

from rlft.run import COMPLETE_MARKER, RunDir, RunError, checkpoint_step
from rlft.runtime.checkpoint_files import read_rlft_state
from rlft.runtime.resume_plan import ProblemOf, ResumePlan, SetAside, newest_whole


def set_aside(item: SetAside, rank: int) -> None:
    """Move a damaged checkpoint out of the trainer's checkpoint-* rotation (rank 0), with a one-line warning."""
    if rank == 0:
        item.checkpoint.rename(item.to)
    print(f"rlft: WARNING {item.checkpoint.name} is damaged ({item.problem}); moved it to {item.to} and falling back "
          f"to {item.fallback.name if item.fallback else 'no checkpoint'}", file=sys.stderr)


def carry_out(plan: ResumePlan, run: RunDir, rank: int, *, first: bool = True) -> tuple[Path, dict]:
    """Do what `plan` says before anything loads: (the checkpoint to resume from, its rlft state); a RunError
    when it refuses. `first=False`: a plan made again after a checkpoint's state failed to load."""
    if first and plan.incomplete:
        print(f"rlft: ignoring incomplete checkpoint(s) {', '.join(plan.incomplete)} (a save was interrupted)",
              file=sys.stderr)
    for item in plan.set_aside:
        set_aside(item, rank)
    if plan.refused:
        raise RunError(plan.refused)
    if plan.final_only:
        print(f"rlft: {run.root} reached step {plan.step} but its final model was not saved completely; "
              f"saving it again from {plan.checkpoint.name}", file=sys.stderr)
    elif rank == 0:
        print(f"rlft: resuming {run.root} from step {plan.step} to step "
              f"{plan.target if plan.target > 0 else 'the end of the data'}", file=sys.stderr)
    return plan.checkpoint, read_rlft_state(plan.checkpoint)


def newest_checkpoint(folder: Path, rank: int, problem_of: ProblemOf) -> Path | None:
    """The newest complete checkpoint in `folder` (None if there is none), for a stage that picks its own (one
    folder per round); damaged ones are moved aside with a warning, as for `--resume`."""
    folder = Path(folder)
    complete = sorted((p for p in folder.glob("checkpoint-*") if (p / COMPLETE_MARKER).is_file()),
                      key=checkpoint_step) if folder.is_dir() else []
    newest, aside = newest_whole(complete, problem_of)
    for item in aside:
        set_aside(item, rank)
    return newest
