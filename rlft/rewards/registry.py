"""Turn a reward spec from the config into a callable.

A spec is one of:

* a built-in name, e.g. ``numeric_match``;
* ``package.module:function`` for code importable from the environment
  (the config's folder and the working directory are searched too);
* ``path/to/file.py:function`` for a standalone file, relative paths
  resolved against the config's folder first, then the working directory.

Errors are :class:`RewardResolveError` with messages written for the person
editing the YAML, because ``rlft validate-config`` shows them verbatim.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from rlft.rewards import builtin

__all__ = [
    "BUILTIN_REWARDS",
    "RewardResolveError",
    "resolve_reward_fn",
    "check_reward_spec",
    "reward_short_name",
    "reward_columns",
]

BUILTIN_REWARDS: dict[str, Callable[..., list[float]]] = {
    "regex_match": builtin.regex_match,
    "format_match": builtin.format_match,
    "exact_match": builtin.exact_match,
    "numeric_match": builtin.numeric_match,
    "json_valid": builtin.json_valid,
    "length_penalty": builtin.length_penalty,
    "char_fraction": builtin.char_fraction,
}

# how custom specs look, repeated in errors so the fix is obvious
_SPEC_FORMS = "'package.module:function' or 'path/to/file.py:function'"

# loaded reward files keyed by (path, mtime_ns, size)
_FILE_CACHE: dict[tuple[str, int, int], ModuleType] = {}


class RewardResolveError(ValueError):
    """A reward spec that cannot be turned into a callable."""


def reward_short_name(spec: str) -> str:
    """Default display name for a spec: the function part, without dotted owners."""
    fn_part = spec.rsplit(":", 1)[-1] if _is_custom(spec) else spec
    return fn_part.rsplit(".", 1)[-1].strip() or spec


def _is_custom(spec: str) -> bool:
    """Custom specs carry ':function'; a Windows drive colon alone does not count."""
    head, sep, tail = spec.rpartition(":")
    return bool(sep) and not (len(head) == 1 and tail[:1] in ("\\", "/"))


def _looks_like_file(module_part: str) -> bool:
    """A module part naming a file rather than a dotted import path."""
    return module_part.endswith(".py") or "/" in module_part or os.sep in module_part


def _resolve_builtin(name: str) -> Callable[..., Any]:
    """Look up a built-in, suggesting the closest name on a typo."""
    if name in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[name]
    close = difflib.get_close_matches(name, list(BUILTIN_REWARDS), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise RewardResolveError(
        f"unknown built-in reward {name!r}.{hint} "
        f"Built-ins: {', '.join(sorted(BUILTIN_REWARDS))}. "
        f"Custom rewards are written as {_SPEC_FORMS}."
    )


def _search_dirs(base_dir: str | Path | None) -> list[Path]:
    """Folders relative specs are resolved against, in order, without repeats."""
    dirs: list[Path] = []
    for d in (base_dir, Path.cwd()):
        if d is not None and Path(d).resolve() not in dirs:
            dirs.append(Path(d).resolve())
    return dirs


@contextmanager
def _extra_sys_path(dirs: list[Path]) -> Iterator[None]:
    """Make the config folder and cwd importable while a user module loads.

    Console scripts do not put the working directory on ``sys.path``, so
    ``my_rewards:score`` would otherwise fail from the ``rlft`` command.
    """
    added = [str(d) for d in dirs if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)


def _describe_exc(exc: BaseException) -> str:
    """``Type: message`` for error texts."""
    return f"{type(exc).__name__}: {exc}"


def _load_file(module_part: str, spec: str, base_dir: str | Path | None) -> tuple[ModuleType, str]:
    """Import a reward file under a unique module name; return it and its label."""
    raw = Path(module_part).expanduser()
    dirs = _search_dirs(base_dir)
    candidates = [raw] if raw.is_absolute() else [d / raw for d in dirs]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        looked = ", ".join(str(c) for c in candidates)
        raise RewardResolveError(f"reward file not found for {spec!r}: {module_part} (looked in: {looked})")
    path = path.resolve()
    stat = path.stat()
    cache_key = (str(path), stat.st_mtime_ns, stat.st_size)
    if cache_key in _FILE_CACHE:
        # validate-then-train resolves twice; user files run once per version
        return _FILE_CACHE[cache_key], f"file {path}"
    # unique per file so two 'rewards.py' in different folders never collide
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    mod_name = f"_rlft_user_rewards_{stem}_{digest}"
    mod_spec = importlib.util.spec_from_file_location(mod_name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise RewardResolveError(f"cannot load {path} as a Python module for reward {spec!r}")
    module = importlib.util.module_from_spec(mod_spec)
    # registered first so dataclasses/pickling inside the file can find it
    sys.modules[mod_name] = module
    try:
        with _extra_sys_path([path.parent, *dirs]):
            mod_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise RewardResolveError(
            f"error while importing reward file {path} for {spec!r}: {_describe_exc(exc)}"
        ) from exc
    _FILE_CACHE[cache_key] = module
    return module, f"file {path}"


def _load_module(module_part: str, spec: str, base_dir: str | Path | None) -> tuple[ModuleType, str]:
    """Import a dotted module, with the config folder and cwd importable."""
    try:
        with _extra_sys_path(_search_dirs(base_dir)):
            module = importlib.import_module(module_part)
    except Exception as exc:
        raise RewardResolveError(
            f"could not import module {module_part!r} for reward {spec!r}: {_describe_exc(exc)}"
        ) from exc
    return module, f"module {module_part!r}"


def _public_callables(module: ModuleType) -> list[str]:
    """Names a user probably meant, for the missing-function message."""
    return sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and callable(obj) and getattr(obj, "__module__", None) == module.__name__
    )


def _resolve_custom(spec: str, base_dir: str | Path | None) -> Callable[..., Any]:
    """Resolve ``module:function`` or ``file.py:function`` (dotted attributes allowed)."""
    module_part, _, attr_path = spec.rpartition(":")
    module_part, attr_path = module_part.strip(), attr_path.strip()
    if not module_part or not attr_path:
        raise RewardResolveError(f"malformed reward spec {spec!r}; expected a built-in name or {_SPEC_FORMS}")
    if _looks_like_file(module_part):
        module, label = _load_file(module_part, spec, base_dir)
    else:
        module, label = _load_module(module_part, spec, base_dir)
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            available = _public_callables(module)
            close = difflib.get_close_matches(attr_path, available, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(available[:20]) + (", ..." if len(available) > 20 else "")
            listing = f" Callables defined there: {shown}." if available else ""
            raise RewardResolveError(f"{label} has no function {attr_path!r} (reward {spec!r}).{hint}{listing}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise RewardResolveError(
            f"{attr_path!r} in {label} is not callable (it is a {type(obj).__name__}); reward {spec!r}"
        )
    return obj


def resolve_reward_fn(spec: str, base_dir: str | Path | None = None) -> Callable[..., Any]:
    """Return the callable a reward spec names.

    ``base_dir`` is normally the folder of the config file, so configs can
    refer to reward files next to them wherever the CLI is started from.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise RewardResolveError(f"reward 'fn' must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if _is_custom(spec):
        return _resolve_custom(spec, base_dir)
    return _resolve_builtin(spec)


def check_reward_spec(spec: str, base_dir: str | Path | None = None) -> str | None:
    """The error message for a bad spec, or None when it resolves.

    Used by config validation, which collects problems instead of stopping
    at the first one.
    """
    try:
        resolve_reward_fn(spec, base_dir)
    except RewardResolveError as exc:
        return str(exc)
    return None


def reward_columns(spec: str, kwargs: dict[str, Any]) -> list[str]:
    """Dataset columns a reward reads, known before any data loads: `kwargs.column` / `kwargs.columns`,
    and for a built-in its default `column` (unless a fixed value such as char_fraction's `char` replaces it)."""
    import inspect

    cols: list[str] = []
    if isinstance(kwargs.get("column"), str):
        cols.append(kwargs["column"])
    if isinstance(kwargs.get("columns"), (list, tuple)):
        cols += [c for c in kwargs["columns"] if isinstance(c, str)]
    fn = BUILTIN_REWARDS.get(spec)
    if fn is not None and not cols:
        param = inspect.signature(fn).parameters.get("column")
        if param is not None and isinstance(param.default, str) and not (spec == "char_fraction" and kwargs.get("char")):
            cols.append(param.default)
    return cols
