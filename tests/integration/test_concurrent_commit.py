"""Real concurrency on local disk: threads and processes, txn_engine and pylance writers.

Every commit lands exactly once (each transaction uuid appears in exactly one version),
versions are contiguous, and pylance reads the result with the expected rows. Deletes of
disjoint rows of one fragment all land when ``affected_rows`` are given; overlapping ones
are retryable and land after re-planning.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import attrs
import lance
import lance.fragment as lf
import pyarrow as pa
import pytest
from pyroaring import BitMap, BitMap64

from txn_engine.commit import commit, replan_and_commit
from txn_engine.conflicts import ConflictOptions
from txn_engine.dataset import Dataset
from txn_engine.errors import RetryableConflictError
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import list_versions
from txn_engine.model import DeletionFile, Fragment
from txn_engine.ops import Append, Delete
from txn_engine.retry import RetryPolicy
from txn_engine.storage import LocalStorage
from txn_engine.transaction import Transaction

LANCE = ConflictOptions(rebase_rows=False)  # pylance 14's rules

pytestmark = pytest.mark.pylance


def _table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _create(uri: str, rows: int = 40, per_file: int = 10) -> None:
    lance.write_dataset(_table(0, rows), uri, max_rows_per_file=per_file)


def _engine_append(uri: str, read_version: int, start: int, n: int = 5) -> Transaction:
    frags = [
        Fragment.from_lance_json(m.to_json()) for m in lf.write_fragments(_table(start, n), uri)
    ]
    txn = Transaction(read_version, Append(frags))
    commit(uri, txn)
    return txn


def _uuids(uri: str) -> Counter[str]:
    store = LocalStorage(uri)
    return Counter(read_transaction(store, e).uuid for e in list_versions(store))


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table()["id"].to_pylist())


def test_engine_threads_append_exactly_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _create(uri)
    writers, per_writer = 4, 6
    landed: list[Transaction] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            for i in range(per_writer):
                txn = _engine_append(uri, 1, 1000 + (w * per_writer + i) * 5)  # stale read version
                with lock:
                    landed.append(txn)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    versions = [e.version for e in list_versions(LocalStorage(uri))]
    assert versions == list(range(1, writers * per_writer + 2))
    counts = _uuids(uri)
    assert all(counts[t.uuid] == 1 for t in landed)
    expected = list(range(40)) + sorted(
        i for w in range(writers * per_writer) for i in range(1000 + w * 5, 1005 + w * 5)
    )
    assert _ids(uri) == sorted(expected)


def test_pylance_and_engine_writers_mixed(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _create(uri)
    rounds = 5
    engine_txns: list[Transaction] = []
    errors: list[BaseException] = []

    def engine(w: int) -> None:
        try:
            for i in range(rounds):
                engine_txns.append(_engine_append(uri, 1, 10_000 + (w * rounds + i) * 5))
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    def pylance_writer(w: int) -> None:
        try:
            for i in range(rounds):
                frags = lf.write_fragments(_table(20_000 + (w * rounds + i) * 5, 5), uri)
                lance.LanceDataset.commit(uri, lance.LanceOperation.Append(frags), read_version=1)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=engine, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=pylance_writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    total = 4 * rounds
    versions = [e.version for e in list_versions(LocalStorage(uri))]
    assert versions == list(range(1, total + 2))
    counts = _uuids(uri)
    assert all(counts[t.uuid] == 1 for t in engine_txns)
    assert sum(counts.values()) == total + 1
    assert lance.dataset(uri).count_rows() == 40 + total * 5


_WRITER = """
import sys
import lance.fragment as lf
import pyarrow as pa
from txn_engine.commit import commit
from txn_engine.model import Fragment
from txn_engine.ops import Append
from txn_engine.transaction import Transaction

uri, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    start = 50_000 + (w * n + i) * 5
    table = pa.table({"id": pa.array(range(start, start + 5), pa.int64())})
    frags = [Fragment.from_lance_json(m.to_json()) for m in lf.write_fragments(table, uri)]
    commit(uri, Transaction(1, Append(frags)))
