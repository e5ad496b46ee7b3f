"""SFT trainers of the sampling stages: TRL's SFTTrainer as is for RS-SFT, and a weighted subclass for AWR.

RS-SFT trains on kept (prompt, completion) pairs with TRL's completion-only loss, which TRL turns on
by itself for prompt/completion datasets: prompt tokens get label -100. TRL appends EOS to text
completions, so the policy also learns to stop where a kept sample ended.

AWR needs one weight per sequence in the loss, which TRL has no option for. `AWRSFTTrainer` keeps a
`weight` column through TRL's dataset preparation, collates it next to TRL's batch and computes
the weighted NLL (rlft.algos.weighted_nll) from the per-token log-probs of TRL's fused LM head: the
same forward TRL's own loss uses, with the weight multiplied in. Weights are not renormalised per
batch; the loss is divided by the token count of the optimizer step, as TRL's unweighted loss is.

The TRL names overridden here are listed in rlft/trainers/trl_private.py, checked against the installed TRL.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import SFTTrainer

WEIGHT_COLUMN = "weight"


class WeightedCollator:
    """TRL's collator, plus a (B,) float tensor of the examples' `weight` values."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        weights = [float(e[WEIGHT_COLUMN]) for e in examples]
        batch = self.inner([{k: v for k, v in e.items() if k != WEIGHT_COLUMN} for e in examples])
        batch[WEIGHT_COLUMN] = torch.tensor(weights, dtype=torch.float32)
        return batch


class AWRSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss is −Σ_i w_i Σ_t log π(y_it) / (completion tokens), w_i from the `weight` column."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.padding_free or self.args.packing:
            raise ValueError("AWR weights are per sequence; packing / padding-free batches would mix them")
        self.data_collator = WeightedCollator(self.data_collator)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if WEIGHT_COLUMN not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, WEIGHT_COLUMN]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        from rlft.algos import weighted_nll

        mode = "train" if self.model.training else "eval"
        weights_B = inputs.pop(WEIGHT_COLUMN)
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        loss = weighted_nll(outputs.log_probs, outputs.label_mask, weights_B.to(outputs.log_probs.device),
                            num_items_in_batch)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as TRL: DDP averages the gradients across ranks
        with torch.no_grad():
            n = self.accelerator.gather_for_metrics(outputs.label_mask.sum()).sum()
            ent = self.accelerator.gather_for_metrics(outputs.entropy.detach().sum()).sum()
            nll = self.accelerator.gather_for_metrics((-outputs.log_probs.detach()).sum()).sum()
            self._metrics[mode]["entropy"].append((ent / n).item() if n > 0 else 0.0)
            self._metrics[mode]["nll"].append((nll / n).item() if n > 0 else 0.0)  # unweighted, for comparison
        return (loss, outputs) if return_outputs else loss
