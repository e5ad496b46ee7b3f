"""The private TRL / transformers names rlft relies on (rlft/trainers/trl_private.py): the installed libraries
still have each one with the listed parameters, and rlft's source uses none that the table leaves out."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import warnings
from functools import lru_cache
from pathlib import Path

import pytest

from rlft.trainers.trl_private import ATTRIBUTE, CALL, MARKER, MEMBERS, OVERRIDE, Member

pytest.importorskip("trl")

RLFT = Path(__file__).resolve().parents[1] / "rlft"
TABLE = RLFT / "trainers" / "trl_private.py"
LIBRARIES = ("trl", "transformers", "torch", "accelerate")


@lru_cache(maxsize=None)
def _import(dotted: str):
    """A class or module by its dotted path (TRL's experimental modules warn on import)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(dotted)
        except ImportError:
            module, _, name = dotted.rpartition(".")
            return getattr(importlib.import_module(module), name)


@lru_cache(maxsize=None)
def _library_source(cls) -> str:
    """The source of `cls` and of its library base classes (where an attribute set in __init__ shows up)."""
    parts = []
    for k in cls.__mro__:
        if k.__module__.split(".")[0] in LIBRARIES:
            try:
                parts.append(inspect.getsource(k))
            except (OSError, TypeError):
                pass
    return "\n".join(parts)


def _has(cls, name: str) -> bool:
    return hasattr(cls, name) or re.search(rf"\bself\.{re.escape(name)}\b", _library_source(cls)) is not None


# --- 1. the installed libraries still have every listed member ----------------------------------------
@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: f"{m.qualname}[{m.kind.split()[-1]}]")
def test_listed_member_exists_with_its_parameters(member: Member):
    cls = _import(member.owner)
    if member.kind == MARKER:  # a module's code reads the name from objects rlft marks
        assert re.search(rf"\b{re.escape(member.name)}\b", inspect.getsource(cls)), \
            f"{member.owner} no longer reads {member.name} (used in {member.used_in})"
        return
    assert inspect.isclass(cls), f"{member.owner} is not a class"
    if member.kind == ATTRIBUTE:
        assert re.search(rf"\bself\.{re.escape(member.name)}\b", _library_source(cls)), \
            f"{member.qualname} is no longer set by {member.owner} (used in {member.used_in})"
        return
    assert member.kind in (OVERRIDE, CALL), member.kind
    fn = getattr(cls, member.name, None)
    assert callable(fn), f"{member.qualname} no longer exists (used in {member.used_in})"
    if member.params is None:
        return
    params = list(inspect.signature(fn).parameters.values())[1:]  # after self
    names = tuple(p.name for p in params)
    if member.kind == OVERRIDE:  # the library calls rlft's method with its own parameter list
        assert names == member.params, f"{member.qualname}{names}: rlft overrides it as {member.params} " \
                                       f"({member.used_in})"
    else:
        assert names[:len(member.params)] == member.params, \
            f"{member.qualname}{names}: rlft calls it with {member.params} ({member.used_in})"
        required = [p.name for p in params[len(member.params):] if p.default is inspect.Parameter.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert not required, f"{member.qualname} now requires {required}, which rlft does not pass ({member.used_in})"


# --- 2. rlft's source uses no private library name the table leaves out ----------------------------
class _Module:
    def __init__(self, path: Path):
        self.path = path
        self.name = ".".join(path.relative_to(RLFT.parent).with_suffix("").parts).removesuffix(".__init__")
        self.tree = ast.parse(path.read_text(), str(path))
        self.imports: dict[str, str] = {}     # local name -> dotted path
        self.module_names: set[str] = set()   # names bound by `import x` (a module, not a class)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    self.module_names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, expr: ast.expr) -> str | None:
        """The dotted path an expression such as `GRPOTrainer` or `transformers.Trainer` names."""
        if isinstance(expr, ast.Name):
            if expr.id in self.imports:
                return self.imports[expr.id]
            return f"{self.name}.{expr.id}"
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return None


@lru_cache(maxsize=1)
def _modules() -> tuple[_Module, ...]:
    return tuple(_Module(p) for p in sorted(RLFT.rglob("*.py")) if p != TABLE)


def _classes() -> dict[str, tuple[_Module, ast.ClassDef]]:
    """Every class in rlft (nested ones too), by module + class name."""
    return {f"{m.name}.{node.name}": (m, node) for m in _modules() for node in ast.walk(m.tree)
            if isinstance(node, ast.ClassDef)}


def _library_bases(dotted: str, classes: dict) -> list:
    """The library classes an rlft class derives from, through rlft's own subclasses."""
    if dotted.split(".")[0] in LIBRARIES:
        try:
            cls = _import(dotted)
        except (ImportError, AttributeError):
            return []
        return [cls] if inspect.isclass(cls) else []
    if dotted not in classes:
        return []
    module, node = classes[dotted]
    return [b for expr in node.bases if (path := module.resolve(expr)) for b in _library_bases(path, classes)]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _rlft_defined() -> set[str]:
    """Private names rlft defines itself: functions, classes, `self._x` stores, module and class-level names."""
    out: set[str] = set()
    for m in _modules():
        for node in ast.walk(m.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                out.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return {n for n in out if _private(n)}


def _is_super_call(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"


def _uses() -> list[tuple[str, str, list]]:
    """(where, private name, the library classes it may belong to) for every private library name rlft uses."""
    classes = _classes()
    out, all_bases = [], {}
    for dotted, (module, node) in classes.items():
        bases = _library_bases(dotted, classes)
        if not bases:
            continue
        all_bases.update({b: None for b in bases})
        where = f"{module.path.relative_to(RLFT.parent)}: class {node.name}"
        names = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        names |= {a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)
                  and (isinstance(a.value, ast.Name) and a.value.id == "self" or _is_super_call(a.value))}
        for name in sorted(n for n in names if _private(n)):
            owners = [b for b in bases if _has(b, name)]
            if owners:
                out.append((where, name, owners))
    # any other receiver (`trainer._save_checkpoint`, `lr_scheduler._last_lr`): a library's name when rlft does
    # not define it, or when one of the library classes rlft subclasses has it
    defined = _rlft_defined()
    for module in _modules():
        for a in ast.walk(module.tree):
            if not (isinstance(a, ast.Attribute) and _private(a.attr)):
                continue
            recv = a.value
            if isinstance(recv, ast.Name) and (recv.id in ("self", "cls") or recv.id in module.module_names) \
                    or _is_super_call(recv):
                continue
            owners = [b for b in all_bases if _has(b, a.attr)]
            if owners or a.attr not in defined:
                out.append((f"{module.path.relative_to(RLFT.parent)}:{a.lineno}", a.attr, owners))
    return out


def test_every_private_library_name_rlft_uses_is_listed():
    missing = []
    for where, name, owners in _uses():
        entries = [m for m in MEMBERS if m.name == name]
        if not entries:
            missing.append(f"{where}: {name}")
            continue
        if owners and not any(issubclass(b, _import(m.owner)) for b in owners for m in entries):
            missing.append(f"{where}: {name} (listed, but not for {', '.join(b.__qualname__ for b in owners)})")
    assert not missing, "private TRL/transformers names used by rlft but not in rlft/trainers/trl_private.py:\n" \
                        + "\n".join(missing)


def test_every_listed_name_is_still_used():
    text = "\n".join(p.read_text() for p in RLFT.rglob("*.py") if p != TABLE)
    unused = sorted({m.qualname for m in MEMBERS if not re.search(rf"\b{re.escape(m.name)}\b", text)})
    assert not unused, f"listed in rlft/trainers/trl_private.py but no longer used by rlft: {unused}"


def test_table_imports_no_heavy_library():
    code = ("import sys, rlft.trainers.trl_private; "
            "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr
