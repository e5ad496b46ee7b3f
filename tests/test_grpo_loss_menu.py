"""The GRPO loss menu (grpo.loss_fn, loss_agg, clip_low/high, clip_ratio_c, is_level) is one loss on every path:
TRL's GRPOTrainer computes single-turn GRPO's from the options rlft maps onto it (rlft/stages/grpo/runner.py's
`trl_loss_args`), rlft's episode loop calls `rlft.algos.grpo_policy_loss`; here both run on the same hand-made
tensors and give the same loss and the same gradient, for every setting. The recipes (configs/recipes/) validate
and change the step-1 loss where they change the math."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlft.algos import LossSettings, grpo_policy_loss, loss_settings

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (REPO / "configs" / "recipes").glob("*.yaml"))

SETTINGS = {
    "importance_sampling": LossSettings("importance_sampling"),
    "is_seq_mean": LossSettings("importance_sampling", loss_agg="seq_mean_token_mean"),
    "ppo": LossSettings("ppo", clip_low=0.2),
    "ppo_clip_higher": LossSettings("ppo", clip_low=0.2, clip_high=0.28),
    "ppo_dual_clip": LossSettings("ppo", clip_low=0.2, clip_ratio_c=1.25),
    "ppo_seq_mean": LossSettings("ppo", clip_low=0.2, loss_agg="seq_mean_token_mean"),
    "dr_grpo": LossSettings("ppo", clip_low=0.2, loss_agg="seq_mean_token_sum_norm", max_tokens=6),
    "is_dr_grpo": LossSettings("importance_sampling", loss_agg="seq_mean_token_sum_norm", max_tokens=6),
    "gspo": LossSettings("ppo", clip_low=3e-2, clip_high=4e-2, is_level="sequence", loss_agg="seq_mean_token_mean"),
    "gspo_token_mean": LossSettings("ppo", clip_low=3e-2, clip_high=4e-2, is_level="sequence"),
    "cispo": LossSettings("cispo", clip_low=0.2, clip_high=0.1),
    "cispo_sequence": LossSettings("cispo", clip_low=0.2, clip_high=0.01, is_level="sequence"),
}


def batch(seed: int = 0):
    """4 sequences x 6 tokens, ragged masks, ratios spread over and beyond every clip, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    logp_old_BT = -torch.rand(4, 6, generator=g) * 3 - 0.1
    logp_BT = logp_old_BT + torch.randn(4, 6, generator=g) * 0.5
    mask_BT = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]])
    adv_B = torch.tensor([1.0, -0.5, -1.5, 0.7])
    return logp_BT, logp_old_BT, adv_B, mask_BT


def trl_loss(s: LossSettings, logp_BT, logp_old_BT, adv_B, mask_BT, tmp_path):
    """TRL GRPOTrainer._compute_loss on these tensors, with the GRPOConfig rlft builds from `s` (one process,
    one micro-batch: the generation batch is the optimizer step)."""
    from trl import GRPOConfig, GRPOTrainer

    from rlft.stages.grpo.runner import trl_loss_args

    B, T = mask_BT.shape
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=B, num_generations=2,
                      gradient_accumulation_steps=1, steps_per_generation=1, max_completion_length=s.max_tokens or T,
                      beta=0.0, use_cpu=True, report_to=[], **trl_loss_args(s))
    accelerator = SimpleNamespace(num_processes=1, sync_gradients=True, reduce=lambda t, reduction: t,
                                  gather=lambda t: t, gather_for_metrics=lambda t: t)
    logp = logp_BT.clone().requires_grad_(True)
    fake = SimpleNamespace(
        args=args, loss_type=args.loss_type, epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        importance_sampling_level=args.importance_sampling_level, beta=args.beta,
        max_completion_length=args.max_completion_length, top_entropy_quantile=args.top_entropy_quantile,
        off_policy_mask_threshold=args.off_policy_mask_threshold, use_vllm=False,
        vllm_importance_sampling_correction=False, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1, accelerator=accelerator,
        _metrics={"train": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros(B, T), None))
    inputs = dict(prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                  completion_ids=torch.zeros(B, T, dtype=torch.long), completion_mask=mask_BT,
                  advantages=adv_B, old_per_token_logps=logp_old_BT, num_items_in_batch=mask_BT.sum())
    loss = GRPOTrainer._compute_loss(fake, None, inputs)
    loss.backward()
    return loss.detach(), logp.grad


