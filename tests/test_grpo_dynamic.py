"""DAPO's dynamic sampling on single-turn GRPO (rlft/trainers/grpo_dynamic.py): the kept groups of several tries
stacked into one TRL batch (padding, row order, the gathered process-major layout), on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from collections import defaultdict
from types import SimpleNamespace

from rlft.trainers.grpo_dynamic import (
    GRPODynamicSampling, concat_outputs, keep_rows, process_major, reward_totals, sampling_metrics, take_rows,
)
from rlft.trainers.grpo_importance import GRPOImportanceFromLoss, importance_ratio

PAD = 9


def trl_batch(prompts: list[list[int]], completions: list[list[int]], adv: list[float]) -> dict:
    """A TRL-shaped batch: prompts left-padded, completions right-padded, per-token log-probs = token id / 10."""
    P, C = max(map(len, prompts)), max(map(len, completions))
    pid = torch.tensor([[PAD] * (P - len(p)) + p for p in prompts])
    pm = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    cid = torch.tensor([c + [PAD] * (C - len(c)) for c in completions])
    cm = torch.tensor([[1] * len(c) + [0] * (C - len(c)) for c in completions])
    return {"prompt_ids": pid, "prompt_mask": pm, "completion_ids": cid, "completion_mask": cm,
            "advantages": torch.tensor(adv), "num_items_in_batch": cm.sum(),
            "old_per_token_logps": cid.float() / 10 * cm}


def test_concat_pads_each_side_to_the_widest_try_and_take_rows_keeps_the_order():
    a = trl_batch([[1], [1]], [[5, 6, 7], [5]], [0.5, -0.5])
    b = trl_batch([[2, 3, 4], [2, 3, 4]], [[8], [8, 8]], [0.0, 0.0])
    both = concat_outputs([a, b], PAD)
    assert "num_items_in_batch" not in both  # a gathered count: recomputed on the kept rows
    assert both["prompt_ids"].tolist() == [[PAD, PAD, 1], [PAD, PAD, 1], [2, 3, 4], [2, 3, 4]]
    assert both["prompt_mask"].tolist() == [[0, 0, 1], [0, 0, 1], [1, 1, 1], [1, 1, 1]]
    assert both["completion_ids"].tolist() == [[5, 6, 7], [5, PAD, PAD], [8, PAD, PAD], [8, 8, PAD]]
    assert both["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert both["old_per_token_logps"].shape == (4, 3) and both["old_per_token_logps"][3].tolist() == \
        pytest.approx([0.8, 0.8, 0.0])
    assert both["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]
    kept = take_rows(both, [2, 3, 0])
    assert kept["completion_ids"].tolist() == [[8, PAD, PAD], [8, 8, PAD], [5, 6, 7]]
    assert kept["prompt_ids"][:, -1].tolist() == [4, 4, 1] and kept["advantages"].tolist() == [0.0, 0.0, 0.5]
    # the prompt and completion of each row still meet: the last real prompt token sits right before the completion
    for row in range(3):
        assert kept["prompt_mask"][row, -1] == 1 and kept["completion_mask"][row, 0] == 1


def test_concat_refuses_what_it_cannot_stack():
    a = trl_batch([[1]], [[5]], [0.0])
    with pytest.raises(NotImplementedError, match="pixel_values"):
        concat_outputs([{**a, "pixel_values": torch.zeros(1, 3)}, a], PAD)
    with pytest.raises(ValueError, match="differ in keys"):
        concat_outputs([a, {k: v for k, v in a.items() if k != "old_per_token_logps"}], PAD)


def test_keep_rows_per_process_first_groups_with_signal_in_sampling_order():
    # 2 processes x 2 groups of 2 per try; try 0: p0 (const, signal), p1 (const, const);
    # try 1: p0 (signal, signal), p1 (signal, const)
    signal = [[[False, True], [False, False]], [[True, True], [True, False]]]
    rows, kept = keep_rows(signal, want=2, group_size=2)
    assert rows[0] == [2, 3, 4, 5]  # p0's groups 1 (try 0) and 2 (try 1, its first group)
    assert rows[1] == [0, 1, 4, 5]  # p1 has one group with signal (try 1's first); its earliest constant one fills
    assert kept == [2, 1]


def test_process_major_matches_gathering_the_stacked_batches():
    # two tries gathered over 2 processes with 2 rows each: try t, process p, row i -> 100 t + 10 p + i
    tries = [torch.tensor([100 * t + 10 * p + i for p in range(2) for i in range(2)]) for t in range(2)]
    assert process_major(tries, 2).tolist() == [0, 1, 100, 101, 10, 11, 110, 111]
    assert process_major([[f"{t}{j}" for j in range(4)] for t in range(2)], 2) == \
        ["00", "01", "10", "11", "02", "03", "12", "13"]
    assert process_major(tries, 1).tolist() == [0, 1, 10, 11, 100, 101, 110, 111]


def test_reward_totals_and_sampling_metrics_on_the_kept_batch():
    rewards = torch.tensor([[1.0, 0.0], [0.0, float("nan")], [1.0, 1.0], [1.0, 1.0]])
    total, valid = reward_totals(rewards, torch.tensor([1.0, 0.5]))
    assert valid.tolist() == [True, False, True, True] and math.isnan(total[1]) and total[[0, 2, 3]].tolist() == \
        [1.0, 1.5, 1.5]
    m = sampling_metrics(torch.tensor([3, 5, 5, 2]), torch.tensor([False, True, True, False]), rewards,
                         torch.tensor([1.0, 0.5]), ["a", "b"], group_size=2, scale_rewards="group")
    assert m["completions/mean_length"] == 3.75 and m["completions/clipped_ratio"] == 0.5
    assert m["completions/mean_terminated_length"] == 2.5 and m["completions/max_terminated_length"] == 3
    assert m["rewards/a/mean"] == 0.75 and m["rewards/b/mean"] == pytest.approx(2 / 3)
    assert m["reward"] == pytest.approx((1.0 + 0.0 + 1.5 + 1.5) / 4)  # TRL's sum skips a failed reward
    assert m["frac_reward_zero_std"] == 0.5  # the second group (1.5, 1.5) is constant


def test_layout_refuses_groups_split_over_processes():
    """Each process refills and keeps whole groups of its own: grpo.batch_size must be divisible by the processes
    (checked by the layout, which the run computes before its folder)."""
    from rlft.config import load_config
    from rlft.errors import RunError
    from rlft.stages.grpo.layout import grpo_batch_layout

    def cfg(*overrides):
        return load_config("grpo", "cpu", [], ["grpo.group_size=4", "grpo.num_substeps=1",
                                               "grpo.dynamic_sampling=true", *overrides])[0]

    with pytest.raises(RunError, match=r"grpo.dynamic_sampling with 2 processes needs grpo.batch_size \(3\)"):
        grpo_batch_layout(cfg("grpo.batch_size=3"), num_processes=2)
    assert grpo_batch_layout(cfg("grpo.batch_size=4"), num_processes=2)["num_generations"] == 4
    assert grpo_batch_layout(cfg("grpo.batch_size=3"), num_processes=1)["num_generations"] == 4
    assert grpo_batch_layout(cfg("grpo.batch_size=3", "grpo.dynamic_sampling=false"), num_processes=2)


def test_importance_ratio_modes_on_worked_numbers():
    """TRL's four vLLM importance-sampling modes: learner - sampler log-probs 0, 0.5 and a masked token; a token
    the sampler could not score (NaN) counts as ratio 1."""
    old = torch.tensor([[0.0, -1.0, -2.0], [-1.0, -1.0, -1.0]])
    sampled = torch.tensor([[0.0, -1.5, -1.0], [-1.0, float("nan"), -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    e = math.exp(0.5)
    token = importance_ratio(old, sampled, mask, "token_truncate", None, 10.0)
    assert torch.allclose(token, torch.tensor([[1.0, e, 1.0], [1.0, 1.0, 1.0]]))
    capped = importance_ratio(old, sampled, mask, "token_truncate", None, 1.5)[0]
    assert torch.allclose(capped, torch.tensor([1.0, 1.5, 1.0]))
    masked = importance_ratio(old, sampled, mask, "token_mask", None, 1.5)[0]
    assert torch.allclose(masked, torch.tensor([1.0, 0.0, 1.0]))
    seq = importance_ratio(old, sampled, mask, "sequence_truncate", 0.5, 3.0)
    assert seq.shape == (2, 1) and torch.allclose(seq, torch.tensor([[e], [1.0]]))
    assert torch.equal(importance_ratio(old, sampled, mask, "sequence_mask", None, 1.5), torch.tensor([[0.0], [1.0]]))
    with pytest.raises(ValueError, match="token_truncate"):
        importance_ratio(old, sampled, mask, "tokens", None, 2.0)


class TriesTrainer(GRPODynamicSampling, GRPOImportanceFromLoss):
    """Just what the mixins read of rlft's GRPO trainer, one process, vLLM sampling. Each try samples 2 groups of
    2; try t's completion tokens are t+1; its rewards are constant except the groups listed in `signal[t]`. The
    learner's log-probs are -token/10, the sampler's 0.01 lower, the reference's -token/5: the ratio is e^0.01 per
    token. `steps_per_generation` 2 (with one accumulation step) puts an optimizer step between sampling and
    training: TRL then keeps the learner's log-probs of every try, as this fake does."""

    use_vllm = True
    vllm_importance_sampling_correction = True
    vllm_importance_sampling_mode = "token_truncate"
    vllm_importance_sampling_clip_min, vllm_importance_sampling_clip_max = None, 3.0
    reward_func_names, scale_rewards, num_iterations = ["r"], "group", 1

    def __init__(self, signal, beta=0.04, steps_per_generation=1):
        self.signal, self.beta, self.tries, self.passes = signal, beta, [], []
        self.cfg = SimpleNamespace(grpo=SimpleNamespace(group_size=2, dynamic_sampling_max_tries=len(signal)))
        self.accelerator = SimpleNamespace(num_processes=1, process_index=0, is_main_process=True,
                                           gather=lambda t: t.reshape(-1) if t.dim() == 0 else t)
        self.args = SimpleNamespace(seed=0, per_device_train_batch_size=4, gradient_checkpointing_kwargs=None,
                                    steps_per_generation=steps_per_generation, gradient_accumulation_steps=1)
        self.state = SimpleNamespace(global_step=0)
        self.model = SimpleNamespace(is_gradient_checkpointing=False, training=True)
        self.ref_model = SimpleNamespace(is_gradient_checkpointing=False)
        self.train_dataset = [{"prompt": f"p{i}"} for i in range(8)]
        self._tokenizer = SimpleNamespace(pad_token_id=PAD)
        self._metrics = {"train": defaultdict(list)}
        self.reward_weights = torch.tensor([1.0])

    def _trl_generate_and_score(self, inputs):
        t = len(self.tries)
        self.tries.append((self.vllm_importance_sampling_correction, self.beta))  # what TRL would see
        token = float(t + 1)
        cid = torch.full((4, 3), t + 1)
        rewards = torch.zeros(4, 1)
        for k in self.signal[t]:
            rewards[2 * k + 1] = 1.0
        self._rewards_per_func, self._batch_log = rewards, None
        self._completion_lengths, self._completion_truncated = [3] * 4, [False] * 4
        out = {"prompt_ids": torch.ones(4, 2, dtype=torch.long), "prompt_mask": torch.ones(4, 2, dtype=torch.long),
               "completion_ids": cid, "completion_mask": torch.ones(4, 3, dtype=torch.long),
               "advantages": torch.zeros(4), "sampling_per_token_logps": torch.full((4, 3), -token / 10 - 0.01)}
        if not self._loss_pass_is_sampling_weights():
            out["old_per_token_logps"] = -cid.float() / 10
        return out

    def _logps(self, model, out, use_ref):  # rlft's GRPOTrainer's: the reference model here
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        return self._get_per_token_logps_and_entropies(self.ref_model if use_ref else model, ids, None,
                                                       out["completion_ids"].size(1))[0]

    def _get_per_token_logps_and_entropies(self, model, ids, attention, width, batch_size=None):
        self.passes.append(("ref" if model is self.ref_model else "learner", ids[:, -width:].clone()))
        return -ids[:, -width:].float() / (5 if model is self.ref_model else 10), None


