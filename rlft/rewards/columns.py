"""How a reward function says which dataset columns it reads.

A function declares them with ``@requires_columns("answer")`` or, when the
column name comes from its configured kwargs, ``@requires_columns(lambda kw:
[kw.get("column", "answer")])``; both set a ``required_columns`` attribute, which a
plain function may also set itself (a list of names, or a callable taking the
configured kwargs). rlft checks these against the data before a run folder is
created, so a missing column fails in seconds instead of at the first reward call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["requires_columns", "required_columns", "columns_read", "suite_columns"]


def requires_columns(*names: str | Callable[[Mapping[str, Any]], Any]) -> Callable[[Callable], Callable]:
    """Decorator: the dataset columns a reward function reads (names, or one callable of its kwargs)."""
    if len(names) == 1 and callable(names[0]):
        declared: Any = names[0]
    elif all(isinstance(n, str) for n in names):
        declared = tuple(names)
    else:
        raise TypeError("requires_columns takes column names, or one callable of the configured kwargs")

    def mark(fn: Callable) -> Callable:
        fn.required_columns = declared  # type: ignore[attr-defined]
        return fn

    return mark


def required_columns(fn: Callable[..., Any], kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """Column names ``fn`` declares it needs with these configured ``kwargs`` ([] when it declares none).

    Raises ``TypeError`` for a declaration that is not a list of strings (or a callable returning one).
    """
    declared = getattr(fn, "required_columns", None)
    if declared is None:
        return []
    if callable(declared):
        declared = declared(dict(kwargs or {}))
    if isinstance(declared, str):
        declared = [declared]
    names = list(declared or [])
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"required_columns of {getattr(fn, '__name__', fn)!r} must be column names, got {names!r}")
    return list(dict.fromkeys(names))


def columns_read(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> list[str]:
    """The dataset columns ``fn`` reads with these configured ``kwargs``: its declaration, less the names the kwargs
    set (a configured value is passed as is, not read from the data). ``TypeError`` as :func:`required_columns`."""
    return [c for c in required_columns(fn, kwargs) if c not in kwargs]


def suite_columns(suite) -> dict[str, list[str]]:
    """The columns each reward of a resolved suite reads (:func:`columns_read`), by reward name; a declaration that
    cannot be read is a RunError naming the reward (reported like a missing column)."""
    from rlft.errors import RunError

    needs: dict[str, list[str]] = {}
    for r in suite.rewards:
        try:
            needs[r.name] = columns_read(r.fn, r.kwargs)
        except Exception as exc:  # noqa: BLE001 - a user's declaration may raise anything
            raise RunError(f"reward {r.name!r}: cannot read its required_columns: {type(exc).__name__}: "
                           f"{exc}") from None
    return needs
