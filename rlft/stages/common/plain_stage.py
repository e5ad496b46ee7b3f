"""The run lifecycle's parts a new stage gets without writing them: its inputs (the tokenizer and, with `rewards:`
configured and data.eval_prompts above 0, the evaluation prompts with the columns the rewards read), the policy
(`model.name_or_path`, or the `model.init_from` run's), and summary.json's eval.start / eval.end scoring fresh
samples of the first prompts of data.eval (or data.train) as every sampling stage scores its own, each
evaluation's samples in eval_completions.jsonl. A stage subclasses `PlainStage` and writes `trainer`; the rest is
rlft.runtime.lifecycle's."""

from __future__ import annotations

from rlft.runtime.lifecycle import CallEvaluator, Stage, StageInputs

# a stage with no sampling settings of its own evaluates with these (each `eval:` key set overrides one)
SAMPLES_PER_PROMPT = 4
MAX_NEW_TOKENS = 64


class PlainStage(Stage):
    """A stage's parts with the shared inputs and evaluation (the policy is `Stage.model`'s): subclasses write
    `trainer`."""

    def inputs(self) -> StageInputs:
        """The tokenizer, then the rewards and the evaluation prompts (with the columns the rewards read) as chat
        rows, before the run folder."""
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer
        from rlft.stages.common.prompt_data import (check_suite_columns, eval_reward_suite, load_prompt_dataset,
                                                    prompts_as_chat, reward_suite)

        cfg = self.cfg
        plan = load_plan(cfg)
        inputs = StageInputs(tokenizer=tokenizer(plan), plan=plan, eval_rows=[])
        if not cfg.rewards or not cfg.data.eval_prompts:
            return inputs
        inputs.suite = reward_suite(cfg, self.composed)
        inputs.eval_suite = eval_reward_suite(cfg, self.composed)  # eval.rewards: scored on eval samples only
        key = "eval" if cfg.data.eval else "train"
        source = load_prompt_dataset(cfg, key)
        source = source.select(range(min(cfg.data.eval_prompts, len(source))))
        check_suite_columns(source, inputs.suite, f"data.{key}")
        inputs.eval_rows = prompts_as_chat(cfg, source, inputs.tokenizer)[0].to_list()
        return inputs

    def evaluator(self, ctx, trainer, inputs: StageInputs) -> CallEvaluator | None:
        """Fresh samples of the evaluation prompts, through the chat template as the sampling stages render them."""
        from rlft.config.eval_sampling import EvalSettings
        from rlft.config.stages import get_spec
        from rlft.rollout import stage_evaluation

        if not inputs.eval_rows:
            return None
        section = getattr(self.cfg, get_spec(self.cfg.stage).section or "", None)
        defaults = EvalSettings(n=SAMPLES_PER_PROMPT, max_new_tokens=getattr(section, "max_tokens", MAX_NEW_TOKENS),
                                temperature=1.0, top_p=1.0)
        return CallEvaluator(stage_evaluation(self.cfg, inputs.eval_rows, inputs.tokenizer, inputs.suite, defaults,
                                              self.cfg.train.per_device_train_batch_size, ctx.run.eval_completions,
                                              inputs.eval_suite))
