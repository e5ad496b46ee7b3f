"""The SFT trainers of RS-SFT and AWR on the tiny model: completion-only labels, the AWR weighted
loss against a hand computation from the full logits (the TRL names it overrides: test_trl_private.py)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from rlft.tiny import ensure_tiny_model

    path = ensure_tiny_model()
    return path, AutoTokenizer.from_pretrained(path)


def _model(path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _args(tmp_path):
    from trl import SFTConfig

    return SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=3, max_steps=1, use_cpu=True, bf16=False,
                     report_to="none", save_strategy="no", disable_tqdm=True, max_length=64)


ROWS = [
    {"prompt": "Repeat the letter z: ", "completion": "z z z", "weight": 2.0},
    {"prompt": "Write z many times: ", "completion": "zzzz q", "weight": 0.25},
    {"prompt": "Repeat the letter z: ", "completion": "a", "weight": 0.0},
]


def test_rs_sft_labels_cover_completion_tokens_only(tiny, tmp_path):
    from datasets import Dataset
    from trl import SFTTrainer

    path, tok = tiny
    rows = [{k: v for k, v in r.items() if k != "weight"} for r in ROWS]
    trainer = SFTTrainer(model=_model(path), args=_args(tmp_path), train_dataset=Dataset.from_list(rows),
                         processing_class=tok)
    ex = trainer.train_dataset[0]
    n_prompt = len(tok(rows[0]["prompt"])["input_ids"])
    labels = ex["labels"]
    assert all(x == -100 for x in labels[:n_prompt])
    assert labels[n_prompt:] == ex["input_ids"][n_prompt:]
    assert ex["input_ids"][-1] == tok.eos_token_id  # TRL appends EOS: the policy learns where to stop


def test_awr_loss_is_weighted_token_mean_nll(tiny, tmp_path):
    from datasets import Dataset

    from rlft.trainers.sft import AWRSFTTrainer

    path, tok = tiny
    trainer = AWRSFTTrainer(model=_model(path), args=_args(tmp_path), train_dataset=Dataset.from_list(ROWS),
                            processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    assert "weight" in batch and batch["weight"].shape == (3,)
    weights = batch["weight"].clone()
    labels = batch["labels"]
    model = trainer.model
    model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch)).item()
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    tgt = labels[:, 1:]
    mask = tgt != -100
    tok_logp = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
    expected = -(weights.unsqueeze(1) * tok_logp).sum() / mask.sum()
    assert loss == pytest.approx(expected.item(), rel=1e-4)
    assert sorted(weights.tolist()) == [0.0, 0.25, 2.0]  # every row's own weight, none renormalised


def test_awr_zero_weight_row_gives_no_gradient(tiny, tmp_path):
    from datasets import Dataset

    from rlft.trainers.sft import AWRSFTTrainer

    path, tok = tiny
    rows = [dict(ROWS[2])]  # weight 0
    trainer = AWRSFTTrainer(model=_model(path), args=_args(tmp_path), train_dataset=Dataset.from_list(rows),
                            processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    loss = trainer.compute_loss(trainer.model, dict(batch))
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert loss.item() == 0.0 and all(float(g.abs().sum()) == 0.0 for g in grads)

