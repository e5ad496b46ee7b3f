"""Typer 0.29+ coerces every command-line value through a pydantic TypeAdapter, and importing
pydantic plus building the adapters costs about 0.1 s per command: a third of `rlft validate-config`.
rlft's config commands take only strings and paths, which need no validation, so those are coerced
here by the same functions typer's adapters call (identical values and error messages), and every
other parameter gets typer's own adapter, built only when a value actually needs coercing.

Installed by `install()` only when typer has the internals this relies on; with any other typer
(older ones have no pydantic step at all) it does nothing and typer behaves exactly as shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin


def install() -> bool:
    """Route typer's parameter coercion through `runtime_param` below (once); False, with nothing
    changed, when this typer does not have the expected internals."""
    try:
        import typer.core as core
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_path
    except ImportError:
        return False
    if getattr(core.build_runtime_param, "rlft_plain", False):
        return True
    if getattr(core, "build_runtime_param", None) is not build_runtime_param \
            or not hasattr(core._TyperParameter, "get_runtime_param"):
        return False

    class Deferred(RuntimeParam):
        """Typer's own coercion for one parameter, built on the first value that needs it (a flag left
        at its default or an option not given never does)."""

        def __init__(self, descriptor: Any) -> None:
            object.__setattr__(self, "descriptor", descriptor)
            object.__setattr__(self, "real", None)
            super().__init__(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)

        def typer_param(self) -> Any:
            if self.real is None:
                object.__setattr__(self, "real", build_runtime_param(self.descriptor))
            return self.real

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            return self.typer_param()._coerce_value(value, param=param, ctx=ctx)

    class Plain(Deferred):
        """`str`, `Path` or a list of them: what typer's str adapter (`str(value)` of a string) and path
        adapter (`coerce_cli_path`, then `Path`) return, without building either."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            many = get_origin(self.annotation) is list
            items = (value if isinstance(value, (list, tuple)) else [value]) if many else [value]
            if not all(type(v) is str for v in items):  # noqa: E721 (a str subclass or bytes: typer's own rules)
                return super()._coerce_value(value, param, ctx)
            item_type = get_args(self.annotation)[0] if many else self.annotation
            if item_type is str:
                out = list(items)
            else:  # the checks and messages of typer's path adapter, given the text the user typed
                out = [Path(coerce_cli_path(v, self.parameter_info, path_type=None, param=param, ctx=ctx))
                       for v in items]
            return out if many else out[0]

    def runtime_param(descriptor: Any) -> Any:
        info, ann = descriptor.parameter_info, descriptor.annotation
        item = get_args(ann)[0] if get_origin(ann) is list and len(get_args(ann)) == 1 else ann
        plain_path = item is Path and info.path_type in (None, Path) and not info.allow_dash
        if descriptor.file_annotation is None and info.parser is None and (item is str or plain_path):
            return Plain(descriptor)
        return Deferred(descriptor)

    runtime_param.rlft_plain = True  # type: ignore[attr-defined]
    core.build_runtime_param = runtime_param
    return True
