"""The layers of txn_engine, enforced: a module imports only from its own layer or the ones
below it (docs/architecture.md draws them). Lazy imports inside functions count too.

``KNOWN`` lists the back-edges not yet removed, each with why; it may only shrink: a new
back-edge fails, and so does an entry that no longer occurs (delete it then).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from txn_engine.redact import looks_secret
from txn_engine.storage.options import OPTIONS

PACKAGE = Path(__file__).resolve().parents[2] / "txn_engine"

#: Layer of each top-level module or package of txn_engine (bottom = 0). Same-layer imports
#: are allowed; a module not listed here fails the test (place it when you add it).
LAYERS: dict[str, int] = {
    # foundations: no imports of the library but each other
    "_version": 0,
    "jsontext": 0,
    "_proto": 0,
    "errors": 0,
    "redact": 0,
    "retry": 0,
    "clock": 0,
    "session": 0,
    # bytes on storage
    "storage": 1,
    "storetime": 1,
    "format": 2,
    # values
    "model": 3,
    "ops": 3,
    "transaction": 3,
    "codec": 3,
    "interop": 3,
    "schema_check": 3,
    # pure manifest building, and reading a dataset
    "builder": 4,
    "dataset": 4,
    "leases": 4,
    "changes": 4,
    # conflicts as data, detection, rebase
    "conflicts": 5,
    # the engine: commit loop, group commit, cleanup, history checks
    "loop": 6,
    "contention": 6,
    "commit": 6,
    "committer": 6,
    "retention": 6,
    "verify": 6,
    # what users call and what tests use
    "writers": 7,
    "api": 7,
    "plans": 7,
    "testing": 7,
    "spark": 7,
    "namespace": 7,
    # applications (txn_engine/apps/: the command line and the stress run), apart from the
    # engine: nothing below imports them
    "apps": 8,
    "__init__": 9,
}

#: Back-edges still to remove: (importing module, imported module) -> why it is still there.
KNOWN: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    if module == "txn_engine.conflicts.__main__":
        return "apps"  # the conflicts CLI entry point is an application
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "txn_engine":
                found.extend(f"txn_engine.{a.name}" for a in node.names)
            elif node.module.startswith("txn_engine."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.startswith("txn_engine."))
    return found


def _edges() -> list[tuple[str, str]]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_proto" in path.parts:
            continue
        module = _module_name(path)
        edges.extend((module, imported) for imported in _imports(path))
    return edges


def test_every_module_has_a_layer() -> None:
    units = {_unit(_module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert units - set(LAYERS) == set(), "place new modules in LAYERS (and the architecture doc)"


def _upward(edges: list[tuple[str, str]]) -> set[tuple[str, str]]:
    upward = set()
    for module, imported in edges:
        mine, theirs = _unit(module), _unit(imported)
        if mine != theirs and LAYERS[theirs] > LAYERS[mine]:
            upward.add((module, imported.removesuffix(".__version__")))
    return upward


def test_no_module_imports_from_a_layer_above() -> None:
    upward = _upward(_edges())
    new = sorted(upward - set(KNOWN))
    assert new == [], f"imports from a layer above: {new}"
    stale = sorted(set(KNOWN) - upward)
    assert stale == [], f"remove these KNOWN entries, the back-edge is gone: {stale}"


@pytest.mark.parametrize(
    "module",
    ["txn_engine.commit", "txn_engine.retention", "txn_engine.testing.machine", "txn_engine.api"],
)
@pytest.mark.parametrize("imported", ["txn_engine.apps", "txn_engine.apps.stress"])
def test_engine_importing_the_applications_fails(module: str, imported: str) -> None:
    """The applications stay apart: an engine or integration module importing
    ``txn_engine.apps`` (or one of its modules) is an import from a layer above."""
    assert _upward([(module, imported)]) == {(module, imported)}
    assert _upward([(imported, module)]) == set()  # the other way round is the rule


def test_layer_check_sees_lazy_imports(tmp_path: Path) -> None:
    """The checker finds an import inside a function (a lazy back-edge is still one)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from txn_engine.commit import commit\n    return commit\n")
    assert _imports(f) == ["txn_engine.commit"]


@pytest.mark.parametrize("spec", [s for s in OPTIONS if s.secret], ids=lambda s: s.name)
def test_every_secret_storage_option_looks_secret(spec: object) -> None:
    """redact (layer 0) cannot consult the storage option table (layer 1): its word list
    must cover every name and alias the table marks secret."""
    names = (spec.name, *spec.aliases)  # type: ignore[attr-defined]
    assert all(looks_secret(n) for n in names), names


def test_the_package_docstring_draws_this_layer_map() -> None:
    """``txn_engine.__doc__`` lists every unit of :data:`LAYERS` at its layer."""
    import txn_engine

    drawn: dict[str, int] = {}
    layer = -1
    for line in (txn_engine.__doc__ or "").splitlines():
        match = re.match(r"^    (\d)  (.*)$", line)
        if match:
            layer = int(match.group(1))
            names = match.group(2).split("  ")[0]
        elif layer >= 0 and re.match(r"^    [a-z_]", line):
            names = line.strip()  # a continuation of the same layer's names
        else:
            continue
        for name in (n.strip() for n in names.split(",")):
            if name:
                drawn[name] = layer
    expected = {name: level for name, level in LAYERS.items() if name != "__init__"}
    assert drawn == expected
