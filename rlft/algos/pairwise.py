"""A reward model's pairwise numbers: how often the chosen answer outscores the rejected one, by how much, and the
Bradley-Terry loss -log sigmoid(r_chosen - r_rejected) TRL's RewardTrainer minimises."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pairwise_metrics(chosen_B: torch.Tensor, rejected_B: torch.Tensor) -> dict[str, float]:
    """{pairwise_accuracy, reward_margin, loss} over pairs (ties count as wrong, as in TRL)."""
    margin_B = chosen_B.float() - rejected_B.float()
    return {"pairwise_accuracy": (margin_B > 0).float().mean().item(),
            "reward_margin": margin_B.mean().item(),
            "loss": -F.logsigmoid(margin_B).mean().item()}
