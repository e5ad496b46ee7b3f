"""The rollout layer: every stage that samples goes through it.

    sample(model, tokenizer, prompts, n, params) -> Rollouts    rlft.rollout.sample
    score(rollouts, suite, columns) -> Scores                   rlft.rollout.score
    CompletionLog(path, limit).write_rollouts(step, r, s, ...)  rlft.rollout.log
    RewardLog(path).write(step, suite.pop_logs())               rlft.rollout.log
    evaluate(model, tokenizer, suite, prompts, columns, n, params)  rlft.rollout.evaluate

It sits below the trainers (a trainer may use it; it never imports a trainer or a stage).
"""

from rlft.rollout.evaluate import EVAL_SEED_OFFSET, evaluate
from rlft.rollout.log import CompletionLog, RewardLog
from rlft.rollout.sample import Rollouts, SamplingParams, render_prompt, sample
from rlft.rollout.score import Scores, score, score_texts

__all__ = ["EVAL_SEED_OFFSET", "CompletionLog", "RewardLog", "Rollouts", "SamplingParams", "Scores", "evaluate",
           "render_prompt", "sample", "score", "score_texts"]
