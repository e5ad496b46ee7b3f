"""`rlft train ... 2>&1 | head`: console output to a closed pipe never stops training."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


def test_closed_stdout_and_stderr_pipe_never_stops_training(tmp_path):
    out = tmp_path / "run"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head`) is already gone: every write gets EPIPE
    proc = subprocess.Popen([sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO,
                             f"train.output_dir={out}", "train.max_steps=3", "train.save_steps=2"],
                            cwd=ROOT, env=os.environ.copy(), stdout=write_end, stderr=write_end)
    os.close(write_end)
    assert proc.wait(timeout=600) == 0
    assert (out / "final" / "adapter_config.json").is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
