"""Sampling ahead of the learner must not change GRPO's math: with zero lag the async path (sampler copy,
published weights, sampler log-probs as the importance-sampling denominator) trains exactly like TRL's
synchronous loop."""

import pytest
import torch

pytestmark = pytest.mark.e2e


def _run(tmp_path, name, lag=None, steps=3):
    """`steps` steps of RlftGRPOTrainer (lag None) or of AsyncGRPOTrainer with `grpo.async.max_steps_off_policy` lag,
    set on the validated config (0 is below what validation accepts)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from rlft.config import load_config
    from rlft.rewards.builtin import char_fraction
    from rlft.data.demo import demo_prompts
    from rlft.tiny import ensure_tiny_model
    from rlft.trainers.grpo import RlftGRPOTrainer
    from rlft.trainers.grpo_async import AsyncGRPOTrainer

    path = ensure_tiny_model()
    args = GRPOConfig(output_dir=str(tmp_path / name), use_cpu=True, bf16=False, per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=8, max_steps=steps, report_to="none", beta=0.0,
                      learning_rate=5e-3, logging_steps=1, save_strategy="no", seed=0, epsilon=1.0,
                      gradient_checkpointing=False,
                      epsilon_high=1e9)
    torch.manual_seed(0)
    kwargs = dict(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=char_fraction, args=args,
                  train_dataset=Dataset.from_list(demo_prompts(16)),
                  processing_class=AutoTokenizer.from_pretrained(path),
                  peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
                  cfg=load_config("grpo", "cpu", [], ["grpo.group_size=4", "grpo.baseline_mode=group_mean_std",
                                                      "grpo.kl_penalty_coef=0", "grpo.adaptive_kl=false",
                                                      "grpo.num_substeps=1", "grpo.loss_fn=importance_sampling"])[0])
    if lag is not None:
        kwargs["cfg"].grpo.async_.max_steps_off_policy = lag
    trainer = AsyncGRPOTrainer(**kwargs) if lag is not None else RlftGRPOTrainer(**kwargs)
    trainer.train()
    return trainer


def test_zero_lag_async_reproduces_synchronous_losses(tmp_path):
    sync = _run(tmp_path, "sync")
    lagged = _run(tmp_path, "async", lag=0)
    losses = lambda t: [h["loss"] for h in t.state.log_history if "loss" in h]  # noqa: E731
    rewards = lambda t: [h["reward"] for h in t.state.log_history if "reward" in h]  # noqa: E731
    assert len(losses(sync)) == 3
    assert losses(lagged) == losses(sync)          # exactly: same tokens, same ratios, same updates
    assert rewards(lagged) == rewards(sync)
    grad_norms = lambda t: [h["grad_norm"] for h in t.state.log_history if "grad_norm" in h]  # noqa: E731
    assert grad_norms(lagged) == grad_norms(sync) and min(grad_norms(sync)) > 0
    after = dict(sync.model.named_parameters())
    assert all(torch.equal(p, after[n]) for n, p in lagged.model.named_parameters())
    assert any(v != 0 for v in losses(sync))
    history = [h for h in lagged.state.log_history if "async/staleness_max" in h]
    assert [h["async/staleness_max"] for h in history] == [0.0, 0.0, 0.0]
    assert all(h["kl_sample_train_v2"] == 0.0 for h in history)  # the sampler's log-probs are the learner's


def test_chunks_older_than_the_limit_are_dropped_counted_and_resampled(tmp_path, monkeypatch):
    """The learner's own check: a sampler let to run 3 iterations ahead of a slow learner hands over batches up
    to 3 versions old; with max_steps_off_policy 1 those are dropped, counted and sampled afresh, and no trained
    batch is older than 1."""
    import time

    from transformers import TrainerCallback

    from rlft.trainers.grpo_async import AsyncGRPOTrainer

    made = AsyncGRPOTrainer._make_worker

    def loose_worker(self, start):
        worker = made(self, start)
        worker.max_steps_off_policy = 3  # admission looser than the learner's limit
        worker.out.maxsize = 4
        return worker

    class SlowLearner(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(1.0)  # the sampler (about 0.1 s a batch) fills its queue meanwhile

    monkeypatch.setattr(AsyncGRPOTrainer, "_make_worker", loose_worker)
    orig_init = AsyncGRPOTrainer.__init__

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        self.add_callback(SlowLearner())

    monkeypatch.setattr(AsyncGRPOTrainer, "__init__", init)
    trainer = _run(tmp_path, "drops", lag=1, steps=5)
    logged = [h for h in trainer.state.log_history if "async/staleness_max" in h]
    assert len(logged) == 5
    assert all(h["async/staleness_max"] <= 1 for h in logged)
    assert sum(h["async/dropped"] for h in logged) > 0
    assert trainer._dropped_rows == sum(h["async/dropped"] for h in logged)
    assert all("reward" in h for h in logged)  # dropped batches were sampled again and trained
