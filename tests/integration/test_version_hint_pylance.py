"""The latest-version hint between pylance 14.0.2 and txn_engine on local disk.

Proves: pylance writes ``_versions/latest_version_hint.json`` and txn_engine starts from it;
when the two alternate commits, both always agree on the latest version and its rows (a
listing may be needed: pylance writes its own hint into ``_versions/`` after its manifest, in
the background, measured landing a few ms after ``write_dataset`` returned); the hint
txn_engine writes (``_txn_engine/latest_version_hint.json``) is byte for byte the one pylance
writes for the same version.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

import txn_engine as te
from txn_engine.dataset import Dataset
from txn_engine.format.naming import TXN_HINT_PATH, VERSION_HINT_PATH
from txn_engine.storage import LocalStorage, RecordingStorage

# these tests exercise the hint path: use it on their small tables too
pytestmark = pytest.mark.usefixtures("hint_on_every_table")


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _hint(uri: str, path: str = VERSION_HINT_PATH) -> bytes:
    return Path(uri, path).read_bytes()


def _versions_listed(rec: RecordingStorage) -> int:
    return sum(1 for method, path in rec.calls if method == "list" and path == "_versions")


def _te_ids(uri: str) -> list[int]:
    """The ids txn_engine's latest version names, read back through pylance at it."""
    version = Dataset.open(uri).version
    table = lance.dataset(uri, version=version).to_table()
    return sorted(table.column("id").to_pylist())


def test_txn_engine_reads_the_hint_pylance_writes(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 5), uri)
    lance.write_dataset(_rows(5, 5), uri, mode="append")
    assert _hint(uri) == b'{"version":2}'
    rec = RecordingStorage(LocalStorage(uri))
    assert Dataset.open(rec).version == 2
    assert _versions_listed(rec) <= 1
    rec.reset()
    frags = write_fragments(_rows(10, 3), uri)
    assert te.commit(rec, lance.Transaction(2, lance.LanceOperation.Append(frags))).version == 3
    assert _versions_listed(rec) <= 1
    assert lance.dataset(uri).version == 3
    assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == list(range(13))


def test_alternating_commits_agree_on_the_latest(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 4), uri)
    expected = list(range(4))
    next_id = 4
    for round_ in range(4):
        # txn_engine, cold from the URI
        frags = write_fragments(_rows(next_id, 2), uri)
        rec = RecordingStorage(LocalStorage(uri))
        read_version = Dataset.open(rec).version
        landed = te.commit(rec, lance.Transaction(read_version, lance.LanceOperation.Append(frags)))
        assert _versions_listed(rec) <= 2, round_
        expected += list(range(next_id, next_id + 2))
        next_id += 2
        assert _hint(uri, TXN_HINT_PATH) == b'{"version":%d}' % landed.version
        assert lance.dataset(uri).version == landed.version == Dataset.open(uri).version
        assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == expected
        assert _te_ids(uri) == expected
        # pylance
        lance.write_dataset(_rows(next_id, 3), uri, mode="append")
        expected += list(range(next_id, next_id + 3))
        next_id += 3
        pylance_version = lance.dataset(uri).version
        assert pylance_version == landed.version + 1
        assert _hint(uri) == b'{"version":%d}' % pylance_version
        rec = RecordingStorage(LocalStorage(uri))
        assert Dataset.open(rec).version == pylance_version
        assert _versions_listed(rec) <= 1
        assert _te_ids(uri) == expected


def test_the_hint_txn_engine_writes_is_pylances(tmp_path: Path) -> None:
    """Version 3 made by pylance in one table and by txn_engine in another: equal hints."""
    by_pylance = str(tmp_path / "p.lance")
    by_engine = str(tmp_path / "e.lance")
    for uri in (by_pylance, by_engine):
        lance.write_dataset(_rows(0, 2), uri)
        lance.write_dataset(_rows(2, 2), uri, mode="append")
    lance.write_dataset(_rows(4, 2), by_pylance, mode="append")
    frags = write_fragments(_rows(4, 2), by_engine)
    assert (
        te.commit(by_engine, lance.Transaction(2, lance.LanceOperation.Append(frags))).version == 3
    )
    assert _hint(by_engine, TXN_HINT_PATH) == _hint(by_pylance) == b'{"version":3}'
    # and a created table: the hint pylance writes for version 1
    created = str(tmp_path / "c.lance")
    schema = _rows(0, 1).schema
    op = lance.LanceOperation.Overwrite(schema, write_fragments(_rows(0, 1), created))
    assert te.commit(created, lance.Transaction(0, op)).version == 1
    made_by_pylance = str(tmp_path / "p1.lance")
    lance.write_dataset(_rows(0, 1), made_by_pylance)
    assert _hint(created, TXN_HINT_PATH) == _hint(made_by_pylance) == b'{"version":1}'
    assert lance.dataset(created).to_table().column("id").to_pylist() == [0]
