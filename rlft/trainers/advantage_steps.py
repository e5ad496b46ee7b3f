"""Per advantage estimator, how rlft's PPO loop turns a sampled batch into advantages (and critic targets) and
which loss trains on them: `gae` (PPO: KL in the reward, a critic) and `episode_returns` (GRPO over episodes: group
baselines, KL in the advantage, no critic). The estimators themselves are rlft.algos.ADVANTAGE_ESTIMATORS."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from rlft.algos import (
    ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LossSettings, behaviour_weights, discounted_returns, entropy_from_logits,
    explained_variance, grpo_policy_loss, group_advantages, kl_sample_train, loss_settings, masked_mean,
    masked_moments, masked_var, ppo_loss, return_scale, shape_rewards, tis_metrics, tis_weights,
    value_bias_from_returns,
)

if TYPE_CHECKING:
    from rlft.trainers.ppo_batch import PPOBatch

# `t` below is the trainer (rlft.trainers.ppo.RlftPPOTrainer, which imports this module): its model, forward
# pass, KL controller, reference and collector


@dataclass(frozen=True)
class AdvantageStep:
    advantages: Callable  # (trainer, batch, update, reward_metrics, scores_B) -> None: fills the batch's fields
    loss: Callable        # (trainer, minibatch, logp_BT, values_BT, logits_BTV) -> (loss, metrics)


def advantage_step(estimator: str) -> AdvantageStep:
    """The loop's step for an estimator in rlft.algos.ADVANTAGE_ESTIMATORS."""
    ADVANTAGE_ESTIMATORS.get(estimator)  # an unknown name: the registry's error, with its did-you-mean
    if estimator not in ADVANTAGE_STEPS:
        raise ValueError(f"rlft's PPO loop has no step for the advantage estimator {estimator!r}; "
                         f"it runs {', '.join(ADVANTAGE_STEPS)}")
    return ADVANTAGE_STEPS[estimator]


# --- the learner's passes over a batch -----------------------------------------------------------
def learner_logps(t, batch: PPOBatch):
    """(logp_old, values, logits, logp_BTV, weights_BT): the learner's forward pass over the batch. Its log-probs
    are the clipped ratio's denominator (the proximal policy). Where an async sampler drew the batch with older
    weights, weights_BT = pi_learner / pi_sampler per token multiplies the advantages (decoupled PPO,
    rlft.algos.behaviour_weights); None when the learner sampled the batch itself."""
    logp, values, logits, logp_BTV = t._forward(t.model, batch)
    behaviour = batch.logp_behaviour_BT
    if behaviour is None:
        cap = _tis_cap(t)  # sampling.tis_cap: the sampler's own log-probs, truncated importance weights
        return logp, values, logits, logp_BTV, None if cap is None else \
            tis_weights(logp, batch.logp_sampler_BT, batch.mask_BT, cap)
    w = behaviour_weights(logp, behaviour, batch.mask_BT)
    t.collector.async_metrics["async/behaviour_weight_mean"] = t._mean(masked_mean(w, batch.mask_BT))
    return logp, values, logits, logp_BTV, w


@torch.no_grad()
def reference_logps(t, batch: PPOBatch):
    if t.ref_model is not None:
        return t._forward(t.ref_model, batch, with_values=False)
    policy = t.policy
    if hasattr(policy, "disable_adapter"):
        with policy.disable_adapter():
            return t._forward(policy, batch, with_values=False)
    return None  # full fine-tuning with no reference checkpoint: no KL penalty


def _tis_cap(t) -> float | None:
    sampling = getattr(t.cfg, "sampling", None)
    return getattr(sampling, "tis_cap", None)


def sample_train_kl(t, batch: PPOBatch, logp_learner_BT: Tensor, mask_BT: Tensor) -> dict:
    """kl_sample_train_v1/v2 between the policy that sampled the batch and the learner now (with sampling.tis_cap on
    a batch the learner's sampler drew: tis/weight_mean and tis/frac_capped too)."""
    sampler = batch.logp_behaviour_BT if batch.logp_behaviour_BT is not None else batch.logp_sampler_BT
    out = {k: t._mean(v) for k, v in kl_sample_train(sampler, logp_learner_BT, mask_BT).items()}
    cap = _tis_cap(t)
    if cap is not None and batch.logp_behaviour_BT is None:
        out.update({k: t._mean(v) for k, v in tis_metrics(logp_learner_BT, sampler, mask_BT, cap).items()})
    return out


