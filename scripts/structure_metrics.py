"""rlft's structure, measured from the source alone (stdlib `ast`, no torch): the rules docs/architecture.md states
("Rules the tests enforce"), each a function returning its violations, and the counts a redesign is judged by.

    python scripts/structure_metrics.py          # the counts, then each rule's violations

tests/test_structure.py imports this file: the same checkers run there against an exact list of known violations,
so a new violation fails and a fixed one must leave the list."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 80
# names each plug-in defines in its own module, so their repetition is the protocol: a stage folder's spec.py and
# runner.py (`run`, `checks`, ...), a module's own `main`, a reward built-in's `check_kwargs`
PROTOCOL_NAMES = frozenset({"run", "checks", "memory", "explain", "model_card", "section_checks", "main",
                            "check_kwargs"})
# the modules that load a class or function named by a string, and the tables of such strings they read
PLUGIN_LOADERS = frozenset({
    "rlft.config.stages",        # each stage folder's spec.py, by folder name
    "rlft.stages",               # get_runner: a spec's `runner` ("module:function")
    "rlft.rewards.registry",     # a reward given as "module:function" or a file
    "rlft.algos.advantages",     # a user's GRPO baseline "package.module:function"
    "rlft.lazy",                 # PEP 562 lazy package names
})
PLUGIN_TABLES = re.compile(r"^rlft\.stages\.[^.]+\.spec$|^rlft\.config\.env_spec$")  # specs' runners, BUILTIN_ENVS
# the files a run folder holds, as rlft spells them
RUN_FILE_NAMES = ("summary.json", "config.yaml", "metrics.jsonl", "completions.jsonl", "health.jsonl",
                  "reward_logs.jsonl", "rlft_state.json", "checkpoint-", "samples.jsonl", "distributed.json")
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


# --- the source -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Module:
    name: str       # rlft.stages.grpo.runner
    path: Path
    rel: str        # rlft/stages/grpo/runner.py
    tree: ast.Module
    is_package: bool


def load_modules(root: Path = ROOT, package: str = "rlft") -> dict[str, Module]:
    """Every .py file under root/package, parsed."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        if path.relative_to(root / package).parts[0] == "configs":  # profiles and example reward files: data
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, path.relative_to(root).as_posix(),
                               ast.parse(path.read_text(encoding="utf-8")), is_package)
    return modules


@dataclasses.dataclass(frozen=True, order=True)
class Violation:
    key: str      # what breaks a rule, stable while the code around it changes (no line numbers, no sizes)
    detail: str   # where and by how much

    def __str__(self) -> str:
        return f"{self.key} ({self.detail})"


@dataclasses.dataclass(frozen=True)
class Import:
    src: str
    dst: str
    line: int


def imports(modules: dict[str, Module]) -> list[Import]:
    """Every import of one package module by another, lazy ones (inside functions) included; `from a import b`
    counts as a.b when that is a module, else as a."""
    found = []
    for m in modules.values():
        package = m.name if m.is_package else m.name.rpartition(".")[0]
        for node in ast.walk(m.tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in dict.fromkeys(targets):
                while t and t not in modules:  # `import a.b.c` of a non-module name: its nearest module
                    t = t.rpartition(".")[0]
                if t and t != m.name:
                    found.append(Import(m.name, t, node.lineno))
    return sorted(set(found), key=lambda i: (i.src, i.line, i.dst))


# --- the layers -----------------------------------------------------------------------------------------------------

def layer_table(architecture: Path = ROOT / "docs" / "architecture.md") -> list[list[str]]:
    """The "Layers" section's table, top to bottom: one list of entries per row (`trainers/`, `errors.py`,
    `stages/<name>/spec.py`), read from the first column of its code block (a line after a first column ending in a
    comma, or indented by one or two spaces, continues the row above; deeper ones continue a description)."""
    section = architecture.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1]
    block = section.split("```", 2)[1].split("\n", 1)[1]
    rows: list[list[str]] = []
    continues = False  # the row above ended its first column with a comma
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent > 2:
            continue
        first = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0]
        entries = [e for e in re.split(r"[\s,]+", first) if re.fullmatch(r"[\w<>./]+", e)]
        if (indent or continues) and rows:
            rows[-1].extend(entries)
        elif entries:
            rows.append(entries)
        continues = first.endswith(",")
    return rows


