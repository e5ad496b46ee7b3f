"""Group-relative advantages for GRPO-style training.

Rewards arrive flat, ordered group by group: ``rewards_PG[p * G + g]`` is the
reward of completion ``g`` for prompt ``p``. Every baseline here only ever
compares completions of the same prompt (except ``global_mean``), which is
what makes the advantage independent of how hard each prompt is.

Completions whose reward function failed are marked ``valid=False``. They are
left out of their group's baseline and get advantage 0, so one broken score
neither poisons its siblings nor pushes the policy anywhere.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

import torch
from torch import Tensor

from rlft.algos.registry import Registry

BaselineFn = Callable[[Tensor, int, Tensor], Tensor]

BASELINES: Registry[BaselineFn] = Registry("baseline")


def register_baseline(name: str) -> Callable[[BaselineFn], BaselineFn]:
    """Register ``fn(rewards_PG, group_size, valid_PG) -> adv_PG`` under ``name``.

    Inputs are flat; invalid rewards are already replaced by 0 and the result
    is masked to 0 at invalid positions afterwards, so a baseline need not
    care about NaNs.
    """
    return BASELINES.register(name)


def get_baseline(name: str | BaselineFn) -> BaselineFn:
    """Resolve a built-in baseline by name, or a user one as ``"pkg.module:function"``."""
    if callable(name):
        return name
    if name in BASELINES:
        return BASELINES.get(name)
    valid = ", ".join(sorted(BASELINES.names()))
    if ":" not in name:
        raise ValueError(
            f"unknown baseline {name!r}; valid names: {valid} "
            "(or a user function as 'package.module:function')"
        )
    module_name, _, attr = name.partition(":")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # console scripts leave the working directory off sys.path; validate-config looks there too
        sys.path.insert(0, cwd)
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"cannot import baseline {name!r} ({exc}); valid names: {valid} "
            "(or a user function as 'package.module:function')"
        ) from exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    if not callable(fn):
        raise ValueError(f"baseline {name!r} is not callable")
    return fn


def _check(rewards: Tensor, group_size: int, valid: Tensor | None) -> Tensor:
    """Validate shapes and return a bool ``valid`` mask (all True when omitted)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D, got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"number of rewards ({rewards.numel()}) must be a positive multiple "
            f"of group_size ({group_size})"
        )
    if valid is None:
        return torch.ones_like(rewards, dtype=torch.bool)
    if valid.shape != rewards.shape:
        raise ValueError(
            f"valid shape {tuple(valid.shape)} != rewards shape {tuple(rewards.shape)}"
        )
    return valid.to(device=rewards.device, dtype=torch.bool)


def _group_stats(rewards_PG: Tensor, group_size: int, valid_PG: Tensor):
    """Per-group (valid count, sum, mean) over valid members, each shaped (P, 1)."""
    r = rewards_PG.view(-1, group_size)  # (P, G)
    v = valid_PG.view(-1, group_size).to(r.dtype)
    n = v.sum(dim=1, keepdim=True)
    s = (r * v).sum(dim=1, keepdim=True)
    return n, s, s / n.clamp_min(1)


@register_baseline("group_mean")
def _group_mean(rewards_PG: Tensor, group_size: int, valid_PG: Tensor) -> Tensor:
    """r - mean(group): the plain GRPO / tinker-cookbook advantage."""
    if bool(valid_PG.all()):  # same ops as the reference implementations, bit for bit
        r = rewards_PG.view(-1, group_size)
        return (r - r.mean(dim=1, keepdim=True)).reshape(-1)
    _, _, mean = _group_stats(rewards_PG, group_size, valid_PG)
    return (rewards_PG.view(-1, group_size) - mean).reshape(-1)


@register_baseline("group_mean_std")
def _group_mean_std(
    rewards_PG: Tensor, group_size: int, valid_PG: Tensor, eps: float = 1e-4
) -> Tensor:
    """(r - mean) / (unbiased std + eps), TRL GRPOTrainer's ``scale_rewards="group"``."""
    r = rewards_PG.view(-1, group_size)
    if bool(valid_PG.all()) and group_size > 1:  # exactly TRL's computation
        return ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + eps)).reshape(-1)
    n, _, mean = _group_stats(rewards_PG, group_size, valid_PG)
    v = valid_PG.view(-1, group_size).to(r.dtype)
    var = (((r - mean) * v) ** 2).sum(dim=1, keepdim=True) / (n - 1).clamp_min(1)
    std = torch.where(n > 1, var.sqrt(), torch.zeros_like(var))  # lone member: numerator is 0 anyway
    return ((r - mean) / (std + eps)).reshape(-1)


