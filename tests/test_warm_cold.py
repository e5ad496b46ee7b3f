"""The tests' warm start (tests/warm_cli.py: `rlft` forked from an interpreter that imported the libraries once) is
what the user's cold start is: a dozen fixed commands, each run both ways in a folder of its own, end with the same
exit code and the same stderr lines once what varies from run to run is written out (times, durations, the
folder, speeds). What a fork could hide (import-time output, teardown, the hash seed) shows here first."""

from __future__ import annotations

import difflib
import os
import re

import pytest

from conftest import ROOT, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not hasattr(os, "fork"), reason="no warm start without fork")]

GRPO = str(ROOT / "configs" / "examples" / "grpo_demo.yaml")
PPO = str(ROOT / "configs" / "examples" / "ppo_demo.yaml")
DPO = str(ROOT / "configs" / "examples" / "dpo_demo.yaml")
RS_SFT = str(ROOT / "configs" / "examples" / "rs_sft_demo.yaml")
FIXTURES = ROOT / "tests" / "fixtures"
TRAIN = ["train", "--hw", "cpu", "train.output_dir=run"]
FEW_EVAL = ["data.eval_prompts=2"]

COMMANDS = {  # name -> (exit code, rlft ARGS...), each run in a folder of its own
    "help": (0, ["--help"]),
    "validate-typo": (2, ["validate-config", "--stage", "grpo", "--hw", "cpu", "-c", GRPO, "trian.max_steps=2"]),
    "validate-bad-value": (2, ["validate-config", "--stage", "grpo", "--hw", "cpu", "-c", GRPO,
                               "train.learning_rate=-1", "grpo.group_size=0"]),
    "dry-run": (0, ["train", "--stage", "ppo", "--hw", "cpu", "-c", PPO, "--dry-run"]),
    "grpo": (0, [*TRAIN, "--stage", "grpo", "-c", GRPO, "train.max_steps=2", *FEW_EVAL]),
    "ppo": (0, [*TRAIN, "--stage", "ppo", "-c", PPO, "ppo.num_episodes=32", *FEW_EVAL]),
    "dpo": (0, [*TRAIN, "--stage", "dpo", "-c", DPO, "train.max_steps=2"]),
    "rs_sft": (0, [*TRAIN, "--stage", "rs_sft", "-c", RS_SFT, "data.max_samples=4", "rs_sft.rounds=1",
                   "train.num_train_epochs=1", "train.per_device_train_batch_size=8", *FEW_EVAL]),
    "bad-reward": (4, [*TRAIN, "--stage", "grpo", "-c", GRPO, "train.max_steps=2", *FEW_EVAL,
                       f"rewards=[{{fn: '{FIXTURES / 'raising_reward.py'}:boom'}}]"]),
    "interrupted": (130, [*TRAIN, "--stage", "grpo", "-c", GRPO, "train.max_steps=4", "train.save_steps=1", *FEW_EVAL,
                          f"rewards=[{{fn: '{FIXTURES / 'interrupting_reward.py'}:ctrl_c', kwargs: {{at: 2}}}}]"]),
    "resume-nothing": (2, [*TRAIN, "--stage", "grpo", "-c", GRPO, "--resume"]),
}


# what differs between two runs of one command, however started: (pattern, written as)
VARIES = [(re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?"), "<TIME>"),
          (re.compile(r"\b\d+:\d\d(:\d\d)?\b"), "<TIME>"),
          (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|min|h)\b"), "<DURATION>"),
          (re.compile(r"\b\d+(\.\d+)?\s?(examples|it|tokens|samples)/s\b"), "<SPEED>"),
          (re.compile(r"\s+"), " ")]  # table columns widen with the widest (time) cell
# lines about the machine rather than the run
MACHINE = ("the machine is busy",)


def normalised(text: str, folder) -> list[str]:
    """`text`'s lines with what varies from run to run written out, the run's folder as <DIR>."""
    out = []
    for line in text.replace(str(folder), "<DIR>").splitlines():
        if any(m in line for m in MACHINE):
            continue
        for pattern, written in VARIES:
            line = pattern.sub(written, line)
        out.append(line.strip())
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_warm_and_cold_starts_agree(name, tmp_path):
    code, args = COMMANDS[name]
    seen = {}
    for start in ("warm", "cold"):
        folder = tmp_path / start
        folder.mkdir()
        res = run_cli(*args, cwd=folder, start=start, timeout=300)
        assert res.returncode == code, f"{start} start: exit {res.returncode}\n{res.stderr[-3000:]}"
        seen[start] = normalised(res.stderr, folder), normalised(res.stdout, folder)
    (warm_err, warm_out), (cold_err, cold_out) = seen["warm"], seen["cold"]
    assert warm_err == cold_err, "stderr differs:\n" + "\n".join(difflib.unified_diff(warm_err, cold_err, "warm",
                                                                                     "cold", lineterm="", n=1))
    assert warm_out == cold_out, "stdout differs:\n" + "\n".join(difflib.unified_diff(warm_out, cold_out, "warm",
                                                                                     "cold", lineterm="", n=1))
