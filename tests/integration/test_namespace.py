"""te.Namespace: pylance 14.0.2 opens, reads and commits through it; transactions across
tables land all or nothing, crash at any step, conflict and settle exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import lance
import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace import errors as lerr

import txn_engine as te
from txn_engine.errors import (
    AmbiguousWriteError,
    InvalidOperationError,
    NamespaceTransactionAbortedError,
)
from txn_engine.namespace import MARKER_KEY
from txn_engine.namespace._transaction import StagingHandler, WithHandler
from txn_engine.verify import verify

pytestmark = pytest.mark.pylance


def _ids(ds: Any) -> list[int]:
    return sorted(ds.to_table()["id"].to_pylist())


def _ns(tmp_path: Path, **kw: Any) -> Any:
    ns = te.Namespace(tmp_path / "root", **kw)
    ns.create_table("db.events", pa.table({"id": [1, 2]}))
    ns.create_table("db.dims", pa.table({"id": [10]}))
    return ns


def _via(ns: Any, table: str) -> Any:
    return lance.dataset(namespace_client=ns, table_id=table.split("."))


def test_pylance_opens_reads_and_commits_through_the_namespace(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    assert isinstance(ns, ln.LanceNamespace)
    ds = _via(ns, "db.events")
    assert _ids(ds) == [1, 2]
    ds.insert(pa.table({"id": [3]}))
    ds.delete("id = 1")
    upsert = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    upsert.execute(pa.table({"id": [3, 9]}))
    assert ds.version == 4
    assert _ids(ds) == [2, 3, 9]
    # published at the canonical path: pylance and txn_engine read it directly
    path = ns.location(("db", "events"))
    assert _ids(lance.dataset(path)) == [2, 3, 9]
    assert te.Dataset.open(path).version == 4
    assert verify(path, deep=True, data_files=True).ok
    assert not [n for n in Path(path, "_versions").iterdir() if "manifest-" in n.name]
    # the txn_engine writer handle commits through the namespace too
    assert ns.open("db.events").append(pa.table({"id": [5]})).version == 5
    assert _ids(_via(ns, "db.events")) == [2, 3, 5, 9]
    old = lance.dataset(namespace_client=ns, table_id=["db", "events"], version=2)
    assert _ids(old) == [1, 2, 3]
    # pylance creating a table through it
    made = lance.write_dataset(pa.table({"id": [7]}), namespace_client=ns, table_id=["db", "x"])
    assert made.version == 1
    assert ns.list_tables(("db",)) == ["db.dims", "db.events", "db.x"]


def test_two_pylance_writers_race_and_both_land(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    a, b = _via(ns, "db.events"), _via(ns, "db.events")
    a.insert(pa.table({"id": [3]}))
    b.insert(pa.table({"id": [4]}))  # 409 on version 2, pylance re-checks and retries
    assert _ids(_via(ns, "db.events")) == [1, 2, 3, 4]


def test_transaction_lands_in_every_table_at_once(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    with ns.transaction() as tx:
        tx.open("db.events").append(pa.table({"id": [100]}))
        tx.open("db.dims").delete("id = 10")
        # planned and staged, nothing visible yet: the reservations are no-op versions
        assert _ids(_via(ns, "db.events")) == [1, 2]
        assert _ids(lance.dataset(ns.location(("db", "dims")))) == [10]
    assert tx.decision is not None
    assert tx.decision.committed
    assert _ids(_via(ns, "db.events")) == [1, 2, 100]
    assert _ids(_via(ns, "db.dims")) == []
    snap = ns.snapshot(["db.events", "db.dims"])
    assert snap == {"db.events": 3, "db.dims": 3}
    reserved = te.Dataset.open(ns.location(("db", "events")), version=2)
    assert reserved.config[MARKER_KEY] == tx.id
    assert reserved.count_rows() == 2


def test_an_exception_in_the_block_aborts_and_frees_the_tables(tmp_path: Path) -> None:
    ns = _ns(tmp_path, abort_after=60.0)
    tx = ns.transaction()

    def failing_block() -> None:
        with tx:
            tx.open("db.events").append(pa.table({"id": [100]}))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_block()
    assert tx.decision is not None
    assert not tx.decision.committed
    started = time.monotonic()
    ns.open("db.events").append(pa.table({"id": [3]}))  # no wait: the abort is decided
    assert time.monotonic() - started < 10
    assert _ids(_via(ns, "db.events")) == [1, 2, 3]


def test_a_crash_before_the_decision_leaves_nothing_visible(tmp_path: Path) -> None:
    ns = _ns(tmp_path, abort_after=0.3)
    crashed = ns.transaction()
    crashed.open("db.events").append(pa.table({"id": [100]}))
    crashed.open("db.dims").append(pa.table({"id": [100]}))
    # the writer process is gone; another writer waits abort_after, then aborts it
    other = te.Namespace(tmp_path / "root", abort_after=0.3)
    other.open("db.events").append(pa.table({"id": [3]}))
    assert other.resolver.decision(crashed.id).state == "aborted"  # type: ignore[union-attr]
    assert _ids(_via(other, "db.events")) == [1, 2, 3]
    assert _ids(_via(other, "db.dims")) == [10]
    with pytest.raises(NamespaceTransactionAbortedError):
        crashed.commit()  # the crashed writer coming back cannot land it any more
    assert _ids(_via(other, "db.dims")) == [10]


def test_a_crash_after_the_decision_is_rolled_forward_by_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns(tmp_path)
    monkeypatch.setattr(
        ns, "publish_all", lambda decided, staged=None: None
    )  # dies after its decision
    with ns.transaction() as tx:
        tx.open("db.events").append(pa.table({"id": [100]}))
        tx.open("db.dims").append(pa.table({"id": [100]}))
    path = ns.location(("db", "dims"))
    assert lance.dataset(path).version == 2  # not published yet
    reader = te.Namespace(tmp_path / "root")
    assert _ids(_via(reader, "db.dims")) == [10, 100]  # pylance through the namespace
    assert lance.dataset(path).version == 3  # published by that read
    # a writer rolls forward the other table before it commits on top
    reader.open("db.events").append(pa.table({"id": [3]}))
    assert _ids(lance.dataset(ns.location(("db", "events")))) == [1, 2, 3, 100]


def test_a_single_table_writer_waits_for_a_pending_transaction(tmp_path: Path) -> None:
    ns = _ns(tmp_path, abort_after=30.0)
    tx = ns.transaction()
    tx.open("db.events").append(pa.table({"id": [100]}))
    done: list[int] = []

    def pylance_writer() -> None:
        ds = _via(te.Namespace(tmp_path / "root"), "db.events")
        ds.insert(pa.table({"id": [3]}))
        done.append(ds.version)

    thread = threading.Thread(target=pylance_writer)
    thread.start()
    time.sleep(0.5)
    assert not done  # it waits on the reserved version
    tx.commit()
    thread.join(30)
    assert done == [4]  # it built 3 on the reservation (2), got 409, rebuilt on 3
    assert _ids(_via(ns, "db.events")) == [1, 2, 3, 100]


def test_disjoint_transactions_both_land_and_common_ones_serialize(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    ns.create_table("db.other", pa.table({"id": [0]}))
    errors: list[BaseException] = []

    def run(tables: list[str], rows: list[int]) -> None:
        try:
            deadline = time.monotonic() + 45.0
            while time.monotonic() < deadline:
                try:
                    with te.Namespace(tmp_path / "root").transaction() as tx:
                        for t in tables:
                            tx.open(t).append(pa.table({"id": rows}))
                    return
                except NamespaceTransactionAbortedError:
                    # gave way to an older transaction: run it again once that one had a
                    # moment (retried at once, one gave way 50 times on a loaded machine
                    # while the older one was still committing)
                    time.sleep(0.05)
            raise AssertionError(f"{rows} still gave way after 45 s")
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(["db.events", "db.dims"], [101])),
        threading.Thread(target=run, args=(["db.dims", "db.events"], [102])),
        threading.Thread(target=run, args=(["db.other"], [103])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert _ids(_via(ns, "db.events")) == [1, 2, 101, 102]
    assert _ids(_via(ns, "db.dims")) == [10, 101, 102]
    assert _ids(_via(ns, "db.other")) == [0, 103]


def test_a_younger_transaction_gives_way_to_an_older_one(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    older, younger = ns.transaction(), ns.transaction()
    older.open("db.events").append(pa.table({"id": [100]}))
    younger.open("db.dims").append(pa.table({"id": [200]}))
    with pytest.raises(NamespaceTransactionAbortedError):
        younger.open("db.events")  # holds a table, meets an older one: dies, no deadlock
    younger.abort()
    older.open("db.dims").append(pa.table({"id": [100]}))  # the older one may wait: free now
    # dims: 1, the younger one's reservation (2, aborted: a no-op), the older one's (3)
    assert older.commit() == {"db.events": 3, "db.dims": 4}
    assert _ids(_via(ns, "db.dims")) == [10, 100]


def test_each_table_changes_once_per_transaction(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    tx = ns.transaction()
    tx.open("db.events").append(pa.table({"id": [100]}))
    with pytest.raises(InvalidOperationError, match="once"):
        tx.open("db.events").append(pa.table({"id": [101]}))
    tx.abort()
    assert _ids(_via(ns, "db.events")) == [1, 2]


class _LoseDecisionResponse:
    """Wraps the root storage: the first decision write lands, its response is lost."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.lost = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.inner.put_if_absent(path, data)
        if "/transactions/" in path and not self.lost:
            self.lost += 1
            raise AmbiguousWriteError("response lost")


