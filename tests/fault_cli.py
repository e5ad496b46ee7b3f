"""`rlft` with faults injected, for end-to-end tests: `python tests/fault_cli.py ARGS...` runs `rlft ARGS...`
after patching in the faults its environment names (rlft itself reads none of these variables):

RLFT_FAULT_NAN_LOSS_AT_STEP=N          step N's metrics record has a NaN loss (once), as the health rules see it
RLFT_FAULT_SIGTERM_AFTER_PROMPTS=N     SIGTERM to the run once samples.jsonl holds the round's first N prompts
RLFT_FAULT_SLEEP_AT_STEP=STEP:SECONDS  training step STEP starts SECONDS late (a long step to interrupt)

Single-process runs only: processes `accelerate launch` starts run `rlft.cli` without these patches.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

NAN_LOSS_AT_STEP = "RLFT_FAULT_NAN_LOSS_AT_STEP"
SIGTERM_AFTER_PROMPTS = "RLFT_FAULT_SIGTERM_AFTER_PROMPTS"
SLEEP_AT_STEP = "RLFT_FAULT_SLEEP_AT_STEP"
FAULTS = (NAN_LOSS_AT_STEP, SIGTERM_AFTER_PROMPTS, SLEEP_AT_STEP)


def _wrap(cls, name: str, after):
    """Replace `cls.name` by the original followed by `after(self, result, *args)`; fails loudly if rlft renamed it."""
    original = getattr(cls, name)  # AttributeError: the fault's target moved; update this launcher

    def wrapped(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        after(self, result, *args, **kwargs)
        return result

    setattr(cls, name, wrapped)


def nan_loss_at_step(step: int) -> None:
    """The record MetricsWriter builds (after NaN -> null normalisation, before it is written and checked)."""
    from rlft.monitor.metrics import MetricsWriter

    pending = [step]

    def poison(self, result, record):
        if pending and record.get("step") == step:
            record["loss"] = float("nan")
            pending.clear()  # once: a rollback must be able to continue past it

    _wrap(MetricsWriter, "_carry_batch_metrics", poison)


def sigterm_after_prompts(n: int) -> None:
    """After the rows that complete the round's first n prompts are appended to samples.jsonl."""
    from rlft.stages.common.samples_log import SamplesLog

    pending = [n]

    def kill(self, result, rows):
        if pending and rows and max(r["prompt_id"] for r in rows) + 1 >= n:
            pending.clear()
            os.kill(os.getpid(), signal.SIGTERM)

    _wrap(SamplesLog, "append", kill)


def sleep_at_step(spec: str) -> None:
    """At the beginning of training step STEP (InterruptCallback is in every run's callbacks)."""
    from rlft.monitor.callbacks import InterruptCallback

    step, seconds = spec.split(":")

    def sleep(self, result, args, state, control, **kwargs):
        if state.global_step + 1 == int(step):
            time.sleep(float(seconds))

    _wrap(InterruptCallback, "on_step_begin", sleep)


def install(env=os.environ) -> list[str]:
    """Install the faults `env` names; returns their variables."""
    installers = {NAN_LOSS_AT_STEP: lambda v: nan_loss_at_step(int(v)),
                  SIGTERM_AFTER_PROMPTS: lambda v: sigterm_after_prompts(int(v)),
                  SLEEP_AT_STEP: sleep_at_step}
    names = [k for k in FAULTS if env.get(k)]
    for k in names:
        installers[k](env[k])
    return names


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, not tests/, as with `python -m rlft.cli`
    install()
    from rlft.cli import main

    sys.argv[0] = "rlft"
    sys.exit(main())
