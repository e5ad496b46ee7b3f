"""Progress of long work other than the training steps (evaluation, sampling rounds, episode collection, model
loading, `rlft plan` on large data, `export --merge`): one display for all of it.

    with progress.task("eval start", total=64, unit="samples") as p:
        p.advance(8)

On a terminal each task is a row of one Rich live display (shared with the training bar of
rlft.monitor.console, which hands its own live display over through `attach`, since Rich draws one live
display per console at a time); the row goes when the task ends, so nothing is left behind. Elsewhere
(CI logs, `nohup`, a pipe) a plain line on stderr at most every RLFT_PROGRESS_EVERY seconds (default 10),
the first one that long after the task starts, from a timer thread, so a generate call that takes minutes
still shows the run is alive:

    eval start: 24/64 samples, 41 s elapsed, ETA 68 s

A task that ends before its first line prints nothing (short work stays silent). Silent on ranks other than 0
of a multi-process run, in threads other than the main one (an async sampler's work is not the user's to
wait on), and with RLFT_QUIET=1 (the commands' --quiet sets it). Rich only: `rlft plan` stays torch-free."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from rlft import world

__all__ = ["EVERY_ENV", "QUIET_ENV", "Task", "attach", "detach", "enabled", "every", "every_problem", "phase",
           "plain_line", "task"]

QUIET_ENV = "RLFT_QUIET"
EVERY_ENV = "RLFT_PROGRESS_EVERY"
DEFAULT_EVERY = 10.0

_phases: list[str] = []        # labels of the work in progress around a task (pipeline stage, "eval start")
_lock = threading.RLock()
_live = None                   # the Rich Progress drawing the rows: attached (the training bar's) or our own
_own_live = False              # we started `_live` and stop it when our last row goes
_rows = 0


def quiet() -> bool:
    return os.environ.get(QUIET_ENV, "").strip().lower() not in ("", "0", "false", "no")


def every_problem() -> str | None:
    """What is wrong with RLFT_PROGRESS_EVERY (one line), or None."""
    raw = os.environ.get(EVERY_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400 or value != value:
        return (f"{EVERY_ENV}={raw!r} (environment): expected seconds between progress lines, a number from 0 to "
                f"86400 (default {DEFAULT_EVERY:g})")
    return None


def every() -> float:
    """Seconds between plain progress lines (RLFT_PROGRESS_EVERY; 0: a line at every advance)."""
    return DEFAULT_EVERY if every_problem() or not os.environ.get(EVERY_ENV, "").strip() else \
        float(os.environ[EVERY_ENV])


def enabled() -> bool:
    """Whether progress is shown here: not quiet, rank 0, the main thread."""
    return not quiet() and world.is_main() and threading.current_thread() is threading.main_thread()


_console = None


def _stderr_console():
    global _console
    if _console is None or _console.file is not sys.stderr:  # tests swap sys.stderr
        from rich.console import Console

        _console = Console(stderr=True)
    return _console


def terminal() -> bool:
    return _stderr_console().is_terminal


@contextmanager
def phase(label: str) -> Iterator[None]:
    """Name the work inside: tasks started within are labelled `outer · label · their own`."""
    _phases.append(label)
    try:
        yield
    finally:
        _phases.pop()


def attach(live_progress) -> None:
    """The training bar's Rich Progress, live now: tasks add their rows to it instead of starting a second live
    display (Rich draws one per console)."""
    global _live, _own_live
    with _lock:
        if _live is not None and _own_live:  # a row of ours is up: hand it over is not worth it; stop ours
            _live.stop()
        _live, _own_live = live_progress, False


def detach(live_progress) -> None:
    global _live
    with _lock:
        if _live is live_progress:
            _live = None


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    m, s = divmod(seconds, 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def plain_line(label: str, completed: float, total: float | None, unit: str, elapsed: float) -> str:
    """`eval start: 24/64 samples, 41 s elapsed, ETA 68 s` (no count or ETA for work of unknown size)."""
    parts = []
    if total:
        parts.append(f"{completed:g}/{total:g}{f' {unit}' if unit else ''}")
    elif completed:
        parts.append(f"{completed:g}{f' {unit}' if unit else ''}")
    parts.append(f"{_fmt_s(elapsed)} elapsed")
    if total and completed and completed < total:
        parts.append(f"ETA {_fmt_s(elapsed * (total - completed) / completed)}")
    return f"{label}: {', '.join(parts)}"


class Task:
    """One piece of long work; `advance(k)` or `update(completed=)` as it goes, `callback` for a
    `progress=(done, total)` parameter such as rlft.rollout.sample's."""

    def __init__(self, label: str, total: float | None = None, unit: str = "", show: bool = True):
        self.label = " · ".join([*_phases, label])
        self.total, self.unit, self.completed = total, unit, 0.0
        self.start = time.monotonic()
        self.show = show and enabled()
        self.live = self.show and terminal()
        self.every = every()
        self._last_line = self.start
        self._lines = 0
        self._row = None
        self._stop = threading.Event()
        self._thread = None
        if self.live:
            self._open_row()
        elif self.show and self.every > 0:
            self._thread = threading.Thread(target=self._tick, name="rlft-progress", daemon=True)
            self._thread.start()

    # -- what the caller reports --------------------------------------------------------------------------
    def advance(self, k: float = 1) -> None:
        self.update(completed=self.completed + k)

    def update(self, completed: float | None = None, total: float | None = None) -> None:
        if completed is not None:
            self.completed = completed
        if total is not None:
            self.total = total
        if self._row is not None:
            with _lock:
                if _live is not None:
                    _live.update(self._row, completed=self.completed, total=self.total, count=self._count_text())
        elif self.show and time.monotonic() - self._last_line >= self.every:
            self._print()

    def callback(self, offset: float = 0) -> Callable[[int, int], None]:
        """A `(done, total)` callable setting this task's count to offset + done."""
        return lambda done, total: self.update(completed=offset + done)

    # -- the displays --------------------------------------------------------------------------------------
    def _open_row(self) -> None:
        global _live, _own_live, _rows
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with _lock:
            if _live is None:
                _live = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                 console=_stderr_console(), transient=True)
                _live.start()
                _own_live = True
            fields = {"count": self._count_text(), "metrics": "", "alerts": ""}  # the training bar's fields too
            self._row = _live.add_task(self.label, total=self.total, completed=self.completed, **fields)
            self._host = _live
            _rows += 1

    def _count_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.completed:g}/{self.total:g}{unit}" if self.total else (f"{self.completed:g}{unit}"
                                                                            if self.completed else "")

    def _print(self) -> None:
        self._last_line = time.monotonic()
        self._lines += 1
        line = plain_line(self.label, self.completed, self.total, self.unit, self._last_line - self.start)
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed pipe or stream: progress is never worth a failure
            pass

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.every)):
            if time.monotonic() - self._last_line >= self.every:
                self._print()

    def close(self) -> None:
        global _live, _own_live, _rows
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._row is not None:
            with _lock:
                try:
                    self._host.remove_task(self._row)
                except KeyError:
                    pass
                _rows -= 1
                if _own_live and self._host is _live and _rows == 0:
                    _live.stop()
                    _live, _own_live = None, False
            self._row = None
        elif self._lines:  # plain lines were printed: say it ended, and in how long
            done = f"{self.completed:g}{f' {self.unit}' if self.unit else ''}, " if self.completed else ""
            try:
                sys.stderr.write(f"{self.label}: done, {done}{_fmt_s(time.monotonic() - self.start)}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass


@contextmanager
def task(label: str, total: float | None = None, unit: str = "", show: bool = True) -> Iterator[Task]:
    """A Task for the work inside; `total` None: work of unknown size (a spinner; plain lines say the time)."""
    t = Task(label, total, unit, show)
    try:
        yield t
    finally:
        t.close()
