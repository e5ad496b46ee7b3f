"""Every example config trains: `validate-config` saying OK must mean the run starts. Each example runs two
optimizer steps on the tiny model (CPU), with the data its `Use:` line asks the user for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import read_jsonl, run_cli
from rlft.config import HARDWARE, STAGES, configs_dir

# the `rlft train` examples (pipeline files are run by `rlft pipeline`, tested with it)
EXAMPLES = sorted(p for p in (configs_dir() / "examples").glob("*.yaml") if "# Use: rlft train " in p.read_text())
PAIRS = "configs/examples/data/preference_demo.jsonl"
USE = re.compile(r"^# Use: rlft train --stage (\S+) --hw (\S+) -c (\S+)(.*)$", re.M)


def use_line(path: Path) -> tuple[str, str, list[str]]:
    m = USE.search(path.read_text())
    assert m, f"{path.name} has no `# Use: rlft train --stage ... --hw ... -c ...` line"
    return m[1], m[2], m[4].split()


def test_every_example_has_a_use_line():
    assert len(EXAMPLES) >= 5
    for path in EXAMPLES:
        stage, hw, _ = use_line(path)
        assert stage in STAGES and hw in HARDWARE


@pytest.mark.e2e
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_trains_two_steps(tmp_path, path):
    stage, _, extra = use_line(path)
    # the data the Use line asks for (my.jsonl, my_eval.jsonl) becomes the shipped preference demo pairs
    data = [re.sub(r"=\S+\.jsonl$", f"={PAIRS}", arg) for arg in extra if arg.startswith("data.")]
    out = tmp_path / "run"
    small = ["train.per_device_train_batch_size=2", "train.gradient_accumulation_steps=1", "train.max_seq_length=64",
             "train.logging_steps=1"]
    if stage == "grpo":
        small += ["grpo.batch_size=2", "grpo.group_size=2", "grpo.num_substeps=1", "grpo.ppo_epochs=1",
                  "grpo.max_tokens=8"]
    elif stage in ("dpo", "orpo"):
        small += [f"{stage}.max_length=64", f"{stage}.max_prompt_length=32"]
    elif stage == "rm":
        small += ["rm.max_length=64"]
    elif stage == "ppo":  # two updates of 4 episodes
        small += ["ppo.num_episodes=8", "ppo.batch_size=4", "ppo.mini_batch_size=2", "ppo.ppo_epochs=1",
                  "ppo.max_tokens=8"]
    else:  # rs_sft, awr: one round on 4 prompts
        small += [f"{stage}.rounds=1", f"{stage}.num_samples_per_prompt=2", f"{stage}.max_tokens=8",
                  "data.max_samples=4",
                  *(["rs_sft.reward_threshold=-1"] if stage == "rs_sft" else []),  # keep samples of an untrained model
                  "data.eval_prompts=2"]
    res = run_cli("train", "--stage", stage, "--hw", "cpu", "-c", path, f"train.output_dir={out}",
                  "model.name_or_path=tiny",
                  "train.max_steps=2", *small, *data)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if not any(k.startswith("eval_") for k in r)]
    if stage in ("grpo", "dpo", "orpo"):
        assert [r["step"] for r in rows] == [1, 2]
    else:
        assert rows and rows[-1]["step"] <= 2 * 4, [r["step"] for r in rows]
    assert (out / "health.jsonl").is_file()  # every stage writes it, empty when no rule fired
    assert (out / "final" / "README.md").is_file()