def rlft_loss(s: LossSettings, logp_BT, logp_old_BT, adv_B, mask_BT):
    logp = logp_BT.clone().requires_grad_(True)
    loss, _ = grpo_policy_loss(s, logp, logp_old_BT, adv_B[:, None].expand_as(logp_BT), mask_BT)
    loss.backward()
    return loss.detach(), logp.grad


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_trl_and_rlft_give_the_same_loss_and_gradient(name, tmp_path):
    s = SETTINGS[name]
    for seed in range(3):
        tensors = batch(seed)
        want, want_grad = trl_loss(s, *tensors, tmp_path)
        got, got_grad = rlft_loss(s, *tensors)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7), (name, seed)
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-7)


def test_the_settings_move_the_clip_where_they_should():
    """Sanity that the parametrised cases exercise what they name (the clips are active on these tensors)."""
    tensors = batch(0)
    base = rlft_loss(SETTINGS["ppo"], *tensors)[0]
    for name in ("importance_sampling", "ppo_clip_higher", "ppo_dual_clip", "gspo", "cispo", "dr_grpo",
                 "ppo_seq_mean"):
        assert rlft_loss(SETTINGS[name], *tensors)[0].item() != pytest.approx(base.item()), name
    logp_BT, logp_old_BT, adv_B, mask_BT = tensors
    _, m = grpo_policy_loss(SETTINGS["ppo_dual_clip"], logp_BT, logp_old_BT, adv_B[:, None].expand_as(logp_BT), mask_BT)
    assert m["clipfrac_lower"] > 0


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_episode_loop_computes_the_single_turn_loss(name, tmp_path):
    """The episode loop's loss (multi-turn GRPO, rlft.trainers.advantage_steps) on the same tensors as TRL's
    single-turn loss."""
    from rlft.trainers.advantage_steps import StepSettings, advantage_step
    from rlft.algos.loop_algorithm import LoopAlgorithm

    s = SETTINGS[name]
    grpo = SimpleNamespace(loss_fn=s.loss_fn, clip_range=s.clip_low, clip_low=None, clip_high=s.clip_high,
                           clip_ratio_c=s.clip_ratio_c, is_level=s.is_level, loss_agg=s.loss_agg,
                           max_tokens=s.max_tokens)
    assert loss_settings(grpo) == dataclasses.replace(s, clip_high=s.high)  # null resolved to clip_range
    logp_BT, logp_old_BT, adv_B, mask_BT = batch(1)
    want, want_grad = trl_loss(s, logp_BT, logp_old_BT, adv_B, mask_BT, tmp_path)
    settings = StepSettings(LoopAlgorithm("episode_returns", s.loss_fn, "kl", 0.0, None), grpo, None, None)
    mb = SimpleNamespace(logp_old_BT=logp_old_BT, advantages_BT=adv_B[:, None].expand_as(logp_BT).clone(),
                         mask_BT=mask_BT, train_mask_BT=mask_BT)
    logp = logp_BT.clone().requires_grad_(True)
    values_BT = torch.zeros(4, 6, requires_grad=True)
    loss, m = advantage_step("episode_returns").loss(settings, mb, logp, values_BT, torch.zeros(4, 6, 3))
    loss.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7) and m["policy_loss"] == loss.item()
    torch.testing.assert_close(logp.grad, want_grad, rtol=1e-5, atol=1e-7)


def test_trl_options_rlft_builds(tmp_path):
    from rlft.stages.grpo.runner import trl_loss_args

    assert trl_loss_args(LossSettings()) == dict(importance_sampling_level="token", loss_type="dapo", epsilon=1.0,
                                                 epsilon_high=1e9)
    assert trl_loss_args(LossSettings("ppo", clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0,
                                      loss_agg="seq_mean_token_sum_norm")) == dict(
        importance_sampling_level="token", loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, delta=3.0)
    cispo = trl_loss_args(LossSettings("cispo", clip_low=0.2, clip_high=4.0))
    assert cispo["loss_type"] == "cispo" and cispo["epsilon_high"] == 5.0


