import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RLFT_CACHE", str(ROOT / ".cache" / "rlft"))


FAULT_CLI = ROOT / "tests" / "fault_cli.py"


def cli_command(faults=None) -> list:
    """How a test starts `rlft`: as a user would, or with `faults` ({RLFT_FAULT_* variable: value}, set in
    the run's environment) through tests/fault_cli.py, which patches them in (rlft itself has no test hooks)."""
    return [sys.executable, str(FAULT_CLI)] if faults else [sys.executable, "-m", "rlft.cli"]


def run_cli(*args, cwd=ROOT, env=None, timeout=900, faults=None):
    """Run `rlft ARGS...` in a subprocess, as a user would (with `faults`: see cli_command)."""
    full_env = {**os.environ, **(env or {}), **(faults or {})}
    return subprocess.run([*cli_command(faults), *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


class RecordingConsole:
    """A stand-in for the run console that keeps each message (health-rule tests)."""

    def __init__(self):
        self.lines = []

    def alert(self, level):
        pass

    def message(self, text, style=None):
        self.lines.append(text)


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture
def cli():
    return run_cli


def interrupt_after_checkpoint(out, step, *args, timeout=300):
    """Run `rlft ARGS...`, send SIGTERM once `out`'s checkpoint-STEP is complete, and return its stderr; the run
    must exit 130 (interrupted, a resumable checkpoint written)."""
    import signal
    import time

    proc = subprocess.Popen([*cli_command(), *map(str, args)], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + timeout
    while not (Path(out) / "checkpoints" / f"checkpoint-{step}" / "rlft_complete").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its checkpoint"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 130, err[-2000:]
    return err
