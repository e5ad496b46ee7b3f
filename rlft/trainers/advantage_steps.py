"""Per advantage estimator, how rlft's own loop turns a sampled batch into advantages (and critic targets) and
which loss trains on them: `gae` (PPO: KL in the reward, a critic) and `episode_returns` (GRPO over episodes: group
baselines, KL in the advantage, no critic).

Each estimator is registered once, in `ADVANTAGE_ESTIMATORS` below: its step (`(batch, state, settings, learner,
sampled, update) -> (Advantages, metrics, new LoopState)`, no trainer, no side effects) and its loss
(`(settings, minibatch, logp_BT, values_BT, logits_BTV, train_policy) -> (loss, metrics)`). The math they call is
rlft.algos'; the forward passes they read are the trainer's (`LearnerPass`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor

from rlft.algos import (
    KL_ESTIMATORS, LossSettings, Registry, behaviour_weights, discounted_returns, entropy_from_logits,
    episode_return_advantages, explained_variance, gae_advantages, grpo_policy_loss, group_advantages,
    kl_sample_train, loss_settings, masked_mean, masked_moments, masked_var, ppo_loss, shape_rewards, tis_metrics,
    tis_weights, value_bias_from_returns,
)

if TYPE_CHECKING:
    from rlft.algos.loop_state import LoopState
    from rlft.algos.loop_algorithm import LoopAlgorithm
    from rlft.rollout.ppo_batch import PPOBatch
    from rlft.rollout.processes import Processes


@dataclass(frozen=True)
class StepSettings:
    """What a step reads besides the batch and the state: the algorithm, the stage's section (`ppo`, or `grpo`
    over episodes), sampling.tis_cap and the run's processes (for means over them)."""
    algorithm: LoopAlgorithm
    section: Any
    tis_cap: float | None
    processes: Processes


@dataclass(frozen=True)
class LearnerPass:
    """The learner's no-grad passes over a batch (rlft.trainers.ppo): its log-probs (the clipped ratio's
    denominator) and values; the sampler's gap as importance weights (async or TIS; None = none); the reference's
    (logp_BT, logp_BTV), None without a KL reference; the value head's bias on a run's first update (else None)."""
    logp_BT: Tensor
    values_BT: Tensor
    logp_BTV: Tensor
    weights_BT: Tensor | None = None
    ref: tuple[Tensor, Tensor] | None = None
    head_bias: float | None = None


def sampler_weights(logp_BT: Tensor, batch, tis_cap: float | None) -> Tensor | None:
    """pi_learner / pi_sampler per token, multiplying the advantages where the learner is not what sampled: an async
    sampler's older weights (decoupled PPO, rlft.algos.behaviour_weights) or, with sampling.tis_cap, the sampler's
    own numerics (truncated importance sampling, rlft.algos.tis_weights); None = neither."""
    if batch.logp_behaviour_BT is not None:
        return behaviour_weights(logp_BT, batch.logp_behaviour_BT, batch.mask_BT)
    if tis_cap is not None:
        return tis_weights(logp_BT, batch.logp_sampler_BT, batch.mask_BT, tis_cap)
    return None


@dataclass(frozen=True)
class Sampled:
    """The collector's scoring of the batch: its reward metrics, scores_B (single-turn, NaN = unscored; None for
    episodes) and the hot-reloaded rewards' version (None without monitor.reward_hot_reload)."""
    reward_metrics: dict
    scores_B: Tensor | None = None
    reward_version: float | None = None


@dataclass(frozen=True)
class Advantages:
    """A step's per-token results, for the batch's fields of the same names; `value_shift`: what the value head's
    bias is to move by (ppo.value_init: first_batch_mean), 0.0 = nothing."""
    logp_old_BT: Tensor
    values_old_BT: Tensor
    advantages_BT: Tensor
    returns_BT: Tensor
    loss_mask_BT: Tensor | None = None
    value_shift: float = 0.0

    def fill(self, batch: PPOBatch) -> None:
        """Puts the per-token results into `batch`."""
        batch.logp_old_BT, batch.values_old_BT = self.logp_old_BT, self.values_old_BT
        batch.advantages_BT, batch.returns_BT, batch.loss_mask_BT = self.advantages_BT, self.returns_BT, \
            self.loss_mask_BT


