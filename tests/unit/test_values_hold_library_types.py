"""The library's values hold only the library's own types (issue 44, item 4).

pylance objects are converted where they enter (txn_engine.commit, the writer API, the
Committer, Spark) by txn_engine.interop; given to an operation's field or to a
Transaction, one is refused with InvalidOperationError naming the conversion. pylance is
not installed in one CI step, so its objects are faked here by classes named (module and
class) like pylance's: that is how the library recognises them. The real ones:
tests/integration/test_interop_pylance.py.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import txn_engine as te
from txn_engine.errors import InvalidOperationError
from txn_engine.model import DataFile, Fragment, IndexMetadata, LanceField
from txn_engine.ops import (
    Append,
    CreateIndex,
    DataReplacementGroup,
    Delete,
    Merge,
    Overwrite,
    Project,
    RewriteGroup,
    Update,
)
from txn_engine.transaction import Transaction

PACKAGE = Path(__file__).resolve().parents[2] / "txn_engine"

COMMIT_INSTEAD = (
    "or pass pylance's own operation/transaction to txn_engine.commit, which converts it"
)


def _pylance_class(module: str, name: str, **attributes: Any) -> type:
    """A class recognised as pylance's ``module.name``."""
    return type(name, (), {"__module__": module, **attributes})


FragmentMetadata = _pylance_class(
    "lance.fragment", "FragmentMetadata", to_json=lambda self: {"id": 0, "files": []}
)
LanceSchema = _pylance_class("lance.schema", "LanceSchema")
PylanceIndex = _pylance_class("lance.dataset", "Index")
PylanceDataFile = _pylance_class("lance.fragment", "DataFile")


@dataclasses.dataclass
class PylanceAppend:
    """Like ``lance.LanceOperation.Append``: a dataclass of module ``lance.dataset``."""

    fragments: list[Any]


PylanceAppend.__module__ = "lance.dataset"
PylanceAppend.__name__ = PylanceAppend.__qualname__ = "Append"

PylanceTransaction = _pylance_class("lance.dataset", "Transaction")

FIELDS = (LanceField(0, -1, "id", "int64"),)
FRAGMENT = Fragment(0, (DataFile("a.lance", (0,), (0,), 2, 2, 10),), 10)
INDEX = IndexMetadata("00000000-0000-4000-8000-000000000001", "i", (0,), 1, frozenset({0}))


def _refusal(build: Callable[[], object]) -> str:
    with pytest.raises(InvalidOperationError, match=r"^expected ") as info:
        build()
    return str(info.value)


@pytest.mark.parametrize(
    ("build", "pylance", "conversion"),
    [
        (lambda: Append([FragmentMetadata()]), "FragmentMetadata", "as_fragments([...])"),
        (lambda: Append(FragmentMetadata()), "FragmentMetadata", "as_fragments([...])"),
        (lambda: Delete([FragmentMetadata()]), "FragmentMetadata", "as_fragments([...])"),
        (
            lambda: Update(new_fragments=[FRAGMENT, FragmentMetadata()]),
            "FragmentMetadata",
            "as_fragments([...])",
        ),
        (
            lambda: RewriteGroup([FRAGMENT], [FragmentMetadata()]),
            "FragmentMetadata",
            "as_fragments([...])",
        ),
        (lambda: Overwrite([FRAGMENT], LanceSchema()), "LanceSchema", "as_fields(...)"),
        (lambda: Merge([FRAGMENT], LanceSchema()), "LanceSchema", "as_fields(...)"),
        (lambda: Project(LanceSchema()), "LanceSchema", "as_fields(...)"),
        (lambda: CreateIndex([PylanceIndex()]), "Index", "as_indices([...])"),
        (lambda: CreateIndex([], [INDEX, PylanceIndex()]), "Index", "as_indices([...])"),
        (lambda: DataReplacementGroup(0, PylanceDataFile()), "DataFile", "as_data_file(...)"),
        (lambda: Transaction(1, PylanceAppend([])), "Append", "as_operation(...)"),
        (lambda: Transaction(1, PylanceTransaction()), "Transaction", "as_transaction(...)"),
    ],
)
def test_a_pylance_object_in_a_value_is_refused_naming_the_conversion(
    build: Callable[[], object], pylance: str, conversion: str
) -> None:
    message = _refusal(build)
    assert f"a pylance {pylance}: convert it with txn_engine.interop.{conversion}" in message
    assert COMMIT_INSTEAD in message