@register_baseline("group_mean_batch_std")
def _group_mean_batch_std(
    rewards_PG: Tensor, group_size: int, valid_PG: Tensor, eps: float = 1e-4
) -> Tensor:
    """(r - mean(group)) / (unbiased std of the batch's valid rewards + eps): LitePPO's "group mean, batch std"
    (Liu et al. 2025), TRL GRPOTrainer's ``scale_rewards="batch"``; robust where a group's std is ~0."""
    v = valid_PG.to(rewards_PG.dtype)
    n = v.sum()
    mean = (rewards_PG * v).sum() / n.clamp_min(1)
    std = ((((rewards_PG - mean) * v) ** 2).sum() / (n - 1).clamp_min(1)).sqrt()
    return _group_mean(rewards_PG, group_size, valid_PG) / (std + eps)


@register_baseline("global_mean")
def _global_mean(rewards_PG: Tensor, group_size: int, valid_PG: Tensor) -> Tensor:
    """r - mean(all valid rewards): ignores prompt difficulty, kept for ablations."""
    v = valid_PG.to(rewards_PG.dtype)
    mean = (rewards_PG * v).sum() / v.sum().clamp_min(1)
    return rewards_PG - mean


@register_baseline("leave_one_out")
def _leave_one_out(rewards_PG: Tensor, group_size: int, valid_PG: Tensor) -> Tensor:
    """RLOO: r_i - mean of the other valid members, an unbiased baseline."""
    if group_size < 2:
        raise ValueError("leave_one_out needs group_size >= 2")
    n, s, _ = _group_stats(rewards_PG, group_size, valid_PG)
    r = rewards_PG.view(-1, group_size)
    adv = r - (s - r) / (n - 1).clamp_min(1)
    return torch.where(n >= 2, adv, torch.zeros_like(adv)).reshape(-1)


BASELINE_MODES: tuple[str, ...] = BASELINES.names()


def group_advantages(
    rewards: Tensor,
    group_size: int,
    baseline_mode: str | BaselineFn = "group_mean",
    *,
    valid: Tensor | None = None,
    eps: float = 1e-4,
) -> Tensor:
    """Advantages for flat, group-ordered ``rewards``; invalid entries get 0.

    ``baseline_mode`` is a name in ``BASELINE_MODES`` or ``"pkg.module:function"``.
    ``eps`` only affects ``group_mean_std`` and ``group_mean_batch_std``.
    """
    valid_PG = _check(rewards, group_size, valid)
    fn = get_baseline(baseline_mode)
    rewards_PG = torch.where(valid_PG, rewards, torch.zeros_like(rewards))  # NaNs never enter the math
    if fn is _group_mean_std or fn is _group_mean_batch_std:
        adv_PG = fn(rewards_PG, group_size, valid_PG, eps=eps)
    else:
        adv_PG = fn(rewards_PG, group_size, valid_PG)
    adv_PG = adv_PG.reshape(-1)
    return torch.where(valid_PG, adv_PG, torch.zeros_like(adv_PG))


def constant_group_mask(
    rewards: Tensor, group_size: int, *, valid: Tensor | None = None
) -> Tensor:
    """(P,) bool: True where a group's valid rewards are all exactly equal.

    Such groups have zero advantage everywhere and carry no learning signal;
    tinker-cookbook drops them with exact float equality, and so do we. A
    group with at most one valid member counts as constant.
    """
    valid_PG = _check(rewards, group_size, valid)
    v = valid_PG.view(-1, group_size)
    r = rewards.view(-1, group_size)
    hi = torch.where(v, r, torch.full_like(r, float("-inf"))).amax(dim=1)
    lo = torch.where(v, r, torch.full_like(r, float("inf"))).amin(dim=1)
    return (hi == lo) | (v.sum(dim=1) <= 1)


def expand_group_mask(mask_P: Tensor, group_size: int) -> Tensor:
    """Per-group mask (P,) -> per-completion mask (P*G,), in group order."""
    return mask_P.repeat_interleave(group_size)


def discounted_returns(rewards_BK: Tensor, gamma: float = 1.0) -> Tensor:
    """Episode returns sum_k gamma^k r_k over K turns (padding turns hold 0), shape (B,): the score a
    multi-turn GRPO group compares (`grpo.episode_gamma`, per turn, not per token)."""
    K = rewards_BK.shape[1]
    weights_K = gamma ** torch.arange(K, dtype=rewards_BK.dtype, device=rewards_BK.device)
    return (rewards_BK * weights_K).sum(dim=1)


def episode_group_advantages(turn_rewards_BK: Tensor, mask_BT: Tensor, group_size: int,
                             baseline_mode: str | BaselineFn = "group_mean", gamma: float = 1.0) -> Tensor:
    """Multi-turn GRPO: each episode's discounted return, a group advantage over consecutive groups of
    `group_size` episodes, spread over that episode's action tokens (mask 1); (B, T)."""
    adv_B = group_advantages(discounted_returns(turn_rewards_BK, gamma), group_size, baseline_mode)
    return adv_B.to(mask_BT.dtype).unsqueeze(1) * mask_BT
