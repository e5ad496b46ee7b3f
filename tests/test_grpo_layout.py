"""How rlft's grpo.batch_size / group_size / num_substeps become TRL's batch arguments."""

import pytest

from rlft.config import load_config
from rlft.errors import RunError
from rlft.stages.grpo.layout import grpo_batch_layout


def _cfg(*overrides):
    cfg, _, _ = load_config("grpo", "cpu", [], list(overrides))
    return cfg


def test_one_generation_split_into_substeps():
    cfg = _cfg("grpo.batch_size=16", "grpo.group_size=4", "grpo.num_substeps=4", "train.per_device_train_batch_size=8")
    lay = grpo_batch_layout(cfg, num_processes=1)
    # 64 completions, 16 per optimizer step, micro-batches of 8 -> accumulate 2, generate every 4 x 2 micro-steps
    assert lay == dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, steps_per_generation=8,
                       num_generations=4)


def test_micro_batch_shrinks_to_a_divisor():
    cfg = _cfg("grpo.batch_size=3", "grpo.group_size=4", "grpo.num_substeps=1", "train.per_device_train_batch_size=8")
    lay = grpo_batch_layout(cfg, num_processes=1)
    assert lay["per_device_train_batch_size"] * lay["gradient_accumulation_steps"] == 12
    assert lay["per_device_train_batch_size"] == 6


def test_processes_must_divide_substep():
    cfg = _cfg("grpo.batch_size=3", "grpo.group_size=3", "grpo.num_substeps=1")
    with pytest.raises(RunError, match="processes"):
        grpo_batch_layout(cfg, num_processes=2)
