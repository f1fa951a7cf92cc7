"""The commit loop over MemoryStorage: creation, conflicts, rebase, budgets, storage calls,
lost responses and crashes (exactly-once). Clock, sleep and randomness are injected."""

from __future__ import annotations

import importlib
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from pyroaring import BitMap, BitMap64

from txn_engine._proto import transaction_pb2
from txn_engine.commit import CommitResult, commit, find_transaction, replan_and_commit
from txn_engine.conflicts.detect import Conflict
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    AmbiguousWriteError,
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    IncompatibleTransactionError,
    ObjectExistsError,
    RetriesExhaustedError,
    RetryableConflictError,
    StorageError,
    VersionNotFoundError,
)
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.format.flags import FLAG_DISABLE_TRANSACTION_FILE
from txn_engine.format.io import latest_version, read_manifest, read_transaction
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.model import DataFile, DeletionFile, Fragment, LanceField
from txn_engine.ops import Append, Delete, Overwrite, Restore, UpdateConfig, UpdateMap
from txn_engine.retry import RetryPolicy
from txn_engine.storage import MemoryStorage, RecordingStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.faults import Fault, FaultyStorage, SimulatedCrash
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"), LanceField(1, -1, "val", "int64"))


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


#: pylance 14's answers (no resolution beyond Lance)
LANCE = ConflictOptions(rebase_rows=False)


def policy(clock: FakeClock, **kw: object) -> RetryPolicy:
    args: dict[str, object] = {
        "clock": clock.now,
        "sleep": clock.sleep,
        "randbelow": lambda n: n - 1,
    }
    args.update(kw)
    return RetryPolicy(**args)  # type: ignore[arg-type]


def frag(rows: int = 10) -> Fragment:
    path = f"{uuid.uuid4().hex}.lance"
    return Fragment(0, (DataFile(path, (0, 1), (0, 1), 2, 2, 100),), rows)


def create(store: Storage, fragments: int = 4) -> CommitResult:
    return commit(store, Transaction(0, Overwrite([frag() for _ in range(fragments)], SCHEMA)))


def append(store: Storage, read_version: int | None = None) -> CommitResult:
    rv = latest_version(store).version if read_version is None else read_version
    return commit(store, Transaction(rv, Append([frag()])))


def versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def competitor(inner: Storage) -> Callable[[str, str], None]:
    """A hook that lands another writer's Append right before our manifest create."""

    def hook(_method: str, _path: str) -> None:
        append(inner)

    return hook


# ---- creation -------------------------------------------------------------------------------


def test_create_then_exists_then_idempotent() -> None:
    store = MemoryStorage()
    txn = Transaction(0, Overwrite([frag()], SCHEMA))
    result = commit(store, txn)
    assert (result.version, result.attempts, result.already_committed) == (1, 1, False)
    assert result.manifest_path == f"_versions/{manifest_name(1, NamingScheme.V2)}"
    assert store.list("_transactions") == []  # inline only by default
    assert read_transaction(store, 1).uuid == txn.uuid
    again = commit(store, txn)  # same transaction: found, not committed twice
    assert again.already_committed
    assert again.version == 1
    with pytest.raises(DatasetAlreadyExistsError, match="read_version=1"):
        commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    assert versions(store) == [1]


def test_create_v1_naming_is_kept_by_later_commits() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)), naming=NamingScheme.V1)
    r = append(store)
    assert r.manifest_path == "_versions/2.manifest"
    assert sorted(store.list("_versions")) == ["1.manifest", "2.manifest"]


def test_concurrent_create_loses_with_already_exists() -> None:
    inner = MemoryStorage()
    store = FaultyStorage(inner)
    store.add(
        Fault(
            "put_if_absent",
            "_versions/*",
            mode="hook",
            hook=lambda m, p: commit(inner, Transaction(0, Overwrite([frag()], SCHEMA))),
        )
    )
    with pytest.raises(DatasetAlreadyExistsError, match="concurrently"):
        commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    assert versions(inner) == [1]


def test_commit_to_missing_dataset_and_missing_read_version() -> None:
    with pytest.raises(DatasetNotFoundError):
        commit(MemoryStorage(), Transaction(1, Append([frag()])))
    store = MemoryStorage()
    create(store)
    with pytest.raises(VersionNotFoundError, match="read version 5"):
        commit(store, Transaction(5, Append([frag()])))


# ---- inline-only transactions ----------------------------------------------------------------