def test_clip_low_alone_leaves_the_upper_clip_at_clip_range(tmp_path):
    """grpo.clip_high null means clip_range on the upper side, whatever clip_low says (docs/reference/config.md;
    verl's clip_ratio_high and TRL's epsilon_high agree). Worked numbers: clip_range 0.2, clip_low 0.1, one token
    with ratio 1.15 and advantage 1 lies inside [0.9, 1.2], so the loss is -r = -1.15 and d loss / d logp = -r."""
    import math

    from rlft.stages.grpo.runner import trl_loss_args

    grpo = SimpleNamespace(loss_fn="ppo", clip_range=0.2, clip_low=0.1, clip_high=None, clip_ratio_c=None,
                           is_level="token", loss_agg="token_mean", max_tokens=None)
    s = loss_settings(grpo)
    assert (s.clip_low, s.high) == (0.1, 0.2)
    assert trl_loss_args(s)["epsilon"] == 0.1 and trl_loss_args(s)["epsilon_high"] == 0.2
    logp_old = torch.tensor([[-1.0]])
    logp = (logp_old + math.log(1.15)).requires_grad_(True)
    loss, _ = grpo_policy_loss(s, logp, logp_old, torch.ones(1, 1), torch.ones(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(-1.15, abs=1e-6) and logp.grad.item() == pytest.approx(-1.15, abs=1e-6)
    # TRL's loss from the options rlft hands it: the same on a batch with ratios on both sides of 1.1 and 1.2
    tensors = batch(0)
    want, want_grad = trl_loss(s, *tensors, tmp_path)
    got, got_grad = rlft_loss(s, *tensors)
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-7)


# --- recipes -------------------------------------------------------------------------------------------------

def test_every_recipe_named_in_the_task_exists():
    assert set(RECIPES) >= {"dapo", "dr_grpo", "gspo", "cispo", "rloo", "lite_ppo"}


def _recipe_config(name: str | None):
    """The demo with recipe `name` layered over it (None: the demo alone); a ConfigError on any error."""
    from rlft.config import load_config

    files = [str(REPO / "configs" / "examples" / "grpo_demo.yaml")]
    return load_config("grpo", "cpu", files + ([str(REPO / "configs" / "recipes" / f"{name}.yaml")] if name else []),
                       [])[0]


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_validates_alone_and_over_the_demo(name):
    from typer.testing import CliRunner

    from rlft.cli import app

    for layers in (["-c", f"configs/recipes/{name}.yaml"],
                   ["-c", "configs/examples/grpo_demo.yaml", "-c", f"configs/recipes/{name}.yaml"]):
        result = CliRunner().invoke(app, ["validate-config", "--stage", "grpo", "--hw", "cpu", *layers])
        assert result.exit_code == 0, result.output
        assert "error:" not in result.output


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_changes_the_step_one_loss_where_it_changes_the_math(name):
    """Step 1's loss on the same fixed tensors (rewards -> advantages -> policy loss, through rlft's functions)
    differs from the demo's default wherever the recipe changes the math."""
    from rlft.algos import group_advantages

    def step_one(cfg) -> float:
        torch.manual_seed(0)
        rewards = torch.tensor([0.0, 0.2, 0.9, 0.4, 0.1, 0.1, 0.3, 0.8])
        adv_B = group_advantages(rewards, 4, cfg.grpo.baseline_mode)
        logp_BT, logp_old_BT, _, mask_BT = batch(2)
        logp_BT, logp_old_BT, mask_BT = (t.repeat(2, 1) for t in (logp_BT, logp_old_BT, mask_BT))
        loss, _ = grpo_policy_loss(loss_settings(cfg.grpo), logp_BT, logp_old_BT,
                                   adv_B[:, None].expand_as(logp_BT), mask_BT)
        return loss.item()

    assert step_one(_recipe_config(name)) != pytest.approx(step_one(_recipe_config(None)), rel=1e-4)


@pytest.mark.parametrize("recipe", RECIPES)
def test_sync_and_async_single_turn_hand_trl_the_recipe_s_loss(recipe, tmp_path):
    """Async and streaming GRPO subclass the synchronous trainer and keep TRL's loss: the same TRL options."""
    from rlft.algos import POLICY_LOSSES
    from rlft.config import load_config
    from rlft.stages.grpo.runner import grpo_trainer_class, grpo_trl_config, trl_loss_args
    from rlft.trainers.grpo import RlftGRPOTrainer
    from rlft.trainers.grpo_async import AsyncGRPOTrainer, overlap_of

    layers = [str(REPO / "configs" / "examples" / "grpo_demo.yaml"),
              str(REPO / "configs" / "recipes" / f"{recipe}.yaml")]
    for extra, cls in (([], RlftGRPOTrainer), (["grpo.async.max_steps_off_policy=1"], AsyncGRPOTrainer)):
        cfg = load_config("grpo", "cpu", layers, extra)[0]
        assert grpo_trainer_class(cfg) is cls
        args = grpo_trl_config(cfg, str(tmp_path))
        for key, value in trl_loss_args(loss_settings(cfg.grpo)).items():
            assert getattr(args, key) == value, (recipe, key)
        if cls is AsyncGRPOTrainer:  # a stale batch is clipped against the learner for a loss that reads the clip
            assert overlap_of(cfg).decoupled == POLICY_LOSSES.get(cfg.grpo.loss_fn).clipped
