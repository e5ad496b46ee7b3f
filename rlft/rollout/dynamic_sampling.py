"""DAPO's dynamic sampling on rlft's episode loop: sample groups until an update holds enough groups whose
episodes' returns differ (a constant group has no advantage whatever the baseline)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from rlft.algos import constant_group_mask, discounted_returns, pick_groups

if TYPE_CHECKING:
    from rlft.rollout.ppo_batch import PPOBatch

# `c` below is the rollout collector (rlft.rollout.collector.RolloutCollector, which imports this module)


def refill_rows(c, update: int, attempt: int) -> list[dict]:
    """This process's rows for sampling `attempt` (1, 2, ...) of an update beyond its first: as many groups as
    `rows_for_update`, of rows drawn from a permutation seeded by (train.seed, update, attempt, process), so a
    resumed run refills with the same rows."""
    G, n = c.algorithm.group_size, len(c.train_rows)
    local = c.local_batch // G
    rank = c.accelerator.process_index
    seed = c.cfg.train.seed + 1_000_003 * (update + 1) + 7_919 * attempt + 104_729 * rank
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return [c.train_rows[int(perm[k % n])] for k in range(local) for _ in range(G)]


def group_signal(episodes, group_size: int, gamma: float) -> list[bool]:
    """Per group of `group_size` episodes: whether their discounted returns differ."""
    K = max(1, max(ep.length for ep in episodes))
    turn_rewards_BK = torch.tensor([[t["reward"] for t in ep.turns] + [0.0] * (K - ep.length) for ep in episodes])
    return (~constant_group_mask(discounted_returns(turn_rewards_BK, gamma), group_size)).tolist()


def dynamic_batch(c, update: int, rows: list[dict]) -> tuple[PPOBatch, list[dict], dict]:
    """(batch, its rows, metrics): sample groups until this update holds its grpo.batch_size groups with signal, at
    most grpo.dynamic_sampling_max_tries samplings, then train on the first of them in sampling order (constant
    groups fill what is still missing, so every minibatch count stays as planned). The processes sample together
    (one more sampling while any of them is short), as a sharded policy needs."""
    g = c.section
    G, want = g.group_size, len(rows) // g.group_size
    episodes, sampled_rows, signal = [], [], []
    tries = 0
    while True:
        tries += 1
        episodes += c.sample_episodes(rows).episodes
        sampled_rows += rows
        signal += group_signal(episodes[-len(rows):], G, g.episode_gamma)
        short = sum(signal) < want
        if tries >= g.dynamic_sampling_max_tries or c.mean(float(short)) == 0:
            break
        rows = refill_rows(c, update, tries)
    keep, kept = pick_groups(signal, want)
    take = [k * G + j for k in keep for j in range(G)]
    batch = c.episodes_batch([episodes[i] for i in take], c.tokenizer)
    n = c.accelerator.num_processes
    kept_all, want_all = round(c.mean(float(kept)) * n), want * n
    if kept_all < want_all and not c.dynamic_said and c.accelerator.is_main_process:
        c.dynamic_said = True  # once a run: metrics.jsonl's dynamic/kept_groups has every step
        logging.getLogger("rlft").warning(
            "dynamic sampling: update %d has %d of its %d groups with signal after %d samplings "
            "(grpo.dynamic_sampling_max_tries); it trains on them, constant groups (no advantage) filling the "
            "rest; later shortfalls show in dynamic/kept_groups", update + 1, kept_all, want_all, tries)
    metrics = {"dynamic/tries": float(tries), "dynamic/kept_groups": float(kept_all)}
    return batch, [sampled_rows[i] for i in take], metrics
