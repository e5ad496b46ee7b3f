"""The rollout layer: every stage that samples goes through it.

    sample(model, tokenizer, prompts, n, params) -> Rollouts    rlft.rollout.sample
    score(rollouts, suite, columns) -> Scores                   rlft.rollout.score
    CompletionLog(path, limit).write_rollouts(step, r, s, ...)  rlft.rollout.log

It sits below the trainers (a trainer may use it; it never imports a trainer or a stage).
"""

from rlft.rollout.log import CompletionLog
from rlft.rollout.sample import Rollouts, SamplingParams, render_prompt, sample
from rlft.rollout.score import Scores, score, score_texts

__all__ = ["CompletionLog", "Rollouts", "SamplingParams", "Scores", "render_prompt", "sample", "score", "score_texts"]