def mask_truncated(t, batch: PPOBatch) -> dict:
    """`<section>.mask_truncated` (DAPO's overlong filtering, TRL's mask_truncated_completions): the rows cut at
    max_tokens without an EOS are left out of the loss (batch.loss_mask_BT), after the advantages, so they still
    count in their group's baseline as on single-turn GRPO. A single-turn row is one completion; an episode is
    left out whole when any of its turns was cut, as verl and SkyRL mask the whole sequence: the episode's return,
    the only reward its turns share, already holds what the cut turn led to, so its other turns would train on
    that noise too. Returns the metric frac_masked_truncated ({} when off)."""
    if not t.algorithm.mask_truncated:
        return {}
    mask = batch.mask_BT
    if batch.episodes is not None:
        cut = [ep.cut_at_max_tokens for ep in batch.episodes]
    else:
        cut = [not done for done in batch.rollouts.finished]
    keep_B = ~torch.tensor(cut, dtype=torch.bool, device=mask.device)
    batch.loss_mask_BT = mask * keep_B.unsqueeze(1).to(mask.dtype)
    return {"frac_masked_truncated": t._mean((~keep_B).float().mean())}


# --- gae: PPO ------------------------------------------------------------------------------------
def gae_advantages(t, batch: PPOBatch, update: int, reward_metrics: dict,
                   scores_B: Tensor | None) -> None:
    """Rewards on the last (action) token, -kl_coef * kl_t on every one -> GAE over the critic's values,
    normalised over the whole batch by ppo.advantage_norm (whitened by default)."""
    p, episodes, mask = t.cfg.ppo, batch.episodes, batch.mask_BT
    logp_old, values_old, _, logp_old_BTV, weights_BT = learner_logps(t, batch)
    ref = reference_logps(t, batch) if t.algorithm.initial_kl_coef > 0 or t.ref_model is not None else None
    if ref is not None:
        logp_ref, _, _, logp_ref_BTV = ref
        kl_BT = KL_ESTIMATORS.get(t.algorithm.kl_estimator)(logp_old, logp_ref, logp_old_BTV, logp_ref_BTV)
        kl_policy_ref = masked_mean(logp_old - logp_ref, mask)  # per-token mean log-ratio, as GRPO logs it
    else:
        kl_BT = torch.zeros_like(logp_old)
        kl_policy_ref = None
    if episodes is not None:  # step rewards already sit on each turn's last action token
        rewards_BT = batch.env_rewards_BT - t.kl_ctl.value * kl_BT * mask
    else:
        rewards_BT = shape_rewards(scores_B, kl_BT, mask, t.kl_ctl.value)
    if p.scale_returns:  # the critic's targets at about unit scale (see ppo.scale_returns)
        rewards_BT = rewards_BT / _return_scale(t, rewards_BT, mask)
    if p.value_init == "first_batch_mean" and update == 0:  # a fresh run's first batch (resumes start later)
        values_old = values_old + _init_value_bias(t, rewards_BT, mask)
    # several processes: normalised over the global batch (the moments summed over them), as verl whitens
    whole_batch = {"sum_over_processes": t._sum_over_processes} if t.accelerator.num_processes > 1 else {}
    adv_BT, returns_BT = ADVANTAGE_ESTIMATORS.get(t.algorithm.estimator)(
        rewards_BT=rewards_BT, values_BT=values_old * mask, mask_BT=mask, gamma=p.gamma, lam=p.lam,
        norm=p.advantage_norm, **whole_batch)
    if weights_BT is not None:  # a stale batch or TIS: the sampler's gap to the learner as an importance weight
        adv_BT = adv_BT * weights_BT
    batch.logp_old_BT, batch.values_old_BT = logp_old, values_old * mask
    batch.advantages_BT, batch.returns_BT = adv_BT, returns_BT
    valid = ~torch.isnan(scores_B) if episodes is None else torch.ones(len(batch.rows), dtype=torch.bool)
    reloader = t.collector.reloader
    batch.metrics = {
        **reward_metrics,
        "kl_policy_ref": t._mean(kl_policy_ref) if kl_policy_ref is not None else None,
        "kl_penalty": t._mean(masked_mean(kl_BT, mask)),
        "kl_coef": t.kl_ctl.value,
        **({"return_scale": t.return_scale} if p.scale_returns else {}),
        "advantage_mean": t._mean(masked_mean(adv_BT, mask)),
        "advantage_std": t._mean(masked_var(adv_BT, mask, unbiased=False).sqrt()),
        "return_mean": t._mean(masked_mean(returns_BT, mask)),
        "value_mean": t._mean(masked_mean(values_old, mask)),
        "explained_variance": explained_variance(values_old * mask, returns_BT, mask),
        "completion_length": t._mean(mask.sum(1).mean()),
        "frac_unscored": t._mean((~valid).float().mean()),
        # completions cut at max_tokens without an EOS (episodes: turns, in reward_metrics)
        **({"frac_truncated": t._mean(1.0 - sum(batch.rollouts.finished) / max(1, len(batch.rollouts)))}
           if episodes is None else {}),
        **({"reward_version": float(reloader.version)} if reloader is not None else {}),
        **sample_train_kl(t, batch, logp_old, mask),
        **mask_truncated(t, batch),
    }


