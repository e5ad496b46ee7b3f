"""`env.name` checked without running user code: what `validate-config` needs to say that an environment
named in YAML exists. A built-in (`toolsim`), `package.module:Class` or `path/to/file.py:Class` (relative
paths against the config's folder, then the working directory) is located and its source read with
:mod:`ast`, never imported (nor torch). `rlft.envs.registry` imports the class itself at train time.
"""

from __future__ import annotations

import ast
import difflib
import sys
from pathlib import Path
from typing import Any

from rlft.rewards import registry as _reg

__all__ = ["BUILTIN_ENVS", "EnvResolveError", "check_env_spec", "env_words", "split_env_spec"]

BUILTIN_ENVS = {"toolsim": "rlft.envs.toolsim:ToolSim"}
_FORMS = "'package.module:Class' or 'path/to/file.py:Class'"


class EnvResolveError(ValueError):
    """An `env.name` that cannot be turned into a class."""


def env_words(msg: str) -> str:
    """The reward registry's messages, reworded for an environment spec."""
    return (msg.replace("reward file", "env file").replace("for reward ", "for env ").replace("(reward ", "(env ")
            .replace("no function", "no class").replace("Functions defined there", "Names defined there"))


def _builtin(spec: str) -> str:
    if spec in BUILTIN_ENVS:
        return BUILTIN_ENVS[spec]
    close = difflib.get_close_matches(spec, list(BUILTIN_ENVS), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise EnvResolveError(f"unknown built-in env {spec!r}.{hint} Built-ins: {', '.join(sorted(BUILTIN_ENVS))}. "
                          f"Custom environments are written as {_FORMS}.")


def split_env_spec(spec: Any) -> tuple[str, str]:
    if not isinstance(spec, str) or not spec.strip():
        raise EnvResolveError(f"env.name must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if not _reg._is_custom(spec):
        spec = _builtin(spec)
    module_part, _, attr = spec.rpartition(":")
    if not module_part.strip() or not attr.strip():
        raise EnvResolveError(f"malformed env.name {spec!r}; expected a built-in name or {_FORMS}")
    return module_part.strip(), attr.strip()


def _classes_in(path: Path) -> tuple[list[str], set[str]]:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names, _ = _reg._top_level_names(tree)
    classes = sorted(n for n, nodes in names.items() if any(isinstance(x, ast.ClassDef) for x in nodes))
    return classes, set(names)


def check_env_spec(spec: Any, base_dir: str | Path | None = None) -> str | None:
    """The error message for a bad `env.name`, or None when it looks resolvable (no user code runs)."""
    try:
        module_part, attr = split_env_spec(spec)
        if _reg._looks_like_file(module_part):
            try:
                path = _reg._find_file(module_part, spec, base_dir)
            except _reg.RewardResolveError as exc:
                raise EnvResolveError(env_words(str(exc))) from None
            label = f"file {path}"
        else:
            loaded = sys.modules.get(module_part)
            if loaded is not None:
                if not isinstance(getattr(loaded, attr, None), type):
                    raise EnvResolveError(f"module {module_part!r} has no class {attr!r} (env {spec!r})")
                return None
            try:
                _reg._check_module_static(module_part, attr, spec, base_dir)
            except _reg.RewardResolveError as exc:
                raise EnvResolveError(env_words(str(exc))) from None
            return None  # the module's source was checked for the name above
        try:
            classes, names = _classes_in(path)
        except (SyntaxError, ValueError, OSError) as exc:
            raise EnvResolveError(f"cannot parse {path} for env {spec!r}: {exc}") from None
        if attr not in classes:
            if attr in names:
                raise EnvResolveError(f"{attr!r} in {label} is not a class (env {spec!r})")
            close = difflib.get_close_matches(attr, classes, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise EnvResolveError(f"{label} has no class {attr!r} (env {spec!r}).{hint} "
                                  f"Classes defined there: {', '.join(classes) or 'none'}.")
    except EnvResolveError as exc:
        return str(exc)
    return None
