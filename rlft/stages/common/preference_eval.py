"""Evaluation of the preference stages (DPO, ORPO), so a pipeline can compare them with the sampling stages:
with `rewards:` configured, fresh samples on the first data.eval_prompts prompts of the preference data (data.eval,
or data.train without it) from the starting and the final policy, scored by those rewards exactly as the sampling
stages score theirs (summary.json's eval.start / eval.end); with data.eval, the last held-out preference accuracy
TRL logged (eval.end.preference_accuracy). The samples are whole answers: up to `eval.max_new_tokens`, else
`<stage>.eval_max_new_tokens`, else the longest chosen answer of those pairs (rlft.config.preference_lengths has the
rule); the other `eval:` keys apply as in every stage."""

from __future__ import annotations

import sys

from rlft.config.schema import RlftConfig
from rlft.runtime.lifecycle import Evaluation

SAMPLES_PER_PROMPT = 4  # a preference stage has no group size of its own; a few samples per prompt steady the mean


class PreferenceEval(Evaluation):
    """`PreferenceEval.prepare(cfg, composed, train_ds, eval_ds)` before the run folder (bad rewards or missing
    reward columns: RunError, exit 2); `.ready(tokenizer, source, ctx)` the run lifecycle's evaluator (it samples
    nothing without evaluation rows), `.ended` (the held-out accuracy) and `.line(ctx)` after a finished run."""

    def __init__(self, cfg: RlftConfig, suite, source, extra_suite=None):
        self.cfg, self.suite, self.source = cfg, suite, source  # source: the preference rows the prompts come from
        self.extra_suite = extra_suite  # eval.rewards, scored on the eval samples only
        self.completions = None  # completions.jsonl, once the run folder exists
        self.max_new_tokens = None  # the answer budget, once the tokenizer is known (`answer_budget`)
        self.eval_rows, self.accuracy = [], None  # set by `ready` and `add_accuracy`

    @classmethod
    def prepare(cls, cfg: RlftConfig, composed, train_ds, eval_ds) -> "PreferenceEval":
        from rlft.stages.common.prompt_data import check_suite_columns, eval_reward_suite, reward_suite

        suite = extra = None
        source = eval_ds if eval_ds is not None else train_ds
        if cfg.rewards and cfg.data.eval_prompts:
            suite = reward_suite(cfg, composed)
            check_suite_columns(source, suite, "data.eval" if eval_ds is not None else "data.train")
            extra = eval_reward_suite(cfg, composed)
        return cls(cfg, suite, source, extra)

    def rows(self, source) -> list[dict]:
        """The evaluation rows of `source` (the preference rows after the chat-template setting)."""
        k = self.cfg.data.eval_prompts
        return source.select(range(min(k, len(source)))).to_list() if self.suite is not None else []

    def _evaluate(self, model, rows: list[dict], step: int | None = None) -> dict:
        from rlft.rollout import stage_evaluation

        evaluation = stage_evaluation(self.cfg, rows, self.tokenizer, self.suite, self.eval_defaults(),
                                      self.cfg.train.per_device_train_batch_size, self.completions, self.extra_suite)
        return evaluation(model, step)

    def eval_defaults(self):
        """The preference stages' own eval settings (what `eval:` keys left null keep): SAMPLES_PER_PROMPT samples
        of the answer budget (eval.max_new_tokens already counted in it) at temperature 1.0."""
        from rlft.config.eval_sampling import EvalSettings

        return EvalSettings(n=SAMPLES_PER_PROMPT, max_new_tokens=self.max_new_tokens, temperature=1.0, top_p=1.0)

    def ready(self, tokenizer, source, ctx) -> "PreferenceEval":
        """The evaluator of eval.start / eval.end once the tokenizer and the run folder exist (no numbers without
        evaluation rows: the held-out accuracy alone, with data.eval). eval.start is measured from the policy as this
        stage starts it: on --resume the trainer still holds that policy then (the checkpoint loads when training
        begins), so the same seed measures the same number again."""
        self.tokenizer, self.eval_rows = tokenizer, self.rows(source)
        self.completions = ctx.run.eval_completions  # each evaluation's samples, as `eval-<i>` rows
        if self.eval_rows:
            self.max_new_tokens = self.answer_budget(tokenizer, source)
        return self

    def evaluate(self, model, step: int) -> dict | None:
        return self._evaluate(model, self.eval_rows, step) if self.eval_rows else None

    def ended(self, ctx, trainer) -> None:
        self.add_accuracy(trainer, ctx)

    def answer_budget(self, tokenizer, source) -> int:
        """New tokens per eval sample, said in one line: `eval.max_new_tokens`, `<stage>.eval_max_new_tokens`, else the
        longest chosen answer of the preference rows the prompts come from (rlft.config.preference_lengths has the
        rule)."""
        from rlft.config.preference_lengths import ANSWER_ROWS, eval_budget

        sec = getattr(self.cfg, self.cfg.stage)
        longest, measured = None, ""
        if sec.eval_max_new_tokens is None and self.cfg.eval.max_new_tokens is None:
            rows = source.select(range(min(ANSWER_ROWS, len(source)))).to_list()
            key = "data.eval" if self.cfg.data.eval else "data.train"
            try:
                longest = max(answer_tokens(tokenizer, rows))
                measured = f"max of the first {len(rows)} pairs of {key} as training tokenizes them"
            except Exception as exc:  # a chat template that cannot render the rows alone: the stated default
                measured = f"the chosen answers of {key} could not be measured: {exc}"
        n, why = eval_budget(self.cfg, longest, measured)
        print(f"rlft: eval: answers of up to {n} new tokens: {why}", file=sys.stderr)
        return n

    def add_accuracy(self, trainer, ctx) -> None:
        """eval.end's held-out preference accuracy: the last one TRL logged (data.eval only)."""
        accuracy = self.accuracy = last_logged(trainer.state.log_history, "eval_rewards/accuracies")
        if accuracy is not None:
            ctx.eval.setdefault("end", {})["preference_accuracy"] = round(accuracy, 6)

    def line(self, ctx) -> str | None:
        """The console's eval line: the reward means (with evaluation rows) and the held-out accuracy."""
        if not ctx.eval:
            return None
        start, end = ctx.eval.get("start", {}), ctx.eval.get("end", {})
        parts = [f"mean reward {start.get('reward_mean')} at the start, {end.get('reward_mean')} at the end "
                 f"({end.get('n')} fresh samples)"] if self.eval_rows else []
        if self.accuracy is not None:
            parts.append(f"held-out preference accuracy {self.accuracy:.3f}")
        return f"eval: {'; '.join(parts)}"


def answer_tokens(tokenizer, rows: list[dict]) -> list[int]:
    """Each row's chosen answer in tokens as training sees it: for chat messages what the answer adds to the
    templated prompt (its end-of-turn tokens included), for text the answer's tokens; + 1 for the end of sequence."""
    from rlft.data.messages import as_text

    heads, fulls = [], []
    for row in rows:
        prompt, chosen = row["prompt"], row["chosen"]
        if isinstance(prompt, list) and isinstance(chosen, list):
            heads.append(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True))
            fulls.append(tokenizer.apply_chat_template(prompt + chosen, tokenize=False))
        else:
            heads.append("")
            fulls.append(as_text(chosen))
    count = lambda texts: [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]  # noqa: E731
    return [max(0, f - h) + 1 for h, f in zip(count(heads), count(fulls))]


def last_logged(history: list[dict], key: str) -> float | None:
    """The last value of `key` in a trainer's log history (None when it was never logged)."""
    return next((row[key] for row in reversed(history) if isinstance(row.get(key), (int, float))), None)
