"""The registries of pluggable pieces: a piece is one registered function (or class), looked up by name by the
trainers; each built-in on worked numbers."""

import math
import subprocess
import sys

import pytest
import torch

from rlft.algos import (
    KL_ESTIMATORS, POLICY_LOSSES, Registry, clipped_surrogate, episode_group_advantages, episode_return_advantages,
    gae, gae_advantages, importance_sampling, kl_penalty_per_token, masked_whiten, ppo_loss,
)

T = torch.tensor


def test_registry_lookup_names_and_did_you_mean():
    reg = Registry("widget")
    reg.register("alpha")(len)
    reg.register("beta")(abs)
    assert reg.names() == ("alpha", "beta") and reg.get("beta") is abs and "alpha" in reg
    with pytest.raises(ValueError, match=r"unknown widget 'alpah' \(did you mean 'alpha'\?\); allowed: alpha, beta"):
        reg.get("alpah")



def test_registering_a_taken_name_names_the_name_and_both_registrants():
    reg = Registry("widget")
    reg.register("alpha")(len)
    with pytest.raises(ValueError, match=r"widget 'alpha' is already registered by builtins\.len; builtins\.abs "
                                         r"cannot take the name too"):
        reg.register("alpha")(abs)
    assert reg.get("alpha") is len  # the first stays
    with pytest.raises(ValueError, match="already registered"):  # two lambdas are two pieces
        reg.register("l")(lambda: 1)
        reg.register("l")(lambda: 2)


def test_registering_the_same_piece_again_is_idempotent():
    reg = Registry("widget")
    assert reg.register("alpha")(len) is len and reg.register("alpha")(len) is len
    assert reg.names() == ("alpha",) and reg.get("alpha") is len


def test_built_in_registries_refuse_a_second_piece_under_a_built_in_name(monkeypatch):
    from rlft.algos import register_baseline
    from rlft.algos.advantages import BASELINES
    from rlft.envs.registry import ENVS, register_env

    monkeypatch.setattr(BASELINES, "_items", dict(BASELINES._items))
    monkeypatch.setattr(ENVS, "_items", dict(ENVS._items))
    with pytest.raises(ValueError, match=r"baseline 'group_mean' is already registered by "
                                         r"rlft\.algos\.advantages\.\w+; .*mine"):
        @register_baseline("group_mean")
        def mine(rewards_PG, group_size, valid_PG):
            return rewards_PG
    with pytest.raises(ValueError, match=r"env 'toolsim' is already registered by rlft\.envs\.toolsim\.ToolSim"):
        @register_env("toolsim")
        class Other:
            pass
    with pytest.raises(ValueError, match=r"loss_fn 'ppo' is already registered by "
                                         r"rlft\.algos\.policy_loss\.clipped_surrogate"):
        POLICY_LOSSES.register("ppo")(importance_sampling)


