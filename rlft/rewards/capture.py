"""What reward functions print, captured per call: `print` to stdout/stderr and `logging` records
from the thread running the function go to that call's buffer instead of the console, so the
report's reward-logs tab can show them per step and function (the GRPO service guide's "Reward
Logs"). Other threads write where they always did.

The standard library can only redirect sys.stdout for the whole process (`contextlib.redirect_stdout`),
which would swallow the trainer's own output while a reward runs in its worker thread; so rlft
routes by thread instead."""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

__all__ = ["capture_output"]

_sinks: dict[int, list[str]] = {}   # thread id -> where that thread's output goes while captured
_lock = threading.Lock()


class _ThreadRouter:
    """A text stream that sends a captured thread's writes to its sink and everything else on."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        sink = _sinks.get(threading.get_ident())
        if sink is None:
            return self._stream.write(text)
        sink.append(text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if threading.get_ident() not in _sinks:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer, ...
        return getattr(self._stream, name)


class _ThreadLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sink = _sinks.get(record.thread) if record.thread is not None else None
        if sink is not None and not record.name.startswith("rlft"):  # rlft's own messages stay on the console
            sink.append(f"[{record.levelname} {record.name}] {self.format(record)}\n")


_handler = _ThreadLogHandler()


def _install() -> None:
    with _lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, _ThreadRouter):
                setattr(sys, name, _ThreadRouter(stream))
        root = logging.getLogger()
        if _handler not in root.handlers:
            root.addHandler(_handler)


@contextmanager
def capture_output(sink: list[str]) -> Iterator[list[str]]:
    """While the block runs, this thread's prints and log records are appended to `sink`."""
    _install()
    ident = threading.get_ident()
    _sinks[ident] = sink
    try:
        yield sink
    finally:
        _sinks.pop(ident, None)
