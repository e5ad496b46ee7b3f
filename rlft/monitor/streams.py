"""Console output must never stop training: `rlft train ... | head` closes the pipe after ten lines,
and every later print would raise BrokenPipeError in the middle of a step. rlft's own wrapper (the
standard library has none) drops output once a stream fails and points its file descriptor at
/dev/null, so library prints, logging and the interpreter's final flush go nowhere quietly too."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

__all__ = ["protect_std_streams"]


class _SafeStream:
    """A text stream that never raises on write/flush; after the first failure it discards output."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.broken = False

    def _fail(self) -> None:
        self.broken = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            self._fail()
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError):
            self._fail()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer, ...
        return getattr(self._stream, name)


def protect_std_streams() -> None:
    """Wrap sys.stdout and sys.stderr (once) so a closed pipe or terminal never raises."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _SafeStream):
            setattr(sys, name, _SafeStream(stream))