KEPT_TOKENS = torch.tensor([[2] * 3] * 2 + [[3] * 3] * 2)  # signal=[[], [0], [1]]: try 2's group 0, try 3's group 1


def _sampled(trainer):
    return trainer._dynamic_generate_and_score([{"prompt": "a"}] * 2 + [{"prompt": "b"}] * 2)


def _assert_ratio_logged_once(trainer, out):
    assert torch.allclose(out["importance_sampling_ratio"], torch.full((4, 3), math.exp(0.01)))
    m = trainer._metrics["train"]
    assert m["sampling/importance_sampling_ratio/mean"] == [pytest.approx(math.exp(0.01))]
    assert m["sampling/sampling_logp_difference/max"] == [pytest.approx(0.01, abs=1e-6)]


def test_reference_pass_runs_once_on_the_kept_rows_and_the_ratio_comes_from_the_loss_pass():
    """3 tries; try 2's group 0 and try 3's group 1 carry signal: TRL's importance-sampling and reference passes
    are off inside every try (and back on after); the reference runs once on the 4 kept rows; no learner pass runs
    before the loss, whose own log-probs give TRL's ratio exp(learner - sampler), logged once."""
    trainer = TriesTrainer(signal=[[], [0], [1]])
    out = _sampled(trainer)
    assert trainer.tries == [(False, 0.0)] * 3
    assert (trainer.vllm_importance_sampling_correction, trainer.beta) == (True, 0.04)
    assert [who for who, _ in trainer.passes] == ["ref"] and torch.equal(trainer.passes[0][1], KEPT_TOKENS)
    assert torch.allclose(out["ref_per_token_logps"], -KEPT_TOKENS.float() / 5)
    assert "old_per_token_logps" not in out and "importance_sampling_ratio" not in out
    assert trainer._metrics["train"]["dynamic/tries"] == [3.0]
    trainer._ratio_from_loss_pass(out, -KEPT_TOKENS.float() / 10)  # what the loss's forward pass hands over
    _assert_ratio_logged_once(trainer, out)
    trainer._ratio_from_loss_pass(out, -KEPT_TOKENS.float() / 10)  # a batch that has its ratio keeps it
    assert len(trainer._metrics["train"]["sampling/importance_sampling_ratio/mean"]) == 1


