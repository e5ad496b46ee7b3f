"""Named pieces of one kind (advantage estimators, policy losses, KL estimators, GRPO baselines): a piece is
registered with `@REGISTRY.register("name")` in the module that defines it, and trainers look it up by name.

Each registry lives in the module that defines its built-in pieces, so a lookup never depends on import
order. The torch-free name lists that `validate-config` checks against are in rlft/config/names.py
(tests/test_registry_names.py holds each equal to its registry).
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind  # the words error messages use: "KL estimator", "policy loss", ...
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `name` -> the decorated object. A name taken by another piece is a ValueError naming both
        (as verl's registries do: a second piece never replaces the first silently); the same piece again, or
        the same function or class defined anew by a reload of its module, is no error (the newer one stays)."""
        def deco(obj: T) -> T:
            old = self._items.get(name, obj)
            if not (old is obj or _same_piece(old, obj)):
                raise ValueError(f"{self.kind} {name!r} is already registered by {_origin(old)}; {_origin(obj)} "
                                 f"cannot take the name too: register it under another name")
            self._items[name] = obj
            return obj

        return deco

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        close = difflib.get_close_matches(str(name), list(self._items), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {self.kind} {name!r}{hint}; allowed: {', '.join(self._items)}")


def _definition(obj: object) -> object:
    """The function or class behind a registered piece (a wrapper such as PolicyLoss keeps it in `fn`)."""
    return obj if hasattr(obj, "__qualname__") else getattr(obj, "fn", obj)


def _origin(obj: object) -> str:
    """Where a piece was defined, for error messages: `module.qualname` (or its repr)."""
    d = _definition(obj)
    module, qual = getattr(d, "__module__", None), getattr(d, "__qualname__", None)
    return f"{module}.{qual}" if module and qual else repr(obj)


def _same_piece(old: object, new: object) -> bool:
    """The same function or class defined again, by a reload of its module (same module and qualified name; a
    wrapper such as PolicyLoss compares the function it holds). Two lambdas are never the same piece."""
    a, b = _definition(old), _definition(new)
    qual = getattr(a, "__qualname__", None)
    same_module = getattr(a, "__module__", None) == getattr(b, "__module__", None)
    return isinstance(a, type) == isinstance(b, type) and bool(qual) and "<lambda>" not in qual \
        and qual == getattr(b, "__qualname__", None) and same_module