@dataclass(frozen=True)
class AdvantageStep:
    fn: Callable    # (batch, state, settings, learner, sampled, update) -> (Advantages, metrics, new LoopState)
    loss: Callable  # (settings, minibatch, logp_BT, values_BT, logits_BTV, train_policy) -> (loss, metrics)
    # (state, algorithm) -> whether its KL coefficient asks for the reference's pass (a reference checkpoint
    # always gets one)
    wants_reference: Callable


ADVANTAGE_ESTIMATORS: Registry[AdvantageStep] = Registry("advantage estimator")


def advantage_step(estimator: str) -> AdvantageStep:
    """The loop's step for an estimator name (an unknown one: the registry's error, with its did-you-mean)."""
    return ADVANTAGE_ESTIMATORS.get(estimator)


# --- shared by the steps -------------------------------------------------------------------------
def sample_train_kl(settings: StepSettings, batch: PPOBatch, logp_learner_BT: Tensor, mask_BT: Tensor) -> dict:
    """kl_sample_train_v1/v2 between the policy that sampled the batch and the learner now (with sampling.tis_cap on
    a batch the learner's sampler drew: tis/weight_mean and tis/frac_capped too)."""
    mean, cap = settings.processes.mean, settings.tis_cap
    sampler = batch.logp_behaviour_BT if batch.logp_behaviour_BT is not None else batch.logp_sampler_BT
    out = {k: mean(v) for k, v in kl_sample_train(sampler, logp_learner_BT, mask_BT).items()}
    if cap is not None and batch.logp_behaviour_BT is None:
        out.update({k: mean(v) for k, v in tis_metrics(logp_learner_BT, sampler, mask_BT, cap).items()})
    return out


def mask_truncated(settings: StepSettings, batch: PPOBatch) -> tuple[Tensor | None, dict]:
    """`<section>.mask_truncated` (DAPO's overlong filtering, TRL's mask_truncated_completions): the rows cut at
    max_tokens without an EOS are left out of the loss (the returned loss mask), after the advantages, so they still
    count in their group's baseline as on single-turn GRPO. A single-turn row is one completion; an episode is
    left out whole when any of its turns was cut, as verl and SkyRL mask the whole sequence: the episode's return,
    the only reward its turns share, already holds what the cut turn led to, so its other turns would train on
    that noise too. Returns (loss_mask_BT, {frac_masked_truncated}); (None, {}) when off."""
    if not settings.algorithm.mask_truncated:
        return None, {}
    mask = batch.mask_BT
    if batch.episodes is not None:
        cut = [ep.cut_at_max_tokens for ep in batch.episodes]
    else:
        cut = [not done for done in batch.rollouts.finished]
    keep_B = ~torch.tensor(cut, dtype=torch.bool, device=mask.device)
    return mask * keep_B.unsqueeze(1).to(mask.dtype), {"frac_masked_truncated": settings.processes.mean(
        (~keep_B).float().mean())}


def _kl_BT(settings: StepSettings, learner: LearnerPass, mask_BT: Tensor) -> tuple[Tensor, Tensor] | None:
    """(kl_BT by the algorithm's KL estimator, the per-token mean log-ratio as GRPO logs it); None without a
    reference."""
    if learner.ref is None:
        return None
    logp_ref, logp_ref_BTV = learner.ref
    kl_BT = KL_ESTIMATORS.get(settings.algorithm.kl_estimator)(learner.logp_BT, logp_ref, learner.logp_BTV,
                                                               logp_ref_BTV)
    return kl_BT, masked_mean(learner.logp_BT - logp_ref, mask_BT)


