"""The run lifecycle every stage shares (rlft.runtime.lifecycle orders a stage's parts around it):
`with RunContext(cfg, composed, opts, resume=PER_CHECKPOINT) as ctx:` sets the process up and checks the run
folder; `ctx.open_run()` creates or reopens it once data and model have loaded, and carries out the resume policy
(`ctx.run` opens nothing: before `open_run` it is an error); `ctx.new_callbacks()` makes rlft's callbacks;
`ctx.train(trainer, tokenizer)` trains to the end and saves the final model; leaving the block writes summary.json
and releases the folder. Each job's details are in the modules beside this one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rlft import world
from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.interrupt import Interrupt
from rlft.rewards.run_folder import set_run_folder
from rlft.rundir.folder import RunDir
from rlft.rundir.options import RunOptions
from rlft.rundir.prepare import check_run_dir, prepare_run_dir, resume_command
from rlft.runtime import outcome
from rlft.runtime.checkpoint_files import seal_checkpoint
from rlft.runtime.final import save_final, save_final_again
from rlft.runtime.first_step import trl_value_error
from rlft.runtime.process import set_up_process, tracker_env
from rlft.runtime.ranks import check_ranks_in_sync, check_same_run
from rlft.runtime.resume import PER_CHECKPOINT, Resume
from rlft.runtime.run_summary import write_run_summary
from rlft.runtime.saved_state import rlft_state
from rlft.models.sharded import mark_sharded
from rlft.runtime.sharding import check_sharded, distributed_block, memory_numbers, set_up_sharding, settle_root
from rlft.runtime.sharding import describe as describe_sharding
from rlft import run_files


class RunContext:
    """`with RunContext(cfg, composed, opts) as ctx:` ... `ctx.train(trainer, tokenizer)`."""

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions, *, resume: str = PER_CHECKPOINT):
        self.cfg, self.composed, self.opts = cfg, composed, opts
        self.num_processes = world.world_size()
        self.rank = world.rank()
        self.interrupt = Interrupt()
        self.resume = Resume(cfg, composed, opts, self.rank, resume)  # the stage's policy: per checkpoint or round
        self._run: RunDir | None = None  # created by open_run
        self.callbacks: list = []  # rlft's callbacks for the trainer, made by new_callbacks
        self.exit_code: int | None = None  # set by train(); None at exit means the run failed
        self.began = False  # a training step began in this process (the resume's changes to the logs are made)
        self.began_at: int | None = None  # the trainer's step count when this process's first step began
        self.steps, self.max_steps = 0, None  # max_steps: known once training started
        self.eval: dict = {}  # stages that score fresh samples fill eval["start"] / eval["end"]
        self.distributed: dict | None = None  # how the model is laid out across ranks, once prepared

    def __enter__(self) -> "RunContext":
        """Process set-up and the run folder's preconditions (checked, nothing written). The libraries' logs are
        quieted once, before the stage checks its inputs (rlft.runtime.lifecycle.run_stage)."""
        self.started = time.monotonic()
        self.planned = check_run_dir(self.cfg, self.opts)
        self.resume.check(self.planned)  # a refused --resume writes nothing
        self.threads_note = set_up_process(self.cfg, self.rank)
        set_up_sharding(self.cfg)
        check_same_run(self.cfg)
        return self

    def open_run(self) -> RunDir:
        """Create (or reopen for --resume) and lock the run folder, write config.yaml and an empty health.jsonl,
        and carry out the resume. A run that fails while loading its data or model never gets here, so nothing
        blocks the corrected rerun."""
        if self._run is not None:
            return self._run
        run = self._run = prepare_run_dir(self.cfg, self.composed, self.opts)
        os.environ.update(tracker_env(self.cfg.train.report_to, run.root, os.environ))
        set_run_folder(run.root)  # rewards that keep files in the run (the llm_judge cache) find it
        try:
            self.resume.open(run)
            if self.rank == 0 and not run.health.exists():
                run.health.touch()
        except BaseException:
            run.release()
            self._run = None
            raise
        if self.rank == 0:
            print(f"rlft: run folder {run.root}; to continue it after a stop: {self.resume_command}", file=sys.stderr)
        self.interrupt.install()
        return run

    def train(self, trainer, tokenizer, *, final: bool = True) -> int:
        """Train to the end; `final=False` (an intermediate round) leaves final/ unwritten."""
        try:
            self.exit_code = self._train(trainer, tokenizer, final)
        finally:
            self.steps, self.max_steps = trainer.state.global_step, trainer.state.max_steps or None
        return self.exit_code

    def _train(self, trainer, tokenizer, final: bool) -> int:
        from transformers.trainer_callback import PrinterCallback

        from rlft.monitor.health import RunStopped
        from rlft.rewards import RewardFailureError

        trainer.remove_callback(PrinterCallback)  # rlft prints its own line per logged step
        self.trainer = trainer
        health, console = _monitors(trainer)
        health.attach(trainer, self)
        self.resume.load_state(trainer, self.run, self.resume_command)
        if self.resume.final_only:
            console.close()
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
        except (ValueError, TypeError) as exc:
            # before this process's first step ended: a `trl:` value TRL declares no range for, first used here
            first = self.began_at is None or trainer.state.global_step == self.began_at
            refused = trl_value_error(exc, self.cfg.trl, self.composed) if first else None
            if refused is None:
                raise
            raise refused from None
        finally:
            console.close()
        if self.interrupt.requested():
            return outcome.interrupted(trainer.state.global_step, trainer.args.output_dir, self.resume_command,
                                       say=self.rank == 0)
        check_ranks_in_sync(trainer, self.run)
        if self.distributed is not None:  # every rank: the figures are gathered
            self.distributed.update(memory_numbers(trainer.accelerator, trainer.model, trainer.optimizer))
        if final:
            save_final(trainer, tokenizer, self.cfg, self.run)
        return 0

    def __exit__(self, exc_type, exc, tb):
        self.interrupt.restore()
        set_run_folder(None)
        run = self._run  # a run that failed before its folder was opened leaves none behind
        if run is not None:
            code, error = outcome.exit_of(exc_type, exc, self.exit_code)
            # a resume that fails before training a step changed nothing: the summary of the run as it
            # stands (finished, interrupted at step N) stays true, and a "failed at step 0" would hide it
            if self.rank == 0 and not (self.opts.resume and not self.began and outcome.failed(code)):
                write_run_summary(run, self.cfg.stage, code, error=error, steps=self.steps, max_steps=self.max_steps,
                                  started=self.started, eval_numbers=self.eval, distributed=self.distributed,
                                  best_by=self.cfg.train.best_by)
            if run.replaced is not None and self.rank == 0:
                print(f"rlft: the run replaced by --overwrite is kept at {run.replaced} (this run wrote no "
                      f"checkpoint); move it back or delete it", file=sys.stderr)
            run.release()
        return False

    # -- for the stages and the callbacks --------------------------------------------------------
    @property
    def run(self) -> RunDir:
        """The run folder, once the lifecycle opened it (after the inputs and the model loaded)."""
        if self._run is None:
            raise RuntimeError("the run folder is not open yet: RunContext.open_run comes after the model loads")
        return self._run

    @property
    def resume_command(self) -> str:
        return self.opts.resume_hint or resume_command(self.run.root, self.opts.argv or ["--stage", self.cfg.stage])

    @property
    def resume_from(self) -> Path | None:
        return self.resume.checkpoint

    @property
    def extra_state(self) -> dict:
        return self.resume.state

    @property
    def rounds(self) -> dict:
        """A per-round run's state (rounds.json): eval.start and the optimizer steps of its finished rounds."""
        return self.resume.rounds(self.run)

    def resume_round(self, folder: Path, steps_before: int) -> Path | None:
        """A round's training is about to start (per-round policy): the checkpoint it continues from on --resume (the
        newest whole one in `folder`), the logged rows after it dropped; None starts the round afresh."""
        return self.resume.start_round(self.run, folder, steps_before)

    def round_done(self, r: int, steps: int) -> None:
        """Round `r` trained `steps` optimizer steps: kept in rounds.json."""
        self.resume.round_done(self.run, r, steps)

    def kept_eval_start(self) -> dict | None:
        """eval.start as measured before a --resume, where the resume policy keeps it, or None."""
        return self.resume.kept_eval_start(self.run)

    def keep_eval_start(self, result: dict) -> None:
        self.resume.keep_eval_start(self.run, result)

    def new_callbacks(self) -> list:
        """rlft's callbacks for a trainer (one set per trainer: a stage of rounds makes a set per round), in
        `self.callbacks`."""
        self.callbacks = self._make_callbacks()
        return self.callbacks

    def _make_callbacks(self) -> list:
        from rlft.monitor.callbacks import ApplyConfigChanges, InterruptCallback
        from rlft.monitor.console import ConsoleProgress
        from rlft.monitor.health import HealthMonitor
        from rlft.monitor.metrics import MetricsWriter
        from rlft.runtime.run_callbacks import CheckpointMarker, ShardingCheck, StepBegins

        console = ConsoleProgress(self.cfg.stage)
        health = HealthMonitor(self.cfg, self.run, console)
        changes = [ApplyConfigChanges(self.resume.changes)] if self.resume.changes else []
        per_generation = get_spec(self.cfg.stage).steps_per_generation
        metrics = MetricsWriter(self.run.metrics, self.cfg.stage, console, health,
                                per_generation(self.cfg) if per_generation else None)
        return [ShardingCheck(self), StepBegins(self), metrics, console,
                InterruptCallback(self.interrupt), CheckpointMarker(self), health, *changes]

    def sharding_ready(self, model) -> None:
        """The model as the trainer will train it (after accelerate's prepare): its layout, checked, and said once
        (a stage of rounds prepares a trainer per round)."""
        block = distributed_block(self.cfg, self.trainer.accelerator, model)
        check_sharded(self.cfg, block)
        if block["strategy"] == "fsdp":
            settle_root(model)
            mark_sharded(model)
        if self.distributed is None and self.rank == 0 and block["world_size"] > 1:
            print(f"rlft: {describe_sharding(block)}", file=sys.stderr)
        self.distributed = block

    def step_begins(self) -> None:
        """This process's first training step begins: the resume now changes the run's logs."""
        if not self.began:
            self.began = True
            trainer = getattr(self, "trainer", None)
            self.began_at = trainer.state.global_step if trainer is not None else None
            self.resume.step_begins(self.run)

    def mark_complete(self, trainer) -> None:
        """After each checkpoint save: rlft's state and the completion marker, then the replaced run can go."""
        path = Path(trainer.args.output_dir) / run_files.checkpoint_name(trainer.state.global_step)
        if trainer.args.should_save and path.is_dir():
            seal_checkpoint(path, rlft_state(trainer))
            self.run.drop_replaced()


def _monitors(trainer) -> tuple:
    """(health monitor, console) among the trainer's callbacks, as `RunContext.new_callbacks` made them."""
    from rlft.monitor.console import ConsoleProgress
    from rlft.monitor.health import HealthMonitor

    callbacks = trainer.callback_handler.callbacks
    health = next((cb for cb in callbacks if isinstance(cb, HealthMonitor)), None)
    console = next((cb for cb in callbacks if isinstance(cb, ConsoleProgress)), None)
    if health is None or console is None:
        raise RuntimeError("the trainer was built without rlft's callbacks (pass `callbacks=ctx.callbacks`)")
    return health, console
