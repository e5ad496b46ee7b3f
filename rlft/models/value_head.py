"""PPO's critic: a scalar linear head on the policy's last hidden state (shared backbone).

LoRA (or full fine-tuning) trains the backbone for both the policy and the value loss; the head
itself is always trained in full, in float32, and saved next to the adapter as
``value_head.safetensors`` so that a plain PEFT load of the adapter is unaffected.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

VALUE_HEAD_FILE = "value_head.safetensors"


class PolicyWithValueHead(nn.Module):
    """``forward(input_ids, attention_mask, position_ids) -> (logits_BTV, values_BT)`` in one pass.

    One module holding both, so DDP all-reduces the head's gradients with the policy's.
    """

    def __init__(self, policy: nn.Module, hidden_size: int):
        super().__init__()
        self.policy = policy
        # zero init: every state starts at value 0, and the first value loss is the plain squared return
        self.value_head = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        out = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          output_hidden_states=True, use_cache=False)
        hidden_BTH = out.hidden_states[-1]  # after the final norm, what the LM head reads
        values_BT = self.value_head(hidden_BTH.float()).squeeze(-1)
        return out.logits, values_BT

    # what FSDP wrapping asks of a transformers model: shard each decoder layer, the embeddings and the head in
    # units of their own (so the policy generates on its own, outside this module's forward)
    @property
    def _no_split_modules(self):
        return getattr(self.policy, "_no_split_modules", None)

    def get_input_embeddings(self):
        return self.policy.get_input_embeddings()

    def get_output_embeddings(self):
        return self.policy.get_output_embeddings()

    def save_value_head(self, folder: str | Path, state: dict | None = None) -> Path:
        """The head's weights (`state`: as gathered from FSDP shards; by default the module's own)."""
        from safetensors.torch import save_file

        path = Path(folder) / VALUE_HEAD_FILE
        state = {k: v.detach().cpu().contiguous() for k, v in (state or self.value_head.state_dict()).items()}
        save_file(state, str(path))
        return path

    def load_value_head(self, folder: str | Path) -> None:
        from safetensors.torch import load_file

        path = Path(folder) / VALUE_HEAD_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no {VALUE_HEAD_FILE} in {folder}: not a PPO checkpoint")
        state = load_file(str(path))
        self.value_head.load_state_dict({k: v.to(self.value_head.weight.device) for k, v in state.items()})


def hidden_size_of(model: nn.Module) -> int:
    config = model.config
    size = getattr(config, "hidden_size", None) or getattr(config.get_text_config(), "hidden_size", None)
    if not size:
        raise ValueError(f"cannot find the hidden size of {type(model).__name__} for the value head")
    return int(size)
