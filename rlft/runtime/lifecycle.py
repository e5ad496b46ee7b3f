"""The one order every stage runs in, so no runner orders its own. `run_stage(stage)`:

1. library logs quieted (once), then `stage.inputs()`: tokenizer, data, rewards, all checked; no run folder yet, so
   bad input leaves nothing behind;
2. `RunContext` entered (the run folder's preconditions and the --resume checked, nothing written);
3. `stage.model(inputs)`: the model(s) loaded; one that fails to load leaves no folder either;
4. `ctx.open_run()`: the run folder created (or reopened for --resume, the stage's resume policy carried out);
5. `ctx.new_callbacks()`: rlft's callbacks (metrics, console, health, interrupt, checkpoint marker);
6. `stage.trainer(ctx, model, inputs)`: the trainer, given `ctx.callbacks`;
7. eval.start from `stage.evaluator(...)` (kept from before a --resume where the resume policy keeps it);
8. train (`RunContext.train` trains and saves the final model; a per-round stage's trainer runs its rounds), with
   the periodic eval;
9. eval.end, and the eval line of a finished run; leaving RunContext writes summary.json and releases the folder.

A stage supplies its parts as a `Stage` subclass (`inputs`, `model`, `trainer`, `evaluator` and the `resume`
policy) and its runner is `run_stage(MyStage(cfg, composed, opts))`. The evaluator is an `Evaluation`:
`evaluate(model, step) -> dict | None` (and `every`, optimizer steps between periodic evaluations)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from rlft.runtime.context import RunContext
from rlft.runtime.resume import PER_CHECKPOINT, PER_ROUND
from rlft.runtime.process import quiet_libraries

__all__ = ["PER_CHECKPOINT", "PER_ROUND", "CallEvaluator", "Evaluation", "Stage", "StageInputs", "run_stage"]


@dataclass
class StageInputs:
    """What a stage reads before anything is written, loaded and checked in `Stage.inputs` (a RunError there, exit 2,
    leaves nothing behind): the tokenizer, the training data (a prompt dataset, preference pairs or rows), the
    evaluation rows, the reward suites, the models' load plan, and what else the stage needs (`extra`)."""

    tokenizer: Any = None
    train: Any = None
    eval_rows: Any = None
    suite: Any = None  # the rewards (`rewards:`)
    eval_suite: Any = None  # `eval.rewards`, scored on evaluation samples only
    plan: Any = None  # rlft.config.load_plan.LoadPlan, read once
    extra: dict = field(default_factory=dict)


class Evaluation:
    """summary.json's eval.start / eval.end from fresh samples of the model: `evaluate` is the one part to write; the
    others default to a trainer that trains `trainer.model` and a finished run's end eval."""

    every = 0  # optimizer steps between periodic evaluations (0: none)

    def evaluate(self, model, step: int) -> dict | None:
        raise NotImplementedError

    def start_model(self, trainer):
        return trainer.model

    def model_now(self, trainer):
        """The policy as trained so far, for a periodic evaluation between optimizer steps."""
        return trainer.accelerator.unwrap_model(trainer.model)

    def end_model(self, trainer, code: int) -> tuple | None:
        """(the trained policy, its optimizer step) for eval.end after training that returned `code`, or None: no
        eval.end (a finished run's by default; a loop that decided it before may keep its own rule)."""
        if code != 0:
            return None
        return trainer.accelerator.unwrap_model(trainer.model), trainer.state.global_step

    def started(self, result: dict) -> None:
        """eval.start is measured: an evaluation whose trainer keeps it in its checkpoints (for --resume) puts it
        there."""

    def ended(self, ctx: RunContext, trainer) -> None:
        """After eval.end of a finished run: numbers the stage adds to it (e.g. a held-out accuracy)."""

    def line(self, ctx: RunContext) -> str | None:
        """The console's eval line once the run finished."""
        start, end = ctx.eval.get("start"), ctx.eval.get("end")
        if start is None or end is None or "reward_mean" not in end:
            return None
        return (f"eval: mean reward {start['reward_mean']} at the start, {end['reward_mean']} at the end "
                f"({end['n']} fresh samples)")


