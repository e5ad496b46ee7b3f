"""No two of rlft's modules import each other, directly or around a circle: imports go down the layers
(docs/architecture.md). Imports inside functions count too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

RLFT = Path(__file__).resolve().parent.parent / "rlft"


def _name(path: Path) -> str:
    parts = list(path.relative_to(RLFT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the rlft modules it imports (a name imported from a package that is a submodule counts as it)."""
    files = {_name(p): p for p in RLFT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                for a in node.names:
                    if f"{base}.{a.name}" in files:
                        found.add(f"{base}.{a.name}")
                    elif base in files:
                        found.add(base)
        graph[name] = found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_rlft_modules_import_each_other_in_a_circle():
    graph = import_graph()
    assert "rlft.models.weights" in graph["rlft.models.loading"]  # the parser saw real imports
    assert circles(graph) == []
