"""Turn `env.name` into an environment class, with the resolution and safety of reward functions.

`env.name` is a built-in (`toolsim`), `package.module:Class` or `path/to/file.py:Class` (relative paths
are resolved against the config's folder, then the working directory). The checks that run no user code
(what `validate-config` uses) live in :mod:`rlft.config.env_spec`; this module imports the class.

Built-ins are registered with `@register_env("name")` on the class, in the module that defines it (listed
at the end of this file); rlft/config/names.py `ENVS` and rlft.config.env_spec's `BUILTIN_ENVS` name the same
ones without importing them (tests/test_registry_names.py holds the three equal).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from rlft.algos.registry import Registry
from rlft.config.env_spec import BUILTIN_ENVS, EnvResolveError, check_env_spec, env_words, split_env_spec
from rlft.rewards import registry as _reg

__all__ = ["BUILTIN_ENVS", "ENVS", "EnvResolveError", "check_env_spec", "register_env", "resolve_env_class"]

ENVS: Registry[type] = Registry("env")


def register_env(name: str):
    """Class decorator: the environment `env.name: <name>` builds."""
    return ENVS.register(name)


def resolve_env_class(spec: str, base_dir: str | Path | None = None) -> type:
    """The registered class `spec` names, or the class it points at (user code runs here, at import)."""
    if isinstance(spec, str) and spec.strip() in ENVS:
        return ENVS.get(spec.strip())
    module_part, attr = split_env_spec(spec)
    try:
        if _reg._looks_like_file(module_part):
            module, label = _reg._load_file(module_part, spec, base_dir)
        else:
            module, label = _reg._load_module(module_part, spec, _reg.module_search_dir(spec, base_dir) or base_dir)
    except _reg.RewardResolveError as exc:
        raise EnvResolveError(env_words(str(exc))) from None
    obj = getattr(module, attr, None)
    if not isinstance(obj, type):
        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module.__name__)
        close = difflib.get_close_matches(attr, classes, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        what = "no class" if obj is None else f"{attr!r} that is a {type(obj).__name__}, not a class:"
        raise EnvResolveError(f"{label} has {what} {attr!r} (env {spec!r}).{hint} "
                              f"Classes defined there: {', '.join(classes) or 'none'}.")
    return obj

