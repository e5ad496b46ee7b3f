"""Misbehaving reward code through the CLI: it neither ends the run nor blocks Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
NO_EVAL = "data.eval_prompts=0"  # the fixture counts its calls: no eval.start / eval.end scoring in between
FIXTURE = "tests/fixtures/misbehaving_reward.py:misbehave"


@pytest.mark.parametrize("mode", ["exit", "keyboard"])
def test_reward_calling_sys_exit_or_raising_keyboard_interrupt_is_a_counted_failure(tmp_path, mode):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "train.max_steps=4", NO_EVAL,
                  f"rewards=[{{fn: char_fraction}}, {{fn: '{FIXTURE}', kwargs: {{mode: {mode}}}}}]",
                  "monitor.max_reward_failure_fraction=1.0")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "final" / "adapter_config.json").is_file()
    rows = read_jsonl(out / "metrics.jsonl")
    assert sum(r["rewards/misbehave/errors"] for r in rows) == 2 * 16  # calls 2 and 4, 16 completions each
    assert ("SystemExit" if mode == "exit" else "KeyboardInterrupt") in res.stderr


def test_hung_reward_times_out_and_training_goes_on(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "train.max_steps=3", NO_EVAL,
                  f"rewards=[{{fn: char_fraction}}, {{fn: '{FIXTURE}', timeout_s: 1, kwargs: {{mode: hang}}}}]",
                  "monitor.max_reward_failure_fraction=1.0")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["rewards/misbehave/errors"] for r in rows] == [0, 16, 0]
    assert "timeout_s=1" in res.stderr


def test_ctrl_c_checkpoints_within_seconds_while_a_reward_hangs(tmp_path):
    out, marker = tmp_path / "run", tmp_path / "hanging"
    cmd = [sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO,
           f"train.output_dir={out}", "train.max_steps=20", NO_EVAL,
           f"rewards=[{{fn: char_fraction}}, {{fn: '{FIXTURE}', timeout_s: 600, kwargs: {{mode: hang, every: 3, "
           f"marker: '{marker}'}}}}]"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=30)[1][-3000:]
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert waited < 20, waited
    checkpoints = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-3"], checkpoints
    assert (out / "checkpoints" / "checkpoint-3" / "rlft_complete").is_file()
