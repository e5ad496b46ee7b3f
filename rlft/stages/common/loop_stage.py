"""The run lifecycle's parts the two stages on rlft's own PPO loop (`rlft.trainers.ppo`: PPO, and GRPO with
`env.name`) share: eval.start / eval.end through the loop's evaluator (its periodic eval stays in the loop, which
logs it after the update's training row), the start kept in the checkpoints for --resume, and eval.end when the
loop ran its last update. Shared here so neither stage folder imports the other."""

from __future__ import annotations

from rlft.runtime.lifecycle import Stage


class LoopStage(Stage):
    """A stage whose trainer is an `RlftPPOTrainer` (`self.trainer`, set by the stage's `build`)."""

    suite = evaluation = env_guard = None  # the stage's reward suite, single-turn evaluation, env failure guard

    def interrupt_hooks(self, ctx) -> None:
        """Ctrl-C never waits on a hung reward or env step; each evaluation's samples go to eval_completions.jsonl
        (opens the run folder when there is an evaluation). In `build`, once the models have loaded."""
        if self.evaluation is not None:
            self.evaluation.completions = ctx.run.eval_completions
        if self.suite is not None:
            self.suite.abort_when(lambda: ctx.interrupt.signal is not None)
        if self.env_guard is not None:
            self.env_guard.should_abort = lambda: ctx.interrupt.signal is not None

    def loop_trainer(self, ctx, wrapped, ref, args, train_rows: list[dict], *, env_factory=None,
                     episode_eval_rows=None, algorithm=None) -> None:
        """`self.trainer`: the loop on the policy with its value head (`wrapped`) and the KL reference `ref` (None:
        the adapter-disabled policy)."""
        from rlft.trainers.ppo import RlftPPOTrainer

        self.trainer = RlftPPOTrainer(
            model=wrapped, args=args, processing_class=self.tokenizer, cfg=self.cfg, train_rows=train_rows,
            reward_suite=self.suite, evaluation=self.evaluation, callbacks=ctx.callbacks(), run=ctx.run,
            ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
            env_factory=env_factory, env_guard=self.env_guard, episode_eval_rows=episode_eval_rows,
            algorithm=algorithm)

    def evaluator(self, ctx):
        # no `every`: the loop logs its periodic eval itself, after the update's training row
        return self.trainer.evaluator if self.trainer.evaluator.enabled else None

    def resumed_eval_start(self, ctx) -> dict | None:
        # measured before the first checkpoint, it travels in each one's rlft state (RlftPPOTrainer.rlft_extra_state)
        return ctx.extra_state.get("trainer", {}).get("eval_start") if ctx.resume_from else None

    def eval_started(self, ctx, result: dict) -> None:
        self.trainer.evaluator.start = result  # so each checkpoint carries it

    def train(self, ctx) -> int:
        try:
            return ctx.train(self.trainer, self.tokenizer)
        finally:  # a resume that set a damaged checkpoint aside reports the start of the one it loaded instead
            if self.trainer.evaluator.start is not None:
                ctx.eval["start"] = self.trainer.evaluator.start

    def start_model(self):
        return self.trainer.policy

    def evaluates_end(self, ctx, code: int) -> bool:
        # the loop's rule: after its last update, even when a Ctrl-C came during it (exit 130); never when it was
        # stopped early, failed, or only saved the final model again (a --resume of a finished run)
        return self.trainer.ran_to_end

    def end_model(self) -> tuple:
        return self.trainer.policy, self.trainer.state.global_step

    def eval_line(self, ctx) -> str | None:
        return None  # the loop's stages print no eval line (the run's summary shows eval start -> end)
