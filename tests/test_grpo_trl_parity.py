"""rlft's GRPO hook with `group_mean_std` and no KL must give stock TRL's advantages on the same batch."""

import pytest
import torch

pytestmark = pytest.mark.e2e


def _cfg(*overrides):
    """The GRPO config the hooks read: no KL unless asked."""
    from rlft.config import load_config

    return load_config("grpo", "cpu", [], ["grpo.group_size=4", "grpo.kl_penalty_coef=0", "grpo.adaptive_kl=false",
                                           *overrides])[0]


def _trainer(cls, tmp_path, name, scale_rewards="group", **extra):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig
    from datasets import Dataset

    from rlft.rewards.builtin import char_fraction
    from rlft.data.demo import demo_prompts
    from rlft.tiny import ensure_tiny_model

    path = ensure_tiny_model()
    args = GRPOConfig(output_dir=str(tmp_path / name), use_cpu=True, bf16=False, per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=8, max_steps=1, report_to="none", beta=0.0,
                      scale_rewards=scale_rewards, seed=0)
    return cls(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=char_fraction, args=args,
               train_dataset=Dataset.from_list(demo_prompts(8)), processing_class=AutoTokenizer.from_pretrained(path),
               peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]), **extra)


def test_group_mean_std_matches_stock_trl(tmp_path):
    from trl import GRPOTrainer

    from rlft.data.demo import demo_prompts
    from rlft.trainers.grpo import RlftGRPOTrainer

    stock = _trainer(GRPOTrainer, tmp_path, "stock")
    ours = _trainer(RlftGRPOTrainer, tmp_path, "rlft", cfg=_cfg("grpo.baseline_mode=group_mean_std"))
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


def test_group_mean_batch_std_matches_stock_trl_batch_scaling(tmp_path):
    """LitePPO's baseline (`group_mean_batch_std`) is TRL's scale_rewards="batch"."""
    from trl import GRPOTrainer

    from rlft.data.demo import demo_prompts
    from rlft.trainers.grpo import RlftGRPOTrainer

    stock = _trainer(GRPOTrainer, tmp_path, "stock", scale_rewards="batch")
    ours = _trainer(RlftGRPOTrainer, tmp_path, "rlft", scale_rewards="batch",
                    cfg=_cfg("grpo.baseline_mode=group_mean_batch_std"))
    batch = [dict(r) for r in demo_prompts(2) for _ in range(4)]
    results = []
    for trainer in (stock, ours):
        trainer.model.train()
        torch.manual_seed(123)
        results.append(trainer._generate_and_score_completions([dict(b) for b in batch]))
    assert torch.equal(results[0]["completion_ids"], results[1]["completion_ids"])  # same batch
    assert results[0]["advantages"].abs().sum() > 0
    torch.testing.assert_close(results[1]["advantages"], results[0]["advantages"], rtol=0, atol=1e-6)


def test_on_policy_kl_penalty_in_the_loss_equals_eager_computation(tmp_path):
    """With the sampler equal to the policy, rlft folds the KL penalty into the advantages inside the loss's
    forward pass (no extra pass); over one micro-batch that must equal the eager formula exactly."""
    from rlft.algos import kl_penalty_advantages
    from rlft.data.demo import demo_prompts
    from rlft.trainers.grpo import RlftGRPOTrainer

    cfg = _cfg("grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage")
    trainer = _trainer(RlftGRPOTrainer, tmp_path, "kl", cfg=cfg)
    trainer.model.train()
    for name, p in trainer.model.named_parameters():  # move the adapter away from the reference
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions([dict(r) for r in demo_prompts(2) for _ in range(4)])
    assert "old_per_token_logps" not in out and "rlft_ref_logps" in out
    logp_sample = trainer._logps(trainer.model, out, use_ref=False)
    expected, metrics = kl_penalty_advantages(out["rlft_base_advantages"], logp_sample, out["rlft_ref_logps"],
                                              out["completion_mask"].float(), 0.05)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    trainer._compute_loss(trainer.model, out)
    assert out["advantages"].shape == expected.shape
    torch.testing.assert_close(out["advantages"], expected, rtol=0, atol=1e-6)
    assert metrics["kl_policy_ref"] != 0
    assert trainer._metrics["train"]["kl_policy_ref"][-1] == pytest.approx(metrics["kl_policy_ref"], abs=1e-6)
