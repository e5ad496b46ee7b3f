"""Turn a reward spec from the config into a callable.

A spec is one of:

* a built-in name, e.g. ``numeric_match``;
* ``package.module:function`` for code importable from the environment
  (the config's folder and the working directory are searched too);
* ``path/to/file.py:function`` for a standalone file, relative paths
  resolved against the config's folder first, then the working directory.

Errors are :class:`RewardResolveError` with messages written for the person
editing the YAML, because ``rlft validate-config`` shows them verbatim.

:func:`check_reward_spec` (what ``validate-config`` uses) never imports or runs
user code: it finds the file or module without importing it and reads its
source with :mod:`ast`, so checking a config cannot have side effects.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from rlft.rewards import builtin, llm_judge, math_answer
from rlft.rewards import reward_model as rm_reward

__all__ = [
    "BUILTIN_REWARDS",
    "RewardResolveError",
    "resolve_reward_fn",
    "check_reward_spec",
    "module_search_dir",
    "reward_short_name",
    "reward_columns",
    "check_reward_kwargs",
]

BUILTIN_REWARDS: dict[str, Callable[..., list[float]]] = {
    "regex_match": builtin.regex_match,
    "format_match": builtin.format_match,
    "exact_match": builtin.exact_match,
    "numeric_match": builtin.numeric_match,
    "json_valid": builtin.json_valid,
    "length_penalty": builtin.length_penalty,
    "overlong_penalty": builtin.overlong_penalty,
    "char_fraction": builtin.char_fraction,
    "math_answer": math_answer.math_answer,  # an optional extra: rlft[math]
    "llm_judge": llm_judge.llm_judge,  # an OpenAI-compatible chat endpoint (rlft/rewards/llm_judge.py)
    "reward_model": rm_reward.reward_model,  # a trained reward model (transformers, loaded on first call)
}

# built-ins whose configured kwargs validate-config checks: fn(kwargs, pending) -> [(kwargs key, problem)]
KWARGS_CHECKS = {"reward_model": rm_reward.check_kwargs}

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


def module_search_dir(spec: Any, config_dir: str | Path | None) -> Path | None:
    """The ``base_dir`` to resolve ``spec`` with: the config file's folder for ``module:function``
    specs; None for file paths, which the config loader already made relative to that file."""
    if not isinstance(spec, str) or config_dir is None or not _is_custom(spec.strip()):
        return None
    return None if _looks_like_file(spec.strip().rpartition(":")[0]) else Path(config_dir)


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
    import hashlib  # here: loading OpenSSL costs every validate-config a few ms; only reward files need it

    # unique per file so two 'rewards.py' in different folders never collide
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    try:
        module = import_file(path, f"_rlft_user_rewards_{stem}_{digest}", dirs)
    except NotAModule as exc:
        raise RewardResolveError(f"cannot load {path} as a Python module for reward {spec!r}") from exc
    except (Exception, SystemExit) as exc:  # sys.exit() at import must not end the run
        raise RewardResolveError(
            f"error while importing reward file {path} for {spec!r}: {_describe_exc(exc)}"
        ) from exc
    _FILE_CACHE[cache_key] = module
    return module, f"file {path}"


class NotAModule(ImportError):
    """A file importlib cannot load as a Python module at all."""


def import_file(path: Path, name: str, dirs: list[Path] = ()) -> ModuleType:
    """Import the Python file `path` as a new module `name`, with its folder and `dirs` importable while it
    runs; registered in sys.modules first (dataclasses and pickling inside the file look it up), removed again
    when the import fails. NotAModule when the file cannot be a module; the file's own exception otherwise."""
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise NotAModule(f"cannot load {path}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    # no __pycache__ beside the user's file: rlft leaves nothing in folders it did not make
    write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        with _extra_sys_path([path.parent, *dirs]):
            mod_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.dont_write_bytecode = write_bytecode
    return module


def _load_module(module_part: str, spec: str, base_dir: str | Path | None) -> tuple[ModuleType, str]:
    """Import a dotted module, with the config folder and cwd importable."""
    try:
        with _extra_sys_path(_search_dirs(base_dir)):
            module = importlib.import_module(module_part)
    except (Exception, SystemExit) as exc:  # sys.exit() at import must not end the run
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
    refer to reward files and modules next to them wherever the CLI is
    started from; it is searched before the working directory.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise RewardResolveError(f"reward 'fn' must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if _is_custom(spec):
        return _resolve_custom(spec, base_dir)
    return _resolve_builtin(spec)


def check_reward_spec(spec: str, base_dir: str | Path | None = None) -> str | None:
    """The error message for a bad spec, or None when it looks resolvable.

    Used by config validation, which collects problems instead of stopping
    at the first one. User files and modules are located and parsed, never
    imported: errors raised at import time show up when training starts.
    """
    try:
        if not isinstance(spec, str) or not spec.strip():
            raise RewardResolveError(f"reward 'fn' must be a non-empty string, got {spec!r}")
        spec = spec.strip()
        if not _is_custom(spec):
            _resolve_builtin(spec)
            return math_answer.missing_package() if spec == "math_answer" else None
        module_part, _, attr_path = spec.rpartition(":")
        module_part, attr_path = module_part.strip(), attr_path.strip()
        if not module_part or not attr_path:
            raise RewardResolveError(f"malformed reward spec {spec!r}; expected a built-in name or {_SPEC_FORMS}")
        if _looks_like_file(module_part):
            path = _find_file(module_part, spec, base_dir)
            _check_source(path, attr_path, spec, f"file {path}")
        else:
            _check_module_static(module_part, attr_path, spec, base_dir)
    except RewardResolveError as exc:
        return str(exc)
    return None


def _find_file(module_part: str, spec: str, base_dir: str | Path | None) -> Path:
    """The reward file a spec names, searched as :func:`_load_file` does."""
    raw = Path(module_part).expanduser()
    candidates = [raw] if raw.is_absolute() else [d / raw for d in _search_dirs(base_dir)]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        looked = ", ".join(str(c) for c in candidates)
        raise RewardResolveError(f"reward file not found for {spec!r}: {module_part} (looked in: {looked})")
    return path.resolve()


def _check_module_static(module_part: str, attr_path: str, spec: str, base_dir: str | Path | None) -> None:
    """Locate a dotted module without importing it (or its packages) and check its source."""
    loaded = sys.modules.get(module_part)
    if loaded is not None:  # already imported (rlft itself, the standard library): no code runs to look
        obj: Any = loaded
        for part in attr_path.split("."):
            if not hasattr(obj, part):
                raise RewardResolveError(f"module {module_part!r} has no function {attr_path!r} (reward {spec!r})")
            obj = getattr(obj, part)
        if not callable(obj):
            raise RewardResolveError(f"{attr_path!r} in module {module_part!r} is not callable "
                                     f"(it is a {type(obj).__name__}); reward {spec!r}")
        return
    parts = module_part.split(".")
    search = [str(d) for d in _search_dirs(base_dir)] + [p for p in sys.path if p]
    found = None
    for i, part in enumerate(parts):
        if i == 0:
            # a top-level lookup runs no module code; meta-path finders cover editable installs
            found = importlib.machinery.PathFinder.find_spec(part, search)
            if found is None:
                with _extra_sys_path(_search_dirs(base_dir)):
                    try:
                        found = importlib.util.find_spec(part)
                    except (ImportError, ValueError):
                        found = None
        else:
            locations = list(found.submodule_search_locations or []) if found is not None else []
            found = importlib.machinery.PathFinder.find_spec(part, locations) if locations else None
        if found is None:
            prefix = ".".join(parts[: i + 1])
            raise RewardResolveError(
                f"could not import module {module_part!r} for reward {spec!r}: no module named {prefix!r} "
                f"(searched the config's folder, the working directory and the Python path)"
            )
    origin = getattr(found, "origin", None)
    if origin and origin.endswith(".py") and Path(origin).is_file():
        _check_source(Path(origin), attr_path, spec, f"module {module_part!r}")
    # compiled or namespace modules: the function is checked when training imports it


# literal values that can never be a reward function
_NOT_CALLABLE = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp, ast.DictComp,
                 ast.SetComp)


def _top_level_names(tree: ast.Module) -> tuple[dict[str, list[ast.AST]], bool]:
    """Every binding of each name at module level (descending into if/try/with blocks) and whether
    the module binds names it cannot show (``from x import *`` or a module ``__getattr__``)."""
    bound: dict[str, list[ast.AST]] = {}
    opaque = False

    class _Names(dict):
        def __setitem__(self, key: str, value: ast.AST) -> None:
            bound.setdefault(key, []).append(value)

    names = _Names()

    def visit(body: list[ast.stmt]) -> None:
        nonlocal opaque
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
                opaque = opaque or node.name == "__getattr__"
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            names[leaf.id] = node.value if isinstance(target, ast.Name) else node
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names[node.target.id] = node.value if node.value is not None else node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        opaque = True
                    else:
                        names[alias.asname or alias.name.split(".")[0]] = node
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.With, ast.For, ast.While)):
                visit(node.body)

    visit(tree.body)
    return bound, opaque