def test_a_lost_decision_response_settles_exactly_once(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    lossy = _LoseDecisionResponse(ns.root)
    ns.resolver._root = lossy
    with ns.transaction() as tx:
        tx.open("db.events").append(pa.table({"id": [100]}))
        tx.open("db.dims").append(pa.table({"id": [100]}))
    assert lossy.lost == 1
    assert tx.decision is not None
    assert tx.decision.committed
    assert _ids(_via(ns, "db.events")) == [1, 2, 100]
    again = ns.transaction(transaction_id=tx.id)
    assert again.already_committed
    with pytest.raises(InvalidOperationError):
        again.open("db.events")
    assert _ids(_via(ns, "db.dims")) == [10, 100]


def _stage(ns: Any, table: str, rows: list[int]) -> tuple[int, str]:
    """Build the next version of ``table`` by hand and stage it (what a client does
    before BatchCommitTables): returns (version, staged manifest path)."""
    parts = tuple(table.split("."))
    storage = ns.table_storage(parts)
    version = ns.latest(parts).version + 1
    handler = StagingHandler(storage, "client", version)
    te.Table(WithHandler(storage, handler)).append(pa.table({"id": rows}))
    assert handler.staged is not None
    return version, handler.staged[0]


def test_batch_commit_tables_all_or_nothing(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    ve, pe = _stage(ns, "db.events", [7])
    vd, pd = _stage(ns, "db.dims", [7])
    request = ln.BatchCommitTablesRequest(
        operations=[
            ln.CommitTableOperation(declare_table=ln.DeclareTableRequest(id=["db", "new"])),
            ln.CommitTableOperation(
                create_table_version=ln.CreateTableVersionRequest(
                    id=["db", "events"], version=ve, manifest_path=pe
                )
            ),
            ln.CommitTableOperation(
                create_table_version=ln.CreateTableVersionRequest(
                    id=["db", "dims"], version=vd, manifest_path=pd
                )
            ),
        ]
    )
    out = ns.batch_commit_tables(request)
    assert [r.create_table_version.version.version for r in out.results[1:]] == [3, 3]
    assert _ids(_via(ns, "db.events")) == [1, 2, 7]
    assert _ids(_via(ns, "db.dims")) == [7, 10]
    assert ns.list_tables(("db",)) == ["db.dims", "db.events", "db.new"]
    # a table that moved on: the whole batch is refused, the other table unchanged
    ve, pe = _stage(ns, "db.events", [8])
    vd, pd = _stage(ns, "db.dims", [8])
    ns.open("db.dims").append(pa.table({"id": [9]}))
    entries = [
        {"id": ["db", "events"], "version": ve, "manifest_path": pe},
        {"id": ["db", "dims"], "version": vd, "manifest_path": pd},
    ]
    with pytest.raises(lerr.ConcurrentModificationError):
        ns.batch_create_table_versions({"entries": entries})
    assert _ids(_via(ns, "db.events")) == [1, 2, 7]
    assert _ids(_via(ns, "db.dims")) == [7, 9, 10]


def test_spec_errors_and_no_secrets(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    with pytest.raises(lerr.TableNotFoundError):
        ns.describe_table(ln.DescribeTableRequest(id=["db", "missing"]))
    with pytest.raises(lerr.InvalidInputError):
        ns.describe_table({"id": ["..", "x"]})
    version, staged = _stage(ns, "db.events", [7])
    ns.open("db.events").append(pa.table({"id": [8]}))  # takes that version number
    with pytest.raises(lerr.ConcurrentModificationError):
        ns.create_table_version(
            {"id": ["db", "events"], "version": version, "manifest_path": staged}
        )
    with pytest.raises(lerr.InvalidInputError):
        ns.create_table_version(
            {"id": ["db", "events"], "version": 9, "manifest_path": "/etc/passwd"}
        )
    with pytest.raises(lerr.TableVersionNotFoundError):
        ns.describe_table_version({"id": ["db", "events"], "version": 99})
    listed = ns.list_table_versions({"id": ["db", "events"], "limit": 1, "descending": True})
    assert [v.version for v in listed.versions] == [2]
    described = ns.describe_table(ln.DescribeTableRequest(id=["db", "events"]))
    assert described.managed_versioning is True
    assert described.is_only_declared is False
    # (storage options with secrets: tests/integration/test_namespace_stores.py)


def test_snapshots_never_split_a_transaction(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        w = te.Namespace(tmp_path / "root")
        try:
            for i in range(8):
                with w.transaction() as tx:
                    tx.open("db.events").append(pa.table({"id": [1000 + i]}))
                    tx.open("db.dims").append(pa.table({"id": [1000 + i]}))
                w.open("db.events").append(pa.table({"id": [5000 + i]}))  # single-table
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reader = te.Namespace(tmp_path / "root")
    seen = 0
    while not stop.is_set() or seen == 0:
        snap = reader.snapshot(["db.events", "db.dims"])
        events = te.Dataset.open(reader.location(("db", "events")), version=snap["db.events"])
        dims = te.Dataset.open(reader.location(("db", "dims")), version=snap["db.dims"])
        e_ids = {
            i for i in _ids(lance.dataset(events.uri, version=events.version)) if 999 < i < 5000
        }
        d_ids = {i for i in _ids(lance.dataset(dims.uri, version=dims.version)) if i > 999}
        assert e_ids == d_ids
        seen += 1
    thread.join(60)
    assert not errors
    assert seen > 0
    assert len(_ids(_via(ns, "db.dims"))) == 9
