"""Completions cut at the token budget: the `frac_truncated` metric's pieces, the `truncated` health rule and
the `overlong_penalty` reward (DAPO's soft overlong punishment), on worked numbers."""

from __future__ import annotations

import pytest
import torch

from rlft.config.schema import MonitorConfig
from rlft.monitor.health import RULES
from rlft.rewards import BUILTIN_REWARDS, overlong_penalty, soft_overlong
from rlft.rewards.safe import RewardSuite, SafeReward
from rlft.rollout.episodes import Episode, episode_metrics
from rlft.rollout.score import sampled_columns, score
from rlft.stages.common.rounds import sampled_metrics


# --- the reward -------------------------------------------------------------------------------
def test_soft_overlong_worked_numbers():
    # budget 10, buffer 4: free up to 6 tokens, then -1/4 per token, -1 from 10 on
    assert [soft_overlong(n, 10, 4) for n in (1, 6, 7, 8, 9, 10, 12)] == \
        pytest.approx([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0])
    assert soft_overlong(8, 10, 4, factor=0.5) == pytest.approx(-0.25)
    assert soft_overlong(10, 10, 10) == pytest.approx(-1.0)  # the whole budget as buffer: a ramp from 0 tokens
    with pytest.raises(ValueError, match="buffer"):
        soft_overlong(3, 10, 0)
    with pytest.raises(ValueError, match="buffer"):
        soft_overlong(3, 10, 11)


def test_overlong_penalty_reads_lengths_and_budget():
    comps = ["a", "b", "c", "d"]
    # budget 20, buffer defaults to a fifth (4): ramp from 16 tokens
    assert overlong_penalty([], comps, completion_lengths=[10, 16, 18, 20], max_tokens=[20] * 4) == \
        pytest.approx([0.0, 0.0, -0.5, -1.0])
    assert overlong_penalty([], comps, completion_lengths=[10, 16, 18, 20], max_tokens=20, buffer=8, factor=2.0) == \
        pytest.approx([0.0, -1.0, -1.5, -2.0])
    with pytest.raises(ValueError, match="token count"):
        overlong_penalty([], comps)  # text alone (no sampler): says what it needs
    assert BUILTIN_REWARDS["overlong_penalty"] is overlong_penalty


def test_sampled_columns_reach_only_the_rewards_that_name_them():
    seen = {}

    def plain(prompts, completions, **kwargs):
        seen["plain"] = sorted(kwargs)
        return [0.0] * len(completions)

    suite = RewardSuite([SafeReward("plain", plain), SafeReward("overlong", overlong_penalty, kwargs={"buffer": 2})])
    out = suite.score(["p", "p"], ["x", "y"], {"answer": [1, 2], "completion_lengths": [3, 8],
                                              "max_tokens": [8, 8]})
    assert seen["plain"] == ["answer"]  # a **kwargs catch-all does not count as naming them
    assert out.per_fn["overlong"] == pytest.approx([0.0, -1.0])
    # a configured max_tokens wins over the sampler's
    suite = RewardSuite([SafeReward("overlong", overlong_penalty, kwargs={"buffer": 2, "max_tokens": 16})])
    assert suite.score(["p"], ["x"], {"completion_lengths": [8], "max_tokens": [8]}).per_fn["overlong"] == [0.0]


def test_score_passes_the_sampled_lengths_and_budget():
    rolls = _Rolls(torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]), 4)
    assert sampled_columns(rolls) == {"completion_lengths": [3, 4], "max_tokens": [4, 4]}
    suite = RewardSuite([SafeReward("overlong", overlong_penalty, kwargs={"buffer": 2})])
    assert score(rolls, suite).per_reward["overlong"] == pytest.approx([-0.5, -1.0])


class _Rolls:
    def __init__(self, mask, budget):
        self.completion_mask_BT, self.max_new_tokens = mask, budget
        self.prompt_index, self.num_prompts, self.completions = [0] * mask.size(0), 1, ["c"] * mask.size(0)

    def __len__(self):
        return len(self.completions)

    def row_prompt_texts(self):
        return ["p"] * len(self)


# --- the metric ---------------------------------------------------------------------------------
def _turn(cut: bool | None) -> dict:
    t = {"action": "a", "observation": [], "reward": 0.0, "components": {}}
    return t if cut is None else {**t, "hit_max_tokens": cut}


def test_episode_frac_truncated_counts_sampled_turns():
    a, b = Episode(prompt_id=0, seed=0), Episode(prompt_id=1, seed=0)
    a.turns = [_turn(True), _turn(False), _turn(True)]
    b.turns = [_turn(None)]  # a reset fault: nothing sampled, not counted
    assert episode_metrics([a, b])["frac_truncated"] == pytest.approx(2 / 3)
    assert episode_metrics([b])["frac_truncated"] == 0.0


def test_sampled_sft_frac_truncated():
    rows = [{"total": 1.0, "finished": True}, {"total": 0.0, "finished": False},
            {"total": None, "finished": False}, {"total": 1.0, "finished": True}]
    assert sampled_metrics(rows, 0)["frac_truncated"] == pytest.approx(0.5)
    assert sampled_metrics([{"total": 1.0}], 0)["frac_truncated"] is None  # an older samples.jsonl


# --- the health rule ------------------------------------------------------------------------------
def test_truncated_rule_names_the_stage_budget_key():
    rule, m = RULES["truncated"], MonitorConfig()
    assert rule({"stage": "grpo", "frac_truncated": 0.5}, m) == []  # at the threshold: quiet
    assert rule({"stage": "grpo", "frac_truncated": None}, m) == []
    (f,) = rule({"stage": "grpo", "frac_truncated": 0.75}, m)
    assert f.rule == "truncated" and f.level == "warning" and f.threshold == 0.5
    assert "75% of sampled completions" in f.message and "grpo.max_tokens" in f.message
    assert "overlong_penalty" in f.message and "\n" not in f.message
    (f,) = rule({"stage": "ppo", "frac_truncated": 1.0, "episode_return": 0.0}, m)
    assert "sampled turns" in f.message and "ppo.max_tokens" in f.message
    assert rule({"stage": "ppo", "frac_truncated": 1.0}, MonitorConfig(truncated_warn=1.0)) == []  # 1 = off


def test_all_masked_truncated_rule_fires_when_nothing_trains_and_names_the_fix():
    rule, m = RULES["all_masked_truncated"], MonitorConfig()
    assert rule({"stage": "grpo", "frac_truncated": 1.0}, m) == []  # mask_truncated off: no such metric
    assert rule({"stage": "grpo", "frac_masked_truncated": 0.99}, m) == []  # some rows still train
    assert rule({"stage": "grpo", "frac_masked_truncated": float("nan")}, m) == []
    (f,) = rule({"stage": "grpo", "frac_masked_truncated": 1.0, "episode_return": 0.0}, m)
    assert f.rule == "all_masked_truncated" and f.level == "warning" and f.threshold == 1.0
    assert f.metric == "frac_masked_truncated" and f.value == 1.0 and "\n" not in f.message
    assert "every episode held a turn" in f.message and "nothing trains" in f.message
    assert "raise grpo.max_tokens, or turn grpo.mask_truncated off" in f.message
    (f,) = rule({"stage": "ppo", "frac_masked_truncated": 1.0}, m)
    assert "every completion reached ppo.max_tokens" in f.message and "ppo.mask_truncated off" in f.message


def test_all_masked_truncated_rule_is_checked_by_the_stages_that_mask():
    from rlft.config.stages import SPECS

    have = {name for name, spec in SPECS.items() if "all_masked_truncated" in spec.health_rules}
    assert have == {"grpo", "ppo"}
