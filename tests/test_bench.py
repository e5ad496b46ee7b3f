"""The overhead benchmark reports the step-time ratio and the peak-RSS ratio of rlft's GRPO trainer over
stock TRL (each training in its own process)."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.e2e
def test_bench_reports_time_and_rss_ratios():
    proc = subprocess.run([sys.executable, "scripts/bench_grpo_overhead.py", "--rounds", "1", "--steps", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "ratio" in line]
    assert len(lines) == 2, proc.stdout
    for line in lines:
        m = re.search(r"time ratio (\d+\.\d+)\s+RSS ratio (\d+\.\d+)", line)
        assert m, line
        assert 0.3 < float(m[1]) < 3 and 0.8 < float(m[2]) < 1.25, line
