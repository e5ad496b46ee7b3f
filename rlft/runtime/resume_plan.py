"""What `--resume` does, decided from the run folder's files alone: the checkpoint to continue from, the damaged
ones to move aside first, whether only the final save is left to redo, the step to train to and the logged rows
to drop. A plan changes nothing (`resume.carry_out` does); it imports no torch, and whether a checkpoint is whole
is the `problem_of` passed in (`checkpoint_files.checkpoint_problem`, whose loading checks need torch)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.rundir.folder import RunDir, checkpoint_step
from rlft import run_files

ProblemOf = Callable[[Path], "str | None"]  # why a checkpoint cannot be resumed from, None when whole


@dataclass(frozen=True)
class SetAside:
    """A damaged checkpoint, moved out of the trainer's checkpoint-* rotation before anything is trained."""
    checkpoint: Path
    problem: str
    to: Path                    # damaged-checkpoint-<step>[.n]
    fallback: Path | None       # the checkpoint tried next


@dataclass(frozen=True)
class ResumePlan:
    checkpoint: Path | None             # to resume from; None when `refused`
    target: int                         # the step the run trains to (0: the end of the data)
    final_only: bool = False            # it reached `target` but final/ was never saved whole: only redo that save
    set_aside: tuple[SetAside, ...] = ()
    incomplete: tuple[str, ...] = ()    # checkpoints whose save never finished (no marker): ignored
    drop_rows_after: int | None = None  # logged rows of later steps are trained again: dropped when training begins
    refused: str | None = None          # why there is nothing to resume (the RunError's message)

    @property
    def step(self) -> int:
        return checkpoint_step(self.checkpoint) if self.checkpoint is not None else 0


def target_steps(cfg: RlftConfig) -> int:
    """The step a run trains to: train.max_steps, or the stage's own count (PPO: updates of ppo.batch_size
    episodes); 0 for the end of the data."""
    total_steps = get_spec(cfg.stage).total_steps
    return total_steps(cfg) if total_steps is not None else cfg.train.max_steps


def damaged_path(bad: Path) -> Path:
    """Where a damaged checkpoint goes: an earlier damaged copy of the same step keeps its name."""
    aside, n = bad.with_name(f"damaged-{bad.name}"), 1
    while aside.exists():
        n += 1
        aside = bad.with_name(f"damaged-{bad.name}.{n}")
    return aside


def newest_whole(complete: list[Path], problem_of: ProblemOf) -> tuple[Path | None, tuple[SetAside, ...]]:
    """The newest of `complete` (oldest first) that `problem_of` finds whole, and the damaged ones newer than it."""
    good, aside = list(complete), []
    while good and (problem := problem_of(good[-1])):
        bad = good.pop()
        aside.append(SetAside(bad, problem, damaged_path(bad), good[-1] if good else None))
    return (good[-1] if good else None), tuple(aside)


def plan_resume(run: RunDir, target: int, problem_of: ProblemOf) -> ResumePlan:
    """The plan for `--resume` of `run`, training to step `target` (0: the end of the data)."""
    complete = run.complete_checkpoints()
    incomplete = tuple(p.name for p in sorted(run.checkpoints.glob(run_files.CHECKPOINT_GLOB), key=checkpoint_step)
                       if p not in complete)
    newest, aside = newest_whole(complete, problem_of)
    plan = ResumePlan(None, target, set_aside=aside, incomplete=incomplete)
    if newest is None:
        if run.final.exists():
            why = f"nothing left to do: {run.root} holds a finished run (final/) and no checkpoint to continue from"
        else:
            why = f"no complete checkpoint to resume in {run.checkpoints}; start again with --overwrite"
        return replace(plan, refused=why)
    step = checkpoint_step(newest)
    if target > 0 and step >= target and not run.final.is_dir():
        # killed during the final save (final/ appears only by a rename once complete): do it again
        return replace(plan, checkpoint=newest, final_only=True)
    if target > 0 and step >= target:
        return replace(plan, refused=f"nothing left to do: the newest checkpoint is at step {step} and "
                                      f"train.max_steps is {target}; raise train.max_steps to train further")
    return replace(plan, checkpoint=newest, drop_rows_after=step)
