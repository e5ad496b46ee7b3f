"""Package names that load their module on first use (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any, Callable


def lazy_attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: name -> the attribute of `package.<where[name]>`, imported on
    first use and then kept on the package."""
    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