"""


def test_engine_processes_append_exactly_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _create(uri)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, uri, str(w), "4"]) for w in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    versions = [e.version for e in list_versions(LocalStorage(uri))]
    assert versions == list(range(1, 14))
    assert len(_uuids(uri)) == 13
    assert lance.dataset(uri).count_rows() == 40 + 12 * 5


# ---- deletes on one fragment ------------------------------------------------------------------


def _plan_delete(uri: str, read_version: int, rows: set[int]) -> Transaction:
    store = LocalStorage(uri)
    ds = Dataset.open(store, version=read_version)
    base = ds.fragments[0]
    before = (
        read_deletion_vector(store, 0, base.deletion_file.to_proto())
        if base.deletion_file is not None
        else BitMap()
    )
    dv = write_deletion_vector(store, 0, read_version, before | BitMap(rows))
    updated = attrs.evolve(base, deletion_file=DeletionFile.from_proto(dv))
    return Transaction(
        read_version,
        Delete([updated], predicate=f"id in {sorted(rows)}", affected_rows=BitMap64(sorted(rows))),
    )


def test_concurrent_disjoint_row_deletes_in_one_fragment_all_land(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _create(uri, rows=40, per_file=40)  # one fragment
    groups = [{0, 1}, {5}, {9, 10, 11}, {20}, {33, 34}, {39}]
    planned = [_plan_delete(uri, 1, g) for g in groups]
    errors: list[BaseException] = []

    def work(txn: Transaction) -> None:
        try:
            commit(uri, txn)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in planned]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    deleted = set().union(*groups)
    assert _ids(uri) == [i for i in range(40) if i not in deleted]
    assert len(list_versions(LocalStorage(uri))) == 1 + len(groups)


def test_overlapping_row_deletes_are_retryable_under_lance_rules_then_land_after_replanning(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    _create(uri, rows=40, per_file=40)
    commit(uri, _plan_delete(uri, 1, {3, 4}))
    with pytest.raises(RetryableConflictError) as info:
        commit(uri, _plan_delete(uri, 1, {4, 5}), conflict_options=LANCE)
    assert info.value.conflicts[0].row_addresses == (4,)

    def plan(ds: Dataset) -> Transaction:
        live = set(_ids(uri))
        return _plan_delete(uri, ds.version, {4, 5} & live)

    result = replan_and_commit(
        uri, plan, retry_policy=RetryPolicy(max_attempts=3), conflict_options=LANCE
    )
    assert result.version == 3
    assert _ids(uri) == [i for i in range(40) if i not in {3, 4, 5}]


def test_overlapping_row_deletes_merge_by_default(tmp_path: Path) -> None:
    """Both deletes land with no re-plan: serially the second one's predicate no longer
    matches row 4, so the result is the union, as pylance reads it."""
    uri = str(tmp_path / "ds")
    _create(uri, rows=40, per_file=40)
    commit(uri, _plan_delete(uri, 1, {3, 4}))
    result = commit(uri, _plan_delete(uri, 1, {4, 5}))
    assert result.version == 3
    assert _ids(uri) == [i for i in range(40) if i not in {3, 4, 5}]
    assert lance.dataset(uri).count_rows() == 37


def test_engine_deletes_rebase_over_pylance_deletes(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _create(uri, rows=40, per_file=40)
    mine = _plan_delete(uri, 1, {7, 8})
    lance.dataset(uri).delete("id in (1, 2)")  # pylance lands v2 on the same fragment
    result = commit(uri, mine)
    assert result.version == 3
    assert result.transaction.read_version == 2
    assert _ids(uri) == [i for i in range(40) if i not in {1, 2, 7, 8}]
    lance.dataset(uri).delete("id = 30")  # and pylance rebases on top of ours
    assert lance.dataset(uri).count_rows() == 35