def _flags_and_file(store: Storage, version: int) -> tuple[bool, str]:
    m = read_manifest(store, version)[1].manifest
    return bool(m.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE), m.transaction_file


def test_by_default_the_transaction_is_inline_only_under_writer_flag_32() -> None:
    """Every commit path (create, append, rebase, restore) writes no ``_transactions/``
    object by default; the manifest says so with writer flag 32 and an empty
    ``transaction_file``; the reader flags are untouched (flag 32 is writer-only)."""
    store = MemoryStorage()
    create(store)
    append(store)
    _delete_landed = commit(store, _delete(store, 0, {1}, affected=True))
    commit(store, Transaction(_delete_landed.version, Restore(1)))
    for v in (1, 2, 3, 4):
        assert _flags_and_file(store, v) == (True, "")
        reader_flags = read_manifest(store, v)[1].manifest.reader_feature_flags
        assert not reader_flags & FLAG_DISABLE_TRANSACTION_FILE
    assert store.list("_transactions") == []
    assert [read_transaction(store, v).uuid != "" for v in (1, 2, 3, 4)] == [True] * 4


def test_transaction_file_true_writes_the_copy_and_clears_flag_32() -> None:
    """``transaction_file=True`` is pylance's layout: the ``.txn`` copy is named in the
    manifest and flag 32 is clear, also on a Restore of an inline-only version (whose
    copied flags had it set) and the other way round."""
    store = MemoryStorage()
    first = commit(store, Transaction(0, Overwrite([frag()], SCHEMA)), transaction_file=True)
    assert _flags_and_file(store, 1) == (False, f"0-{first.transaction.uuid}.txn")
    appended = append(store)  # inline only
    assert _flags_and_file(store, 2) == (True, "")
    restored = commit(store, Transaction(2, Restore(2)), transaction_file=True)
    assert _flags_and_file(store, 3) == (False, f"2-{restored.transaction.uuid}.txn")
    assert store.exists(f"_transactions/2-{restored.transaction.uuid}.txn")
    commit(store, Transaction(3, Restore(1)))  # flags copied from version 1: clear
    assert _flags_and_file(store, 4) == (True, "")
    assert appended.transaction.uuid == read_transaction(store, 2).uuid


# ---- storage calls per commit ------------------------------------------------------------------


@pytest.mark.parametrize("transaction_file", [False, True])
def test_uncontended_commit_storage_calls(transaction_file: bool) -> None:
    """Cold (from a URI): one listing, the read version's manifest, the create, the lineage
    check, then (``transaction_file=True`` only) the redundant ``.txn`` copy."""
    inner = MemoryStorage()
    create(inner)
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])), transaction_file=transaction_file)
    assert r.version == 2
    counts = rec.snapshot()
    assert counts["list"] == 1
    assert counts.get("put", 0) == int(transaction_file)  # the .txn file
    assert counts["put_if_absent"] == 1  # the manifest
    assert counts.get("get", 0) + counts.get("get_range", 0) == 1  # the read-version manifest
    tail = rec.calls[-3:] if transaction_file else rec.calls[-2:]
    assert [c[0] for c in tail] == ["put_if_absent", "exists", "put"][: len(tail)]
    # after the create: is there a version above ours (one built on a cleaned-up twin)?
    assert tail[1] == ("exists", f"_versions/{manifest_name(3, NamingScheme.V2)}")
    if transaction_file:
        assert tail[2] == ("put", f"_transactions/1-{r.transaction.uuid}.txn")


def test_uncontended_commit_with_base_creates_first() -> None:
    """Warm (a Dataset as ``base``): no listing, no read; the manifest create is the first
    request, then the lineage check (and, when asked for, the redundant ``.txn`` copy)."""
    inner = MemoryStorage()
    create(inner)
    ds = Dataset.open(inner)
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])), base=ds, assume_latest=True)
    assert r.version == 2
    assert [c[0] for c in rec.calls] == ["put_if_absent", "exists"]
    rec = RecordingStorage(inner)
    txn = Transaction(2, Append([frag()]))
    commit(rec, txn, base=Dataset.open(inner), assume_latest=True, transaction_file=True)
    assert [c[0] for c in rec.calls] == ["put_if_absent", "exists", "put"]


