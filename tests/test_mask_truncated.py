"""`grpo.mask_truncated` / `ppo.mask_truncated` on rlft's loop (episode GRPO and PPO): rows with an action cut at
max_tokens without an EOS are left out of the loss (a whole episode when any of its turns was cut), on hand-made
tensors and turns; the rest of the batch trains as without the option."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from rlft.cli import app
from rlft.rollout.episodes import Episode, episode_metrics
from rlft.trainers.advantage_steps import StepSettings, advantage_step, mask_truncated
from rlft.algos.loop_algorithm import LoopAlgorithm
from rlft.rollout.ppo_batch import PPOBatch

REPO = Path(__file__).resolve().parents[1]
B, T = 4, 6


def episode(*cut: bool) -> Episode:
    ep = Episode(prompt_id=0, seed=0)
    ep.turns = [{"reward": 0.0, "components": {}, "hit_max_tokens": c} for c in cut]
    return ep


def tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp_old_BT = -torch.rand(B, T, generator=g) * 3 - 0.1
    logp_BT = logp_old_BT + torch.randn(B, T, generator=g) * 0.3
    mask_BT = torch.tensor([[1, 1, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0], [1, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]]).float()
    adv_BT = torch.tensor([1.0, -0.5, -1.5, 0.7])[:, None].expand(B, T) * mask_BT
    return logp_BT, logp_old_BT, adv_BT, mask_BT


def ppo_batch(mask_BT, episodes=None, finished=None) -> PPOBatch:
    ids = torch.zeros(B, T + 1, dtype=torch.long)
    rollouts = SimpleNamespace(finished=finished) if finished is not None else None
    return PPOBatch(ids, torch.ones_like(ids), ids, 1, mask_BT, torch.zeros(B, T), episodes=episodes,
                    rollouts=rollouts)


def trainer(estimator: str, on: bool, section=None) -> StepSettings:
    """The step settings of a single-process loop (means over processes are plain floats)."""
    return StepSettings(LoopAlgorithm(estimator, "ppo", "kl", 0.0, None, mask_truncated=on), section, None,
                        SimpleNamespace(mean=float, count=1))


def masked(settings, batch) -> dict:
    """mask_truncated's loss mask put into the batch, as the loop's Advantages.fill does; its metrics."""
    batch.loss_mask_BT, m = mask_truncated(settings, batch)
    return m


GRPO = SimpleNamespace(loss_fn="ppo", clip_range=0.2, clip_low=None, clip_high=None, clip_ratio_c=None,
                       is_level="token", loss_agg="token_mean", max_tokens=T)
PPO = SimpleNamespace(clip_range=0.2, cliprange_value=0.2, vf_coef=0.5, ent_coef=0.01, clip_ratio_c=None)


def test_an_episode_is_cut_when_any_turn_hit_max_tokens():
    assert episode(False, True, False).cut_at_max_tokens
    assert not episode(False, False).cut_at_max_tokens and not episode().cut_at_max_tokens
    # frac_truncated keeps its meaning: the share of sampled turns, not of episodes
    assert episode_metrics([episode(False, True, False), episode(False)])["frac_truncated"] == pytest.approx(1 / 4)


def test_episodes_with_a_cut_turn_are_masked_whole_and_the_metric_counts_episodes():
    _, _, _, mask = tensors()
    batch = ppo_batch(mask, episodes=[episode(False, False), episode(False, True), episode(True), episode(False)])
    m = masked(trainer("episode_returns", True), batch)
    assert m == {"frac_masked_truncated": 0.5}
    torch.testing.assert_close(batch.loss_mask_BT, mask * torch.tensor([1.0, 0.0, 0.0, 1.0])[:, None])
    assert batch.mask_BT is mask  # the action mask (advantages, metrics, completions.jsonl) is left as it was
    sub = batch.select(torch.tensor([1, 3]))  # a minibatch carries its rows' loss mask
    torch.testing.assert_close(sub.train_mask_BT, torch.stack([torch.zeros(T), mask[3]]))


def test_single_turn_rows_are_masked_where_they_did_not_finish():
    _, _, _, mask = tensors()
    batch = ppo_batch(mask, finished=[True, False, True, True])
    assert masked(trainer("gae", True), batch) == {"frac_masked_truncated": 0.25}
    assert batch.loss_mask_BT[1].sum() == 0 and torch.equal(batch.loss_mask_BT[[0, 2, 3]], mask[[0, 2, 3]])


def test_off_nothing_changes():
    _, _, _, mask = tensors()
    batch = ppo_batch(mask, episodes=[episode(True)] * B)
    assert masked(trainer("episode_returns", False), batch) == {}
    assert batch.loss_mask_BT is None and batch.train_mask_BT is mask


def _loss_and_grad(estimator, section, mb, logp_BT, values_BT=None):
    logp = logp_BT.clone().requires_grad_(True)
    values = (values_BT if values_BT is not None else torch.zeros(B, T)).clone().requires_grad_(True)
    logits = torch.randn(B, T, 5, generator=torch.Generator().manual_seed(3), requires_grad=True)
    loss, m = advantage_step(estimator).loss(trainer(estimator, True, section), mb, logp, values, logits)
    loss.backward()
    return loss, m, logp.grad, values.grad, logits.grad


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_episode_grpo_masked_episodes_give_no_gradient_and_the_rest_train_as_alone(agg):
    section = SimpleNamespace(**{**vars(GRPO), "loss_agg": agg})
    logp_BT, logp_old_BT, adv_BT, mask = tensors()
    batch = ppo_batch(mask, episodes=[episode(False), episode(False, True), episode(False), episode(True)])
    masked(trainer("episode_returns", True), batch)
    batch.logp_old_BT, batch.advantages_BT = logp_old_BT, adv_BT
    loss, m, g_logp, _, g_logits = _loss_and_grad("episode_returns", section, batch, logp_BT)
    assert torch.all(g_logp[[1, 3]] == 0) and g_logits is None  # GRPO's entropy is a metric, outside the graph
    assert torch.all(g_logp[[0, 2]][mask[[0, 2]] > 0] != 0)
    # the kept episodes: the loss token_mean gives them alone (sequence means count the masked rows as empty)
    kept = ppo_batch(mask * torch.tensor([1.0, 0, 1, 0])[:, None], episodes=[episode(False)] * B)
    kept.logp_old_BT, kept.advantages_BT = logp_old_BT, adv_BT
    want, _, want_grad, _, _ = _loss_and_grad("episode_returns", section, kept, logp_BT)
    assert loss.item() == pytest.approx(want.item()) and torch.allclose(g_logp, want_grad)
    if agg == "token_mean":
        alone = ppo_batch(mask, episodes=[episode(False)] * B).select(torch.tensor([0, 2]))
        alone.logp_old_BT, alone.advantages_BT = logp_old_BT[[0, 2]], adv_BT[[0, 2]]
        logp = logp_BT[[0, 2]].clone().requires_grad_(True)
        ref, _ = advantage_step("episode_returns").loss(trainer("episode_returns", False, section), alone, logp,
                                                        torch.zeros(2, T), torch.zeros(2, T, 5))
        ref.backward()
        assert loss.item() == pytest.approx(ref.item()) and torch.allclose(g_logp[[0, 2]], logp.grad)


def test_untruncated_batch_trains_as_without_the_option():
    logp_BT, logp_old_BT, adv_BT, mask = tensors()
    on = ppo_batch(mask, episodes=[episode(False, False)] * B)
    masked(trainer("episode_returns", True), on)
    off = ppo_batch(mask, episodes=[episode(False, False)] * B)
    for b in (on, off):
        b.logp_old_BT, b.advantages_BT = logp_old_BT, adv_BT
    a = _loss_and_grad("episode_returns", GRPO, on, logp_BT)
    b = _loss_and_grad("episode_returns", GRPO, off, logp_BT)
    assert a[0].item() == b[0].item() and torch.equal(a[2], b[2])


def test_ppo_masked_rows_give_no_policy_value_or_entropy_gradient():
    logp_BT, logp_old_BT, adv_BT, mask = tensors()
    batch = ppo_batch(mask, finished=[True, True, False, True])
    masked(trainer("gae", True), batch)
    g = torch.Generator().manual_seed(5)
    batch.logp_old_BT, batch.advantages_BT = logp_old_BT, adv_BT
    batch.values_old_BT, batch.returns_BT = torch.randn(B, T, generator=g) * mask, torch.randn(B, T, generator=g)
    _, m, g_logp, g_values, g_logits = _loss_and_grad("gae", PPO, batch, logp_BT, torch.randn(B, T, generator=g))
    for grad in (g_logp, g_values, g_logits):
        assert torch.all(grad[2] == 0) and grad[[0, 1, 3]].abs().sum() > 0
    assert "value_loss" in m


def _validate(*args):
    return CliRunner().invoke(app, ["validate-config", *map(str, args)])


def test_validate_accepts_it_on_episodes_and_on_ppo():
    grpo = REPO / "configs" / "examples" / "tool_use_grpo.yaml"
    ppo = REPO / "configs" / "examples" / "tool_use_ppo.yaml"
    for args in (("--stage", "grpo", "--hw", "cpu", "-c", grpo), ("--stage", "grpo"),
                 ("--stage", "ppo", "--hw", "cpu", "-c", ppo)):
        section = args[1]
        res = _validate(*args, f"{section}.mask_truncated=true")
        assert res.exit_code == 0, res.output


def test_the_model_card_says_what_mask_truncated_masks_on_each_path():
    """Single-turn GRPO leaves out the cut completions; the episode loop masks an episode with any cut turn whole."""
    from rlft.config.compose import compose
    from rlft.config.validate import validate
    from rlft.stages.grpo.spec import model_card

    grpo = REPO / "configs" / "examples" / "tool_use_grpo.yaml"
    single = validate(compose("grpo", "cpu", [], ["grpo.mask_truncated=true"]))[0]
    episodes = validate(compose("grpo", "cpu", [grpo], ["grpo.mask_truncated=true"]))[0]
    assert episodes.env.name and not single.env.name
    assert "truncated completions masked" in model_card(single)[-1]
    assert "episodes with any truncated turn masked whole" in model_card(episodes)[-1]
    episodes.grpo.mask_truncated = False
    assert "masked" not in model_card(episodes)[-1]