def test_reloading_a_module_that_registers_is_no_error(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "rlft_test_reg_home.py").write_text("from rlft.algos.registry import Registry\nREG = Registry('w')\n")
    (tmp_path / "rlft_test_reg_plugin.py").write_text(
        "from rlft_test_reg_home import REG\n\n@REG.register('one')\ndef one():\n    return 1\n\n"
        "@REG.register('cls')\nclass Cls:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("rlft_test_reg_home", "rlft_test_reg_plugin"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    plugin = importlib.import_module("rlft_test_reg_plugin")
    first = plugin.one
    plugin = importlib.reload(plugin)
    home = sys.modules["rlft_test_reg_home"]
    assert plugin.one is not first and home.REG.get("one") is plugin.one and home.REG.get("cls") is plugin.Cls
    assert home.REG.names() == ("one", "cls")
    for mod in ("rlft_test_reg_home", "rlft_test_reg_plugin"):  # not left for later tests
        sys.modules.pop(mod, None)

def test_kl_penalty_looks_the_estimator_up_by_name(monkeypatch):
    monkeypatch.setattr(KL_ESTIMATORS, "_items", dict(KL_ESTIMATORS._items))
    KL_ESTIMATORS.register("twice")(lambda lp, ref, lp_v=None, ref_v=None: 2 * (lp - ref))
    assert kl_penalty_per_token(T([[-1.0]]), T([[-1.5]]), "twice").tolist() == [[1.0]]


def test_importance_sampling_is_the_unclipped_ratio_times_the_advantage():
    # r = 1.5, A = 1 -> -1.5 (the clipped surrogate would stop at -1.2); r = 0.5, A = -1 -> 0.5; r = 1, A = 2 -> -2
    logp = torch.log(T([[1.5, 0.5, 1.0]]))
    loss, m = importance_sampling(logp, torch.zeros(1, 3), T([[1.0, -1.0, 2.0]]), torch.ones(1, 3), 0.2)
    assert loss.item() == pytest.approx((-1.5 + 0.5 - 2.0) / 3)
    assert m["ratio"] == pytest.approx(1.0)
    assert m["approx_kl"] == pytest.approx((0.5 * math.log(1.5) ** 2 + 0.5 * math.log(0.5) ** 2) / 3)


def test_policy_losses_by_name_and_whether_they_clip():
    assert POLICY_LOSSES.get("ppo").fn is clipped_surrogate and POLICY_LOSSES.get("ppo").clipped
    assert POLICY_LOSSES.get("importance_sampling").fn is importance_sampling
    assert not POLICY_LOSSES.get("importance_sampling").clipped
    logp, old, adv, mask = torch.log(T([[1.5, 0.5]])), torch.zeros(1, 2), T([[1.0, -1.0]]), torch.ones(1, 2)
    zeros = torch.zeros(1, 2)
    kw = dict(clip_range=0.2, clip_range_value=0.2, vf_coef=0.0, ent_coef=0.0)
    clipped, _ = ppo_loss(logp, old, adv, zeros, zeros, zeros, zeros, mask, **kw)
    plain, _ = ppo_loss(logp, old, adv, zeros, zeros, zeros, zeros, mask, policy_loss="importance_sampling", **kw)
    assert clipped.item() == pytest.approx((-1.2 + 0.8) / 2) and plain.item() == pytest.approx((-1.5 + 0.5) / 2)


def test_gae_estimator_whitens_the_advantages_not_the_returns():
    rewards, values, mask = T([[0.0, 1.0, 0.5], [0.0, 2.0, 0.0]]), T([[0.1, 0.2, 0.0], [0.3, 0.1, 0.0]]), \
        T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = gae_advantages(rewards_BT=rewards, values_BT=values, mask_BT=mask, gamma=0.9, lam=0.8)
    raw, want_ret = gae(rewards, values, mask, 0.9, 0.8)
    assert torch.equal(adv, masked_whiten(raw, mask)) and torch.equal(ret, want_ret)
    assert float((adv * mask).sum()) == pytest.approx(0.0, abs=1e-6)


def test_episode_returns_estimator_is_the_group_advantage_of_the_discounted_return():
    # two groups of two episodes; returns r0 + 0.5 r1: 3, 1 | 0, 0 -> group_mean advantages 1, -1 | 0, 0
    turns = T([[2.0, 2.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    mask = T([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    adv, ret = episode_return_advantages(turn_rewards_BK=turns, mask_BT=mask, group_size=2,
                                         baseline_mode="group_mean", gamma=0.5)
    assert ret is None
    assert adv.tolist() == [[1.0, 0.0, 1.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert torch.equal(adv, episode_group_advantages(turns, mask, 2, "group_mean", 0.5))


def test_a_registered_env_is_what_env_name_builds(monkeypatch):
    from rlft.envs import resolve_env_class
    from rlft.envs.registry import ENVS, register_env
    from rlft.envs.toolsim import ToolSim

    assert resolve_env_class("toolsim") is ToolSim
    monkeypatch.setattr(ENVS, "_items", dict(ENVS._items))

    @register_env("coin")
    class Coin:
        pass

    assert resolve_env_class("coin") is Coin and ENVS.names() == ("toolsim", "coin")


def test_the_schedule_and_the_registries_import_without_torch():
    code = ("import sys, rlft.algos.schedule, rlft.algos.registry, rlft.envs; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_episode_grpo_schedule_counts_updates_of_groups():
    from rlft.algos.schedule import episode_grpo_loop_schedule
    from rlft.config import load_config

    cfg, _, _ = load_config("grpo", "cpu", ["configs/examples/tool_use_grpo.yaml"], [])
    s = episode_grpo_loop_schedule(cfg, 32)
    assert (s.batch_size, s.mini_batch_size, s.minibatches_per_step) == (32, 16, 1)  # 2 rows x 16, 2 substeps
    assert (s.num_updates, s.optimizer_steps_per_update, s.log_every, s.eval_every, s.save_every) == (40, 4, 1, 20, 20)
    cfg.train.max_steps, cfg.train.num_train_epochs = -1, 1.5
    assert episode_grpo_loop_schedule(cfg, 32).num_updates == 24  # 1.5 passes over 32 rows, 2 rows an update
