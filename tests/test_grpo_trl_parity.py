"""rlft's GRPO hook with `group_mean_std` and no KL must give stock TRL's advantages on the same batch."""

import pytest
import torch

pytestmark = pytest.mark.e2e


def _trainer(cls, tmp_path, name, **extra):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig
    from datasets import Dataset

    from rlft.demo import char_fraction, demo_prompts
    from rlft.tiny import ensure_tiny_model

    path = ensure_tiny_model()
    args = GRPOConfig(output_dir=str(tmp_path / name), use_cpu=True, bf16=False, per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=8, max_steps=1, report_to="none", beta=0.0,
                      scale_rewards="group", seed=0)
    return cls(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=char_fraction, args=args,
               train_dataset=Dataset.from_list(demo_prompts(8)), processing_class=AutoTokenizer.from_pretrained(path),
               peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]), **extra)


def test_group_mean_std_matches_stock_trl(tmp_path):
    from trl import GRPOTrainer

    from rlft.demo import demo_prompts
    from rlft.trainers.grpo import GRPOHooks, RlftGRPOTrainer

    stock = _trainer(GRPOTrainer, tmp_path, "stock")
    ours = _trainer(RlftGRPOTrainer, tmp_path, "rlft", hooks=GRPOHooks(group_size=4, baseline_mode="group_mean_std"))
    rows = demo_prompts(2)
    batch = [dict(r) for r in rows for _ in range(4)]
    results = []
    for trainer in (stock, ours):
        trainer.model.train()
        torch.manual_seed(123)
        results.append(trainer._generate_and_score_completions([dict(b) for b in batch]))
    assert torch.equal(results[0]["completion_ids"], results[1]["completion_ids"])  # same batch
    assert results[0]["advantages"].abs().sum() > 0
    torch.testing.assert_close(results[1]["advantages"], results[0]["advantages"], rtol=0, atol=1e-6)
