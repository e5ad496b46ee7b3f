"""PPO's critic: a scalar linear head on the policy's last hidden state (shared backbone), or on the last hidden
state of a critic model of its own (`ppo.value_model: separate`).

Shared: LoRA (or full fine-tuning) trains the backbone for both the policy and the value loss. Separate: the critic
is a second copy of the model with its own LoRA (or all its weights), trained by the value loss alone, and the
policy by the policy loss and entropy alone. The head itself is always trained in full, in float32, and saved next
to the adapter as ``value_head.safetensors`` (with a separate critic, its trained weights too, as ``critic.*``
keys) so that a plain PEFT load of the adapter is unaffected.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

VALUE_HEAD_FILE = "value_head.safetensors"
CRITIC_PREFIX = "critic."  # a separate critic's trained weights, in the value head's file


def _decoder(model: nn.Module) -> nn.Module:
    """The transformer body under a (PEFT-wrapped) causal LM: its last hidden state without the LM head's logits.
    LoRA layers sit inside it, so calling it runs the adapter."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder()


class PolicyWithValueHead(nn.Module):
    """``forward(input_ids, attention_mask, position_ids) -> (logits_BTV, values_BT)`` in one pass.

    One module holding both (and a separate critic), so DDP all-reduces the head's and the critic's gradients with
    the policy's. `critic`: None = the head reads the policy's last hidden state (shared backbone); a model = the
    head reads this model's last hidden state instead, and the value loss never reaches the policy.
    """

    def __init__(self, policy: nn.Module, hidden_size: int, critic: nn.Module | None = None):
        super().__init__()
        self.policy = policy
        self.critic = critic
        # zero init: every state starts at value 0, and the first value loss is the plain squared return
        self.value_head = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        if self.critic is None:
            out = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              output_hidden_states=True, use_cache=False)
            hidden_BTH = out.hidden_states[-1]  # after the final norm, what the LM head reads
        else:
            out = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=False)
            hidden_BTH = _decoder(self.critic)(input_ids=input_ids, attention_mask=attention_mask,
                                               position_ids=position_ids, use_cache=False).last_hidden_state
        values_BT = self.value_head(hidden_BTH.float()).squeeze(-1)
        return out.logits, values_BT

    def critic_parameters(self) -> list[nn.Parameter]:
        """The trainable parameters the value loss alone trains: the head's, and a separate critic's."""
        critic = [] if self.critic is None else [q for q in self.critic.parameters() if q.requires_grad]
        return [*self.value_head.parameters(), *critic]

    def policy_parameters(self) -> list[nn.Parameter]:
        """The trainable parameters outside the value head and a separate critic (the policy's: LoRA's, or all)."""
        critic = {id(q) for q in self.critic_parameters()}
        return [q for q in self.parameters() if q.requires_grad and id(q) not in critic]

    def _critic_state(self) -> dict:
        """A separate critic's trained weights (its LoRA's, or all of them), by name under CRITIC_PREFIX."""
        if self.critic is None:
            return {}
        return {CRITIC_PREFIX + n: q for n, q in self.critic.named_parameters() if q.requires_grad}

    # what FSDP wrapping asks of a transformers model: shard each decoder layer, the embeddings and the head in
    # units of their own (so the policy generates on its own, outside this module's forward)
    @property
    def _no_split_modules(self):
        return getattr(self.policy, "_no_split_modules", None)

    def get_input_embeddings(self):
        return self.policy.get_input_embeddings()

    def get_output_embeddings(self):
        return self.policy.get_output_embeddings()

    def save_parts(self, folder: str | Path, state: dict | None = None) -> None:
        """The policy (its PEFT adapter, or whole) and the value head into `folder`; `state`: the whole model's, as
        gathered from FSDP shards (by default the modules' own)."""
        if state is None:
            self.policy.save_pretrained(folder)
            self.save_value_head(folder)
            return
        self.policy.save_pretrained(folder, state_dict={k.removeprefix("policy."): v for k, v in state.items()
                                                        if k.startswith("policy.")})
        self.save_value_head(folder, {k.removeprefix("value_head."): v for k, v in state.items()
                                      if k.startswith("value_head.")})

    def load_parts(self, folder: str | Path) -> None:
        """A checkpoint's policy adapter (or full weights) and value head, into this model."""
        from rlft.models.weights import load_weights_into

        load_weights_into(self.policy, folder)
        self.load_value_head(folder)

    def save_value_head(self, folder: str | Path, state: dict | None = None) -> Path:
        """The head's weights (`state`: as gathered from FSDP shards; by default the module's own)."""
        from safetensors.torch import save_file

        path = Path(folder) / VALUE_HEAD_FILE
        state = {**(state or self.value_head.state_dict()), **self._critic_state()}
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(path))
        return path

    def load_value_head(self, folder: str | Path) -> None:
        from safetensors.torch import load_file

        path = Path(folder) / VALUE_HEAD_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no {VALUE_HEAD_FILE} in {folder}: not a PPO checkpoint")
        state = load_file(str(path))
        critic = {k.removeprefix(CRITIC_PREFIX): v for k, v in state.items() if k.startswith(CRITIC_PREFIX)}
        head = {k: v.to(self.value_head.weight.device) for k, v in state.items() if not k.startswith(CRITIC_PREFIX)}
        self.value_head.load_state_dict(head)
        want = {k.removeprefix(CRITIC_PREFIX) for k in self._critic_state()}
        if want != set(critic):  # a shared-backbone checkpoint into a separate critic, or the other way round
            raise ValueError(f"{path} holds {len(critic)} critic weights, this model's separate critic "
                             f"{len(want)}: ppo.value_model differs from the run that wrote it")
        if critic:
            params = dict(self.critic.named_parameters())
            with torch.no_grad():
                for name, value in critic.items():
                    params[name].copy_(value.to(params[name].device, params[name].dtype))


def hidden_size_of(model: nn.Module) -> int:
    config = model.config
    size = getattr(config, "hidden_size", None) or getattr(config.get_text_config(), "hidden_size", None)
    if not size:
        raise ValueError(f"cannot find the hidden size of {type(model).__name__} for the value head")
    return int(size)
