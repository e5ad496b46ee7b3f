"""The one exception type for data problems.

A ``ValueError`` subclass so callers that validate configs can catch it with
other value problems, and so the CLI can print it without a traceback.
"""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """A dataset file or table that rlft cannot use, with a message naming where."""
