"""Simple beats clever, measured: no function or method of ``txn_engine`` is longer than
:data:`MAX_FUNCTION_LINES` lines and no module longer than :data:`MAX_MODULE_LINES`
(generated protobuf code aside). Split a function into named steps, a module by what its
parts are about."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "txn_engine"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 1000


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts)


def _long_functions(path: Path) -> list[tuple[int, str, int]]:
    """(line, name, length) of each function in ``path`` over the limit."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append((node.lineno, node.name, lines))
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    long = [
        f"{p.relative_to(PACKAGE.parent)}:{line} {name} ({n})"
        for p in _sources()
        for line, name, n in _long_functions(p)
    ]
    assert long == []


def test_no_module_is_longer_than_1000_lines() -> None:
    long = [
        f"{p.relative_to(PACKAGE.parent)} ({n})"
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


def test_the_size_check_sees_a_long_method(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    path = tmp_path / "sample.py"
    short, long = "    def short(self):", "    def long(self):"
    source = f"class C:\n{short}\n{body}\n\n{long}\n{body}\n        y = 0\n"
    path.write_text(source)
    assert _long_functions(path) == [(MAX_FUNCTION_LINES + 3, "long", MAX_FUNCTION_LINES + 1)]