def test_warm_commit_with_a_stale_base_checks_every_newer_version() -> None:
    inner = MemoryStorage()
    create(inner)
    ds = Dataset.open(inner)
    commit(inner, Transaction(1, Overwrite([frag()], SCHEMA)))  # 2: unseen by the base
    rec = RecordingStorage(inner)
    with pytest.raises(IncompatibleTransactionError):
        commit(rec, Transaction(1, Append([frag()])), base=ds, assume_latest=True)
    assert [c[0] for c in rec.calls][:3] == ["put_if_absent", "size", "get_range"]  # settled
    assert rec.counts["list"] == 1  # then the listing loop checked version 2
    assert versions(inner) == [1, 2]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_k_intervening_versions_cost_at_most_k_reads(k: int) -> None:
    inner = MemoryStorage()
    create(inner)
    for _ in range(k):
        append(inner)
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])))
    assert r.version == k + 2
    reads = [c for c in rec.calls if c[0] in ("get", "get_range", "size")]
    assert len(reads) <= k
    assert rec.counts["list"] == 1


class DelayedReads:
    """A storage on which every read request (get, get_range, size) takes ``delay`` seconds,
    as on an object store, declaring ``read_concurrency`` (its reads may overlap); records
    the most reads ever in flight at once."""

    def __init__(self, inner: Storage, delay: float, concurrency: int) -> None:
        self.inner = inner
        self.delay = delay
        self.read_concurrency = concurrency
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self.inner.uri

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.inner.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        self.inner.put(path, data)

    def list(self, prefix: str) -> Sequence[str]:
        return self.inner.list(prefix)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def _slow(self, read: Callable[[], Any], delay: float | None = None) -> Any:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay if delay is None else delay)
            return read()
        finally:
            with self._lock:
                self.in_flight -= 1

    def get(self, path: str) -> bytes:
        return self._slow(lambda: self.inner.get(path))  # type: ignore[no-any-return]

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._slow(lambda: self.inner.get_range(path, start, end))  # type: ignore[no-any-return]

    def size(self, path: str) -> int:
        return self._slow(lambda: self.inner.size(path))  # type: ignore[no-any-return]


class DelayedRequests(DelayedReads):
    """DelayedReads whose writes and existence checks take ``delay`` too (counted in flight)."""

    def put(self, path: str, data: bytes) -> None:
        self._slow(lambda: self.inner.put(path, data))

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._slow(lambda: self.inner.put_if_absent(path, data))

    def exists(self, path: str) -> bool:
        return self._slow(lambda: self.inner.exists(path))  # type: ignore[no-any-return]


def test_the_transaction_copy_goes_out_beside_the_lineage_check_on_an_object_store() -> None:
    """After the create, the ``.txn`` copy and the lineage check's existence check are in
    flight together (one round trip, not two) on a store that serves requests concurrently;
    the copy is there when commit returns."""
    inner = MemoryStorage()
    create(inner)
    ds = Dataset.open(inner)
    slow = DelayedRequests(inner, 0.05, 8)
    txn = Transaction(1, Append([frag()]))
    r = commit(slow, txn, base=ds, assume_latest=True, transaction_file=True)
    assert r.version == 2
    assert slow.max_in_flight == 2
    assert inner.exists(f"_transactions/1-{r.transaction.uuid}.txn")
    # on a store without concurrent requests (local disk) nothing overlaps
    serial = DelayedRequests(inner, 0.01, 1)
    txn = Transaction(2, Append([frag()]))
    commit(serial, txn, base=Dataset.open(inner), assume_latest=True, transaction_file=True)
    assert serial.max_in_flight == 1


def _stale_commit(k: int, concurrency: int, delay: float) -> tuple[float, DelayedReads, Any]:
    """Commit an Append read at version 1 with ``k`` Appends landed since, on storage with
    ``delay`` per read request; returns the wall time, the storage and the recorder."""
    inner = MemoryStorage()
    create(inner)
    for _ in range(k):
        append(inner)
    slow = DelayedReads(inner, delay, concurrency)
    rec = RecordingStorage(slow)
    start = time.perf_counter()
    r = commit(rec, Transaction(1, Append([frag()])))
    took = time.perf_counter() - start
    assert r.version == k + 2
    assert r.attempts == 1
    return took, slow, rec


