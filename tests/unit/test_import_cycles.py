"""No import cycles among txn_engine's modules, counting every import: at module level,
inside functions (lazy), and under ``if TYPE_CHECKING:``. A cycle means two modules that
cannot be understood (or changed) apart; break it by moving what both need below them, or
by handing one a callable (a seam) instead of an import.

Edges go to the module named (``from txn_engine.a import b`` names ``txn_engine.a.b`` when
that is a module, else ``txn_engine.a``); the package ``__init__`` that Python imports on
the way is not an edge of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "txn_engine"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_of(p): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if "_proto" not in p.parts  # generated code
    }


def _imports(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The txn_engine modules ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    return {m for m in found if m in known and m != module}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def _cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle_among_the_modules() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_lazy_import_cycle(tmp_path: Path) -> None:
    """The detector finds a cycle that runs through an import inside a function and one
    under TYPE_CHECKING, and resolves relative imports."""
    pkg = tmp_path / "txn_engine"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from txn_engine.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "sub" / "c.py").write_text("from ..a import f\n")
    (pkg / "d.py").write_text("import txn_engine.a\n")
    known = {
        "txn_engine.a": pkg / "a.py",
        "txn_engine.sub": pkg / "sub" / "__init__.py",
        "txn_engine.sub.b": pkg / "sub" / "b.py",
        "txn_engine.sub.c": pkg / "sub" / "c.py",
        "txn_engine.d": pkg / "d.py",
    }
    graph = {m: _imports(m, p, known) for m, p in known.items()}
    assert graph["txn_engine.a"] == {"txn_engine.sub.b"}
    assert graph["txn_engine.sub.b"] == {"txn_engine.sub.c"}
    assert graph["txn_engine.sub.c"] == {"txn_engine.a"}
    assert _cycles(graph) == [["txn_engine.a", "txn_engine.sub.b", "txn_engine.sub.c"]]
