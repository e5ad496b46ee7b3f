"""`rlft plan` against a real run: the planned peak of the GRPO demo (tiny model, CPU) within 25% of the peak
RSS of `rlft train` on the same config for 2 steps (scripts/bench_plan.py runs both)."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.e2e
def test_planned_peak_of_the_grpo_demo_is_within_25_percent_of_its_peak_rss():
    proc = subprocess.run([sys.executable, "scripts/bench_plan.py", "--stages", "grpo", "--steps", "2", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["stage"] == "grpo" and row["rss_gb"] > 0.2, row
    assert 0.75 <= row["ratio"] <= 1.25, row
