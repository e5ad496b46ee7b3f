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
        """Decorator: `name` -> the decorated object (registered again, the newer one replaces it)."""
        def deco(obj: T) -> T:
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