def layer_of(module: str, rows: list[list[str]], package: str = "rlft") -> int | None:
    """The row (0 = top) that holds `module`: the most specific entry that matches it (`stages/<name>/spec.py`
    before `stages/<name>/runner.py`, whose package `stages/` is where the rest of rlft/stages sits)."""
    best: tuple[int, int] | None = None  # (specificity, row)
    prefixes_seen: set[str] = set()
    for row_index, row in enumerate(rows):
        for entry in row:
            path = entry.rstrip("/")
            pattern = re.escape(path).replace(re.escape("<name>"), r"[^.]+").replace("/", r"\.")
            if entry.endswith(".py"):
                pattern = pattern[:-len(r"\.py")]
            candidates = []
            if entry.endswith("/") or "." not in entry:  # a package (`trainers/`) or a bare module (`cli`)
                candidates.append((2, rf"{package}\.{pattern}(\..+)?"))
            else:
                candidates.append((3, rf"{package}\.{pattern}"))
            top = path.split("/")[0]
            if "/" in path and top not in prefixes_seen:  # `stages/<name>/runner.py`: the rest of stages/ too
                prefixes_seen.add(top)
                candidates.append((1, rf"{package}\.{re.escape(top)}(\..+)?"))
            for specificity, regex in candidates:
                if re.fullmatch(regex, module) and (best is None or specificity > best[0]):
                    best = (specificity, row_index)
    return None if best is None else best[1]


def unplaced_modules(modules: dict[str, Module], rows: list[list[str]], package: str = "rlft") -> list[Violation]:
    """Modules the layer table does not place (the package's own __init__ aside)."""
    return sorted(Violation(m.rel, "in no row of the layer table") for m in modules.values()
                  if m.name != package and layer_of(m.name, rows, package) is None)


def upward_imports(modules: dict[str, Module], rows: list[list[str]], package: str = "rlft") -> list[Violation]:
    """Imports that go up the layer table (a lower row importing a higher one), lazy imports included."""
    out = []
    for i in imports(modules):
        a, b = layer_of(i.src, rows, package), layer_of(i.dst, rows, package)
        if a is not None and b is not None and b < a:
            out.append(Violation(f"{modules[i.src].rel} -> {i.dst}", f"line {i.line}: row {a} imports row {b}, up"))
    return out


