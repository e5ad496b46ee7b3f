"""The run lifecycle's parts the two stages on rlft's own PPO loop (`rlft.trainers.ppo`: PPO, and GRPO with
`env.name`) share: the trainer made once the run folder is open (the interrupt hooks set first), and eval.start /
the periodic eval and eval.end through the loop's evaluator (the lifecycle runs all three, as for every stage; the
start travels in each checkpoint for --resume), eval.end when the loop ran its last update.
Shared here so neither stage folder imports the other."""

from __future__ import annotations

import dataclasses

from rlft.runtime.lifecycle import Evaluation, Stage, StageInputs


class LoopStage(Stage):
    """A stage whose trainer is an `RlftPPOTrainer`. Its inputs' `extra` may hold `evaluation` (single-turn eval),
    `env_factory`, `env_guard` (env failure guard), `episode_eval_rows` and `algorithm`."""

    def loop_trainer(self, ctx, wrapped, ref, args, inputs: StageInputs):
        """The loop on the policy with its value head (`wrapped`) and the KL reference `ref` (None: the
        adapter-disabled policy). Ctrl-C never waits on a hung reward or env step; each evaluation's samples go to
        eval_completions.jsonl."""
        from rlft.trainers.ppo import RlftPPOTrainer

        x, suite = inputs.extra, inputs.suite
        evaluation, env_guard = x.get("evaluation"), x.get("env_guard")
        if evaluation is not None:
            evaluation.completions = ctx.run.eval_completions
        if suite is not None:
            suite.abort_when(ctx.interrupt.requested)
        if env_guard is not None:
            env_guard.should_abort = ctx.interrupt.requested
        return RlftPPOTrainer(
            model=wrapped, args=args, processing_class=inputs.tokenizer, cfg=self.cfg, train_rows=inputs.train,
            reward_suite=suite, evaluation=evaluation, callbacks=ctx.callbacks, run=ctx.run,
            ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
            env_factory=x.get("env_factory"), env_guard=env_guard, episode_eval_rows=x.get("episode_eval_rows", []),
            algorithm=x.get("algorithm"))

    def evaluator(self, ctx, trainer, inputs: StageInputs) -> Evaluation | None:
        return LoopEval(trainer) if trainer.evaluator.enabled else None


class LoopEval(Evaluation):
    """The loop's evaluator as the lifecycle's: every `eval_interval` episodes (in updates) the lifecycle's periodic
    evaluation samples the policy; no eval line (the run's summary shows eval start -> end)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.every = trainer.schedule.eval_every

    def evaluate(self, model, step: int) -> dict | None:
        return self.trainer.evaluator.evaluate(model, step)

    def start_model(self, trainer):
        return trainer.policy

    model_now = start_model  # between updates as at the start: the policy being trained

    def end_model(self, trainer, code: int) -> tuple | None:
        # the loop's rule: after its last update, even when a Ctrl-C came during it (exit 130); never when it was
        # stopped early, failed, or only saved the final model again (a --resume of a finished run)
        return (trainer.policy, trainer.state.global_step) if trainer.ran_to_end else None

    def started(self, result: dict) -> None:
        # in the loop's state, so each checkpoint carries it
        self.trainer.loop_state = dataclasses.replace(self.trainer.loop_state, eval_start=result)

    def line(self, ctx) -> str | None:
        return None
