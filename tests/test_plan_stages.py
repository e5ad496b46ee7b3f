"""`rlft plan` knows stages only through their specs: each stage's `memory` profile, or SFT on train.* for a
stage without one, and no stage name in rlft/plan."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rlft.config import load_config
from rlft.config.stages import SPECS, STAGES, StageSpec
from rlft.config.stagespec import DataLengths, MemoryProfile
from rlft.plan.advise import candidates
from rlft.plan.estimate import make_plan
from rlft.plan.model_shape import load_shape

PLAN = Path(__file__).resolve().parents[1] / "rlft" / "plan"


def test_plan_names_no_stage():
    found = [f"{path.name}: {m.group(0)}" for path in sorted(PLAN.glob("*.py"))
             for m in re.finditer(r"[\"'](%s)[\"']|stage (==|!=|in \()" % "|".join(STAGES), path.read_text())]
    assert found == []


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_profiles_its_memory_as_plain_data(stage):
    cfg, _, _ = load_config(stage, "cpu", [], ["model.name_or_path=tiny"])
    profile = SPECS[stage].memory(cfg, 1)
    assert isinstance(profile, MemoryProfile) and profile.train_rows >= 1 and profile.train_seq >= profile.scored
    assert (profile.sample_rows > 0) == SPECS[stage].samples
    for what, overrides in profile.levers:
        assert what and overrides and all(isinstance(k, str) and "." in k for k in overrides)


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_plans_the_datas_lengths_within_its_limits(stage):
    cfg, _, _ = load_config(stage, "cpu", [], ["model.name_or_path=tiny"])
    limits = SPECS[stage].memory(cfg, 1)
    # prompts of 5 and 9 tokens, answers of 3 and 4 (preference stages read them)
    short = SPECS[stage].memory(cfg, 1, DataLengths((5, 9), (3, 4)))
    assert short.train_seq == (9 + 4 if not SPECS[stage].samples else 9 + short.completion) < limits.train_seq
    assert short.prompt == (9 if SPECS[stage].samples else 0)
    # longer data than the limits is cut to them, as the run truncates it
    huge = SPECS[stage].memory(cfg, 1, DataLengths((10 ** 6, 10 ** 6), (10 ** 6, 10 ** 6)))
    assert (huge.train_seq, huge.prompt, huge.scored) == (limits.train_seq, limits.prompt, limits.scored)


def test_a_stage_without_a_memory_profile_plans_as_sft(monkeypatch):
    monkeypatch.setitem(SPECS, "toy", StageSpec(name="toy", section=None, runner="toy.runner:run"))
    dpo, _, _ = load_config("dpo", "cpu", [], ["model.name_or_path=tiny", "train.per_device_train_batch_size=4",
                                               "train.max_seq_length=64"])
    cfg = dataclasses.replace(dpo, stage="toy")
    plan = make_plan(cfg, load_shape("tiny"))
    assert plan.stage == "toy" and "batch: SFT micro-batches of 4 rows of 64 tokens" in plan.notes
    names = [t.name for t in plan.terms]
    assert "kv_cache" not in names and "vllm" not in names and "sampler_copy" not in names
    assert plan.term("reference").bytes == 0 and plan.term("reference").formula == "toy uses no reference here"
    assert "256 tokens" in plan.term("activations").formula  # 4 rows x 64 tokens
    levers = dict(candidates(cfg))
    accumulation = 2 * cfg.train.gradient_accumulation_steps
    assert levers["halve the micro-batch"] == {"train.per_device_train_batch_size": 2,
                                               "train.gradient_accumulation_steps": accumulation}
    assert levers["shorter sequences (train.max_seq_length)"] == {"train.max_seq_length": 32}
