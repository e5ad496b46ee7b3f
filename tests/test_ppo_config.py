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
    ("ppo.advantage_norm=scale", "ppo.advantage_norm", "not allowed"),
    ("ppo.kl_penalty=k3", "ppo.kl_penalty", "not allowed"),
    ("train.gradient_accumulation_steps=3", "train.gradient_accumulation_steps", "must divide ppo.batch_size"),
    ("ppo.critic_warmup=-1", "ppo.critic_warmup", "out of range"),
    ("ppo.value_init=mean", "ppo.value_init", "not allowed"),
])
def test_bad_ppo_input_exits_2(override, key, words):
    res = run(override)
    assert res.exit_code == 2, res.output
    assert f"error: {key} (command line)" in res.stderr and words in res.stderr, res.stderr
    assert "Traceback" not in res.output


def test_deepspeed_refused_with_reason():
    res = CliRunner().invoke(app, ["validate-config", "--stage", "ppo", "--hw", "ddp",
                                   "hw.distributed_strategy=deepspeed"])
    assert res.exit_code == 2 and "error: hw.distributed_strategy" in res.stderr and "--hw fsdp" in res.stderr


def test_separate_critic_validates_and_is_refused_under_fsdp():
    assert run("ppo.value_model=separate").exit_code == 0
    res = CliRunner().invoke(app, ["validate-config", "--stage", "ppo", "--hw", "ddp", "hw.distributed_strategy=fsdp",
                                   "ppo.value_model=separate"])
    assert res.exit_code == 2 and "error: ppo.value_model" in res.stderr and "fsdp" in res.stderr, res.stderr


def test_profile_validates_and_target_kl_states_its_unit():
    assert run().exit_code == 0
    from rlft.config.schema import leaf_specs

    specs = leaf_specs()
    assert "per token" in specs["ppo.target_kl"].help and "per token" in specs["grpo.target_kl"].help


def test_show_config_explain_converts_episodes_to_updates():
    res = CliRunner().invoke(app, ["show-config", "--stage", "ppo", "--hw", "cpu", "--explain", "ppo.num_episodes=640",
                                   "ppo.log_interval=32", "ppo.save_interval=160", "ppo.eval_interval=100"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if x.startswith("# ppo schedule"))
    assert "640 episodes / batch_size 16 = 40 updates" in line
    assert "log_interval 32 episodes = every 2 update(s)" in line
    assert "eval_interval 100 episodes = every 6 update(s)" in line
    assert "save_interval 160 episodes = every 10 update(s)" in line
    assert "16 optimizer steps per update, 640 in all" in line  # 4 epochs x 4 minibatches, cpu: no accumulation


def test_the_trainers_schedule_is_the_explained_one():
    """The trainer runs by rlft.algos.schedule; show-config --explain states the same numbers."""
    from rlft.algos.schedule import ppo_loop_schedule
    from rlft.config import load_config
    from rlft.stages.ppo.spec import schedule

    cfg, _, _ = load_config("ppo", "rtx4090", [], ["ppo.num_episodes=160", "ppo.log_interval=32"])
    s = ppo_loop_schedule(cfg)
    assert (s.num_updates, s.log_every, s.minibatches_per_step) == (10, 2, 4)
    assert s.optimizer_steps_per_update == 4  # 4 epochs x (4 minibatches / 4 accumulated)
    assert (s.batch_size, s.mini_batch_size, s.eval_every, s.save_every) == (16, 4, 62, 125)
    line = schedule(cfg)
    assert f"= {s.num_updates} updates" in line and f"log_interval 32 episodes = every {s.log_every} update(s)" in line
    assert (f"an optimizer step every {s.minibatches_per_step} minibatch(es) = {s.optimizer_steps_per_update} "
            f"optimizer steps per update") in line


def test_processes_must_split_batch_and_minibatch():
    res = CliRunner().invoke(app, ["validate-config", "--stage", "ppo", "--hw", "ddp", "hw.num_processes=3"])
    assert res.exit_code == 2
    assert "error: hw.num_processes (command line)" in res.stderr and "divisible by hw.num_processes (3)" in res.stderr


def test_max_steps_is_flagged_for_ppo():
    res = run("train.max_steps=10")
    assert res.exit_code == 0 and "warning: train.max_steps (command line)" in res.stderr
    assert "ppo.num_episodes" in res.stderr


def test_critic_warmup_must_leave_policy_updates():
    """The profile's 50000 episodes / 16 = 3125 updates: a warm-up as long as the run never trains the policy."""
    res = run("ppo.num_episodes=64", "ppo.critic_warmup=4")
    assert res.exit_code == 2 and "error: ppo.critic_warmup (command line)" in res.stderr
    assert "must be below the run's 4 update(s)" in res.stderr
    assert run("ppo.num_episodes=64", "ppo.critic_warmup=3").exit_code == 0
    res = run("ppo.critic_warmup=2", "ppo.vf_coef=0")
    assert res.exit_code == 0 and "warning: ppo.critic_warmup" in res.stderr and "train nothing" in res.stderr


def test_plan_counts_a_separate_critics_weights():
    from rlft.config import load_config
    from rlft.plan.estimate import make_plan
    from rlft.plan.model_shape import load_shape

    plans = {}
    for critic in ("shared", "separate"):
        cfg, _, _ = load_config("ppo", "cpu", ["configs/examples/ppo_demo.yaml"], [f"ppo.value_model={critic}"])
        plans[critic] = make_plan(cfg, load_shape(cfg.model.name_or_path, cfg.model.tiny_init_std))
    assert plans["shared"].term("critic") is None
    term, n = plans["separate"].term("critic"), plans["separate"].shape.num_params()
    assert term.bytes > n * 4 and plans["separate"].peak > plans["shared"].peak  # a second copy of the weights
