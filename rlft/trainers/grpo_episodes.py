"""GRPO over multi-turn episodes (stage `grpo` with `env.name` set).

Why rlft writes it: TRL's GRPOTrainer gives one reward per rollout (its `environment_factory` calls
`get_reward` once at the end) and has no per-step rewards or per-turn masks. This trainer reuses rlft's
PPO loop (episodes from `rlft.rollout.episodes`, minibatches, clipped surrogate, checkpoints) with
GRPO's advantage instead of a critic: a group is `group_size` episodes of the same row and seed, each
episode's score is its discounted return sum_k episode_gamma^k r_k over turns, the group baseline
(`grpo.baseline_mode`) turns it into one advantage, and that advantage is spread over the episode's
action tokens (observations stay masked). The value head is not trained (vf_coef 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlft.algos import (
    ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LoopSchedule, discounted_returns, entropy_from_logits,
    episode_grpo_loop_schedule, group_advantages, masked_mean, ppo_loss,
)
from rlft.trainers.ppo import PPOBatch, RlftPPOTrainer

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


class RlftEpisodeGRPOTrainer(RlftPPOTrainer):
    """GRPO on `cfg.grpo` over episodes of `cfg.env`, on the PPO loop."""
    advantage_estimator = "episode_returns"
    policy_loss = "ppo"  # clipped at grpo.clip_range whatever grpo.loss_fn says: that key is TRL's (single-turn)

    def make_schedule(self, cfg: RlftConfig, num_rows: int) -> LoopSchedule:
        return episode_grpo_loop_schedule(cfg, num_rows)

    @property
    def initial_kl_coef(self) -> float:
        return self.cfg.grpo.kl_penalty_coef

    @property
    def kl_estimator(self) -> str:
        return "kl"  # the log-ratio, subtracted from the advantage

    def loss(self, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor, logits_BTV: Tensor) -> tuple[Tensor, dict]:
        # no critic and no entropy bonus: both terms weigh 0 (the value clip is then immaterial)
        return ppo_loss(logp_BT, mb.logp_old_BT, mb.advantages_BT, values_BT * mb.mask_BT, mb.values_old_BT,
                        mb.returns_BT, entropy_from_logits(logits_BTV), mb.mask_BT, clip_range=self.cfg.grpo.clip_range,
                        clip_range_value=0.2, vf_coef=0.0, ent_coef=0.0, policy_loss=self.policy_loss)

    def _rows_for_update(self, update: int) -> list[dict]:
        """This process's rows: batch_size / group_size distinct rows, each repeated group_size times
        (contiguous, so group i is rows [i*G, (i+1)*G)); a pure function of the update index."""
        G = self.cfg.grpo.group_size
        n = len(self.train_rows)
        per_update, local = self.schedule.batch_size // G, self.local_batch // G
        first = update * per_update + self.accelerator.process_index * local
        rows = []
        for e in range(first, first + local):
            epoch, i = divmod(e, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.train.seed + epoch))
            rows += [self.train_rows[int(perm[i])]] * G
        return rows

    @torch.no_grad()
    def rollout(self, update: int) -> PPOBatch:
        g = self.cfg.grpo
        rows = self._rows_for_update(update)
        batch = self._sampled(update, rows)
        episodes = batch.episodes
        reward_metrics = self._episode_metrics(episodes)
        mask = batch.mask_BT
        logp_old, values_old, _, logp_old_BTV, weights_BT = self._behaviour_logps(batch)
        K = max(1, max(ep.length for ep in episodes))
        turn_rewards_BK = torch.tensor([[t["reward"] for t in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
        returns_B = discounted_returns(turn_rewards_BK, g.episode_gamma)
        adv_BT, _ = ADVANTAGE_ESTIMATORS.get(self.advantage_estimator)(
            turn_rewards_BK=turn_rewards_BK.to(mask.device), mask_BT=mask, group_size=g.group_size,
            baseline_mode=g.baseline_mode, gamma=g.episode_gamma)
        adv_B = group_advantages(returns_B, g.group_size, g.baseline_mode)  # for the metrics
        kl_policy_ref = None
        if self.kl_ctl.value > 0 or self.ref_model is not None:
            ref = self._reference_logps(batch)
            if ref is not None:
                logp_ref, _, _, logp_ref_BTV = ref
                kl_BT = KL_ESTIMATORS.get(self.kl_estimator)(logp_old, logp_ref, logp_old_BTV, logp_ref_BTV)
                adv_BT = adv_BT - self.kl_ctl.value * kl_BT * mask  # GRPO's KL in the advantage
                kl_policy_ref = masked_mean(logp_old - logp_ref, mask)
        if weights_BT is not None:  # a stale batch: the sampler's gap to the learner as an importance weight
            adv_BT = adv_BT * weights_BT
        zeros = torch.zeros_like(logp_old)
        batch.rows, batch.logp_old_BT, batch.values_old_BT = rows, logp_old, zeros
        batch.advantages_BT, batch.returns_BT = adv_BT, zeros
        batch.metrics = {
            **reward_metrics,
            "kl_policy_ref": self._mean(kl_policy_ref) if kl_policy_ref is not None else None,
            "kl_coef": self.kl_ctl.value,
            "advantage_mean": self._mean(adv_B.mean()),
            "advantage_abs_mean": self._mean(adv_B.abs().mean()),
            "discounted_return_mean": self._mean(returns_B.mean()),
            "completion_length": self._mean(mask.sum(1).mean()),
            **self._sample_train_kl(batch, logp_old, mask),
        }
        return batch

    def optimize(self, batch: PPOBatch) -> dict:
        out = super().optimize(batch)
        for key in ("value_loss", "value_clipfrac"):  # no critic in GRPO
            out.pop(key, None)
        return out
