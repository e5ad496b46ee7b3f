"""TRL's vLLM importance-sampling correction on GRPO, without its extra forward pass where none is needed.

With vLLM sampling, TRL weighs each token's loss by pi_learner / pi_vLLM (`vllm_importance_sampling_*`), and to
get pi_learner it runs the learner over every batch right after sampling (`old_per_token_logps`), one more forward
pass a step. When the loss's own forward pass runs on the weights the batch was sampled with (one optimizer step
per generation: TRL's `gradient_accumulation_steps % (steps_per_generation * num_iterations) == 0`, the case where
TRL itself drops `old_per_token_logps` without vLLM), that pass's detached log-probs are exactly pi_learner: the
ratio is computed there (`_ratio_from_loss_pass`, called from rlft's hook on the loss's log-prob pass) and TRL's
pass is skipped. Where an optimizer step falls between sampling and training, TRL computes the pass as before.
Measured on SmolLM2-135M (docs/benchmarks.md, "Sampling with vLLM"): the pass was a quarter of a bf16 step.

`importance_ratio` is TRL's formula (inline in its `_generate_and_score_completions`, no function to call).
"""

from __future__ import annotations

import contextlib
import math

import torch
from trl.trainer.utils import nanmax, nanmin

__all__ = ["GRPOImportanceFromLoss", "IS_METRICS", "importance_ratio"]

# TRL's names; from the loss's pass they are per micro-batch, so one without tokens is dropped with the other
# token metrics (rlft.trainers.grpo.TOKEN_METRICS)
IS_METRICS = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
              "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
              "sampling/importance_sampling_ratio/max")


def importance_ratio(old_BT: torch.Tensor, sampling_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str,
                     clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """TRL's vLLM importance-sampling ratio pi_learner / pi_vLLM (its `vllm_importance_sampling_mode`s and clips):
    per token (B, T) for the token_* modes, per completion (B, 1) for sequence_*; *_truncate clamps into
    [clip_min, clip_max], *_mask zeroes what falls outside. A token vLLM could not score (NaN) counts as ratio 1."""
    diff_BT = torch.nan_to_num((old_BT - sampling_BT) * mask_BT, nan=0.0)
    ratio = torch.exp(diff_BT.sum(dim=-1, keepdim=True) if mode.startswith("sequence") else diff_BT)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode in ("sequence_mask", "token_mask"):
        low = clip_min if clip_min is not None else -math.inf
        high = clip_max if clip_max is not None else math.inf
        return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}: token_truncate, token_mask, "
                     "sequence_truncate or sequence_mask")


class GRPOImportanceFromLoss:
    """Mixed into rlft's GRPOTrainer (rlft.trainers.grpo): `_ratio_pass_skipped` around TRL's generate-and-score,
    `_importance_correction` wherever the learner's log-probs of a sampled batch are at hand."""

    def _loss_pass_is_sampling_weights(self) -> bool:
        """The loss's forward pass sees the weights the batch was sampled with (TRL's own test for dropping
        `old_per_token_logps`): one optimizer step per generation."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every == 0

    def _ratio_from_loss(self) -> bool:
        """Training, vLLM sampling with TRL's correction, and the loss pass on the sampling weights."""
        return (self.model.training and self.use_vllm and self.vllm_importance_sampling_correction
                and self._loss_pass_is_sampling_weights())

    @contextlib.contextmanager
    def _ratio_pass_skipped(self):
        """TRL's correction off while it samples and scores (no learner pass, no ratio), on again after: the
        loss's pass supplies the ratio (`_ratio_from_loss_pass`)."""
        if not self._ratio_from_loss():
            yield
            return
        self.vllm_importance_sampling_correction = False
        try:
            yield
        finally:
            self.vllm_importance_sampling_correction = True

    def _ratio_from_loss_pass(self, inputs: dict, logps_BT: torch.Tensor) -> None:
        """A training batch vLLM sampled that has no ratio yet gets it from these log-probs (the loss's pass, run
        before TRL's loss reads `importance_sampling_ratio`)."""
        if ("importance_sampling_ratio" not in inputs and "sampling_per_token_logps" in inputs
                and self._ratio_from_loss()):
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            self._importance_correction(inputs, logps_BT.detach(), mask)

    def _importance_correction(self, batch: dict, old_BT: torch.Tensor, mask_BT: torch.Tensor) -> None:
        """TRL's importance-sampling ratio of `batch` against the learner's log-probs `old_BT`, and its sampling/*
        metrics, gathered over processes as TRL gathers them."""
        sampled, mode = batch["sampling_per_token_logps"], self.vllm_importance_sampling_mode
        ratio = importance_ratio(old_BT, sampled, mask_BT, mode, self.vllm_importance_sampling_clip_min,
                                 self.vllm_importance_sampling_clip_max)
        batch["importance_sampling_ratio"] = ratio
        mask = mask_BT.bool()
        delta = torch.abs(old_BT - sampled)
        delta = delta[mask & ~torch.isnan(delta)]
        zero = torch.tensor(0.0, device=old_BT.device)
        flat = ratio.flatten() if mode.startswith("sequence") else ratio[mask]
        gather, m = self.accelerator.gather, self._metrics["train"]
        m["sampling/sampling_logp_difference/mean"].append(
            gather(delta.mean() if delta.numel() else zero).mean().item())
        m["sampling/sampling_logp_difference/max"].append(gather(delta.max() if delta.numel() else zero).max().item())
        m["sampling/importance_sampling_ratio/min"].append(nanmin(gather(flat.min() if flat.numel() else zero)).item())
        m["sampling/importance_sampling_ratio/mean"].append(
            gather(flat.mean() if flat.numel() else zero).nanmean().item())
        m["sampling/importance_sampling_ratio/max"].append(nanmax(gather(flat.max() if flat.numel() else zero)).item())