def test_with_a_step_between_sampling_and_training_the_ratio_uses_the_log_probs_trl_kept():
    trainer = TriesTrainer(signal=[[], [0], [1]], beta=0.0, steps_per_generation=2)
    out = _sampled(trainer)
    assert trainer.passes == [] and not trainer._ratio_from_loss()
    assert torch.allclose(out["old_per_token_logps"], -KEPT_TOKENS.float() / 10)
    _assert_ratio_logged_once(trainer, out)


def test_no_pass_without_vllm_or_beta_and_the_flags_come_back_after_a_failed_try():
    trainer = TriesTrainer(signal=[[0, 1]], beta=0.0)
    trainer.use_vllm = False
    out = _sampled(trainer)
    assert trainer.passes == [] and "old_per_token_logps" not in out and "importance_sampling_ratio" not in out
    trainer._ratio_from_loss_pass(out, -KEPT_TOKENS.float() / 10)
    assert "importance_sampling_ratio" not in out  # generate sampled: the learner is the sampler
    failing = TriesTrainer(signal=[[]])

    def boom(inputs):
        raise RuntimeError("engine died")

    failing._trl_generate_and_score = boom
    with pytest.raises(RuntimeError, match="engine died"):
        failing._dynamic_generate_and_score([{"prompt": "a"}] * 4)
    assert (failing.vllm_importance_sampling_correction, failing.beta) == (True, 0.04)


def test_trl_skips_its_ratio_pass_only_where_the_loss_pass_sees_the_sampling_weights():
    aligned, stepped = TriesTrainer(signal=[[]]), TriesTrainer(signal=[[]], steps_per_generation=2)
    with aligned._ratio_pass_skipped():
        assert aligned.vllm_importance_sampling_correction is False
    with stepped._ratio_pass_skipped():
        assert stepped.vllm_importance_sampling_correction is True
    aligned.model.training = False  # evaluation: TRL's own pass, as before
    with aligned._ratio_pass_skipped():
        assert aligned.vllm_importance_sampling_correction is True
    assert aligned.vllm_importance_sampling_correction and stepped.vllm_importance_sampling_correction
