"""DAPO's dynamic sampling (`grpo.dynamic_sampling`): which sampled groups a step keeps, on worked numbers, and
where validate-config refuses it (exit 2, with the reason: async and streaming GRPO hand batches over before they
are scored)."""

from __future__ import annotations

import pytest

from conftest import run_cli
from rlft.algos import pick_groups


def test_pick_groups_keeps_the_first_groups_with_signal():
    # sampling 1 gave groups 0-3 (signal at 1, 3), sampling 2 groups 4-7 (signal at 4, 6, 7): want 4
    signal = [False, True, False, True, True, False, True, True]
    assert pick_groups(signal, 4) == ([1, 3, 4, 6], 4)
    assert pick_groups(signal[:4], 4) == ([0, 1, 2, 3], 2)  # out of tries: constant groups fill, 2 with signal
    assert pick_groups([False, True, False, False, True], 3) == ([0, 1, 4], 2)  # the earliest constant one fills
    assert pick_groups([True, True], 2) == ([0, 1], 2)
    with pytest.raises(ValueError, match="3 groups sampled, 4 needed"):
        pick_groups([True, True, True], 4)


@pytest.mark.parametrize("config, overrides, says", [
    ("configs/examples/grpo_demo.yaml", ["grpo.async.max_steps_off_policy=1"], "not with grpo.async"),
    ("configs/examples/grpo_demo.yaml", ["grpo.async.max_steps_off_policy=0"], "not with grpo.async"),
    ("configs/examples/grpo_demo.yaml", ["grpo.stream_minibatch.num_minibatches=2"],
     "not with grpo.stream_minibatch"),
    ("configs/examples/tool_use_grpo.yaml", ["grpo.async.max_steps_off_policy=1"], "not with grpo.async"),
], ids=["single-turn-async", "single-turn-async-0", "single-turn-streaming", "episodes-async"])
def test_refused_where_it_cannot_refill(config, overrides, says):
    res = run_cli("validate-config", "--stage", "grpo", "-c", config, "grpo.dynamic_sampling=true", *overrides)
    assert res.returncode == 2 and "grpo.dynamic_sampling (command line)" in res.stderr and says in res.stderr, \
        res.stderr


@pytest.mark.parametrize("config", ["configs/examples/grpo_demo.yaml", "configs/examples/tool_use_grpo.yaml"],
                         ids=["single-turn", "episodes"])
def test_accepted_on_synchronous_grpo(config):
    ok = run_cli("validate-config", "--stage", "grpo", "-c", config, "grpo.dynamic_sampling=true")
    assert ok.returncode == 0, ok.stderr