# --- gae: PPO ------------------------------------------------------------------------------------
def gae_step(batch: PPOBatch, state: LoopState, settings: StepSettings, learner: LearnerPass, sampled: Sampled,
             update: int) -> tuple[Advantages, dict, LoopState]:
    """Rewards on the last (action) token, -kl_coef * kl_t on every one -> GAE over the critic's values,
    normalised over the whole batch by ppo.advantage_norm (whitened by default)."""
    p, episodes, mask, procs = settings.section, batch.episodes, batch.mask_BT, settings.processes
    mean = procs.mean
    logp_old, values_old = learner.logp_BT, learner.values_BT
    kl = _kl_BT(settings, learner, mask)
    kl_BT, kl_policy_ref = kl if kl is not None else (torch.zeros_like(logp_old), None)
    if episodes is not None:  # step rewards already sit on each turn's last action token
        rewards_BT = batch.env_rewards_BT - state.kl_coef * kl_BT * mask
    else:
        rewards_BT = shape_rewards(sampled.scores_B, kl_BT, mask, state.kl_coef)
    new_state = state
    if p.scale_returns:  # the critic's targets at about unit scale (see ppo.scale_returns)
        returns_B = (rewards_BT * mask).sum(1)  # this batch's episode returns, into the run's moments
        moments = masked_moments(returns_B, torch.ones_like(returns_B))
        new_state = state.with_returns(procs.sum(moments).cpu() if procs.count > 1 else moments)
        rewards_BT = rewards_BT / new_state.return_scale
    shift = 0.0
    if p.value_init == "first_batch_mean" and update == 0:  # a fresh run's first batch (resumes start later)
        # the head's bias becomes the batch's mean discounted return (every rank the same); the head is linear, so
        # the shift moves every value alike and the batch's values need no second forward pass
        shift = mean(value_bias_from_returns(rewards_BT, mask, p.gamma)) - learner.head_bias
        values_old = values_old + shift
    # several processes: normalised over the global batch (the moments summed over them), as verl whitens
    whole_batch = {"sum_over_processes": procs.sum} if procs.count > 1 else {}
    adv_BT, returns_BT = gae_advantages(rewards_BT=rewards_BT, values_BT=values_old * mask, mask_BT=mask,
                                        gamma=p.gamma, lam=p.lam, norm=p.advantage_norm, **whole_batch)
    if learner.weights_BT is not None:  # a stale batch or TIS: the sampler's gap to the learner as a weight
        adv_BT = adv_BT * learner.weights_BT
    valid = ~torch.isnan(sampled.scores_B) if episodes is None else torch.ones(len(batch.rows), dtype=torch.bool)
    loss_mask, masked = mask_truncated(settings, batch)
    metrics = {
        **sampled.reward_metrics,
        "kl_policy_ref": mean(kl_policy_ref) if kl_policy_ref is not None else None,
        "kl_penalty": mean(masked_mean(kl_BT, mask)),
        "kl_coef": state.kl_coef,
        **({"return_scale": new_state.return_scale} if p.scale_returns else {}),
        "advantage_mean": mean(masked_mean(adv_BT, mask)),
        "advantage_std": mean(masked_var(adv_BT, mask, unbiased=False).sqrt()),
        "return_mean": mean(masked_mean(returns_BT, mask)),
        "value_mean": mean(masked_mean(values_old, mask)),
        "explained_variance": explained_variance(values_old * mask, returns_BT, mask),
        "completion_length": mean(mask.sum(1).mean()),
        "frac_unscored": mean((~valid).float().mean()),
        # completions cut at max_tokens without an EOS (episodes: turns, in reward_metrics)
        **({"frac_truncated": mean(1.0 - sum(batch.rollouts.finished) / max(1, len(batch.rollouts)))}
           if episodes is None else {}),
        **({"reward_version": sampled.reward_version} if sampled.reward_version is not None else {}),
        **sample_train_kl(settings, batch, logp_old, mask),
        **masked,
    }
    return Advantages(logp_old, values_old * mask, adv_BT, returns_BT, loss_mask, shift), metrics, new_state


def critic_loss(settings: StepSettings, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor, logits_BTV: Tensor,
                train_policy: bool = True) -> tuple[Tensor, dict]:
    """PPO's loss: the policy loss by name, the clipped value loss and the entropy bonus (`train_policy` False: a
    critic warm-up update, the value loss alone)."""
    p = settings.section
    return ppo_loss(logp_BT, mb.logp_old_BT, mb.advantages_BT, values_BT * mb.mask_BT, mb.values_old_BT,
                    mb.returns_BT, entropy_from_logits(logits_BTV), mb.train_mask_BT, clip_range=p.clip_range,
                    clip_range_value=p.cliprange_value, vf_coef=p.vf_coef, ent_coef=p.ent_coef,
                    policy_loss=settings.algorithm.policy_loss, clip_ratio_c=p.clip_ratio_c,
                    train_policy=train_policy)