def test_a_stale_commit_reads_the_winners_concurrently_on_an_object_store() -> None:
    """k = 16 versions behind, 25 ms per read request: with 8 threads the winners cost about
    ceil(16 / 8) x (requests per winner) x 25 ms, not 16 x that; order and request count
    unchanged, and never more than 8 reads in flight."""
    k, delay = 16, 0.025
    serial, slow1, rec1 = _stale_commit(k, 1, delay)
    parallel, slow8, rec8 = _stale_commit(k, 8, delay)
    assert slow1.max_in_flight == 1
    assert slow8.max_in_flight == 8  # bounded by the store's read_concurrency
    reads = {m: rec8.counts[m] for m in ("get", "get_range", "size")}
    assert reads == {m: rec1.counts[m] for m in ("get", "get_range", "size")}  # same requests
    per_winner = sum(reads.values()) / k
    # serial: every read waits for the one before; parallel: 16 winners in 2 waves of 8
    assert serial >= k * per_winner * delay
    assert parallel < serial / 3, (parallel, serial)
    # ~ceil(k / 8) waves of reads, plus the read version and the latest (x3: a loaded CI box)
    assert parallel < (math.ceil(k / 8) * per_winner + 2) * delay * 3
    print(
        f"\n[k={k}, {delay * 1000:.0f} ms/read, {sum(reads.values())} reads] "
        f"serial {serial * 1000:.0f} ms, 8 threads {parallel * 1000:.0f} ms"
    )


def test_concurrent_winner_reads_keep_version_order() -> None:
    """Later versions answer first (shorter delays): the first conflict in version order is
    still the one reported."""
    inner = MemoryStorage()
    create(inner)
    append(inner, 1)  # 2
    commit(inner, Transaction(2, Overwrite([frag()], SCHEMA)))  # 3: conflicts with ours
    append(inner, 3)  # 4
    commit(inner, Transaction(4, Overwrite([frag()], SCHEMA)))  # 5: conflicts too
    append(inner, 5)  # 6

    slow = DelayedReads(inner, 0.0, 8)
    orders: list[str] = []

    def get_range(path: str, start: int, end: int) -> bytes:
        version = next(v for v in range(1, 8) if path.endswith(manifest_name(v, NamingScheme.V2)))
        # version 2 slowest, version 6 fastest
        data: bytes = slow._slow(lambda: inner.get_range(path, start, end), 0.01 * (8 - version))
        orders.append(path)
        return data

    slow.get_range = get_range  # type: ignore[method-assign]
    with pytest.raises(IncompatibleTransactionError) as info:
        commit(slow, Transaction(1, Append([frag()])))
    assert info.value.conflicting_version == 3
    finished = [
        next(v for v in range(1, 8) if p.endswith(manifest_name(v, NamingScheme.V2)))
        for p in orders
    ]
    winners = [v for v in finished if 2 <= v <= 5]
    assert sorted(winners) == [2, 3, 4, 5]
    assert winners != sorted(winners)  # the winners' reads did finish out of order
    assert slow.max_in_flight > 1


# ---- conflicts raise typed errors ----------------------------------------------------------------


def test_incompatible_conflict_carries_context() -> None:
    store = MemoryStorage()
    create(store)
    commit(store, Transaction(1, Overwrite([frag()], SCHEMA)))
    with pytest.raises(IncompatibleTransactionError) as info:
        commit(store, Transaction(1, Append([frag()])))
    err = info.value
    assert not err.retryable
    assert (err.read_version, err.conflicting_version) == (1, 2)
    assert (err.operation, err.other_operation) == ("Append", "Overwrite")
    assert err.remedy
    assert "Help:" in str(err)
    (conflict,) = err.conflicts
    assert isinstance(conflict, Conflict)
    assert conflict.outcome is Outcome.INCOMPATIBLE
    assert versions(store) == [1, 2]


def test_config_conflict_names_the_key() -> None:
    store = MemoryStorage()
    create(store)
    cfg = UpdateConfig(config_updates=UpdateMap({"k": "1"}))
    commit(store, Transaction(1, cfg))
    with pytest.raises(IncompatibleTransactionError) as info:
        commit(store, Transaction(1, UpdateConfig(config_updates=UpdateMap({"k": "2"}))))
    assert info.value.conflicts[0].keys == {"k"}


def _delete(
    store: Storage, fid: int, rows: set[int], *, affected: bool, read_version: int = 1
) -> Transaction:
    _, mf = read_manifest(store, read_version)
    base = Fragment.from_proto(next(f for f in mf.manifest.fragments if f.id == fid))
    before = (
        read_deletion_vector(store, fid, base.deletion_file.to_proto())
        if base.deletion_file is not None
        else BitMap()
    )
    dv = write_deletion_vector(store, fid, read_version, before | BitMap(rows))
    updated = attrs.evolve(base, deletion_file=DeletionFile.from_proto(dv))
    addresses = BitMap64([fid << 32 | r for r in rows]) if affected else None
    return Transaction(read_version, Delete([updated], predicate="x", affected_rows=addresses))


