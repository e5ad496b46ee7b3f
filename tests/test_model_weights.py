"""rlft.models.weights.load_weights_into: the one loader of a checkpoint's weights into a built model (resume,
health rollback, the next round of RS-SFT/AWR)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def _tiny():
    from transformers import AutoModelForCausalLM

    from rlft.tiny import ensure_tiny_model

    return AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model()))


def _trainable(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def test_a_saved_adapter_comes_back_into_the_peft_model(tmp_path):
    from rlft.models.weights import load_weights_into

    model = peft.get_peft_model(_tiny(), peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.5)
    saved = _trainable(model)
    model.save_pretrained(str(tmp_path))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.zero_()
    load_weights_into(model, tmp_path)
    after = _trainable(model)
    assert saved.keys() == after.keys() and all(torch.equal(saved[k], after[k]) for k in saved)


def test_full_weights_come_back_and_keys_the_file_lacks_keep_their_values(tmp_path):
    from safetensors.torch import save_file

    from rlft.models.weights import load_weights_into

    model = _tiny()
    name, param = next(iter(model.named_parameters()))
    wanted = torch.full_like(param, 0.25)
    save_file({name: wanted.contiguous()}, str(tmp_path / "model.safetensors"))
    others = {k: v.detach().clone() for k, v in model.named_parameters() if k != name}
    load_weights_into(model, tmp_path)
    params = dict(model.named_parameters())
    assert torch.equal(params[name].detach(), wanted)
    assert all(torch.equal(params[k].detach(), v) for k, v in others.items())
