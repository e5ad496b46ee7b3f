"""The policy's weights as a plain transformers checkpoint names them, LoRA merged in: what an inference engine
loads to sample the policy being trained. The adapter is added to a copy of each adapted weight (W + scale B A,
PEFT's own `get_delta_weight`), so the model itself is never touched (merge_adapter/unmerge_adapter would leave
rounding in the base weights after every sync)."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn


def _base_and_lora(model: nn.Module) -> tuple[nn.Module, dict[str, nn.Module]]:
    """(the transformers model under a PEFT wrapper, {module name: its unmerged LoRA layer})."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # no PEFT: nothing can be adapted
        return base, {}
    layers = {name: m for name, m in base.named_modules()
              if isinstance(m, LoraLayer) and not getattr(m, "merged", False) and not m.disable_adapters}
    return base, layers


def _plain_name(name: str) -> str | None:
    """A PEFT parameter name as the plain checkpoint spells it; None for the adapter's own tensors and the
    originals that `modules_to_save` replaced."""
    if ".lora_" in name or ".original_module." in name:
        return None
    return name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


@torch.no_grad()
def merged_weights(model: nn.Module, merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter of the policy's transformers model, adapters merged (detached; a merged
    weight is a new tensor, any other the parameter itself); merge=False: the base weights, adapters left out."""
    base, lora = _base_and_lora(model)
    lora = lora if merge else {}
    for name, param in base.named_parameters():
        plain = _plain_name(name)
        if plain is None:
            continue
        owner, _, leaf = name.rpartition(".")
        layer = lora.get(owner[: -len(".base_layer")]) if owner.endswith(".base_layer") and leaf == "weight" else None
        if layer is None:
            yield plain, param.detach()
            continue
        weight = param.detach()
        for adapter in layer.active_adapters:
            if adapter in getattr(layer, "lora_A", {}) or adapter in getattr(layer, "lora_embedding_A", {}):
                weight = weight + layer.get_delta_weight(adapter).to(weight.dtype)
        yield plain, weight


@torch.no_grad()
def weights_fingerprint(model: nn.Module) -> torch.Tensor:
    """A cheap summary of the weights that training changes (the trainable parameters; every parameter when none
    trains): one sum per tensor. Two equal fingerprints mean no update happened in between."""
    params = [p for p in model.parameters() if p.requires_grad] or list(model.parameters())
    return torch.stack([p.detach().float().sum() for p in params]).cpu()