def _deleted(store: Storage, fid: int) -> BitMap:
    _, mf = read_manifest(store)
    f = next(f for f in mf.manifest.fragments if f.id == fid)
    return (
        read_deletion_vector(store, fid, f.deletion_file)
        if f.HasField("deletion_file")
        else BitMap()
    )


def test_same_fragment_deletes_without_affected_rows_are_retryable() -> None:
    store = MemoryStorage()
    create(store)
    a = _delete(store, 0, {1, 2}, affected=False)
    b = _delete(store, 0, {7, 8}, affected=False)
    commit(store, a)
    with pytest.raises(RetryableConflictError) as info:
        commit(store, b, conflict_options=LANCE)
    assert info.value.retryable
    assert info.value.conflicts[0].rule == "D1"
    # beyond Lance (the default): b's rows are derived from its deletion file and merged
    r = commit(store, b)
    assert r.version == 3
    assert _deleted(store, 0) == BitMap([1, 2, 7, 8])


def test_disjoint_row_deletes_in_one_fragment_both_land() -> None:
    store = MemoryStorage()
    create(store)
    a = _delete(store, 0, {1, 2}, affected=True)
    b = _delete(store, 0, {7, 8}, affected=True)
    commit(store, a)
    r = commit(store, b, transaction_file=True)
    assert r.version == 3
    assert r.transaction.read_version == 2  # rebased
    assert r.transaction.uuid == b.uuid
    assert _deleted(store, 0) == BitMap([1, 2, 7, 8])
    landed = read_transaction(store, 3)
    assert landed.read_version == 2
    assert landed.delete.updated_fragments[0].deletion_file.file_type == 1  # .bin
    assert store.exists(f"_transactions/2-{b.uuid}.txn")


def test_overlapping_row_deletes_are_retryable() -> None:
    store = MemoryStorage()
    create(store)
    commit(store, _delete(store, 0, {1, 2}, affected=True))
    second = _delete(store, 0, {2, 3}, affected=True)
    with pytest.raises(RetryableConflictError) as info:
        commit(store, second, conflict_options=LANCE)
    assert info.value.conflicts[0].rule == "ROWS"
    assert info.value.conflicts[0].row_addresses == (2,)
    assert _deleted(store, 0) == BitMap([1, 2])
    # beyond Lance (the default): a row deleted by both is deleted once
    commit(store, second)
    assert _deleted(store, 0) == BitMap([1, 2, 3])


def test_unreadable_concurrent_transaction_is_an_incompatible_conflict() -> None:
    store = MemoryStorage()
    create(store)
    _, mf = read_manifest(store, 1)
    m = type(mf.manifest)()
    m.CopyFrom(mf.manifest)
    m.version = 2
    m.transaction_file = ""
    alien = transaction_pb2.Transaction(read_version=1, uuid=str(uuid.uuid4()))  # no operation
    store.put_if_absent(
        f"_versions/{manifest_name(2, NamingScheme.V2)}",
        encode_manifest_file(m, mf.indices, alien),
    )
    with pytest.raises(IncompatibleTransactionError, match="version 2") as info:
        commit(store, Transaction(1, Append([frag()])))
    assert info.value.conflicts[0].rule == "UNREADABLE"
    assert info.value.conflicting_version == 2


# ---- losing the race: backoff and budgets ------------------------------------------------------


def test_lost_race_backs_off_and_lands_on_the_next_version() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    clock = FakeClock()

    def slow_competitor(method: str, path: str) -> None:
        clock.t += 0.1  # the first attempt took 100 ms
        append(inner)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=slow_competitor))
    r = commit(store, Transaction(1, Append([frag()])), retry_policy=policy(clock))
    assert (r.version, r.attempts) == (3, 2)
    assert clock.sleeps == [pytest.approx(3 * 0.11)]  # slot 3 of 4, unit = 1.1 x 100 ms
    assert versions(inner) == [1, 2, 3]