def test_the_librarys_own_values_and_plain_values_are_still_taken() -> None:
    assert Append([FRAGMENT]).fragments == (FRAGMENT,)
    assert Append(iter([FRAGMENT])).fragments == (FRAGMENT,)
    assert Delete(deleted_fragment_ids=[1, 2]).deleted_fragment_ids == (1, 2)
    assert Overwrite([FRAGMENT], list(FIELDS)).schema == FIELDS
    assert CreateIndex([INDEX]).new_indices == (INDEX,)
    assert Transaction(1, Append([FRAGMENT])).operation == Append([FRAGMENT])


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: Append([{"id": 0, "files": []}]), "txn_engine.Fragment.from_lance_json"),
        (lambda: Append(["{}"]), "txn_engine.Fragment.from_lance_json"),
        (lambda: Append([1]), "expected a txn_engine.Fragment, got builtins.int"),
        (lambda: Append(FRAGMENT), "expected a sequence of fragments"),
        (lambda: Append(None), "expected a sequence of fragments"),
        (lambda: Project([{"name": "id"}]), "expected a txn_engine.LanceField"),
        (lambda: Project("id"), "expected Lance fields or a pyarrow.Schema"),
        (lambda: CreateIndex(INDEX), "expected a sequence of indices"),
        (lambda: DataReplacementGroup(0, "a.lance"), "expected a txn_engine.DataFile"),
        (lambda: Transaction(1, "Append"), "expected a txn_engine operation"),
    ],
)
def test_anything_else_is_refused_saying_what_was_expected(
    build: Callable[[], object], expected: str
) -> None:
    message = _refusal(build)
    assert expected in message
    assert "a pylance" not in message  # not taken for a pylance object


def test_interop_still_converts_what_the_values_refuse() -> None:
    """The conversion the refusal names does convert (a fragment's JSON here; pylance's
    own objects: tests/integration/test_interop_pylance.py)."""
    json = FRAGMENT.to_lance_json()
    assert te.interop.as_fragments([json]) == (FRAGMENT,)
    assert Append(te.interop.as_fragments([json])).fragments == (FRAGMENT,)
    assert te.interop.as_operation(Append([FRAGMENT])) == Append([FRAGMENT])
    assert te.interop.SchemaMetadata is not None  # re-exported from its new home


def _imported_modules(path: Path, package_dir: Path = PACKAGE) -> set[str]:
    """Every module ``path`` imports, at any level (module level, inside functions, under
    TYPE_CHECKING), relative imports resolved against the package at ``package_dir``."""
    rel = path.relative_to(package_dir.parent).with_suffix("").parts
    package = list(rel[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _values_modules() -> list[Path]:
    return [
        *sorted((PACKAGE / "ops").glob("*.py")),
        PACKAGE / "transaction.py",
        PACKAGE / "model.py",
    ]


@pytest.mark.parametrize("path", _values_modules(), ids=lambda p: p.name)
def test_the_values_import_nothing_from_interop(path: Path) -> None:
    interop = {m for m in _imported_modules(path) if m.split(".")[:2] == ["txn_engine", "interop"]}
    assert interop == set(), f"{path.name} imports {sorted(interop)}"


def test_the_interop_import_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "txn_engine"
    (package / "ops").mkdir(parents=True)
    lazy = package / "ops" / "lazy.py"
    lazy.write_text("def f():\n    from txn_engine.interop import as_fragments\n")
    typing_only = package / "ops" / "typing_only.py"
    typing_only.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import interop\n"
    )
    plain = package / "plain.py"
    plain.write_text("import txn_engine.interop as i\n")
    for path in (lazy, typing_only, plain):
        imported = _imported_modules(path, package)
        assert any(m.startswith("txn_engine.interop") for m in imported), path