# --- episode_returns: GRPO over episodes ---------------------------------------------------------
def episode_returns_step(batch: PPOBatch, state: LoopState, settings: StepSettings, learner: LearnerPass,
                         sampled: Sampled, update: int) -> tuple[Advantages, dict, LoopState]:
    """Each episode's discounted return against its group's baseline, spread over its action tokens, minus
    kl_coef * kl_t (GRPO's KL in the advantage); the value head is not trained."""
    g, episodes, mask, mean = settings.section, batch.episodes, batch.mask_BT, settings.processes.mean
    logp_old = learner.logp_BT
    K = max(1, max(ep.length for ep in episodes))
    turn_rewards_BK = torch.tensor([[turn["reward"] for turn in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
    returns_B = discounted_returns(turn_rewards_BK, g.episode_gamma)
    adv_BT, _ = episode_return_advantages(turn_rewards_BK=turn_rewards_BK.to(mask.device), mask_BT=mask,
                                          group_size=g.group_size, baseline_mode=g.baseline_mode,
                                          gamma=g.episode_gamma)
    adv_B = group_advantages(returns_B, g.group_size, g.baseline_mode)  # for the metrics
    kl = _kl_BT(settings, learner, mask)
    kl_policy_ref = None
    if kl is not None:
        kl_BT, kl_policy_ref = kl
        adv_BT = adv_BT - state.kl_coef * kl_BT * mask
    if learner.weights_BT is not None:  # a stale batch or TIS: the sampler's gap to the learner as a weight
        adv_BT = adv_BT * learner.weights_BT
    zeros = torch.zeros_like(logp_old)
    loss_mask, masked = mask_truncated(settings, batch)
    metrics = {
        **sampled.reward_metrics,
        "kl_policy_ref": mean(kl_policy_ref) if kl_policy_ref is not None else None,
        "kl_coef": state.kl_coef,
        "advantage_mean": mean(adv_B.mean()),
        "advantage_abs_mean": mean(adv_B.abs().mean()),
        "discounted_return_mean": mean(returns_B.mean()),
        "completion_length": mean(mask.sum(1).mean()),
        **sample_train_kl(settings, batch, logp_old, mask),
        **masked,
    }
    return Advantages(logp_old, zeros, adv_BT, zeros, loss_mask), metrics, state


def policy_only_loss(settings: LossSettings, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor | None,
                     logits_BTV: Tensor) -> tuple[Tensor, dict]:
    """No critic and no entropy bonus: the policy loss alone, with the section's clip, ratio level and
    aggregation (the same loss menu as single-turn GRPO)."""
    mask = mb.train_mask_BT
    loss, m = grpo_policy_loss(settings, logp_BT, mb.logp_old_BT, mb.advantages_BT, mask)
    with torch.no_grad():
        entropy = masked_mean(entropy_from_logits(logits_BTV), mask)
    metrics = {"policy_loss": float(loss.detach()), "entropy": float(entropy), **m}
    if values_BT is not None:  # the untrained value head stays in the graph (DDP wants every parameter used)
        loss = loss + 0.0 * (values_BT * mb.mask_BT).sum()
    return loss, metrics


def episode_loss(settings: StepSettings, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor | None,
                 logits_BTV: Tensor, train_policy: bool = True) -> tuple[Tensor, dict]:
    """grpo.loss_fn's policy loss with the section's loss settings (no critic, so no warm-up)."""
    loss = dataclasses.replace(loss_settings(settings.section), loss_fn=settings.algorithm.policy_loss)
    return policy_only_loss(loss, mb, logp_BT, values_BT, logits_BTV)


def initial_kl(state: LoopState, algorithm: LoopAlgorithm) -> bool:
    """PPO: a KL penalty configured (the run's initial coefficient)."""
    return algorithm.initial_kl_coef > 0


def current_kl(state: LoopState, algorithm: LoopAlgorithm) -> bool:
    """GRPO over episodes: the coefficient now (as a --resume may have changed it)."""
    return state.kl_coef > 0


# the one registration per estimator: its name, its step, its loss and when it reads the reference
ADVANTAGE_ESTIMATORS.register("gae")(AdvantageStep(gae_step, critic_loss, initial_kl))
ADVANTAGE_ESTIMATORS.register("episode_returns")(AdvantageStep(episode_returns_step, episode_loss, current_kl))