def test_lost_races_reuse_the_transaction_file_and_the_winners_manifest() -> None:
    """Losing twice: the .txn file is written once, and the manifest read while settling
    each lost create is the one the next attempt builds on (not read again)."""
    inner = MemoryStorage()
    create(inner)
    rec = RecordingStorage(inner)
    store = FaultyStorage(rec)
    store.add(
        Fault("put_if_absent", "_versions/*", mode="hook", hook=lambda m, p: append(inner), times=2)
    )
    clock = FakeClock()
    txn = Transaction(1, Append([frag()]))
    r = commit(store, txn, retry_policy=policy(clock), transaction_file=True)
    assert (r.version, r.attempts) == (4, 3)
    assert rec.counts["put"] == 1  # one .txn file for three attempts
    assert rec.counts["put_if_absent"] == 3
    assert rec.counts["list"] == 3
    # read: the read-version manifest once, each winner's manifest once (while settling)
    gets = [c for c in rec.calls if c[0] in ("get", "get_range", "size")]
    path = {v: f"_versions/{manifest_name(v, NamingScheme.V2)}" for v in (1, 2, 3)}
    assert list(dict.fromkeys(c[1] for c in gets)) == [path[1], path[2], path[3]]
    for v in (2, 3):  # a winner's manifest: one bounded read (its size, then its bytes)
        assert [c[0] for c in gets if c[1] == path[v]] == ["size", "get_range"]
    assert read_transaction(inner, 4).uuid == r.transaction.uuid


def test_backoff_delays_stay_within_slot_bounds() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    clock = FakeClock()

    def slow(method: str, path: str) -> None:
        clock.t += 0.05
        append(inner)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=slow, times=5))
    import random

    rng = random.Random(3)
    r = commit(
        store,
        Transaction(1, Append([frag()])),
        retry_policy=policy(clock, randbelow=rng.randrange),
    )
    assert r.attempts == 6
    unit = 0.055
    for n, delay in enumerate(clock.sleeps):
        assert 0 <= delay <= ((n + 2) ** 2 - 1) * unit + 1e-9


def test_attempt_budget_exhausted_is_contention_not_conflict() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    clock = FakeClock()

    def slow(method: str, path: str) -> None:
        clock.t += 0.01
        append(inner)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=slow, times=None))
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(RetriesExhaustedError, match="3 attempt") as info:
        commit(store, txn, retry_policy=policy(clock, max_attempts=3))
    assert not isinstance(info.value, RetryableConflictError)
    assert info.value.read_version == 1
    ours = [p for m, p, o in store.log if m == "put_if_absent"]
    assert len(ours) == 3
    assert len(clock.sleeps) == 2
    assert find_transaction(inner, txn.uuid) is None


def test_deadline_budget() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    clock = FakeClock()

    def slow(method: str, path: str) -> None:
        clock.t += 1.0
        append(inner)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=slow, times=None))
    with pytest.raises(RetriesExhaustedError, match="deadline"):
        commit(
            store,
            Transaction(1, Append([frag()])),
            retry_policy=policy(clock, deadline=2.5, adaptive=False, initial_unit=0.0),
        )
    assert clock.t < 3.5


# ---- exactly once ------------------------------------------------------------------------------


def test_lost_response_on_manifest_create_reports_the_original_version() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(Fault("put_if_absent", "_versions/*", mode="after"))
    txn = Transaction(1, Append([frag()]))
    r = commit(store, txn)
    assert (r.version, r.attempts) == (2, 1)
    assert versions(inner) == [1, 2]
    assert read_transaction(inner, 2).uuid == txn.uuid


def test_lost_response_seen_as_object_exists_is_settled_by_content() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(
        Fault(
            "put_if_absent",
            "_versions/*",
            mode="after",
            error=lambda m, p: ObjectExistsError(f"{p} exists (our own retried request)"),
        )
    )
    r = commit(store, Transaction(1, Append([frag()])))
    assert r.version == 2
    assert versions(inner) == [1, 2]


def test_unsettled_outcome_then_retry_finds_the_original_version() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(Fault("put_if_absent", "_versions/*", mode="after"))
    v2 = f"_versions/{manifest_name(2, NamingScheme.V2)}"
    store.add(Fault("size", v2, mode="before", times=None))  # reading it back fails too
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(CommitStateUnknownError) as info:
        commit(store, txn)
    assert "do not delete" in str(info.value)
    assert versions(inner) == [1, 2]  # it did land
    assert find_transaction(inner, txn.uuid) == 2
    store.clear()
    append(inner)  # another writer commits on top meanwhile
    r = commit(store, txn)
    assert r.already_committed
    assert r.version == 2
    assert versions(inner) == [1, 2, 3]


