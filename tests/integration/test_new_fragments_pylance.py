"""Fragments that must be newly written, against pylance 14.0.2 as the oracle.

The same transaction is committed by pylance (``LanceDataset.commit``) and by txn_engine
(``te.commit``) on two copies of one table. For each case the test measures pylance's
verdict live (refused; landed and readable; landed and then unreadable or uncommittable) and
asserts txn_engine's: it refuses with ``InvalidOperationError`` (nothing written) whatever
pylance refuses and whatever pylance lands but cannot read back, and otherwise lands the
table pylance lands (same rows, fragment ids, stable row ids and row versions).

The class of input: a new fragment gets its id at commit, and a deletion file is found by
its fragment's id, so a new fragment carrying one points at nothing; a fragment with stable
row ids in a table without them makes pylance refuse every later commit; a Merge restates
the table's fragments, and may add new ones after them.
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.errors import InvalidOperationError

pytestmark = pytest.mark.pylance

LO = lance.LanceOperation
Plan = Callable[[str, lance.LanceDataset], Any]


def _table(root: Path, *, stable: bool, delete: bool) -> str:
    """100 rows in fragments 0 and 1 (50 each); ``delete``: rows 0-9 of fragment 0 deleted."""
    uri = str(root / "base.lance")
    lance.write_dataset(
        pa.table({"a": list(range(100))}), uri, max_rows_per_file=50, enable_stable_row_ids=stable
    )
    if delete:
        lance.dataset(uri).delete("a < 10")
    return uri


def _with(meta: Any, **changes: Any) -> Any:
    out = copy.deepcopy(meta)
    for key, value in changes.items():
        setattr(out, key, value)
    return out


def _written(uri: str, rows: int = 50, start: int = 1000) -> Any:
    return lf.write_fragments(pa.table({"a": list(range(start, start + rows))}), uri)[0]


def _frags(ds: lance.LanceDataset) -> list[Any]:
    return [f.metadata for f in ds.get_fragments()]


def _foreign_row_ids(root: str) -> Any:
    """Stable row ids of a fragment of another table (one with stable row ids)."""
    src = tempfile.mkdtemp(dir=root) + "/s.lance"
    lance.write_dataset(pa.table({"a": list(range(50))}), src, enable_stable_row_ids=True)
    return lance.dataset(src).get_fragments()[0].metadata.row_id_meta


def _drop_fragment_0(d: str, ds: lance.LanceDataset) -> lance.LanceDataset:
    ds.delete("a < 50")
    return lance.dataset(d)


# name: (stable, delete, plan, pylance's verdict, what txn_engine's refusal says or None)
CASES: dict[str, tuple[bool, bool, Plan, str, str | None]] = {
    "overwrite, a fragment of the table with its deletion file": (
        False,
        True,
        lambda d, ds: LO.Overwrite(ds.schema, _frags(ds)),
        "refused",
        "Overwrite fragments must be newly written.*use Delete",
    ),
    "overwrite, a written fragment given a deletion file": (
        False,
        True,
        lambda d, ds: LO.Overwrite(
            ds.schema, [_with(_written(d), deletion_file=_frags(ds)[0].deletion_file)]
        ),
        "refused",
        "must be newly written",
    ),
    "overwrite, a written fragment with an id of its own (renumbered)": (
        False,
        False,
        lambda d, ds: LO.Overwrite(ds.schema, [_with(_written(d), id=1)]),
        "landed",
        None,
    ),
    "overwrite of a stable table": (
        True,
        True,
        lambda d, ds: LO.Overwrite(ds.schema, [_written(d)]),
        "landed",
        None,
    ),
    # pylance 14 lands this one (the table then has stable row ids: those given, and no
    # others); txn_engine refuses it, as pylance refuses it for every other operation
    "overwrite, row ids on a table without stable row ids": (
        False,
        False,
        lambda d, ds: LO.Overwrite(
            ds.schema, [_with(_written(d), row_id_meta=_foreign_row_ids(d))]
        ),
        "landed",
        "does not use stable row ids",
    ),
    "append, a fragment of the table with its deletion file": (
        False,
        True,
        lambda d, ds: LO.Append([_with(_frags(ds)[0], id=0)]),
        "unreadable",
        "Append fragments must be newly written.*then delete its rows with a Delete",
    ),
    "append, a fragment with an id of its own and a deletion file": (
        False,
        True,
        lambda d, ds: LO.Append([_with(_frags(ds)[0], id=9)]),
        "unreadable",
        "must be newly written",
    ),
    "append, row ids on a table without stable row ids": (
        False,
        False,
        lambda d, ds: LO.Append([_with(_written(d), row_id_meta=_foreign_row_ids(d))]),
        "refused",
        "does not use stable row ids",
    ),
    "append, version sequences given with a written fragment (ignored)": (
        True,
        True,
        lambda d, ds: LO.Append(
            [
                _with(
                    _written(d),
                    created_at_version_meta=_frags(ds)[1].created_at_version_meta,
                    last_updated_at_version_meta=_frags(ds)[1].last_updated_at_version_meta,
                )
            ]
        ),
        "landed",
        None,
    ),
    "update, a new fragment with a deletion file": (
        False,
        True,
        lambda d, ds: LO.Update(
            new_fragments=[_with(_written(d), deletion_file=_frags(ds)[0].deletion_file)]
        ),
        "unreadable",
        "Update fragments must be newly written",
    ),
    "update, a new fragment with row ids on a table without them": (
        False,
        False,
        lambda d, ds: LO.Update(
            new_fragments=[_with(_written(d), row_id_meta=_foreign_row_ids(d))]
        ),
        "refused",
        "does not use stable row ids",
    ),
    "rewrite, a new fragment with a deletion file": (
        False,
        True,
        lambda d, ds: LO.Rewrite(
            groups=[
                LO.RewriteGroup(
                    old_fragments=[_frags(ds)[0]],
                    new_fragments=[
                        _with(_written(d, 40), deletion_file=_frags(ds)[0].deletion_file)
                    ],
                )
            ],
            rewritten_indices=[],
        ),
        "unreadable",
        "Rewrite fragments must be newly written",
    ),
    "rewrite, a new fragment with row ids on a table without them": (
        False,
        False,
        lambda d, ds: LO.Rewrite(
            groups=[
                LO.RewriteGroup(
                    old_fragments=[_frags(ds)[0]],
                    new_fragments=[_with(_written(d), row_id_meta=_foreign_row_ids(d))],
                )
            ],
            rewritten_indices=[],
        ),
        "refused",
        "does not use stable row ids",
    ),
    "merge, the fragments as the table has them": (
        False,
        True,
        lambda d, ds: LO.Merge(_frags(ds), ds.schema),
        "landed",
        None,
    ),
    "merge, a fragment's deletion file dropped": (
        False,
        True,
        lambda d, ds: LO.Merge(
            [_with(_frags(ds)[0], deletion_file=None), _frags(ds)[1]], ds.schema
        ),
        "landed",
        None,
    ),
    "merge, a fragment given another fragment's deletion file": (
        False,
        True,
        lambda d, ds: LO.Merge(
            [_frags(ds)[0], _with(_frags(ds)[1], deletion_file=_frags(ds)[0].deletion_file)],
            ds.schema,
        ),
        "unreadable",
        "not the one it has",
    ),
    "merge, a new fragment with a deletion file": (
        False,
        True,
        lambda d, ds: LO.Merge(
            [*_frags(ds), _with(_written(d), id=5, deletion_file=_frags(ds)[0].deletion_file)],
            ds.schema,
        ),
        "unreadable",
        "Merge fragments must be newly written",
    ),
    "merge, a new fragment (id 0) after the existing ones": (
        False,
        False,
        lambda d, ds: LO.Merge([*_frags(ds), _written(d)], ds.schema),
        "landed",
        None,
    ),
    "merge, a new fragment (id 0) after the existing ones, stable row ids": (
        True,
        False,
        lambda d, ds: LO.Merge([*_frags(ds), _written(d)], ds.schema),
        "landed",
        None,
    ),
    "merge, a new fragment with an id of its own, stable row ids": (
        True,
        False,
        lambda d, ds: LO.Merge([*_frags(ds), _with(_written(d), id=5)], ds.schema),
        "landed",
        None,
    ),
    "merge, a new fragment (id 0) on a table without fragment 0, stable row ids": (
        True,
        False,
        lambda d, ds: LO.Merge([*_frags(_drop_fragment_0(d, ds)), _written(d)], ds.schema),
        "landed",
        None,
    ),
    "merge, a new fragment listed before the existing ones": (
        False,
        False,
        lambda d, ds: LO.Merge([_written(d), *_frags(ds)], ds.schema),
        "refused",
        "after a new fragment",
    ),
    "merge, a fragment listed twice": (
        False,
        False,
        lambda d, ds: LO.Merge([*_frags(ds), _frags(ds)[1]], ds.schema),
        "refused",
        "listed twice",
    ),
    "merge, a fragment missing": (
        False,
        False,
        lambda d, ds: LO.Merge(_frags(ds)[1:], ds.schema),
        "refused",
        "fragment 0 is missing",
    ),
    "merge, the stable row ids of a fragment dropped": (
        True,
        False,
        lambda d, ds: LO.Merge([_frags(ds)[0], _with(_frags(ds)[1], row_id_meta=None)], ds.schema),
        "refused",
        "dropped the stable row ids of existing fragment 1",
    ),
    "merge, row ids given on a table without them": (
        False,
        False,
        lambda d, ds: LO.Merge(
            [_frags(ds)[0], _with(_frags(ds)[1], row_id_meta=_foreign_row_ids(d))], ds.schema
        ),
        "refused",
        "does not use stable row ids",
    ),
}


def _commit(base: str, plan: Plan, engine: str) -> tuple[str, BaseException | None]:
    """A copy of ``base`` with ``plan`` committed on it by ``engine``: (its URI, the error
    the commit raised or None)."""
    uri = tempfile.mkdtemp(dir=str(Path(base).parent)) + "/t.lance"
    shutil.copytree(base, uri)
    ds = lance.dataset(uri)
    op = plan(uri, ds)
    try:
        if engine == "pylance":
            lance.LanceDataset.commit(uri, op, read_version=ds.version)
        else:
            te.commit(uri, lance.Transaction(ds.version, op))  # converted by commit
    except Exception as exc:  # pylance raises OSError/ValueError; txn_engine its own
        return uri, exc
    return uri, None


def _read_back(uri: str) -> dict[str, Any]:
    """What the latest version reads as, and whether pylance can still commit on top."""
    ds = lance.dataset(uri)
    cols = ["a"]
    if ds.has_stable_row_ids:
        cols += ["_row_created_at_version", "_row_last_updated_at_version"]
    rows = ds.to_table(columns=cols, with_row_id=ds.has_stable_row_ids)
    out = {
        "version": ds.version,
        "count": ds.count_rows(),
        "fragment ids": [f.fragment_id for f in ds.get_fragments()],
        "rows": sorted(zip(*(rows[c].to_pylist() for c in rows.column_names), strict=True)),
    }
    lance.write_dataset(pa.table({"a": [-1]}), uri, mode="append")  # a later commit works
    return out


def _verdict(uri: str, error: BaseException | None) -> str:
    if error is not None:
        return "refused"
    try:
        _read_back(copy_of(uri))
    except Exception:
        return "unreadable"
    return "landed"


def copy_of(uri: str) -> str:
    out = tempfile.mkdtemp(dir=str(Path(uri).parent)) + "/r.lance"
    shutil.copytree(uri, out)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_new_fragments_as_pylance_validates_them(tmp_path: Path, name: str) -> None:
    stable, delete, plan, pylance_verdict, refusal = CASES[name]
    base = _table(tmp_path, stable=stable, delete=delete)
    theirs, their_error = _commit(base, plan, "pylance")
    assert _verdict(theirs, their_error) == pylance_verdict, their_error
    ours, our_error = _commit(base, plan, "txn_engine")
    if refusal is not None:
        assert isinstance(our_error, InvalidOperationError), our_error
        assert re.search(refusal, str(our_error)), str(our_error)
        assert lance.dataset(ours).version == lance.dataset(base).version  # nothing landed
        assert sorted(p.name for p in Path(ours, "_versions").iterdir()) == sorted(
            p.name for p in Path(base, "_versions").iterdir()
        )
        return
    assert our_error is None, our_error
    assert _read_back(ours) == _read_back(theirs)
