"""PPO config rules: bad input is refused by validate-config with exit 2, naming the key."""

import pytest
from typer.testing import CliRunner

from rlft.cli import app


def run(*args):
    return CliRunner().invoke(app, ["validate-config", "--stage", "ppo", "--hw", "cpu", *args])


@pytest.mark.parametrize("override,key,words", [
    ("ppo.mini_batch_size=3", "ppo.mini_batch_size", "must divide ppo.batch_size (16)"),
    ("ppo.gamma=1.5", "ppo.gamma", "out of range"),
    ("ppo.lam=-0.1", "ppo.lam", "out of range"),
    ("ppo.value_model=separate", "ppo.value_model", "not built yet"),
    ("ppo.kl_penalty=k3", "ppo.kl_penalty", "not allowed"),
    ("train.gradient_accumulation_steps=3", "train.gradient_accumulation_steps", "must divide ppo.batch_size"),
])
def test_bad_ppo_input_exits_2(override, key, words):
    res = run(override)
    assert res.exit_code == 2, res.output
    assert f"error: {key} (command line)" in res.stderr and words in res.stderr, res.stderr
    assert "Traceback" not in res.output


def test_fsdp_refused_with_reason():
    res = CliRunner().invoke(app, ["validate-config", "--stage", "ppo", "--hw", "fsdp"])
    assert res.exit_code == 2 and "error: hw.distributed_strategy" in res.stderr and "ddp" in res.stderr


def test_profile_validates_and_target_kl_states_its_unit():
    assert run().exit_code == 0
    from rlft.config.schema import leaf_specs

    specs = leaf_specs()
    assert "per token" in specs["ppo.target_kl"].help and "per token" in specs["grpo.target_kl"].help