def test_crash_before_manifest_then_retry_lands_once() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(Fault("put_if_absent", "_versions/*", mode="crash_before"))
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(SimulatedCrash):
        commit(store, txn)
    assert versions(inner) == [1]
    assert not inner.exists(f"_transactions/1-{txn.uuid}.txn")  # written only once landed
    r = commit(store, txn)
    assert (r.version, r.already_committed) == (2, False)
    assert versions(inner) == [1, 2]
    assert commit(store, txn).already_committed
    assert versions(inner) == [1, 2]


def test_crash_after_manifest_before_transaction_file_is_found_by_uuid() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(Fault("put", "_transactions/*", mode="crash_before"))
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(SimulatedCrash):
        commit(store, txn, transaction_file=True)
    assert versions(inner) == [1, 2]  # the manifest (with the transaction inline) landed
    assert not inner.exists(f"_transactions/1-{txn.uuid}.txn")
    assert read_transaction(inner, 2).uuid == txn.uuid  # from the inline copy
    again = commit(store, txn)
    assert (again.version, again.already_committed) == (2, True)


def test_manifest_create_failing_before_the_store_is_offered_again() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(
        Fault("put_if_absent", "_versions/*", mode="before", error=lambda m, p: StorageError("503"))
    )
    r = commit(store, Transaction(1, Append([frag()])))
    assert r.version == 2
    assert versions(inner) == [1, 2]


def test_manifest_create_failing_persistently_is_unknown_and_nothing_lands() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(Fault("put_if_absent", "_versions/*", mode="before", times=None))
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(CommitStateUnknownError) as info:
        commit(store, txn)
    assert isinstance(info.value.__cause__, AmbiguousWriteError)
    assert versions(inner) == [1]
    store.clear()
    assert commit(store, txn).version == 2


def test_transaction_file_write_failure_after_landing_is_not_a_failure() -> None:
    """The ``_transactions/`` copy is redundant (readers use the inline transaction) and
    written after the manifest landed: its failure must not report a landed commit as
    failed (a caller would retry an Append and duplicate it)."""
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    store.add(
        Fault("put", "_transactions/*", mode="before", error=lambda m, p: StorageError("down"))
    )
    txn = Transaction(1, Append([frag()]))
    r = commit(store, txn)
    assert (r.version, r.already_committed) == (2, False)
    assert versions(inner) == [1, 2]
    assert read_transaction(inner, 2).uuid == txn.uuid
    assert commit(store, txn).already_committed


def test_find_transaction() -> None:
    store = MemoryStorage()
    first = create(store)
    r = append(store)
    assert find_transaction(store, r.transaction.uuid) == 2
    assert find_transaction(store, first.transaction.uuid) == 1
    assert find_transaction(store, first.transaction.uuid, since_version=1) is None
    assert find_transaction(store, str(uuid.uuid4())) is None


# ---- re-planning ---------------------------------------------------------------------------------


def test_replan_and_commit_replans_after_a_retryable_conflict() -> None:
    inner = MemoryStorage()
    create(inner)
    store = FaultyStorage(inner)
    calls: list[int] = []

    def plan(ds: Dataset) -> Transaction:
        calls.append(ds.version)
        if len(calls) == 1:  # someone deletes in the same fragment while we plan
            commit(inner, _delete(inner, 0, {5}, affected=False, read_version=ds.version))
        return _delete(inner, 0, {1}, affected=False, read_version=ds.version)

    clock = FakeClock()
    r = replan_and_commit(
        store, plan, retry_policy=policy(clock, max_attempts=3), conflict_options=LANCE
    )
    assert calls == [1, 2]
    assert r.version == 3
    assert _deleted(inner, 0) == BitMap([1, 5])


def test_replan_budget_exhaustion_chains_the_last_conflict() -> None:
    inner = MemoryStorage()
    create(inner)

    clock = FakeClock()
    planned: list[int] = []

    def plan(ds: Dataset) -> Transaction:
        planned.append(ds.version)
        clock.t += 0.2
        # a competitor deletes another row of the same fragment while we plan, every time
        commit(inner, _delete(inner, 0, {ds.version + 4}, affected=False, read_version=ds.version))
        return _delete(inner, 0, {0}, affected=False, read_version=ds.version)

    with pytest.raises(RetriesExhaustedError, match="preempted 2 time") as info:
        replan_and_commit(
            inner, plan, retry_policy=policy(clock, max_attempts=2), conflict_options=LANCE
        )
    assert isinstance(info.value.__cause__, RetryableConflictError)
    assert info.value.conflicts
    assert planned == [1, 2]
    # the unit is 1.1 x the first attempt (0.22 s), capped at RetryPolicy.max_unit; the
    # injected randbelow picks the last of the 4 first slots
    unit = min(1.1 * 0.2, RetryPolicy().max_unit or 1.0)
    assert clock.sleeps == [pytest.approx(3 * unit)]


