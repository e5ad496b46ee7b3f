"""A run's `--resume`, carried out by the stage's declared policy. PER_CHECKPOINT: the config checked, the plan's
damaged checkpoints moved aside with a warning and its refusal raised, the checkpoint's rlft state loaded into the
trainer (one that does not load is moved aside and the plan made again), and the logs cut back once the first step
begins. PER_ROUND: each round continues from its own folder's newest whole checkpoint, its logs cut back as it
starts, and rounds.json keeps eval.start and the finished rounds' steps."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.rundir.folder import COMPLETE_MARKER, RunDir, checkpoint_step
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.checkpoint_files import checkpoint_problem, read_rlft_state
from rlft.runtime.resume_config import check_resume_config
from rlft.runtime.resume_logs import drop_rows_after, resume_logs
from rlft.runtime.resume_plan import (ProblemOf, ResumePlan, SetAside, damaged_path, newest_whole, plan_resume,
                                     target_steps)
from rlft.runtime.rounds_state import read_rounds_state, write_rounds_state
from rlft.runtime.saved_state import load_rlft_state, state_problem
from rlft import run_files

PER_CHECKPOINT, PER_ROUND = "checkpoint", "round"  # a stage's resume policy (rlft.runtime.lifecycle.Stage.resume)


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
    """The newest complete checkpoint in `folder` (None if there is none); damaged ones are moved aside with a
    warning, as for `--resume`."""
    folder = Path(folder)
    complete = sorted((p for p in folder.glob(run_files.CHECKPOINT_GLOB) if (p / COMPLETE_MARKER).is_file()),
                      key=checkpoint_step) if folder.is_dir() else []
    newest, aside = newest_whole(complete, problem_of)
    for item in aside:
        set_aside(item, rank)
    return newest


class Resume:
    """The resume side of one run, by the stage's `policy`. Per round there is no plan: each round's start picks its
    checkpoint (`start_round`)."""

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions, rank: int, policy: str = PER_CHECKPOINT):
        self.cfg, self.composed, self.opts, self.rank = cfg, composed, opts, rank
        self.own = policy == PER_ROUND
        self._rounds: dict | None = None  # rounds.json, read on first use
        self.plan: ResumePlan | None = None
        self.checkpoint: Path | None = None  # the checkpoint training continues from
        self.state: dict = {}  # its rlft state
        self.changes: dict = {}  # key -> (old, new), a resume with --allow-config-change

    @property
    def final_only(self) -> bool:
        """A run killed during its final save: only redo that save."""
        return self.plan is not None and self.plan.final_only

    def check(self, run: RunDir) -> None:
        """Before anything loads or is written (the folder not yet opened): the refusals `open` would meet, so a
        refused --resume leaves the run folder as it was. Damaged checkpoints are left for `open` to set aside."""
        if not self.opts.resume or os.environ.get("RLFT_LAUNCHED"):
            return
        check_resume_config(run, self.cfg, self.opts.allow_config_change, -1)  # quiet: `open` says it again
        if not self.own:
            plan = plan_resume(run, target_steps(self.cfg), checkpoint_problem)
            if plan.refused and not plan.set_aside:
                raise RunError(plan.refused)

    def open(self, run: RunDir) -> None:
        """The run folder has opened (nothing loaded yet): check the config and carry out the plan."""
        if not self.opts.resume:
            return
        self.changes = check_resume_config(run, self.cfg, self.opts.allow_config_change, self.rank)
        if not self.own:
            self._carry_out(plan_resume(run, target_steps(self.cfg), checkpoint_problem), run)

    def _carry_out(self, plan: ResumePlan, run: RunDir, first: bool = True) -> None:
        self.plan = plan
        self.checkpoint, self.state = carry_out(plan, run, self.rank, first=first)

    def load_state(self, trainer, run: RunDir, resume_command: str) -> None:
        """The checkpoint's rlft state into `trainer`; one that does not load is moved aside and the plan made
        again without it, before anything is trained."""
        section = get_spec(self.cfg.stage).section
        if self.checkpoint is None:
            load_rlft_state(trainer, self.state, self.changes, section)
        while self.checkpoint is not None and (problem := state_problem(trainer, self.state, self.changes, section)):
            bad = self.checkpoint
            if self.own:  # the stage chose it and dropped its rows: it chooses again on the next run
                set_aside(SetAside(bad, problem, damaged_path(bad), None), self.rank)
                raise RunError(f"{bad.name} was damaged and is moved aside; run the same command again to resume "
                               f"from the checkpoint before it: {resume_command}")
            known = {bad: problem}
            self._carry_out(plan_resume(run, target_steps(self.cfg), lambda p: known.get(p) or checkpoint_problem(p)),
                            run, first=False)
        if self.checkpoint is not None and not self.final_only:
            self.check_optimizer(trainer)

    def check_optimizer(self, trainer) -> None:
        """Before the first step: the checkpoint's optimizer state fits the parameters this run trains, or a
        RunError naming the file and what differs (torch would load a state of other shapes and fail mid-step)."""
        from rlft.runtime.optimizer_fit import OPTIMIZER, optimizer_mismatch

        mismatch = optimizer_mismatch(trainer, self.checkpoint)
        if mismatch:
            raise RunError(f"cannot resume: {self.checkpoint / OPTIMIZER} does not fit this model: {mismatch}. It "
                           f"was saved for other trainable weights (a model or lora setting changed since the run "
                           f"started, or the file was edited): resume with the settings the run was trained with, "
                           f"or start a new run (another train.output_dir, or --overwrite)")

    def start_round(self, run: RunDir, folder: Path, steps_before: int) -> Path | None:
        """Per round: on --resume the newest whole checkpoint in the round's `folder` (its rlft state read, damaged
        ones moved aside), and the logged rows of the steps trained again dropped (rank 0); None otherwise."""
        self.checkpoint, self.state = None, {}
        if not self.opts.resume:
            return None
        self.checkpoint = newest_checkpoint(folder, self.rank, checkpoint_problem)
        if self.checkpoint is not None:
            self.state = read_rlft_state(self.checkpoint)
        if self.rank == 0:  # steps after the resume point run again and log anew
            done = steps_before + (checkpoint_step(self.checkpoint) if self.checkpoint is not None else 0)
            for path in (run.metrics, run.health):
                drop_rows_after(path, done)
        return self.checkpoint

    def rounds(self, run: RunDir) -> dict:
        """Per round: rounds.json's state (read once; a damaged one is a RunError)."""
        if self._rounds is None:
            self._rounds = read_rounds_state(run)
        return self._rounds

    def round_done(self, run: RunDir, r: int, steps: int) -> None:
        self.rounds(run).setdefault("round_steps", {})[str(r)] = steps
        if self.rank == 0:
            write_rounds_state(run, self.rounds(run))

    def kept_eval_start(self, run: RunDir) -> dict | None:
        """eval.start as measured before this --resume: in rounds.json (per round) or in the rlft state of the
        checkpoint resumed from (per checkpoint: a trainer that keeps it, under "trainer")."""
        if self.own:
            return self.rounds(run).get("eval_start")
        return (self.state.get("trainer", {}).get("eval_start") or None) if self.checkpoint else None

    def keep_eval_start(self, run: RunDir, result: dict) -> None:
        """Per round: a measured eval.start goes into rounds.json (per checkpoint the trainer's state carries it)."""
        if self.own and "eval_start" not in self.rounds(run):
            self.rounds(run)["eval_start"] = result
            if self.rank == 0:
                write_rounds_state(run, self.rounds(run))

    def step_begins(self, run: RunDir) -> None:
        """The first step begins (everything has loaded): drop the logged rows of the steps trained again and
        record a changed config. A resume that fails while loading leaves the run's files as they were."""
        if self.plan is not None and self.plan.drop_rows_after is not None and self.rank == 0:
            resume_logs(run, self.plan.drop_rows_after, self.cfg, self.composed, bool(self.changes))
