"""SIGINT/SIGTERM during a run: finish the current step, checkpoint, exit; a second Ctrl-C exits at once.

In the bottom layer (stdlib only), so the rewards' and envs' abort checks can hold `Interrupt.requested` itself:
a hung reward or env step never keeps Ctrl-C waiting, and no call climbs back up to the run that set it."""

from __future__ import annotations

import signal
import sys


class Interrupt:
    """The first signal is recorded (`signal`; the trainer's InterruptCallback ends the step with a checkpoint),
    a second one raises KeyboardInterrupt."""

    def __init__(self):
        self.signal: int | None = None
        self._old = {}

    def requested(self) -> bool:
        """Whether a stop was asked for (the first signal came)."""
        return self.signal is not None

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)

    def restore(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum, frame):
        if self.signal is not None:  # second signal: stop now
            self.restore()
            raise KeyboardInterrupt
        self.signal = signum
        name = signal.Signals(signum).name
        print(f"\n{name} received: finishing the current step and writing a checkpoint "
              f"(press Ctrl-C again to exit at once)", file=sys.stderr, flush=True)
