"""Table.compact keeps indices correct the way pylance 14.0.2 does with
``defer_index_remap``: same index coverage, same ``__lance_frag_reuse`` record, same query
results as pylance's own compaction (default remap and deferred remap), round after round."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.optimize import Compaction

import txn_engine as te
from txn_engine._proto import table_pb2


def _write(uri: str, start: int, fragments: int, rows: int = 10) -> None:
    for i in range(fragments):
        lo = start + i * rows
        table = pa.table({"id": list(range(lo, lo + rows)), "v": [f"s{x}" for x in range(rows)]})
        lance.write_dataset(table, uri, mode="append")


def _coverage(uri: str) -> list[tuple[str, str, list[int], int]]:
    """Every index as pylance lists it, without its uuid: name, type, fragments, version."""
    ds = lance.dataset(uri)
    return sorted(
        (i["name"], i["type"], sorted(i["fragment_ids"]), i["version"]) for i in ds.list_indices()
    )


def _described(uri: str) -> list[tuple[str, int]]:
    return sorted((i.name, i.num_rows_indexed) for i in lance.dataset(uri).describe_indices())


def _queries(uri: str, ids: range) -> list[Any]:
    ds = lance.dataset(uri)
    out = []
    for i in ids:
        scanner = ds.scanner(filter=f"id = {i}")
        assert "ScalarIndexQuery" in scanner.explain_plan()  # answered by the index
        out.append(scanner.to_table().to_pylist())
    out.append(ds.to_table(filter="id >= 5 and id < 33").sort_by("id").to_pylist())
    return out


def _pylance_deferred(uri: str) -> None:
    ds = lance.dataset(uri)
    opts: Any = {"defer_index_remap": True}
    done = [t.execute(ds) for t in Compaction.plan(ds, opts).tasks]
    Compaction.commit(ds, done, opts)


@pytest.fixture
def triple(tmp_path: Path) -> tuple[str, str, str]:
    """Three copies of a table with a BTREE index over 4 fragments and a deletion:
    (pylance default compaction, pylance deferred remap, txn_engine)."""
    a = str(tmp_path / "a.lance")
    _write(a, 0, 4)
    lance.dataset(a).create_scalar_index("id", "BTREE")
    lance.dataset(a).delete("id = 3")
    b, c = str(tmp_path / "b.lance"), str(tmp_path / "c.lance")
    shutil.copytree(a, b)
    shutil.copytree(a, c)
    return a, b, c


def test_compact_under_a_btree_index_matches_pylance(triple: tuple[str, str, str]) -> None:
    default, deferred, ours = triple
    lance.dataset(default).optimize.compact_files()
    _pylance_deferred(deferred)
    result = te.open(ours).compact()
    assert result is not None
    assert result.transaction.kind == "Rewrite"

    # the index covers the new fragment, in every variant (the old code left it on the
    # removed fragments 0-3)
    assert ("id_idx", "BTree", [4], 4) in _coverage(ours)
    user = [c for c in _coverage(ours) if not c[0].startswith("__")]
    assert user == [c for c in _coverage(default) if not c[0].startswith("__")]
    # exactly what pylance's deferred remap records (uuids aside), versions included
    assert _coverage(ours) == _coverage(deferred)
    assert _described(ours) == _described(deferred)
    assert [n for n in _described(default) if n[0] == "id_idx"] == [("id_idx", 39)]
    assert lance.dataset(ours).version == lance.dataset(deferred).version
    # filtered queries answered by the index give the rows pylance's compactions give
    expected = _queries(default, range(0, 40, 3))
    assert _queries(ours, range(0, 40, 3)) == expected == _queries(deferred, range(0, 40, 3))
    kinds = [v.operation for v in te.Dataset.open(ours).versions()][-2:]
    assert kinds == ["ReserveFragments", "Rewrite"]


def test_a_second_round_appends_to_the_fragment_reuse_record(
    triple: tuple[str, str, str],
) -> None:
    default, deferred, ours = triple
    lance.dataset(default).optimize.compact_files()
    _pylance_deferred(deferred)
    te.open(ours).compact()
    for uri in triple:  # new rows, indexed, then compacted again
        _write(uri, 40, 3)
        lance.dataset(uri).optimize.optimize_indices()
        lance.dataset(uri).delete("id = 41")
    lance.dataset(default).optimize.compact_files()
    _pylance_deferred(deferred)
    te.open(ours).compact()

    assert _coverage(ours) == _coverage(deferred)
    assert _described(ours) == _described(deferred)
    assert _queries(ours, range(0, 70, 4)) == _queries(default, range(0, 70, 4))
    reuse = [i for i in te.Dataset.open(ours).indices if i.name == "__lance_frag_reuse"]
    assert len(reuse) == 1
    assert reuse[0].index_details is not None
    details = table_pb2.FragmentReuseIndexDetails()
    details.ParseFromString(reuse[0].index_details.value)
    theirs = [
        i for i in lance.dataset(deferred).list_indices() if i["name"] == "__lance_frag_reuse"
    ]
    assert len(details.inline.versions) == 2  # one per compaction, the first one kept
    assert [v.dataset_version for v in details.inline.versions][-1] == theirs[0]["version"]


def test_without_an_index_compact_reserves_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _write(uri, 0, 4)
    before = lance.dataset(uri).version
    result = te.open(uri).compact()
    assert result is not None
    assert result.version == before + 1  # one Rewrite, as pylance's compact_files
    assert lance.dataset(uri).list_indices() == []


def _stable_table(uri: str) -> None:
    """100 rows in 10 fragments with stable row ids, a BTREE index on ``id`` over all of
    them, then 3 appended fragments the index does not cover."""
    table = pa.table({"id": list(range(100)), "v": [f"s{x}" for x in range(100)]})
    lance.write_dataset(table, uri, max_rows_per_file=10, enable_stable_row_ids=True)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    for i in range(3):
        lo = 100 + 10 * i
        extra = pa.table({"id": list(range(lo, lo + 10)), "v": ["t"] * 10})
        lance.write_dataset(extra, uri, mode="append")


def test_compact_on_stable_row_ids_keeps_every_query_right(tmp_path: Path) -> None:
    """pylance 14 cannot defer an index remap under stable row ids, and a Python caller
    cannot remap index files outside pylance's commit: txn_engine's compact takes the
    compacted fragments out of the index's coverage (claiming them would hide indexed rows:
    a point query found nothing), so every query returns what it returns after pylance's
    own compaction; optimize_indices covers them again."""
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    _stable_table(ours)
    shutil.copytree(ours, theirs)
    te.open(ours).compact()
    lance.dataset(theirs).optimize.compact_files()

    def answers(uri: str) -> list[list[int]]:
        ds = lance.dataset(uri)
        points = [
            ds.to_table(filter=f"id = {i}").column("id").to_pylist()
            for i in (0, 5, 57, 99, 100, 115, 129)
        ]
        window = ds.to_table(filter="id >= 95 and id < 105").column("id").to_pylist()
        return [*points, sorted(window), [ds.count_rows()]]

    assert answers(ours) == answers(theirs)
    assert answers(ours)[0] == [0]
    assert answers(ours)[-1] == [130]
    assert [len(f) for _, _, f, _ in _coverage(ours)] == [0]  # out of coverage, not stale
    lance.dataset(ours).optimize.optimize_indices()
    assert [f for _, _, f, _ in _coverage(ours)] != [[]]
    assert answers(ours) == answers(theirs)