class CallEvaluator(Evaluation):
    """An `evaluation(model, step) -> dict` callable as an Evaluation, evaluated every `every` optimizer steps too;
    `keep(result)` puts eval.start where the trainer's checkpoints carry it."""

    def __init__(self, fn, every: int = 0, keep=None):
        self.fn, self.every, self.keep = fn, every, keep

    def evaluate(self, model, step: int) -> dict | None:
        return self.fn(model, step)

    def started(self, result: dict) -> None:
        if self.keep is not None:
            self.keep(result)


class Stage:
    """A stage's parts, called by `run_stage` in the lifecycle's order: `trainer` is the part every stage writes;
    `inputs` and `evaluator` default to a stage with no data of its own and no evaluation, `model` to the policy of
    the inputs' load plan, `resume` to resuming from the newest whole checkpoint."""

    # PER_CHECKPOINT: --resume continues from the run's newest whole checkpoint (RunContext picks it when the folder
    # opens). PER_ROUND: the trainer is a loop of rounds (`train_rounds(ctx) -> exit code`) that resumes each round
    # through `RunContext.resume_round`, and RunContext keeps the rounds' state (rounds.json).
    resume = PER_CHECKPOINT

    def __init__(self, cfg, composed, opts):
        self.cfg, self.composed, self.opts = cfg, composed, opts

    def inputs(self) -> StageInputs:
        """Tokenizer, data, rewards and TRL settings, loaded and checked before anything is written."""
        return StageInputs()

    def model(self, inputs: StageInputs):
        """The model(s) the trainer trains, loaded (the run folder does not exist yet): by default the policy of the
        inputs' load plan (`model.name_or_path`, `tiny` built on demand, or the `model.init_from` run's weights)."""
        from rlft.models.loading import policy

        return policy(inputs.plan)

    def trainer(self, ctx: RunContext, model, inputs: StageInputs):
        """The trainer, its checkpoints in `ctx.run.checkpoints`, with `ctx.callbacks`."""
        raise NotImplementedError

    def evaluator(self, ctx: RunContext, trainer, inputs: StageInputs) -> Evaluation | None:
        """The evaluation of eval.start / eval.end (and the periodic one), or None for a stage without one."""
        return None


def run_stage(stage: Stage) -> int:
    """A stage's run, in the lifecycle's order; the exit code."""
    quiet_libraries(stage.opts.verbose)  # before the first library loads anything, for the inputs' checks too
    inputs = stage.inputs()
    with RunContext(stage.cfg, stage.composed, stage.opts, resume=stage.resume) as ctx:
        model = stage.model(inputs)
        ctx.open_run()
        ctx.new_callbacks()
        trainer = stage.trainer(ctx, model, inputs)
        evaluator = stage.evaluator(ctx, trainer, inputs)
        if evaluator is not None:
            _eval_start(ctx, evaluator, trainer)
        try:
            if stage.resume == PER_ROUND:
                code = ctx.exit_code = trainer.train_rounds(ctx)
            else:
                code = ctx.exit_code = ctx.train(trainer, inputs.tokenizer)  # summary.json's exit code
        finally:  # a resume that set a damaged checkpoint aside reports the start kept in the one it loaded
            kept = ctx.kept_eval_start() if evaluator is not None else None
            if kept is not None:
                ctx.eval["start"] = kept
        end = evaluator.end_model(trainer, code) if evaluator is not None else None
        if end is not None and (result := evaluator.evaluate(*end)) is not None:
            ctx.eval["end"] = result
        if code == 0 and evaluator is not None:
            evaluator.ended(ctx, trainer)
            line = evaluator.line(ctx)
            if line and ctx.rank == 0:
                print(f"rlft: {line}", file=sys.stderr)
        return code


def _eval_start(ctx: RunContext, evaluator: Evaluation, trainer) -> None:
    """eval.start: kept from before a --resume (where the resume policy keeps it), else measured and kept; the
    periodic evaluation as a callback."""
    start = ctx.kept_eval_start()
    if start is None:
        start = evaluator.evaluate(evaluator.start_model(trainer), 0)
        if start is not None:
            ctx.keep_eval_start(start)
            evaluator.started(start)
    if start is not None:
        ctx.eval["start"] = start
    if evaluator.every and hasattr(trainer, "add_callback"):
        from rlft.runtime.run_callbacks import PeriodicEval

        trainer.add_callback(PeriodicEval(ctx, evaluator))
