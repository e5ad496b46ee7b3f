"""The rollout layer: every stage that samples goes through it.

    sample(model, tokenizer, prompts, n, params) -> Rollouts    rlft.rollout.sample
    score(rollouts, suite, columns) -> Scores                   rlft.rollout.score
    CompletionLog(path, limit).write_rollouts(step, r, s, ...)  rlft.rollout.log
    RewardLog(path).write(step, suite.pop_logs())               rlft.rollout.log
    evaluate(model, tokenizer, suite, prompts, columns, n, params)  rlft.rollout.evaluate

It sits below the trainers (a trainer may use it; it never imports a trainer or a stage). Scoring and the
logs import no torch (`rlft rewards try` scores logged completions without it); the sampling names load
on first use.
"""

import sys
from types import ModuleType

from rlft.lazy import lazy_attributes

_LAZY = {**dict.fromkeys(("EVAL_SEED_OFFSET", "evaluate", "evaluation", "sampling_params", "stage_evaluation"),
                         "evaluate"),
         **dict.fromkeys(("Rollouts", "SamplingParams", "render_prompt", "sample"), "sample")}


class _Package(ModuleType):
    def __setattr__(self, name, value):
        # importing the submodule rlft.rollout.sample (or .evaluate, .score) binds it on the package under
        # the name of the function the package exports: `rlft.rollout.sample` stays the function
        if isinstance(value, ModuleType) and name in ("evaluate", "sample", "score"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
__getattr__ = lazy_attributes(__name__, _LAZY)

from rlft.rollout.log import CompletionLog, RewardLog, write_eval_samples  # noqa: E402 - after the package class is set
from rlft.rollout.score import Scores, score, score_texts  # noqa: E402

__all__ = ["EVAL_SEED_OFFSET", "CompletionLog", "RewardLog", "Rollouts", "SamplingParams", "Scores", "evaluate",
           "evaluation", "sampling_params", "stage_evaluation",
           "render_prompt", "sample", "score", "score_texts", "write_eval_samples"]