def stage_rules(modules: dict[str, Module], package: str = "rlft") -> list[Violation]:
    """docs/architecture.md's "never" rules for rlft/stages: no stage folder imports another; a spec.py imports
    only config.fields, config.stagespec, config.names (and its own folder, never its runner); stages/common/
    never imports the stages root (rlft.stages, or a module beside the folders)."""
    stages = f"{package}.stages"
    folders = {m.name.split(".")[2] for m in modules.values()
               if m.name.startswith(stages + ".") and m.is_package and m.name.count(".") == 2
               and m.name.split(".")[2] != "common"}
    root_modules = {m.name for m in modules.values() if m.name == stages or
                    (m.name.startswith(stages + ".") and m.name.count(".") == 2 and not m.is_package)}
    spec_may = {f"{package}.config.fields", f"{package}.config.stagespec", f"{package}.config.names"}

    def folder(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if len(parts) >= 3 and parts[:2] == [package, "stages"] and parts[2] in folders else None

    out = []
    for i in imports(modules):
        rel, at = modules[i.src].rel, f"line {i.line}: "
        a, b = folder(i.src), folder(i.dst)
        if a and b and a != b:
            out.append(Violation(f"{rel} -> {i.dst}", at + "a stage folder importing another"))
        if a and i.src == f"{stages}.{a}.spec":
            own = b == a and not i.dst.endswith(".runner")
            if i.dst not in spec_may and not own and i.dst != f"{package}.errors":  # RunError: any layer
                out.append(Violation(f"{rel} -> {i.dst}", at + "a spec imports only config.fields, config.stagespec, "
                                     "config.names"))
        if i.src.startswith(f"{stages}.common") and i.dst in root_modules:
            out.append(Violation(f"{rel} -> {i.dst}", at + "stages/common/ importing the stages root"))
    return out


# --- sizes ----------------------------------------------------------------------------------------------------------

def _lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def _top_classes(modules: dict[str, Module]) -> dict[str, tuple[Module, ast.ClassDef]]:
    return {f"{m.name}.{n.name}": (m, n) for m in modules.values() for n in m.tree.body if isinstance(n, ast.ClassDef)}


def _imported_names(m: Module, modules: dict[str, Module]) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (`from rlft.x import Y as Z`: Z -> rlft.x.Y)."""
    package = m.name if m.is_package else m.name.rpartition(".")[0]
    names = {}
    for node in ast.walk(m.tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def _resolve_class(dotted: str, classes: dict, modules: dict[str, Module], depth: int = 0) -> str | None:
    """rlft.pkg.Name (perhaps re-exported by a package) -> the qualified name of the class definition."""
    if dotted in classes or depth > 5:
        return dotted if dotted in classes else None
    module, _, name = dotted.rpartition(".")
    m = modules.get(module)
    if m is None:
        return None
    target = _imported_names(m, modules).get(name)
    return _resolve_class(target, classes, modules, depth + 1) if target else None


def rlft_bases(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Each package class -> its bases that are package classes (qualified names)."""
    classes = _top_classes(modules)
    bases = {}
    for qual, (m, node) in classes.items():
        local = _imported_names(m, modules)
        found = []
        for b in node.bases:
            name = b.id if isinstance(b, ast.Name) else None
            if name is None:
                continue
            target = f"{m.name}.{name}" if f"{m.name}.{name}" in classes else local.get(name)
            resolved = _resolve_class(target, classes, modules) if target else None
            if resolved:
                found.append(resolved)
        bases[qual] = found
    return bases


def _mro(qual: str, bases: dict[str, list[str]]) -> list[str]:
    seen, order, todo = set(), [], [qual]
    while todo:
        c = todo.pop(0)
        if c not in seen:
            seen.add(c)
            order.append(c)
            todo.extend(bases.get(c, []))
    return order


def class_sizes(modules: dict[str, Module]) -> dict[str, int]:
    """Each class's lines plus those of every package class in its bases, each counted once."""
    classes = _top_classes(modules)
    bases = rlft_bases(modules)
    return {q: sum(_lines(classes[c][1]) for c in _mro(q, bases)) for q in classes}


def big_classes(modules: dict[str, Module], limit: int = MAX_CLASS_LINES) -> list[Violation]:
    """Classes over `limit` lines, their package bases (mixins) counted in."""
    classes = _top_classes(modules)
    out = []
    for qual, size in class_sizes(modules).items():
        if size > limit:
            m, node = classes[qual]
            out.append(Violation(f"{m.rel}:{node.name}", f"line {node.lineno}: {size} lines with its package "
                                 f"bases (> {limit})"))
    return out


def _qualnames(tree: ast.Module) -> dict[ast.AST, str]:
    """Each function node -> its dotted name within the module (Class.method, outer.inner)."""
    names = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[child] = prefix + child.name
                visit(child, names[child] + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return names


def big_functions(modules: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> list[Violation]:
    """Functions and methods over `limit` lines (a nested function counts in its outer one, and on its own)."""
    out = []
    for m in modules.values():
        qualnames = _qualnames(m.tree)
        for node in ast.walk(m.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _lines(node) > limit:
                out.append(Violation(f"{m.rel}:{qualnames[node]}", f"line {node.lineno}: {_lines(node)} lines "
                                     f"(> {limit})"))
    return out


# --- names ----------------------------------------------------------------------------------------------------------

def public_definitions(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Public module-level function and class names -> the modules that define them."""
    where = defaultdict(list)
    for m in modules.values():
        for node in m.tree.body:
            defines = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if defines and not node.name.startswith("_"):
                where[node.name].append(m.rel)
    return where


def duplicate_names(modules: dict[str, Module], allowed=PROTOCOL_NAMES) -> list[Violation]:
    """Public names defined in two or more modules, outside the plug-in protocol."""
    return [Violation(f"{name}: {', '.join(sorted(paths))}", "defined in each")
            for name, paths in sorted(public_definitions(modules).items()) if len(paths) > 1 and name not in allowed]


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _strings(m: Module):
    """The string constants of a module's code (docstrings left out), with their line."""
    skip = _docstrings(m.tree)
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value, node.lineno


def string_loads(modules: dict[str, Module], loaders=PLUGIN_LOADERS, tables=PLUGIN_TABLES,
                 package: str = "rlft") -> list[Violation]:
    """Code loaded by name outside the plug-in loaders: importlib.import_module / __import__ calls, and
    "package.module:Name" strings, which hide an import from the import graph."""
    out = []
    target = re.compile(rf"^{package}(\.\w+)+:\w+$")
    for m in modules.values():
        if m.name in loaders:
            continue
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in ("import_module", "__import__"):
                    out.append(Violation(f"{m.rel}: {name}(...)", f"line {node.lineno}"))
        if not tables.match(m.name):
            for value, line in _strings(m):
                if target.match(value):
                    out.append(Violation(f"{m.rel}: \"{value}\"", f"line {line}"))
    return out


# --- the redesign's counts ------------------------------------------------------------------------------------------

LOOP_OBJECTS = ("t", "trainer", "c", "collector")


def loop_object_functions(modules: dict[str, Module], package: str = "rlft") -> tuple[list[str], list[str]]:
    """Module-level functions of the PPO loop's modules (trainers/ and rollout/ modules that speak `PPOBatch`) that
    take the loop's trainer or collector as a parameter (`t`, `trainer`, `c`, `collector`, not annotated as a
    tensor), and their reaches into its private attributes (`t._x`)."""
    functions, reaches = [], []
    for m in modules.values():
        if not (m.name.startswith((f"{package}.trainers.", f"{package}.rollout."))
                and "PPOBatch" in ast.unparse(m.tree)):
            continue
        for node in m.tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs
                      if x.arg in LOOP_OBJECTS and "Tensor" not in ast.unparse(x.annotation or ast.Constant(""))}
            if not params:
                continue
            functions.append(f"{m.rel}:{node.lineno} {node.name}({', '.join(sorted(params))})")
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in params
                        and sub.attr.startswith("_") and not sub.attr.startswith("__")):
                    reaches.append(f"{m.rel}:{sub.lineno} {sub.value.id}.{sub.attr}")
    return functions, sorted(reaches, key=lambda r: (r.split(":")[0], int(r.split(":")[1].split()[0])))


def collector_parameters(modules: dict[str, Module]) -> dict[str, list[str]]:
    """The constructor parameters of each *Collector class (self left out; ": Callable" marks a callable)."""
    out = {}
    for qual, (m, node) in _top_classes(modules).items():
        if node.name.endswith("Collector"):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    a = f.args
                    params = [x.arg + (": Callable" if "Callable" in ast.unparse(x.annotation or ast.Constant(""))
                                       else "") for x in a.posonlyargs + a.args + a.kwonlyargs]
                    out[f"{m.rel}:{node.lineno} {node.name}"] = params[1:]
    return out


def periodic_eval_owners(modules: dict[str, Module]) -> list[str]:
    """Functions that run the periodic eval: a step taken modulo an `...every` and a call of `.evaluate(...)`."""
    out = []
    for m in modules.values():
        for node in ast.walk(m.tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            modulo = any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Mod) and "every" in ast.unparse(s.right)
                         for s in ast.walk(node))
            calls = any(isinstance(s, ast.Call) and isinstance(s.func, ast.Attribute) and s.func.attr == "evaluate"
                        for s in ast.walk(node))
            if modulo and calls:
                out.append(f"{m.rel}:{node.lineno} {node.name}")
    return out


def estimator_registrations(modules: dict[str, Module], registry: str = "ADVANTAGE_ESTIMATORS") -> dict[str, list]:
    """Per advantage estimator registered with `@<registry>.register("name")`: every place that registers the name
    (that decorator, and module-level tables naming it: dict keys, tuples of names)."""
    names = set()
    for m in modules.values():
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and ast.unparse(node.func.value) == registry and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    places = defaultdict(list)
    for m in modules.values():
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and ast.unparse(node.func.value) == registry and node.args
                    and isinstance(node.args[0], ast.Constant)):
                places[node.args[0].value].append(f"{m.rel}:{node.lineno} @{registry}.register")
        for node in m.tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            target = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
            literals = [k for k in getattr(node.value, "keys", []) or getattr(node.value, "elts", [])
                        if isinstance(k, ast.Constant)]
            for k in literals:
                if k.value in names:
                    places[k.value].append(f"{m.rel}:{node.lineno} {target}")
    return {n: places[n] for n in sorted(names)}


def stage_parts(modules: dict[str, Module], base: str = "rlft.runtime.lifecycle.Stage") -> tuple[list[str], dict]:
    """The parts of the lifecycle's Stage a stage may override (methods and class attributes, __init__ aside), and
    per concrete stage class (no subclass in the package) the parts it or its package bases override."""
    classes = _top_classes(modules)
    if base not in classes:
        return [], {}
    _, node = classes[base]

    def parts_of(cls: ast.ClassDef) -> set[str]:
        names = set()
        for n in cls.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("__"):
                names.add(n.name)
            elif isinstance(n, ast.Assign):
                names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                names.add(n.target.id)
        return names

    parts = parts_of(node)
    bases = rlft_bases(modules)
    subclasses = {q for q in classes if base in _mro(q, bases) and q != base}
    leaves = {q for q in subclasses if not any(q in bases[o] for o in subclasses)}
    overridden = {}
    for q in sorted(leaves):
        mine = set()
        for c in _mro(q, bases):
            if c != base and c in subclasses:
                mine |= parts_of(classes[c][1]) & parts
        overridden[q] = sorted(mine)
    return sorted(parts), overridden


def run_file_spellings(modules: dict[str, Module], names=RUN_FILE_NAMES) -> dict[str, list[str]]:
    """Per run-folder file name, the modules whose code spells it as a path: a string (docstrings aside) that starts
    with it or ends with "/<name>" (help text that mentions a file does not count)."""
    out: dict[str, set] = {n: set() for n in names}
    for m in modules.values():
        for value, _ in _strings(m):
            for n in names:
                if value.startswith(n) or value.endswith("/" + n):
                    out[n].add(m.rel)
    return {n: sorted(v) for n, v in out.items()}


def rank_readers(modules: dict[str, Module], names=RANK_VARIABLES) -> list[str]:
    """Modules whose code names RANK / WORLD_SIZE (the environment a launcher sets) in a string."""
    return sorted({m.rel for m in modules.values() for value, _ in _strings(m) if value in names})


# --- the report -----------------------------------------------------------------------------------------------------

RULES = {  # rule id -> (what it reports, checker(modules, layer rows))
    "upward-imports": ("imports that go up the layers", lambda mods, rows: upward_imports(mods, rows)),
    "unplaced-modules": ("modules in no layer", lambda mods, rows: unplaced_modules(mods, rows)),
    "stage-rules": ("stage folder rules", lambda mods, rows: stage_rules(mods)),
    "class-size": (f"classes over {MAX_CLASS_LINES} lines with their package bases",
                   lambda mods, rows: big_classes(mods)),
    "function-size": (f"functions over {MAX_FUNCTION_LINES} lines", lambda mods, rows: big_functions(mods)),
    "duplicate-names": ("public names defined in 2+ modules outside the plug-in protocol",
                        lambda mods, rows: duplicate_names(mods)),
    "string-loads": ("code loaded by a string outside the plug-in loaders", lambda mods, rows: string_loads(mods)),
}


def counts(modules: dict[str, Module], rows: list[list[str]]) -> list[tuple[str, object]]:
    functions, reaches = loop_object_functions(modules)
    collectors = collector_parameters(modules)
    regs = estimator_registrations(modules)
    parts, overridden = stage_parts(modules)
    spellings = run_file_spellings(modules)
    top = max((len(v) for v in overridden.values()), default=0)
    most = ", ".join(k.rsplit(".", 1)[-1] for k, v in overridden.items() if len(v) == top)
    rules = [(label, len(check(modules, rows))) for label, check in RULES.values()]
    return [
        ("functions taking the loop's trainer or collector (t, trainer, c, collector)", len(functions)),
        ("  their private reaches (t._x)", len(reaches)),
        ("collector constructor parameters (callables)",
         {k.split()[-1]: f"{len(v)} ({sum(p.endswith('Callable') for p in v)})" for k, v in collectors.items()} or 0),
        ("periodic-eval owners", len(periodic_eval_owners(modules))),
        ("registrations per advantage estimator", {k: len(v) for k, v in regs.items()}),
        ("Stage parts (overridable)", len(parts)),
        ("max parts a stage overrides", f"{top} ({most})"),
        ("modules spelling run-folder file names", len({p for v in spellings.values() for p in v})),
        ("  per name", {k: len(v) for k, v in spellings.items() if v}),
        ("modules reading RANK / WORLD_SIZE", len(rank_readers(modules))),
        *rules,
        ("modules / lines", f"{len(modules)} / {sum(len(m.path.read_text().splitlines()) for m in modules.values())}"),
    ]


def main(argv: list[str]) -> int:
    modules, rows = load_modules(), layer_table()
    table = counts(modules, rows)
    width = max(len(label) for label, _ in table)
    for label, value in table:
        print(f"{label:<{width}} {value}")
    if "--quiet" in argv:
        return 0
    functions, reaches = loop_object_functions(modules)
    details = {"functions taking the trainer or collector": functions, "private reaches": reaches,
               "collector parameters": [f"{k}: {', '.join(v)}" for k, v in collector_parameters(modules).items()],
               "periodic-eval owners": periodic_eval_owners(modules),
               "estimator registrations": [f"{k}: {p}" for k, v in estimator_registrations(modules).items() for p in v],
               "stage parts overridden": [f"{k}: {len(v)} {v}" for k, v in stage_parts(modules)[1].items()],
               "run-folder file names": [f"{k}: {', '.join(v)}" for k, v in run_file_spellings(modules).items() if v],
               "RANK / WORLD_SIZE": rank_readers(modules)}
    details.update({f"{label} [{rule}]": check(modules, rows) for rule, (label, check) in RULES.items()})
    for title, lines in details.items():
        print(f"\n{title} ({len(lines)})")
        for line in lines:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
