"""The one order every stage runs in, so no runner orders its own: library logs quieted (once) -> the stage's
inputs checked (no run folder yet: bad input leaves nothing behind) -> `RunContext` -> build (model, trainer) ->
eval.start -> train (with the periodic eval; `RunContext.train` saves the final model) -> eval.end -> leaving
RunContext writes summary.json and releases the folder.

A stage supplies its parts as a `Stage` subclass and its runner is `run_stage(MyStage(cfg, composed, opts))`.
The evaluator is anything with `evaluate(model, step) -> dict | None` (and optionally `every`, optimizer steps
between periodic evaluations), so a stage with its own training loop can plug in the same way."""

from __future__ import annotations

import sys
from typing import Protocol, runtime_checkable

from rlft.runtime.context import RunContext
from rlft.runtime.process import quiet_libraries


@runtime_checkable
class Evaluator(Protocol):
    """summary.json's eval numbers from fresh samples of `model` (None: nothing to report at this step)."""

    def evaluate(self, model, step: int) -> dict | None: ...


class CallEvaluator:
    """An `evaluation(model, step) -> dict` callable as an Evaluator, evaluated every `every` optimizer steps too."""

    def __init__(self, fn, every: int = 0):
        self.fn, self.every = fn, every

    def evaluate(self, model, step: int) -> dict | None:
        return self.fn(model, step)


class Stage:
    """A stage's parts, called by `run_stage` in the lifecycle's order. `build` is the one part every stage
    writes; the others default to what a plain stage needs (one trainer through `RunContext.train`)."""

    own_resume = False  # True: the stage picks its checkpoints itself (e.g. one folder per round)

    def __init__(self, cfg, composed, opts):
        self.cfg, self.composed, self.opts = cfg, composed, opts
        self.trainer, self.tokenizer = None, None

    def check_inputs(self) -> None:
        """Before the run folder: rewards, data and TRL settings checked; a RunError here writes nothing."""

    def build(self, ctx: RunContext) -> None:
        """The model and the trainer (`self.trainer`, `self.tokenizer`), the run folder opened."""
        raise NotImplementedError

    def evaluator(self, ctx: RunContext) -> Evaluator | None:
        """The evaluation of eval.start / eval.end (and the periodic one), or None for a stage without one."""
        return None

    def resumed_eval_start(self, ctx: RunContext) -> dict | None:
        """eval.start as measured before a --resume (kept in the run's checkpoints or state), or None."""
        return None

    def eval_started(self, ctx: RunContext, result: dict) -> None:
        """eval.start is known (a stage may keep it for its resume)."""

    def start_model(self):
        return self.trainer.model

    def train(self, ctx: RunContext) -> int:
        """Train to the end (final model saved); the exit code."""
        return ctx.train(self.trainer, self.tokenizer)

    def evaluates_end(self, ctx: RunContext, code: int) -> bool:
        """eval.end is taken after training that returned `code`: a finished run's (a stage whose own loop decided
        it before may keep its rule, e.g. the PPO loop's: every update trained, even when interrupted after it)."""
        return code == 0

    def end_model(self) -> tuple:
        """(the trained policy, its optimizer step) for eval.end."""
        return self.trainer.accelerator.unwrap_model(self.trainer.model), self.trainer.state.global_step

    def eval_ended(self, ctx: RunContext) -> None:
        """After eval.end of a finished run: numbers the stage adds to it (e.g. a held-out accuracy)."""

    def eval_line(self, ctx: RunContext) -> str | None:
        """The console's eval line once the run finished."""
        start, end = ctx.eval.get("start"), ctx.eval.get("end")
        if start is None or end is None or "reward_mean" not in end:
            return None
        return (f"eval: mean reward {start['reward_mean']} at the start, {end['reward_mean']} at the end "
                f"({end['n']} fresh samples)")


def run_stage(stage: Stage) -> int:
    """A stage's run, in the lifecycle's order; the exit code."""
    quiet_libraries(stage.opts.verbose)  # before the first library loads anything, for the inputs' checks too
    stage.check_inputs()
    with RunContext(stage.cfg, stage.composed, stage.opts, own_resume=stage.own_resume) as ctx:
        stage.build(ctx)
        evaluator = stage.evaluator(ctx)
        start = stage.resumed_eval_start(ctx)
        if start is None and evaluator is not None:
            start = evaluator.evaluate(stage.start_model(), 0)
        if start is not None:
            ctx.eval["start"] = start
            stage.eval_started(ctx, start)
        if evaluator is not None:
            every = getattr(evaluator, "every", 0)
            if every and stage.trainer is not None:
                from rlft.monitor.callbacks import PeriodicEval

                stage.trainer.add_callback(PeriodicEval(ctx, evaluator.evaluate, every))
        code = ctx.exit_code = stage.train(ctx)  # summary.json's exit code, whoever returned it
        if evaluator is not None and stage.evaluates_end(ctx, code):
            end = evaluator.evaluate(*stage.end_model())
            if end is not None:
                ctx.eval["end"] = end
        if code == 0:
            stage.eval_ended(ctx)
            line = stage.eval_line(ctx)
            if line and ctx.rank == 0:
                print(f"rlft: {line}", file=sys.stderr)
        return code
