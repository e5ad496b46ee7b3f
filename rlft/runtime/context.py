"""The run lifecycle every stage shares: `with RunContext(cfg, composed, opts) as ctx:` sets the process up and
checks the run folder; `ctx.open_run()` (or the first use of `ctx.run`) creates or reopens it once data and
model have loaded, and carries out the resume plan; `ctx.train(trainer, tokenizer)` trains to the end and saves
the final model; leaving the block writes summary.json and releases the folder. Each job's details are in the
modules beside this one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.run import RunDir, RunError, RunOptions, check_run_dir, prepare_run_dir, resume_command
from rlft.runtime import outcome
from rlft.runtime.checkpoint_files import checkpoint_problem, read_rlft_state, seal_checkpoint
from rlft.runtime.final import save_final, save_final_again
from rlft.runtime.interrupt import Interrupt
from rlft.runtime.process import quiet_libraries, set_up_process, tracker_env
from rlft.runtime.ranks import check_ranks_in_sync
from rlft.runtime.resume import carry_out, newest_checkpoint, set_aside
from rlft.runtime.resume_config import check_resume_config
from rlft.runtime.resume_logs import resume_logs
from rlft.runtime.resume_plan import ResumePlan, SetAside, aside_path, plan_resume, target_steps
from rlft.runtime.run_summary import write_run_summary
from rlft.runtime.saved_state import load_rlft_state, rlft_state, state_problem


class RunContext:
    """`with RunContext(cfg, composed, opts) as ctx:` ... `ctx.train(trainer, tokenizer)`."""

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions, *, own_resume: bool = False):
        self.cfg, self.composed, self.opts = cfg, composed, opts
        self.own_resume = own_resume  # the stage picks its checkpoints itself (e.g. one folder per round)
        self.num_processes = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.interrupt = Interrupt()
        self.plan: ResumePlan | None = None  # what --resume does (stages with own_resume make none)
        self.resume_from: Path | None = None
        self.final_only = False  # resume of a run killed during its final save: only redo that save
        self.threads_note = "cpu threads: torch default"
        self._run: RunDir | None = None  # created by open_run (or on first use of .run)
        self.config_changes: dict = {}  # key -> (old, new), a resume with --allow-config-change
        self.extra_state: dict = {}  # the rlft state of the checkpoint resumed from
        self.exit_code: int | None = None  # set by train(); None at exit means the run failed
        self.began = False  # a training step began in this process (the resume's changes to the logs are made)
        self.steps = 0
        self.max_steps: int | None = None
        self.eval: dict = {}  # stages that score fresh samples fill eval["start"] / eval["end"]

    # -- the lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "RunContext":
        """Process set-up and the run folder's preconditions (checked, nothing written); the folder itself is
        created by `open_run`, which a stage calls once its data and model have loaded."""
        quiet_libraries(self.opts.verbose)
        self.started = time.monotonic()
        self.planned = check_run_dir(self.cfg, self.opts)
        self.threads_note = set_up_process(self.cfg, self.rank)
        return self

    @property
    def run(self) -> RunDir:
        """The run folder; opened on first use for stages that do not call `open_run` themselves."""
        if self._run is None:
            self.open_run()
        return self._run

    def open_run(self) -> RunDir:
        """Create (or reopen for --resume) and lock the run folder, write config.yaml and an empty
        health.jsonl, and resolve the checkpoint to resume from. A run that fails while loading its data or
        model never gets here, so nothing blocks the corrected rerun."""
        if self._run is not None:
            return self._run
        run = self._run = prepare_run_dir(self.cfg, self.composed, self.opts)
        os.environ.update(tracker_env(self.cfg.train.report_to, run.root, os.environ))
        try:
            if self.opts.resume:
                self.config_changes = check_resume_config(run, self.cfg, self.opts.allow_config_change, self.rank)
                if not self.own_resume:
                    self._resume(plan_resume(run, target_steps(self.cfg), checkpoint_problem))
            if self.rank == 0 and not run.health.exists():
                run.health.touch()
        except BaseException:
            run.release()
            self._run = None
            raise
        if self.rank == 0:
            print(f"rlft: run folder {run.root}; to continue it after a stop: {self.resume_command}",
                  file=sys.stderr)
        self.interrupt.install()
        return run

    def train(self, trainer, tokenizer, *, final: bool = True) -> int:
        """Train to the end; `final=False` (an intermediate round) leaves final/ unwritten."""
        try:
            self.exit_code = self._train(trainer, tokenizer, final)
        finally:
            self.steps = trainer.state.global_step
            self.max_steps = trainer.state.max_steps or None  # known once training started
        return self.exit_code

    def _train(self, trainer, tokenizer, final: bool) -> int:
        from transformers.trainer_callback import PrinterCallback

        from rlft.monitor.health import RunStopped
        from rlft.rewards import RewardFailureError

        trainer.remove_callback(PrinterCallback)  # rlft prints its own line per logged step
        self.trainer = trainer
        self.health.attach(trainer, self)
        self._load_state(trainer)
        if self.final_only:
            self.console.close()
            save_final_again(trainer, tokenizer, self.resume_from, self.cfg, self.run)
            return 0
        try:
            trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        except (RunStopped, RewardFailureError) as exc:
            trainer._save_checkpoint(trainer.model, trial=None)
            self.mark_complete(trainer)
            return outcome.stopped(exc, self.resume_command)
        except KeyboardInterrupt:
            return outcome.interrupted_twice(self.run, self.rank, self.resume_command)
        finally:
            self.console.close()
        if self.interrupt.signal is not None:
            return outcome.interrupted(trainer.state.global_step, trainer.args.output_dir, self.resume_command)
        check_ranks_in_sync(trainer, self.run)
        if final:
            save_final(trainer, tokenizer, self.cfg, self.run)
        return 0

    def __exit__(self, exc_type, exc, tb):
        self.interrupt.restore()
        run = self._run  # a run that failed before its folder was opened leaves none behind
        if run is not None:
            code, error = outcome.exit_of(exc_type, exc, self.exit_code)
            # a resume that fails before training a step changed nothing: the summary of the run as it
            # stands (finished, interrupted at step N) stays true, and a "failed at step 0" would hide it
            from rlft.monitor.summary import status_for

            failed_resume = self.opts.resume and not self.began and status_for(code) == "failed"
            if self.rank == 0 and not failed_resume:
                write_run_summary(run, self.cfg.stage, code, error=error, steps=self.steps, max_steps=self.max_steps,
                                  started=self.started, eval_numbers=self.eval)
            if run.replaced is not None and self.rank == 0:
                print(f"rlft: the run replaced by --overwrite is kept at {run.replaced} (this run wrote no "
                      f"checkpoint); move it back or delete it", file=sys.stderr)
            run.release()
        return False

    # -- resume --------------------------------------------------------------------------------
    @property
    def resume_command(self) -> str:
        if self.opts.resume_hint:
            return self.opts.resume_hint
        return resume_command(self.run.root, self.opts.argv or ["--stage", self.cfg.stage])

    def _resume(self, plan: ResumePlan, *, first: bool = True) -> None:
        self.plan = plan
        self.resume_from, self.extra_state = carry_out(plan, self.run, self.rank, first=first)
        self.final_only = plan.final_only

    def _load_state(self, trainer) -> None:
        """The rlft state of the checkpoint resumed from into `trainer`; one that does not load is moved aside
        and the resume planned again without it, before anything is trained."""
        section = get_spec(self.cfg.stage).section
        if self.resume_from is None:
            load_rlft_state(trainer, self.extra_state, self.config_changes, section)
        while self.resume_from is not None and (
                problem := state_problem(trainer, self.extra_state, self.config_changes, section)):
            bad = self.resume_from
            if self.own_resume:  # the stage chose it and dropped its rows: it chooses again on the next run
                set_aside(SetAside(bad, problem, aside_path(bad), None), self.rank)
                raise RunError(f"{bad.name} was damaged and is moved aside; run the same command again to resume "
                               f"from the checkpoint before it: {self.resume_command}")
            known = {bad: problem}
            self._resume(plan_resume(self.run, target_steps(self.cfg), lambda p: known.get(p) or checkpoint_problem(p)),
                         first=False)

    def newest_checkpoint(self, folder: Path) -> Path | None:
        """For a stage with its own resume: the newest complete checkpoint in `folder` (None if there is none),
        its rlft state loaded; damaged ones are moved aside with a warning, as for `--resume`."""
        newest = newest_checkpoint(folder, self.rank, checkpoint_problem)
        self.extra_state = read_rlft_state(newest) if newest is not None else {}
        return newest

    def step_begins(self) -> None:
        """The first training step of this process begins: everything is loaded, so the resume now drops the
        logged rows of the steps it trains again and records a changed config. A resume that fails while
        loading leaves the run's files as they were."""
        if self.began:
            return
        self.began = True
        if self.plan is not None and self.plan.drop_rows_after is not None and self.rank == 0:
            resume_logs(self.run, self.plan.drop_rows_after, self.cfg, self.composed, bool(self.config_changes))

    # -- callbacks -----------------------------------------------------------------------------
    def callbacks(self) -> list:
        from rlft.monitor.callbacks import CheckpointMarker, InterruptCallback, StepBegins
        from rlft.monitor.console import ConsoleProgress
        from rlft.monitor.health import HealthMonitor
        from rlft.monitor.metrics import MetricsWriter

        self.console = ConsoleProgress(self.cfg.stage)
        self.health = HealthMonitor(self.cfg, self.run, self.console)
        extra = []
        if self.config_changes:
            from rlft.monitor.callbacks import ApplyConfigChanges

            extra.append(ApplyConfigChanges(self.config_changes))
        return [StepBegins(self), MetricsWriter(self.run.metrics, self.cfg.stage, self.console, self.health), self.console,
                InterruptCallback(self.interrupt), CheckpointMarker(self), self.health, *extra]

    def mark_complete(self, trainer) -> None:
        """After each checkpoint save: rlft's state and the completion marker, then the replaced run can go."""
        if not trainer.args.should_save:
            return
        path = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
        if path.is_dir():
            seal_checkpoint(path, rlft_state(trainer))
            self.run.drop_replaced()