def test_clone_creates_a_shallow_clone_once() -> None:
    from txn_engine.ops import Clone
    from txn_engine.storage import open_storage

    name = f"memory://clone-src-{uuid.uuid4().hex}"
    src = open_storage(name)
    create(src, fragments=2)
    append(src)
    dst = MemoryStorage()
    txn = Transaction(0, Clone(2, name, ref_name="main"))
    r = commit(dst, txn)
    assert r.version == 2  # a shallow clone keeps the source version number
    ds = Dataset.open(dst)
    assert len(ds.fragments) == 3
    assert [b.path for b in ds.manifest_pb.base_paths] == [name]
    again = commit(dst, txn)
    assert again.already_committed
    assert again.version == 2
    with pytest.raises(DatasetAlreadyExistsError):
        commit(dst, Transaction(0, Clone(2, name)))


def _appended(appends: int) -> MemoryStorage:
    """A new dataset (version 1) with ``appends`` Appends on top."""
    store = MemoryStorage()
    create(store)
    for _ in range(appends):
        append(store)
    return store


def _spy(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> list[Any]:
    """Replace ``module.name`` by a wrapper recording each call's first argument."""
    mod = importlib.import_module(module)
    real = getattr(mod, name)
    calls: list[Any] = []

    def spy(first: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(first)
        return real(first, *args, **kwargs)

    monkeypatch.setattr(mod, name, spy)
    return calls


def test_pairs_compatible_by_kind_are_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Append after k Appends: the matrix decides by kinds alone, so the intervening
    transactions' fragment lists are never turned into attrs values; a predicate pair
    (Delete after Delete) still decodes the other transaction."""
    inner = _appended(3)
    decoded = _spy(monkeypatch, "txn_engine.conflicts.planner", "transaction_from_proto")
    r = commit(inner, Transaction(1, Append([frag()])))
    assert r.version == 5
    assert decoded == []
    first = _delete(inner, 0, {1}, affected=False, read_version=5)
    second = _delete(inner, 0, {2}, affected=False, read_version=5)
    commit(inner, first)
    decoded.clear()
    with pytest.raises(RetryableConflictError):
        commit(inner, second, conflict_options=LANCE)
    assert [pb.WhichOneof("operation") for pb in decoded] == ["delete"]


def test_intervening_versions_parse_only_their_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """k versions behind: each intervening manifest's inline transaction is parsed from
    the head of its file; only the latest manifest is decoded whole."""
    inner = _appended(6)
    decoded = _spy(monkeypatch, "txn_engine.format.io", "decode_manifest_file")
    r = commit(inner, Transaction(1, Append([frag()])))
    assert r.version == 8
    # read whole: only the latest manifest, which the new one is built on
    assert len(decoded) == 1


def test_a_base_creates_first_and_lists_after_unless_the_caller_assumes_it_is_the_latest() -> None:
    """By default a Dataset base on a store without concurrent requests creates the next
    version first and lists after it (the listing decides the lineage check, so a stale
    base cannot land below versions a lease-ignoring cleanup removed); with assume_latest
    one existence check replaces the listing."""
    inner = MemoryStorage()
    create(inner)
    rec = RecordingStorage(inner)
    commit(rec, Transaction(1, Append([frag()])), base=Dataset.open(inner))
    assert [c[0] for c in rec.calls] == ["put_if_absent", "list"]
    rec = RecordingStorage(inner)
    commit(rec, Transaction(2, Append([frag()])), base=Dataset.open(inner), assume_latest=True)
    assert [c[0] for c in rec.calls] == ["put_if_absent", "exists"]


@pytest.mark.parametrize("transaction_file", [False, True])
def test_replan_and_commit_passes_transaction_file(transaction_file: bool) -> None:
    store = MemoryStorage()
    create(store)
    r = replan_and_commit(
        store,
        lambda ds: Transaction(ds.version, Append([frag()])),
        transaction_file=transaction_file,
    )
    assert _flags_and_file(store, r.version) == (
        not transaction_file,
        f"1-{r.transaction.uuid}.txn" if transaction_file else "",
    )
    assert store.exists(f"_transactions/1-{r.transaction.uuid}.txn") is transaction_file
