"""How a run ends, as an exit code and the line that tells the user what to do next (rlft's exit codes: 0 done,
4 stopped by a health rule or by reward failures, 130 interrupted; a RunError carries its own)."""

from __future__ import annotations

import sys

from rlft.rundir.folder import RunDir, checkpoint_step
from rlft.errors import RunError

STOPPED = 4
INTERRUPTED = 130  # Ctrl-C's code for SIGTERM too: one "interrupted, resumable" code


def stopped(exc: Exception, resume_command: str) -> int:
    """A health rule (RunStopped) or the reward-failure guard stopped training; a checkpoint was written."""
    from rlft.monitor.health import RunStopped

    if isinstance(exc, RunStopped):
        print(f"rlft: stopped by health rule: {exc}. A checkpoint was written; after fixing the cause, "
              f"resume with: {resume_command}", file=sys.stderr)
    else:
        print(f"rlft: stopped: {exc} A checkpoint was written; fix the rewards and resume with: "
              f"{resume_command}", file=sys.stderr)
    return STOPPED


def interrupted(step: int, output_dir: str, resume_command: str, *, say: bool = True) -> int:
    """The first Ctrl-C or SIGTERM: the step finished and was checkpointed (`say`: this rank tells the user)."""
    if say:
        print(f"rlft: interrupted at step {step}; checkpoint written to {output_dir}. "
              f"Resume with: {resume_command}", file=sys.stderr)
    return INTERRUPTED


def interrupted_twice(run: RunDir, rank: int, resume_command: str) -> int:
    """A second Ctrl-C stopped at once: say which checkpoint is there to resume from."""
    good = run.complete_checkpoints() if rank == 0 else []
    if good:
        print(f"rlft: interrupted twice: stopped at once, without a new checkpoint. {good[-1]} "
              f"(step {checkpoint_step(good[-1])}) is still there; resume from it with: {resume_command}",
              file=sys.stderr)
    elif rank == 0:
        print(f"rlft: interrupted twice: stopped at once; no checkpoint had been written yet, so start "
              f"again (add --overwrite to replace {run.root})", file=sys.stderr)
    return INTERRUPTED


def failed(code: int | None) -> bool:
    from rlft.monitor.summary import status_for

    return status_for(code) == "failed"


def exit_of(exc_type, exc, exit_code: int | None) -> tuple[int | None, str | None]:
    """(exit code, error) summary.json records for a run that ends with `exc` (None: ran through, with the code
    `train` returned); None for a failure."""
    if isinstance(exc, RunError):  # a stage's own clear stop (bad data, nothing to train on)
        return exc.exit_code, str(exc)
    if exc_type is not None:
        return None, f"{exc_type.__name__}: {exc}"
    return exit_code, None