def _check_source(path: Path, attr_path: str, spec: str, label: str) -> None:
    """Parse a reward module's source and check that it defines the function (first name of a dotted path)."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise RewardResolveError(f"cannot read reward source {path} for {spec!r}: {exc}") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise RewardResolveError(
            f"syntax error in {path} line {exc.lineno} for reward {spec!r}: {exc.msg}"
        ) from None
    except ValueError as exc:  # e.g. null bytes
        raise RewardResolveError(f"cannot parse {path} for reward {spec!r}: {exc}") from None
    names, opaque = _top_level_names(tree)
    head = attr_path.split(".")[0]
    nodes = names.get(head)
    if not nodes:
        if opaque:
            return
        available = sorted(n for n, v in names.items() if not n.startswith("_")
                           and any(isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) for x in v))
        close = difflib.get_close_matches(head, available, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        shown = ", ".join(available[:20]) + (", ..." if len(available) > 20 else "")
        listing = f" Functions defined there: {shown}." if available else ""
        raise RewardResolveError(f"{label} has no function {attr_path!r} (reward {spec!r}).{hint}{listing}")
    if "." not in attr_path and all(isinstance(node, _NOT_CALLABLE) for node in nodes):
        node = nodes[-1]
        kind = type(ast.literal_eval(node)).__name__ if isinstance(node, ast.Constant) else "literal value"
        raise RewardResolveError(f"{attr_path!r} in {label} is not callable (it is a {kind}); reward {spec!r}")


def check_reward_kwargs(spec: Any, kwargs: Any, pending: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """[(kwargs key, problem)] of a built-in's configured kwargs, read without importing torch (`pending`: folders
    an earlier pipeline stage will write)."""
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    check = KWARGS_CHECKS.get(spec.strip()) if isinstance(spec, str) else None
    if check is not None:
        return check(kwargs, pending)
    fn = BUILTIN_REWARDS.get(spec.strip()) if isinstance(spec, str) else None
    own = getattr(fn, "check_kwargs", None)  # a built-in that carries its own check (llm_judge): whole-kwargs problems
    return [("", msg) for msg in own(kwargs)] if own is not None else []


def reward_columns(spec: str, kwargs: dict[str, Any]) -> list[str]:
    """Dataset columns a reward reads, known without importing user code: `kwargs.column` / `kwargs.columns`,
    and for a built-in what it declares (`required_columns`, less the names its kwargs configure)."""
    from rlft.rewards.columns import columns_read

    cols: list[str] = []
    if isinstance(kwargs.get("column"), str):
        cols.append(kwargs["column"])
    if isinstance(kwargs.get("columns"), (list, tuple)):
        cols += [c for c in kwargs["columns"] if isinstance(c, str)]
    fn = BUILTIN_REWARDS.get(spec)
    if fn is not None:
        try:
            cols += columns_read(fn, kwargs)
        except TypeError:
            pass  # a broken declaration is reported when training resolves the reward
    return list(dict.fromkeys(cols))
