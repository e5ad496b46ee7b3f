"""The run lifecycle's parts a new stage gets without writing them: with `rewards:` configured (and
data.eval_prompts above 0), summary.json's eval.start / eval.end score fresh samples of the first prompts of
data.eval (or data.train) as every sampling stage scores its own, each evaluation's samples in
eval_completions.jsonl. A stage subclasses `PlainStage` and writes `build` (model, trainer); the rest is
rlft.runtime.lifecycle's."""

from __future__ import annotations

from rlft.runtime.lifecycle import CallEvaluator, Stage

# a stage with no sampling settings of its own evaluates with these (each `eval:` key set overrides one)
SAMPLES_PER_PROMPT = 4
MAX_NEW_TOKENS = 64


class PlainStage(Stage):
    """A stage's parts with the shared evaluation: subclasses call `super().check_inputs()` if they override it."""

    def check_inputs(self) -> None:
        """The rewards and the evaluation prompts (with the columns the rewards read), before the run folder."""
        from rlft.stages.common.prompt_data import (check_reward_columns, eval_reward_suite, load_prompt_dataset,
                                                    reward_suite)

        cfg = self.cfg
        self.eval_source = self.suite = self.extra_suite = None
        if not cfg.rewards or not cfg.data.eval_prompts:
            return
        self.suite = reward_suite(cfg, self.composed)
        self.extra_suite = eval_reward_suite(cfg, self.composed)  # eval.rewards: scored on eval samples only
        key = "eval" if cfg.data.eval else "train"
        source = load_prompt_dataset(cfg, key)
        self.eval_source = source.select(range(min(cfg.data.eval_prompts, len(source))))
        check_reward_columns(self.eval_source, self.suite, f"data.{key}")

    def evaluator(self, ctx):
        """Fresh samples of the evaluation prompts, through the chat template as the sampling stages render them."""
        from rlft.config.eval_sampling import EvalSettings
        from rlft.config.stages import get_spec
        from rlft.rollout import stage_evaluation
        from rlft.stages.common.prompt_data import prompts_as_chat

        if self.eval_source is None:
            return None
        section = getattr(self.cfg, get_spec(self.cfg.stage).section or "", None)
        defaults = EvalSettings(n=SAMPLES_PER_PROMPT, max_new_tokens=getattr(section, "max_tokens", MAX_NEW_TOKENS),
                                temperature=1.0, top_p=1.0)
        rows = prompts_as_chat(self.cfg, self.eval_source, self.tokenizer)[0].to_list()
        evaluation = stage_evaluation(self.cfg, rows, self.tokenizer, self.suite, defaults,
                                      self.cfg.train.per_device_train_batch_size, ctx.run.eval_completions,
                                      self.extra_suite)
        return CallEvaluator(evaluation)
