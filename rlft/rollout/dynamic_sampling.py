"""DAPO's dynamic sampling on rlft's episode loop: sample groups until an update holds enough groups whose
episodes' returns differ (a constant group has no advantage whatever the baseline)."""

from __future__ import annotations

import logging
from typing import Callable

import torch

from rlft.algos import constant_group_mask, discounted_returns, pick_groups

class DynamicSampling:
    """One run's dynamic sampling on this process: `train_rows` to refill from, `local_batch` rows an update (groups
    of `section.group_size`), `seed` (train.seed) and `processes` (rlft.rollout.processes.Processes: the processes
    sample together, as a sharded policy needs)."""

    def __init__(self, section, train_rows: list[dict], local_batch: int, seed: int, processes):
        self.section, self.train_rows, self.local_batch, self.seed = section, train_rows, local_batch, seed
        self.processes = processes
        self.said = False  # the shortfall warning, once a run

    def refill_rows(self, update: int, attempt: int) -> list[dict]:
        """This process's rows for sampling `attempt` (1, 2, ...) of an update beyond its first: as many groups as
        the update's, of rows drawn from a permutation seeded by (train.seed, update, attempt, process), so a
        resumed run refills with the same rows."""
        G, n = self.section.group_size, len(self.train_rows)
        local = self.local_batch // G
        rank = self.processes.accelerator.process_index
        seed = self.seed + 1_000_003 * (update + 1) + 7_919 * attempt + 104_729 * rank
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return [self.train_rows[int(perm[k % n])] for k in range(local) for _ in range(G)]

    def episodes(self, update: int, rows: list[dict], sample: Callable[[list[dict]], list]) -> tuple[list, list, dict]:
        """(episodes, their rows, metrics): `sample(rows) -> episodes` until this update holds its grpo.batch_size
        groups with signal, at most grpo.dynamic_sampling_max_tries samplings, then the first of them in sampling
        order (constant groups fill what is still missing, so every minibatch count stays as planned)."""
        g, mean = self.section, self.processes.mean
        G, want = g.group_size, len(rows) // g.group_size
        episodes, sampled_rows, signal = [], [], []
        tries = 0
        while True:
            tries += 1
            episodes += sample(rows)
            sampled_rows += rows
            signal += group_signal(episodes[-len(rows):], G, g.episode_gamma)
            short = sum(signal) < want
            if tries >= g.dynamic_sampling_max_tries or mean(float(short)) == 0:
                break
            rows = self.refill_rows(update, tries)
        keep, kept = pick_groups(signal, want)
        take = [k * G + j for k in keep for j in range(G)]
        n = self.processes.count
        kept_all, want_all = round(mean(float(kept)) * n), want * n
        if kept_all < want_all and not self.said and self.processes.accelerator.is_main_process:
            self.said = True  # once a run: metrics.jsonl's dynamic/kept_groups has every step
            logging.getLogger("rlft").warning(
                "dynamic sampling: update %d has %d of its %d groups with signal after %d samplings "
                "(grpo.dynamic_sampling_max_tries); it trains on them, constant groups (no advantage) filling the "
                "rest; later shortfalls show in dynamic/kept_groups", update + 1, kept_all, want_all, tries)
        metrics = {"dynamic/tries": float(tries), "dynamic/kept_groups": float(kept_all)}
        return [episodes[i] for i in take], [sampled_rows[i] for i in take], metrics


def group_signal(episodes, group_size: int, gamma: float) -> list[bool]:
    """Per group of `group_size` episodes: whether their discounted returns differ."""
    K = max(1, max(ep.length for ep in episodes))
    turn_rewards_BK = torch.tensor([[t["reward"] for t in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
    return (~constant_group_mask(discounted_returns(turn_rewards_BK, gamma), group_size)).tolist()
