"""GRPO over multi-turn episodes (stage `grpo` with `env.name` set).

Why rlft writes it: TRL's GRPOTrainer gives one reward per rollout (its `environment_factory` calls
`get_reward` once at the end) and has no per-step rewards or per-turn masks. This trainer reuses rlft's
PPO loop (episodes from `rlft.rollout.episodes`, minibatches, checkpoints; grpo.loss_fn's loss) with
GRPO's advantage instead of a critic: a group is `group_size` episodes of the same row and seed, each
episode's score is its discounted return sum_k episode_gamma^k r_k over turns, the group baseline
(`grpo.baseline_mode`) turns it into one advantage, and that advantage is spread over the episode's
action tokens (observations stay masked). The value head is not trained (vf_coef 0).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlft.algos import (
    ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LoopSchedule, constant_group_mask, discounted_returns, entropy_from_logits,
    episode_grpo_loop_schedule, grpo_policy_loss, group_advantages, loss_settings, masked_mean, pick_groups,
)
from rlft.trainers.ppo import PPOBatch, RlftPPOTrainer

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


class RlftEpisodeGRPOTrainer(RlftPPOTrainer):
    """GRPO on `cfg.grpo` over episodes of `cfg.env`, on the PPO loop."""
    advantage_estimator = "episode_returns"

    @property
    def policy_loss(self) -> str:
        return self.cfg.grpo.loss_fn  # the same loss menu as single-turn GRPO (rlft.algos.loss_settings)

    def make_schedule(self, cfg: RlftConfig, num_rows: int) -> LoopSchedule:
        return episode_grpo_loop_schedule(cfg, num_rows)

    @property
    def initial_kl_coef(self) -> float:
        return self.cfg.grpo.kl_penalty_coef

    @property
    def kl_estimator(self) -> str:
        return "kl"  # the log-ratio, subtracted from the advantage

    def loss(self, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor, logits_BTV: Tensor) -> tuple[Tensor, dict]:
        # no critic and no entropy bonus: the policy loss alone, with grpo.*'s clip, ratio level and aggregation
        loss, m = grpo_policy_loss(loss_settings(self.cfg.grpo), logp_BT, mb.logp_old_BT, mb.advantages_BT, mb.mask_BT)
        with torch.no_grad():
            entropy = masked_mean(entropy_from_logits(logits_BTV), mb.mask_BT)
        metrics = {"policy_loss": float(loss.detach()), "entropy": float(entropy), **m}
        if values_BT is not None:  # the untrained value head stays in the graph (DDP wants every parameter used)
            loss = loss + 0.0 * (values_BT * mb.mask_BT).sum()
        return loss, metrics

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

    # --- dynamic sampling (DAPO) -----------------------------------------------------------------
    def _refill_rows(self, update: int, attempt: int) -> list[dict]:
        """This process's rows for sampling `attempt` (1, 2, ...) of an update beyond its first: as many groups
        as `_rows_for_update`, of rows drawn from a permutation seeded by (train.seed, update, attempt, process),
        so a resumed run refills with the same rows."""
        G, n = self.cfg.grpo.group_size, len(self.train_rows)
        local = self.local_batch // G
        rank = self.accelerator.process_index
        seed = self.cfg.train.seed + 1_000_003 * (update + 1) + 7_919 * attempt + 104_729 * rank
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return [self.train_rows[int(perm[k % n])] for k in range(local) for _ in range(G)]

    def _group_signal(self, episodes) -> list[bool]:
        """Per group of `group_size` episodes: whether their discounted returns differ (a constant group has no
        advantage whatever the baseline)."""
        g = self.cfg.grpo
        K = max(1, max(ep.length for ep in episodes))
        turn_rewards_BK = torch.tensor([[t["reward"] for t in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
        return (~constant_group_mask(discounted_returns(turn_rewards_BK, g.episode_gamma), g.group_size)).tolist()

    def _dynamic_batch(self, update: int, rows: list[dict]) -> tuple[PPOBatch, list[dict], dict]:
        """(batch, its rows, metrics): sample groups until this update holds its grpo.batch_size groups with
        signal, at most grpo.dynamic_sampling_max_tries samplings, then train on the first of them in sampling
        order (constant groups fill what is still missing, so every minibatch count stays as planned). The
        processes sample together (one more sampling while any of them is short), as a sharded policy needs."""
        g = self.cfg.grpo
        G, want = g.group_size, len(rows) // g.group_size
        episodes, sampled_rows, signal = [], [], []
        tries = 0
        while True:
            tries += 1
            episodes += self._sample_episodes(rows).episodes
            sampled_rows += rows
            signal += self._group_signal(episodes[-len(rows):])
            short = sum(signal) < want
            if tries >= g.dynamic_sampling_max_tries or self._mean(float(short)) == 0:
                break
            rows = self._refill_rows(update, tries)
        keep, kept = pick_groups(signal, want)
        take = [k * G + j for k in keep for j in range(G)]
        batch = self._episodes_batch([episodes[i] for i in take], self.processing_class)
        n = self.accelerator.num_processes
        kept_all, want_all = round(self._mean(float(kept)) * n), want * n
        if kept_all < want_all and not self._dynamic_said and self.accelerator.is_main_process:
            self._dynamic_said = True  # once a run: metrics.jsonl's dynamic/kept_groups has every step
            logging.getLogger("rlft").warning(
                "dynamic sampling: update %d has %d of its %d groups with signal after %d samplings "
                "(grpo.dynamic_sampling_max_tries); it trains on them, constant groups (no advantage) filling the "
                "rest; later shortfalls show in dynamic/kept_groups", update + 1, kept_all, want_all, tries)
        return batch, [sampled_rows[i] for i in take], {"dynamic/tries": float(tries),
                                                        "dynamic/kept_groups": float(kept_all)}

    _dynamic_said = False

    @torch.no_grad()
    def rollout(self, update: int) -> PPOBatch:
        g = self.cfg.grpo
        rows = self._rows_for_update(update)
        dynamic: dict = {}
        if g.dynamic_sampling:  # validation refuses it with grpo.async: every batch is sampled here, now
            batch, rows, dynamic = self._dynamic_batch(update, rows)
        else:
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
            **dynamic,
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
