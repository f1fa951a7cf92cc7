"""Conformance suites: the contracts every blob store and every commit handler must honour,
as pytest base classes that an implementation plugs into (as zarr's store tests do).

* :class:`StorageConformance`: the :class:`~txn_engine.storage.Storage` contract
  (``txn_engine/storage/base.py``): create-if-absent and its 8-way race, overwrite, reads
  and byte ranges, listing, existence, delete, path validation, typed errors, atomic
  visibility, list-after-write and read-after-list across independent clients.
* :class:`CommitHandlerConformance`: the
  :class:`~txn_engine.storage.handler.CommitHandler` contract: commit / resolve / the
  listing after ``finish_pending``, a taken version, an existing manifest, the 8-way race
  per version, and through :func:`txn_engine.commit.commit`: a lost commit response and an
  "already exists" answer to one's own retried request settle exactly once, and concurrent
  writers all land on consecutive versions.
* :class:`PendingCommitConformance`: for handlers whose commit can stop half way (the
  version decided, the manifest not yet in the blob store: the external manifest store):
  ``resolve``, ``finish_pending``, a reader and the next writer complete it.

Plug an implementation in by subclassing in a ``test_*.py`` module and providing a
``storage`` (resp. ``handler``) fixture that returns a fresh, empty instance; override
:meth:`StorageConformance.clients` / :meth:`CommitHandlerConformance.clients` to hand out
independent clients of the same store (own connections and caches) where the
implementation has them::

    class TestMyStore(StorageConformance):
        @pytest.fixture
        def storage(self, tmp_path):
            return MyStore(tmp_path)

Class attributes size the expensive tests (``race_rounds``, ``partial_read_size``...) so a
store behind a network can run them in seconds. Needs pytest.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest

from txn_engine.commit import CommitResult, commit
from txn_engine.contention.offers import carried_uuids
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    AmbiguousWriteError,
    InvalidStorageArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import ForwardingStorage, Storage, read_concurrency
from txn_engine.storage.handler import CommitHandler
from txn_engine.transaction import Transaction

__all__ = [
    "CommitHandlerConformance",
    "HandlerStorage",
    "PendingCommitConformance",
    "StorageConformance",
    "race",
]

#: A manifest path the blob-store tests create (V2 name of version 1).
MANIFEST = "_versions/18446744073709551614.manifest"

#: Paths every Storage method refuses with InvalidStorageArgumentError.
BAD_PATHS = (
    "",
    "/abs/path",
    "a/../b",
    "../escape",
    "a//b",
    "./a",
    "a/./b",
    "a\\b",
    "a\x00b",
    "dir/",
)


@contextmanager
def _thread_switching(interval: float | None) -> Iterator[None]:
    """Switch threads every ``interval`` seconds (None: unchanged), so that check-then-act
    races interleave in-process (with 1 us, raw fsspec MemoryFileSystem ``pipe_file(mode=
    "create")`` lets two threads win a few rounds in a hundred)."""
    if interval is None:
        yield
        return
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def race(
    creators: Sequence[Callable[[bytes], None]],
) -> tuple[list[int], list[int]]:
    """Thread ``i`` calls ``creators[i](payload_i)``, all released at one barrier; returns the
    indices that won and those that got ObjectExistsError. Any other error fails."""
    n = len(creators)
    barrier = threading.Barrier(n)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def contend(i: int) -> None:
        barrier.wait()
        try:
            creators[i](f"writer-{i}".encode() * 100)
        except ObjectExistsError:
            with lock:
                lost.append(i)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                won.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return won, lost


def _uniform(payload: bytes, size: int) -> bool:
    return len(payload) == size and payload == payload[:1] * size


# ---- blob stores ------------------------------------------------------------------------------


class StorageConformance:
    """The Storage contract. Subclasses provide a ``storage`` fixture (fresh, empty)."""

    #: rounds of the 8-way create race
    race_rounds = 60
    #: writers per race round
    race_writers = 8
    #: sys.setswitchinterval during the race (None: leave it; in-process stores want 1e-6)
    race_switch_interval: float | None = 1e-6
    #: object size of the partial-read test, and how many overwrites it makes
    partial_read_size = 256 * 1024
    partial_read_versions = 40

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        """``n`` clients of the store ``storage`` is bound to (default: ``storage`` itself
        ``n`` times; override to give independent clients with their own connections)."""
        return [storage] * n

    def test_is_a_storage(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)
        assert isinstance(storage.uri, str)
        assert storage.uri
        assert read_concurrency(storage) >= 1

    def test_put_if_absent_creates_then_refuses(self, storage: Storage) -> None:
        other = self.clients(storage, 2)[1]
        assert list(storage.list("_versions")) == []
        assert not storage.exists(MANIFEST)
        storage.put_if_absent(MANIFEST, b"first")
        with pytest.raises(ObjectExistsError) as info:
            other.put_if_absent(MANIFEST, b"second")
        assert isinstance(info.value, FileExistsError)
        assert isinstance(info.value, StorageError)
        assert other.get(MANIFEST) == b"first"  # the loser did not overwrite
        assert storage.get(MANIFEST) == b"first"

    def test_put_if_absent_refuses_after_put(self, storage: Storage) -> None:
        storage.put("_transactions/0-a.txn", b"x")
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("_transactions/0-a.txn", b"y")
        assert storage.get("_transactions/0-a.txn") == b"x"

    def test_put_overwrites(self, storage: Storage) -> None:
        other = self.clients(storage, 2)[1]
        storage.put("data/a.lance", b"one")
        storage.put("data/a.lance", b"two!")
        assert storage.get("data/a.lance") == b"two!"
        assert other.get("data/a.lance") == b"two!"
        assert storage.size("data/a.lance") == 4
        assert list(storage.list("data")) == ["a.lance"]

    def test_empty_object(self, storage: Storage) -> None:
        storage.put_if_absent("_versions/1.manifest", b"")
        assert storage.get("_versions/1.manifest") == b""
        assert storage.size("_versions/1.manifest") == 0
        assert storage.exists("_versions/1.manifest")

    def test_top_level_object(self, storage: Storage) -> None:
        storage.put_if_absent("_latest.manifest", b"top")
        assert storage.get("_latest.manifest") == b"top"
        assert "_latest.manifest" in storage.list("")

    def test_missing_object_reads(self, storage: Storage) -> None:
        for call in (
            lambda: storage.get("_versions/9.manifest"),
            lambda: storage.size("_versions/9.manifest"),
            lambda: storage.get_range("_versions/9.manifest", 0, 4),
            lambda: storage.get_range("_versions/9.manifest", 2, 2),
        ):
            with pytest.raises(ObjectNotFoundError) as info:
                call()
            assert isinstance(info.value, FileNotFoundError)
        assert not storage.exists("_versions/9.manifest")

    def test_get_range(self, storage: Storage) -> None:
        storage.put("f.bin", bytes(range(10)))
        assert storage.get_range("f.bin", 2, 5) == bytes([2, 3, 4])
        assert storage.get_range("f.bin", 0, 10) == bytes(range(10))
        assert storage.get_range("f.bin", 7, 100) == bytes([7, 8, 9])
        assert storage.get_range("f.bin", 10, 20) == b""
        assert storage.get_range("f.bin", 15, 20) == b""
        assert storage.get_range("f.bin", 4, 4) == b""
        for start, end in ((-1, 3), (5, 4)):
            with pytest.raises(InvalidStorageArgumentError):
                storage.get_range("f.bin", start, end)

    def test_list_names_direct_children_only(self, storage: Storage) -> None:
        storage.put_if_absent("_versions/1.manifest", b"1")
        storage.put_if_absent("_versions/2.manifest", b"2")
        storage.put("_versions/nested/3.manifest", b"3")
        storage.put("_transactions/0-x.txn", b"t")
        assert sorted(storage.list("_versions")) == ["1.manifest", "2.manifest"]
        assert sorted(storage.list("_versions/")) == ["1.manifest", "2.manifest"]
        assert list(storage.list("_versions/nested")) == ["3.manifest"]
        assert list(storage.list("_transactions")) == ["0-x.txn"]
        assert list(storage.list("")) == []
        assert list(storage.list("missing")) == []
        assert list(storage.list("missing/deeper")) == []
        # a prefix naming an object (not a directory) lists nothing
        assert list(storage.list("_transactions/0-x.txn")) == []

    def test_list_and_read_after_write_across_clients(self, storage: Storage) -> None:
        """A second client's create shows in the first client's next listing, and can be
        read right after a listing that did not have it (the commit loop's lost-race read);
        no cached listing hides a new size or a delete."""
        other = self.clients(storage, 2)[1]
        storage.put_if_absent("_versions/1.manifest", b"first")
        assert sorted(storage.list("_versions")) == ["1.manifest"]  # cached, perhaps
        other.put_if_absent("_versions/2.manifest", b"0123456789")
        assert storage.get("_versions/2.manifest") == b"0123456789"
        assert sorted(storage.list("_versions")) == ["1.manifest", "2.manifest"]
        assert storage.exists("_versions/2.manifest")
        assert storage.size("_versions/2.manifest") == 10
        assert storage.get_range("_versions/2.manifest", 2, 5) == b"234"
        assert sorted(other.list("_versions")) == ["1.manifest", "2.manifest"]
        assert other.size("_versions/2.manifest") == 10
        storage.put("_versions/2.manifest", b"0123")
        assert other.size("_versions/2.manifest") == 4
        storage.delete("_versions/1.manifest")
        assert sorted(other.list("_versions")) == ["2.manifest"]
        assert not other.exists("_versions/1.manifest")

    def test_exists(self, storage: Storage) -> None:
        storage.put("data/a.lance", b"a")
        assert storage.exists("data/a.lance")
        assert not storage.exists("data")  # directories are not objects
        assert not storage.exists("data/b.lance")
        assert not storage.exists("nowhere/b.lance")

    def test_delete(self, storage: Storage) -> None:
        storage.put("data/a.lance", b"a")
        storage.put("data/b.lance", b"b")
        storage.delete("data/a.lance")
        assert not storage.exists("data/a.lance")
        assert list(storage.list("data")) == ["b.lance"]
        storage.delete("data/a.lance")  # missing is fine
        storage.delete("never/was.here")
        with pytest.raises(ObjectNotFoundError):
            storage.get("data/a.lance")
        storage.put_if_absent("data/a.lance", b"again")  # a deleted name can be created again
        assert storage.get("data/a.lance") == b"again"

    @pytest.mark.parametrize("bad", BAD_PATHS)
    def test_invalid_paths_are_refused(self, storage: Storage, bad: str) -> None:
        calls: list[Callable[[], object]] = [
            lambda: storage.put_if_absent(bad, b"x"),
            lambda: storage.put(bad, b"x"),
            lambda: storage.get(bad),
            lambda: storage.get_range(bad, 0, 1),
            lambda: storage.size(bad),
            lambda: storage.exists(bad),
            lambda: storage.delete(bad),
        ]
        for call in calls:
            with pytest.raises(InvalidStorageArgumentError) as info:
                call()
            assert isinstance(info.value, ValueError)
            assert not isinstance(info.value, StorageError)

    @pytest.mark.parametrize("bad", ["/abs", "a/../b", "..", "a\\b"])
    def test_invalid_list_prefix_is_refused(self, storage: Storage, bad: str) -> None:
        with pytest.raises(InvalidStorageArgumentError):
            storage.list(bad)

    def test_put_if_absent_race_has_exactly_one_winner(self, storage: Storage) -> None:
        clients = self.clients(storage, self.race_writers)
        for client in clients:  # connect before the race
            client.exists("warm-up")
        with _thread_switching(self.race_switch_interval):
            for r in range(self.race_rounds):
                path = f"_versions/{r}.manifest"
                won, lost = race([functools.partial(c.put_if_absent, path) for c in clients])
                assert len(won) == 1, f"round {r}: winners {won}"
                assert len(lost) == self.race_writers - 1
                assert storage.get(path) == f"writer-{won[0]}".encode() * 100
        expected = sorted(f"{r}.manifest" for r in range(self.race_rounds))
        assert sorted(storage.list("_versions")) == expected

    def test_readers_never_see_partial_objects(self, storage: Storage) -> None:
        size = self.partial_read_size
        versions = self.partial_read_versions
        reader_clients = self.clients(storage, 3)[1:]
        stop = threading.Event()
        bad: list[str] = []
        seen: set[bytes] = set()

        def reader(client: Storage) -> None:
            while not stop.is_set():
                for path in (
                    "data/overwritten.bin",
                    *(f"_versions/{v}.manifest" for v in range(4)),
                ):
                    try:
                        data = client.get(path)
                    except ObjectNotFoundError:
                        continue
                    if not _uniform(data, size):
                        bad.append(f"{path}: {len(data)} bytes")
                    seen.add(data[:1])

        readers = [threading.Thread(target=reader, args=(c,)) for c in reader_clients]
        for t in readers:
            t.start()
        try:
            for v in range(versions):
                storage.put("data/overwritten.bin", bytes([v]) * size)
            for v in range(4):
                storage.put_if_absent(f"_versions/{v}.manifest", bytes([200 + v]) * size)
            # on a loaded machine the readers may not have been scheduled yet: the objects
            # exist now, so give them a bounded moment to observe some
            deadline = time.monotonic() + 20
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            for t in readers:
                t.join()
        assert bad == []
        assert storage.get("data/overwritten.bin") == bytes([versions - 1]) * size
        assert seen  # the readers did observe objects

    def test_same_name_in_other_directory_is_independent(self, storage: Storage) -> None:
        storage.put_if_absent("a/x", b"1")
        storage.put_if_absent("b/x", b"2")
        assert storage.get("a/x") == b"1"
        assert storage.get("b/x") == b"2"

    def test_object_and_directory_share_no_state_in_listing(self, storage: Storage) -> None:
        storage.put("d/f", b"1")
        storage.put("d/sub/g", b"2")
        assert list(storage.list("d")) == ["f"]


# ---- commit handlers ----------------------------------------------------------------------------


class HandlerStorage(ForwardingStorage):
    """``handler.storage`` as a Storage that carries ``handler`` as its ``commit_handler``
    (so :func:`txn_engine.commit.commit` commits through it). Creating a manifest directly
    with ``put_if_absent`` is refused: the commit loop must go through the handler."""

    def __init__(self, handler: CommitHandler) -> None:
        super().__init__(handler.storage)
        self.commit_handler = handler

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Pass-through, except manifests (AssertionError: the loop bypassed the handler)."""
        if path.startswith("_versions/"):
            raise AssertionError(f"{path}: a manifest was created around the commit handler")
        self.inner.put_if_absent(path, data)


class _LostResponse:
    """A handler whose next ``commit`` lands but answers with ``error`` (a lost response,
    or a client retry that hit its own precondition)."""

    def __init__(self, inner: CommitHandler, error: Exception) -> None:
        self.inner = inner
        self.error: Exception | None = error
        self.commits = 0

    @property
    def storage(self) -> Storage:
        return self.inner.storage

    def commit(self, version: int, path: str, data: bytes) -> None:
        self.commits += 1
        self.inner.commit(version, path, data)
        error, self.error = self.error, None
        if error is not None:
            raise error

    def resolve(self, version: int, path: str) -> bool:
        return self.inner.resolve(version, path)

    def finish_pending(self) -> Sequence[str]:
        return self.inner.finish_pending()


_SCHEMA = (LanceField(0, -1, "id", "int64"),)
_FAST = RetryPolicy(max_attempts=200, initial_unit=0.001, max_delay=0.05)


def _fragment(rows: int = 10) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def _manifest(version: int) -> str:
    return f"_versions/{manifest_name(version, NamingScheme.V2)}"


def _create(handler: CommitHandler) -> CommitResult:
    """A dataset of one 10-row fragment, committed through ``handler``."""
    return commit(HandlerStorage(handler), Transaction(0, Overwrite([_fragment()], _SCHEMA)))


class CommitHandlerConformance:
    """The CommitHandler contract. Subclasses provide a ``handler`` fixture: a fresh handler
    of an empty dataset."""

    #: rounds (versions) of the 8-way commit race
    race_rounds = 5
    race_writers = 8
    race_switch_interval: float | None = 1e-6
    #: threads x commits of the concurrent-writers test
    writer_threads = 8
    commits_per_writer = 3

    def clients(self, handler: CommitHandler, n: int) -> list[CommitHandler]:
        """``n`` handlers of the same dataset (default: ``handler`` ``n`` times; override to
        give independent clients)."""
        return [handler] * n

    def test_is_a_commit_handler(self, handler: CommitHandler) -> None:
        assert isinstance(handler, CommitHandler)
        assert isinstance(handler.storage, Storage)
        assert list(handler.finish_pending()) == []  # nothing pending in an empty dataset

    def test_commit_makes_the_version_exist(self, handler: CommitHandler) -> None:
        assert not handler.resolve(1, _manifest(1))
        handler.commit(1, _manifest(1), b"version one")
        assert handler.resolve(1, _manifest(1))
        assert handler.storage.get(_manifest(1)) == b"version one"
        assert list(handler.finish_pending()) == []
        handler.commit(2, _manifest(2), b"version two")
        assert [e.version for e in list_versions(handler.storage)] == [1, 2]
        assert not handler.resolve(3, _manifest(3))

    def test_a_taken_version_is_refused(self, handler: CommitHandler) -> None:
        other = self.clients(handler, 2)[1]
        handler.commit(1, _manifest(1), b"first")
        with pytest.raises(ObjectExistsError):
            other.commit(1, _manifest(1), b"second")
        assert other.storage.get(_manifest(1)) == b"first"
        assert [e.version for e in list_versions(handler.storage)] == [1]

    def test_an_existing_manifest_is_never_overwritten(self, handler: CommitHandler) -> None:
        """A manifest already in the blob store (written before this handler decided the
        dataset's versions, or by another naming of the version) wins."""
        handler.storage.put(_manifest(1), b"pre-existing")
        with pytest.raises(ObjectExistsError):
            handler.commit(1, _manifest(1), b"stale writer")
        assert handler.storage.get(_manifest(1)) == b"pre-existing"
        assert handler.resolve(1, _manifest(1))

    def test_commit_race_has_exactly_one_winner(self, handler: CommitHandler) -> None:
        clients = self.clients(handler, self.race_writers)
        with _thread_switching(self.race_switch_interval):
            for version in range(1, self.race_rounds + 1):
                path = _manifest(version)
                won, lost = race([functools.partial(c.commit, version, path) for c in clients])
                assert len(won) == 1, f"version {version}: winners {won}"
                assert len(lost) == self.race_writers - 1
                assert handler.storage.get(path) == f"writer-{won[0]}".encode() * 100
        listed = [e.version for e in list_versions(handler.storage)]
        assert listed == list(range(1, self.race_rounds + 1))
        # nothing but the manifests is left in _versions/ (losers cleaned up after themselves)
        assert len(handler.storage.list("_versions")) == self.race_rounds

    def test_commit_loop_goes_through_the_handler(self, handler: CommitHandler) -> None:
        created = _create(handler)
        assert created.version == 1
        result = commit(HandlerStorage(handler), Transaction(1, Append([_fragment()])))
        assert result.version == 2
        assert Dataset.open(handler.storage).count_rows() == 20

    @pytest.mark.parametrize(
        "error",
        [
            AmbiguousWriteError("injected: the commit landed, its response was lost"),
            ObjectExistsError("injected: a client retry of the landed request hit its condition"),
        ],
        ids=["lost-response", "own-retry-exists"],
    )
    def test_an_unknown_outcome_is_settled_exactly_once(
        self, handler: CommitHandler, error: Exception
    ) -> None:
        _create(handler)
        lossy = _LostResponse(handler, error)
        txn = Transaction(1, Append([_fragment()]))
        result = commit(HandlerStorage(lossy), txn, retry_policy=_FAST)
        assert lossy.error is None  # the fault fired
        assert result.version == 2
        assert result.attempts == 1  # recognised as ours, not a lost race
        assert not result.already_committed
        assert [e.version for e in list_versions(handler.storage)] == [1, 2]
        again = commit(HandlerStorage(handler), txn, retry_policy=_FAST)  # exactly once
        assert (again.version, again.already_committed) == (2, True)
        assert Dataset.open(handler.storage).count_rows() == 20

    def test_concurrent_writers_all_land(self, handler: CommitHandler) -> None:
        _create(handler)
        clients = self.clients(handler, self.writer_threads)
        barrier = threading.Barrier(self.writer_threads)
        results: list[CommitResult] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def run(client: CommitHandler) -> None:
            storage = HandlerStorage(client)
            try:
                barrier.wait()
                for _ in range(self.commits_per_writer):
                    ds = Dataset.open(storage)
                    txn = Transaction(ds.version, Append([_fragment()]))
                    r = commit(storage, txn, retry_policy=_FAST, base=ds)
                    with lock:
                        results.append(r)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        total = self.writer_threads * self.commits_per_writer
        assert len(results) == total
        # each transaction is in exactly the version it was told: its own, or (on an object
        # store, where writers that lost races are carried by others: txn_engine.contention.offers)
        # one that carried it; the versions are contiguous and hold every row once
        carried_in: dict[str, list[int]] = {}
        entries = list_versions(handler.storage)
        assert [e.version for e in entries] == list(range(1, len(entries) + 1))
        for entry in entries[1:]:
            pb = read_transaction(handler.storage, entry)
            for u in carried_uuids(pb):
                carried_in.setdefault(u, []).append(entry.version)
        for r in results:
            assert carried_in.get(r.transaction.uuid) == [r.version], r
        assert len(entries) - 1 <= total
        assert Dataset.open(handler.storage).count_rows() == 10 * (1 + total)


class PendingCommitConformance:
    """For handlers whose commit can stop after the version is decided but before its
    manifest is in the blob store. Mix into a :class:`CommitHandlerConformance` subclass and
    implement :meth:`leave_pending`."""

    def leave_pending(self, handler: CommitHandler, version: int, path: str, data: bytes) -> None:
        """Decide ``version`` for ``data`` and stop there (a writer that crashed)."""
        raise NotImplementedError

    def test_resolve_completes_a_pending_commit(self, handler: CommitHandler) -> None:
        self.leave_pending(handler, 1, _manifest(1), b"claimed")
        assert not handler.storage.exists(_manifest(1))
        assert handler.resolve(1, _manifest(1))
        assert handler.storage.get(_manifest(1)) == b"claimed"
        assert handler.storage.list("_versions") == [_manifest(1).rpartition("/")[2]]
        assert handler.resolve(1, _manifest(1))  # completing again is harmless

    def test_finish_pending_completes_what_a_listing_would_miss(
        self, handler: CommitHandler
    ) -> None:
        handler.commit(1, _manifest(1), b"one")
        self.leave_pending(handler, 2, _manifest(2), b"two")
        assert [e.version for e in list_versions(handler.storage)] == [1]  # invisible
        assert list(handler.finish_pending()) == [_manifest(2)]
        assert [e.version for e in list_versions(handler.storage)] == [1, 2]
        assert handler.storage.get(_manifest(2)) == b"two"
        assert list(handler.finish_pending()) == []
        with pytest.raises(ObjectExistsError):  # the version stays taken
            handler.commit(2, _manifest(2), b"late writer")

    def test_the_next_writer_completes_a_crashed_commit(self, handler: CommitHandler) -> None:
        _create(handler)
        crashed = _PendingOnly(handler, self)
        commit(HandlerStorage(crashed), Transaction(1, Append([_fragment()])))
        assert crashed.pending == [2]
        assert not handler.storage.exists(_manifest(2))
        result = commit(HandlerStorage(handler), Transaction(1, Append([_fragment()])))
        assert result.version == 3  # version 2 was seen (completed), then checked
        assert result.attempts == 1  # completed before the listing, not found by losing v2
        assert handler.storage.exists(_manifest(2))
        assert Dataset.open(handler.storage).count_rows() == 30


class _PendingOnly:
    """A handler whose commits stop after the version is decided (a writer that crashed
    each time right after)."""

    def __init__(self, inner: CommitHandler, suite: PendingCommitConformance) -> None:
        self.inner = inner
        self.suite = suite
        self.pending: list[int] = []

    @property
    def storage(self) -> Storage:
        return self.inner.storage

    def commit(self, version: int, path: str, data: bytes) -> None:
        self.suite.leave_pending(self.inner, version, path, data)
        self.pending.append(version)

    def resolve(self, version: int, path: str) -> bool:
        # the crashed writer's own lineage check: nothing above (it stops before reading)
        return self.inner.storage.exists(path)

    def finish_pending(self) -> Sequence[str]:
        return self.inner.finish_pending()
