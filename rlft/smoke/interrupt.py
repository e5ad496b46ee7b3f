"""Stop each run of a smoke test at its first complete checkpoint, as Ctrl-C there would, so that the next
command resumes it from that checkpoint (`--resume`) the way a user's interrupted run is resumed.

The stop is a real SIGINT delivered to this process right after rlft marks the checkpoint complete (rlft's
own handler records it, as for a key press), and the step's trainer control is told to stop there, so the
run ends at that step every time instead of at whichever step the signal would happen to land in."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def run_key(root: Path) -> str:
    """How a run folder is named in the stops' record, whatever the working folder."""
    return str(Path(root).resolve())


@contextmanager
def stop_at_first_checkpoint() -> Iterator[dict[str, int]]:
    """Within the block, the first complete checkpoint of each run folder stops its run (exit 130, resumable);
    yields {run_key(run folder): the step it stopped at}."""
    from rlft.runtime.run_callbacks import CheckpointMarker

    original = CheckpointMarker.on_save
    stopped: dict[str, int] = {}

    def on_save(self, args, state, control, **kwargs):
        control = original(self, args, state, control, **kwargs) or control
        root = run_key(self.ctx.run.root)
        handler = signal.getsignal(signal.SIGINT)
        if root not in stopped and self.ctx.interrupt.signal is None and getattr(handler, "__self__", None) is \
                self.ctx.interrupt:  # only through rlft's own handler: anything else would end the process
            stopped[root] = state.global_step
            print(f"rlft smoke: checkpoint at step {state.global_step} is complete; stopping here as Ctrl-C would, "
                  f"then resuming from it", file=sys.stderr, flush=True)
            signal.raise_signal(signal.SIGINT)  # rlft's handler (installed with the run folder) records it
            control.should_training_stop = True
        return control

    CheckpointMarker.on_save = on_save
    try:
        yield stopped
    finally:
        CheckpointMarker.on_save = original
