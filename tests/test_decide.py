"""RS-SFT and AWR decisions over samples.jsonl rows: kept flags, weights, metrics, the no-sample-kept error."""

import math

import pytest

from rlft.stages.awr.spec import AWRConfig
from rlft.stages.rs_sft.spec import RSSFTConfig
from rlft.errors import RunError
from rlft.stages.awr.decide import awr_decide
from rlft.stages.rs_sft.decide import rs_sft_decide
from rlft.stages.common.rounds import training_pairs


def _rows(totals, n):
    return [{"round": 1, "prompt_id": i // n, "sample": i % n, "prompt": f"p{i // n}", "completion": f"c{i}",
             "rewards": {"r": t}, "total": t} for i, t in enumerate(totals)]


def test_rs_sft_best_keeps_one_per_prompt_and_reports():
    rows = _rows([0.2, 0.9, 0.1, 0.3, 0.7, None], 2)
    decided, m = rs_sft_decide(rows, RSSFTConfig(num_samples_per_prompt=2, keep="best", reward_threshold=0.6), 1)
    assert [r["kept"] for r in decided] == [False, True, False, False, True, False]
    assert m["kept_count"] == 2 and m["kept_fraction"] == pytest.approx(2 / 6)
    assert m["sampled_reward_mean"] == pytest.approx((0.2 + 0.9 + 0.1 + 0.3 + 0.7) / 5)
    assert m["frac_unscored"] == pytest.approx(1 / 6)
    assert m["kept_reward_mean"] == pytest.approx(0.8)
    pairs = training_pairs(decided)
    assert pairs == [{"prompt": "p0", "completion": "c1"}, {"prompt": "p2", "completion": "c4"}]


def test_rs_sft_nothing_above_threshold_is_exit_2_with_spread():
    rows = _rows([0.1, 0.5, 0.3, None], 2)
    with pytest.raises(RunError) as err:
        rs_sft_decide(rows, RSSFTConfig(num_samples_per_prompt=2, reward_threshold=0.6), 1)
    msg = str(err.value)
    assert err.value.exit_code == 2
    assert "min 0.1" in msg and "median 0.3" in msg and "max 0.5" in msg and "(0.6)" in msg


def test_awr_weights_rows_and_metrics():
    rows = _rows([1.0, 0.0, 0.5, 0.5], 2)  # advantages [0.5, -0.5, 0, 0]
    a = AWRConfig(num_samples_per_prompt=2, advantage_beta=1.0, clip_advantage=10.0, normalize_advantage=False)
    decided, m = awr_decide(rows, a, 1)
    assert [r["advantage"] for r in decided] == [0.5, -0.5, 0.0, 0.0]
    assert [r["weight"] for r in decided] == pytest.approx([math.exp(0.5), math.exp(-0.5), 1, 1], abs=1e-6)
    assert m["weight_max"] == pytest.approx(math.exp(0.5))
    assert 0 < m["ess"] <= 1 and m["frac_clipped"] == 0.0
    pairs = training_pairs(decided)
    assert [p["weight"] for p in pairs] == pytest.approx([math.exp(0.5), math.exp(-0.5), 1, 1], abs=1e-6)


def test_awr_unscored_row_left_out_of_training():
    rows = _rows([1.0, None, 0.5, 0.0], 2)
    decided, _ = awr_decide(rows, AWRConfig(num_samples_per_prompt=2), 1)
    assert decided[1]["advantage"] is None and decided[1]["weight"] == 0.0
    assert len(training_pairs(decided)) == 3


def test_chat_prompt_becomes_conversational_pair():
    rows = _rows([0.9, 0.1], 2)
    rows[0]["prompt"] = rows[1]["prompt"] = [{"role": "user", "content": "hi"}]
    decided, _ = rs_sft_decide(rows, RSSFTConfig(num_samples_per_prompt=2, reward_threshold=0.6), 1)
    assert training_pairs(decided) == [{"prompt": [{"role": "user", "content": "hi"}],
                                        "completion": [{"role": "assistant", "content": "c0"}]}]
