"""One update's episodes as the PPO loop's learner reads them (`PPOBatch`), a minibatch of them, and a model's
per-token log-probs over them (`token_logps`, and the KL reference's: `reference_logps`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from rlft.rollout import Rollouts, Scores


@dataclass
class PPOBatch:
    """One update's episodes on this process, laid out for the learner: B rows of a left-padded prompt (P
    tokens) and a completion (T tokens); L = P + T. Filled in two steps: sampling (ids, masks, the sampler's
    log-probs) and the update's rollout (rewards, the learner's log-probs and values, advantages)."""
    input_ids_BL: Tensor
    attention_mask_BL: Tensor
    position_ids_BL: Tensor                 # as generate() numbers positions
    prompt_len: int                         # P
    mask_BT: Tensor                         # 1 on action tokens: loss, GAE and metrics run over these
    logp_sampler_BT: Tensor                 # the sampler's log-probs of the drawn tokens
    rollouts: Rollouts | None = None        # single-turn: what rollout.sample drew
    episodes: list | None = None            # multi-turn: one rlft.rollout.episodes.Episode per row
    env_rewards_BT: Tensor | None = None    # multi-turn: step rewards on each turn's last action token
    logp_behaviour_BT: Tensor | None = None  # async: the sampler copy's log-probs (it drew with older weights)
    rows: list[dict] | None = None          # the data rows sampled from
    scores: Scores | None = None            # single-turn: the rewards of each completion
    logp_old_BT: Tensor | None = None       # the learner's log-probs before the update (the ratio's denominator)
    values_old_BT: Tensor | None = None     # its values, 0 off the mask
    advantages_BT: Tensor | None = None
    returns_BT: Tensor | None = None
    loss_mask_BT: Tensor | None = None      # mask_truncated: mask_BT less the truncated rows' tokens; None = mask_BT
    metrics: dict = field(default_factory=dict)  # the update's rollout metrics

    @property
    def train_mask_BT(self) -> Tensor:
        """The tokens the loss trains on: the action tokens, less those `mask_truncated` left out."""
        return self.mask_BT if self.loss_mask_BT is None else self.loss_mask_BT

    def select(self, idx: Tensor) -> PPOBatch:
        """The rows `idx` (a minibatch): every per-row tensor and list indexed; the update's own records
        (rollouts, scores, metrics) stay with the whole batch."""
        rows = idx.tolist()
        kept = {"prompt_len": self.prompt_len}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                kept[f.name] = value[idx]
            elif f.name in ("rows", "episodes") and value is not None:
                kept[f.name] = [value[i] for i in rows]
        return PPOBatch(**kept)


def token_logps(model, batch: PPOBatch, temperature: float, with_values: bool = True):
    """(logp_BT, values_BT, logits_BTV, logp_BTV) of the completion tokens (position t-1 predicts t) at the
    sampling temperature; `with_values`: a policy with a value head (else values_BT is None)."""
    ids, attn, pos = batch.input_ids_BL, batch.attention_mask_BL, batch.position_ids_BL
    P = batch.prompt_len
    if with_values:
        logits, values = model(input_ids=ids, attention_mask=attn, position_ids=pos)
        values_BT = values[:, P - 1:-1]
    else:
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).logits
        values_BT = None
    logits_BTV = logits[:, P - 1:-1].float() / temperature
    logp_BTV = torch.log_softmax(logits_BTV, dim=-1)
    logp_BT = logp_BTV.gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
    return logp_BT, values_BT, logits_BTV, logp_BTV


@torch.no_grad()
def reference_logps(policy, ref_model, batch: PPOBatch, temperature: float):
    """The KL reference's pass (token_logps without values): `ref_model`, else the adapter-disabled policy; None for
    full fine-tuning with no reference checkpoint (no KL penalty)."""
    if ref_model is not None:
        return token_logps(ref_model, batch, temperature, False)
    if hasattr(policy, "disable_adapter"):
        with policy.disable_adapter():
            return token_logps(policy, batch, temperature, False)
    return None