def _return_scale(t, rewards_BT: Tensor, mask_BT: Tensor) -> float:
    """This batch's episode returns added to the run's (every process's) moments; their standard deviation."""
    returns_B = (rewards_BT * mask_BT).sum(1)
    batch = masked_moments(returns_B, torch.ones_like(returns_B))
    if t.accelerator.num_processes > 1:
        batch = t._sum_over_processes(batch.to(t.accelerator.device)).cpu()
    t.return_moments = t.return_moments + batch.cpu()
    t.return_scale = return_scale(t.return_moments)
    return t.return_scale


@torch.no_grad()
def _init_value_bias(t, rewards_BT: Tensor, mask_BT: Tensor) -> float:
    """Set the value head's bias to the batch's mean discounted return (the mean over processes, so every rank sets
    the same); returns the shift, which moves every value by the same amount (the head is linear), so the batch's
    values need no second forward pass."""
    bias = t._mean(value_bias_from_returns(rewards_BT, mask_BT, t.cfg.ppo.gamma))
    head = t.accelerator.unwrap_model(t.model).value_head.bias
    shift = bias - float(head.full_tensor() if hasattr(head, "full_tensor") else head)
    head.add_(shift)
    return shift


def critic_loss(t, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor,
                logits_BTV: Tensor) -> tuple[Tensor, dict]:
    """PPO's loss: the policy loss by name, the clipped value loss and the entropy bonus."""
    p = t.cfg.ppo
    return ppo_loss(logp_BT, mb.logp_old_BT, mb.advantages_BT, values_BT * mb.mask_BT, mb.values_old_BT,
                    mb.returns_BT, entropy_from_logits(logits_BTV), mb.train_mask_BT, clip_range=p.clip_range,
                    clip_range_value=p.cliprange_value, vf_coef=p.vf_coef, ent_coef=p.ent_coef,
                    policy_loss=t.algorithm.policy_loss, clip_ratio_c=p.clip_ratio_c,
                    train_policy=not t.critic_warming_up)




# --- episode_returns: GRPO over episodes ---------------------------------------------------------
def episode_return_advantages(t, batch: PPOBatch, update: int, reward_metrics: dict,
                              scores_B: Tensor | None) -> None:
    """Each episode's discounted return against its group's baseline, spread over its action tokens, minus
    kl_coef * kl_t (GRPO's KL in the advantage); the value head is not trained."""
    g, episodes, mask = t.section, batch.episodes, batch.mask_BT
    logp_old, values_old, _, logp_old_BTV, weights_BT = learner_logps(t, batch)
    K = max(1, max(ep.length for ep in episodes))
    turn_rewards_BK = torch.tensor([[turn["reward"] for turn in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
    returns_B = discounted_returns(turn_rewards_BK, g.episode_gamma)
    adv_BT, _ = ADVANTAGE_ESTIMATORS.get(t.algorithm.estimator)(
        turn_rewards_BK=turn_rewards_BK.to(mask.device), mask_BT=mask, group_size=g.group_size,
        baseline_mode=g.baseline_mode, gamma=g.episode_gamma)
    adv_B = group_advantages(returns_B, g.group_size, g.baseline_mode)  # for the metrics
    kl_policy_ref = None
    if t.kl_ctl.value > 0 or t.ref_model is not None:
        ref = reference_logps(t, batch)
        if ref is not None:
            logp_ref, _, _, logp_ref_BTV = ref
            kl_BT = KL_ESTIMATORS.get(t.algorithm.kl_estimator)(logp_old, logp_ref, logp_old_BTV, logp_ref_BTV)
            adv_BT = adv_BT - t.kl_ctl.value * kl_BT * mask
            kl_policy_ref = masked_mean(logp_old - logp_ref, mask)
    if weights_BT is not None:  # a stale batch or TIS: the sampler's gap to the learner as an importance weight
        adv_BT = adv_BT * weights_BT
    zeros = torch.zeros_like(logp_old)
    batch.logp_old_BT, batch.values_old_BT, batch.advantages_BT, batch.returns_BT = logp_old, zeros, adv_BT, zeros
    batch.metrics = {
        **reward_metrics,
        "kl_policy_ref": t._mean(kl_policy_ref) if kl_policy_ref is not None else None,
        "kl_coef": t.kl_ctl.value,
        "advantage_mean": t._mean(adv_B.mean()),
        "advantage_abs_mean": t._mean(adv_B.abs().mean()),
        "discounted_return_mean": t._mean(returns_B.mean()),
        "completion_length": t._mean(mask.sum(1).mean()),
        **sample_train_kl(t, batch, logp_old, mask),
        **mask_truncated(t, batch),
    }


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


def _episode_loss(t, mb: PPOBatch, *out) -> tuple[Tensor, dict]:
    return policy_only_loss(dataclasses.replace(loss_settings(t.section), loss_fn=t.algorithm.policy_loss), mb, *out)


# keyed by the estimator's name (rlft.algos.ADVANTAGE_ESTIMATORS): what the loop does around it
ADVANTAGE_STEPS = {"gae": AdvantageStep(gae_advantages, critic_loss),
                   "episode_returns": AdvantageStep(episode_return_advantages, _episode_loss)}
