"""Conformance: every commit handler honours the CommitHandler contract
(txn_engine/storage/handler.py), through the shared suites in
:mod:`txn_engine.testing.conformance`; then what is particular to the external manifest
store (Lance's DynamoDB protocol) with its in-memory store.

StoreCommitHandler over memory, local disk and fsspec's memory filesystem, and
ExternalCommitHandler (with the in-memory manifest store) over memory and local disk plug
in here; the object stores and DynamoDB on moto plug into the same suites in
tests/integration/test_object_stores.py.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    AmbiguousWriteError,
    InvalidStorageArgumentError,
    ObjectExistsError,
    StorageError,
)
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import (
    CommitHandler,
    ExternalCommitHandler,
    ExternalManifestStorage,
    FsspecStorage,
    InMemoryManifestStore,
    LocalStorage,
    ManifestLocation,
    MemoryStorage,
    RecordingStorage,
    Storage,
    StoreCommitHandler,
    commit_handler_for,
    open_storage,
)
from txn_engine.storage.external import is_staging_manifest_name
from txn_engine.testing.conformance import (
    CommitHandlerConformance,
    HandlerStorage,
    PendingCommitConformance,
)
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag(rows: int = 10) -> Fragment:
    import uuid

    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def manifest(version: int, scheme: NamingScheme = NamingScheme.V2) -> str:
    return f"_versions/{manifest_name(version, scheme)}"


# ---- the store decides (create-if-absent) -------------------------------------------------------


class TestStoreHandlerMemory(CommitHandlerConformance):
    race_rounds = 30

    @pytest.fixture
    def handler(self) -> CommitHandler:
        return StoreCommitHandler(MemoryStorage())


class TestStoreHandlerLocal(CommitHandlerConformance):
    @pytest.fixture
    def handler(self, tmp_path: Path) -> CommitHandler:
        return StoreCommitHandler(LocalStorage(tmp_path / "ds.lance"))

    def clients(self, handler: CommitHandler, n: int) -> list[CommitHandler]:
        root = handler.storage.uri
        return [handler, *(StoreCommitHandler(LocalStorage(root)) for _ in range(n - 1))]


class TestStoreHandlerFsspecMemory(CommitHandlerConformance):
    @pytest.fixture
    def handler(self) -> CommitHandler:
        fs = fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)
        return StoreCommitHandler(FsspecStorage(fs, "memory://ds.lance"))


# ---- an external manifest store decides ----------------------------------------------------------


class _ExternalSuite(CommitHandlerConformance, PendingCommitConformance):
    def leave_pending(self, handler: CommitHandler, version: int, path: str, data: bytes) -> None:
        assert isinstance(handler, ExternalCommitHandler)
        handler.claim(version, path, data)

    def clients(self, handler: CommitHandler, n: int) -> list[CommitHandler]:
        assert isinstance(handler, ExternalCommitHandler)
        return [
            handler,
            *(
                ExternalCommitHandler(handler.inner, handler.store, base_uri=handler.base_uri)
                for _ in range(n - 1)
            ),
        ]


class TestExternalHandlerMemory(_ExternalSuite):
    @pytest.fixture
    def handler(self) -> CommitHandler:
        return ExternalCommitHandler(MemoryStorage(), InMemoryManifestStore(), base_uri="ds")


class TestExternalHandlerLocal(_ExternalSuite):
    """The blob store's own create-if-absent is never used for manifests: local disk works
    as well as any."""

    @pytest.fixture
    def handler(self, tmp_path: Path) -> CommitHandler:
        return ExternalCommitHandler(LocalStorage(tmp_path / "ds"), InMemoryManifestStore())


# ---- what is particular to the external manifest store ------------------------------------------


def test_store_entries_use_lances_keys_and_final_paths() -> None:
    inner = MemoryStorage()
    store = InMemoryManifestStore()
    handler = ExternalCommitHandler(inner, store, base_uri="bucket/ds/")
    assert handler.base_uri == "bucket/ds"
    handler.commit(1, manifest(1), b"one")
    assert store.get("bucket/ds", 1) == ManifestLocation(
        "bucket/ds", 1, f"bucket/ds/{manifest(1)}", 3, None, "txn_engine"
    )
    assert inner.list("_versions") == [manifest(1).rpartition("/")[2]]  # no staging left
    assert ExternalCommitHandler(inner, store).base_uri == inner.uri.rstrip("/")


def test_a_version_written_before_onboarding_is_never_claimed() -> None:
    inner = MemoryStorage()
    inner.put_if_absent(manifest(1), b"pre-store")
    handler = ExternalCommitHandler(inner, InMemoryManifestStore(), base_uri="ds")
    with pytest.raises(ObjectExistsError):
        handler.commit(1, manifest(1), b"stale writer")
    assert inner.get(manifest(1)) == b"pre-store"
    assert handler.store.get_latest("ds") is None  # nothing claimed
    assert inner.list("_versions") == [manifest(1).rpartition("/")[2]]  # no staging object


def test_a_claim_under_the_other_naming_scheme_is_not_this_path() -> None:
    handler = ExternalCommitHandler(MemoryStorage(), InMemoryManifestStore(), base_uri="ds")
    handler.claim(3, manifest(3, NamingScheme.V1), b"v1 name")
    assert not handler.resolve(3, manifest(3, NamingScheme.V2))
    assert handler.resolve(3, manifest(3, NamingScheme.V1))


def test_a_lost_claim_response_keeps_the_staging_object_for_settlement() -> None:
    class LostResponseStore(InMemoryManifestStore):
        def put_if_not_exists(
            self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
        ) -> None:
            super().put_if_not_exists(base_uri, version, path, size, e_tag)
            raise AmbiguousWriteError("response lost after the claim landed")

    inner = MemoryStorage()
    handler = ExternalCommitHandler(inner, LostResponseStore(), base_uri="ds")
    with pytest.raises(AmbiguousWriteError):
        handler.commit(1, manifest(1), b"mine")
    [staged] = inner.list("_versions")
    assert staged.startswith(manifest(1).rpartition("/")[2] + "-")  # kept: it is committed
    assert handler.resolve(1, manifest(1))  # what the commit loop's read-back does
    assert inner.get(manifest(1)) == b"mine"
    assert inner.list("_versions") == [manifest(1).rpartition("/")[2]]


def test_a_failed_claim_leaves_nothing_behind() -> None:
    class Down(InMemoryManifestStore):
        def put_if_not_exists(
            self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
        ) -> None:
            raise StorageError("store unreachable")

    inner = MemoryStorage()
    handler = ExternalCommitHandler(inner, Down(), base_uri="ds")
    with pytest.raises(StorageError):
        handler.commit(1, manifest(1), b"x")
    assert inner.list("_versions") == []


def test_a_failed_finalize_is_completed_by_the_next_reader() -> None:
    """The claim landed, the copy to the final name failed: the commit is reported as
    done (it is), and the next listing completes it."""

    class CopyFails(MemoryStorage):
        fail = True

        def put(self, path: str, data: bytes) -> None:
            if self.fail and not path.rpartition("/")[2].count("-"):
                raise StorageError("copy failed")
            super().put(path, data)

    inner = CopyFails()
    handler = ExternalCommitHandler(inner, InMemoryManifestStore(), base_uri="ds")
    handler.commit(1, manifest(1), b"one")  # no error: committed
    assert not inner.exists(manifest(1))
    inner.fail = False
    assert list(handler.finish_pending()) == [manifest(1)]
    assert inner.get(manifest(1)) == b"one"


def test_finalize_is_idempotent() -> None:
    inner = MemoryStorage()
    handler = ExternalCommitHandler(inner, InMemoryManifestStore(), base_uri="ds")
    location = handler.claim(1, manifest(1), b"claimed")
    assert location.version == 1
    assert handler.finalize(location) == manifest(1)
    assert handler.finalize(location) == manifest(1)  # a slow second finalizer: harmless
    entry = handler.store.get("ds", 1)
    assert entry is not None
    assert handler.finalize(entry) == manifest(1)  # already final
    assert inner.get(manifest(1)) == b"claimed"
    assert inner.list("_versions") == [manifest(1).rpartition("/")[2]]


# ---- the Storage view (s3+ddb://) --------------------------------------------------------------


def test_the_view_carries_its_handler_and_refuses_manifest_creates() -> None:
    inner = MemoryStorage()
    view = ExternalManifestStorage(inner, InMemoryManifestStore(), base_uri="ds")
    assert isinstance(view, Storage)
    assert commit_handler_for(view) is view.commit_handler
    assert view.commit_handler.storage is inner
    assert isinstance(commit_handler_for(inner), StoreCommitHandler)
    with pytest.raises(InvalidStorageArgumentError, match="commit handler"):
        view.put_if_absent(manifest(1), b"around the handler")
    assert inner.list("_versions") == []
    # a wrapper that does not forward the handler fails loudly rather than bypassing it
    with pytest.raises(InvalidStorageArgumentError):
        commit(RecordingStorage(view), Transaction(0, Overwrite([frag()], SCHEMA)))
    # non-manifest creates pass through to the blob store's create-if-absent
    view.put_if_absent("data/x.lance", b"x")
    with pytest.raises(ObjectExistsError):
        view.put_if_absent("data/x.lance", b"y")
    assert open_storage(view) is view


def test_the_view_completes_pending_commits_for_readers() -> None:
    inner = MemoryStorage()
    store = InMemoryManifestStore()
    view = ExternalManifestStorage(inner, store, base_uri="ds")
    view.commit_handler.commit(1, manifest(1), b"one")
    view.commit_handler.claim(2, manifest(2), b"two")  # its writer "crashed" here
    orphan = f"{manifest(3)}-00000000-0000-0000-0000-000000000000"
    inner.put(orphan, b"orphan staging (claim never made)")
    assert len(inner.list("_versions")) == 3
    names = sorted(view.list("_versions"))  # completed, staging hidden
    assert names == sorted(p.rpartition("/")[2] for p in (manifest(1), manifest(2)))
    assert inner.get(manifest(2)) == b"two"
    assert store.get_latest("ds") == ManifestLocation(
        "ds", 2, f"ds/{manifest(2)}", 3, None, "txn_engine"
    )
    # the orphan stays invisible and does not block version 3
    view.commit_handler.commit(3, manifest(3), b"three")
    assert [e.version for e in list_versions(view)] == [1, 2, 3]

    # a reader that reads a manifest without listing first completes it too
    view.commit_handler.claim(4, manifest(4), b"four")
    reader = ExternalManifestStorage(inner, store, base_uri="ds")
    assert reader.size(manifest(4)) == 4
    view.commit_handler.claim(5, manifest(5), b"five")
    assert reader.get_range(manifest(5), 1, 3) == b"iv"
    view.commit_handler.claim(6, manifest(6), b"six")
    assert reader.exists(manifest(6))
    view.commit_handler.claim(7, manifest(7), b"seven")
    assert reader.get(manifest(7)) == b"seven"
    assert not reader.exists(manifest(8))


def test_commits_through_the_view_and_a_crash_completed_by_the_next_writer() -> None:
    inner = MemoryStorage()
    store = InMemoryManifestStore()
    view = ExternalManifestStorage(inner, store)
    assert commit(view, Transaction(0, Overwrite([frag()], SCHEMA))).version == 1

    class ClaimOnly:
        def __init__(self, handler: ExternalCommitHandler) -> None:
            self.inner = handler
            self.claimed: list[ManifestLocation] = []

        @property
        def storage(self) -> Storage:
            return self.inner.storage

        def commit(self, version: int, path: str, data: bytes) -> None:
            self.claimed.append(self.inner.claim(version, path, data))

        def resolve(self, version: int, path: str) -> bool:
            return self.inner.storage.exists(path)

        def finish_pending(self) -> list[str]:
            return self.inner.finish_pending()

    crashed = ClaimOnly(view.commit_handler)
    commit(HandlerStorage(crashed), Transaction(1, Append([frag()])))
    [claimed] = crashed.claimed
    assert claimed.version == 2
    staging = claimed.path.removeprefix(f"{view.base_uri}/")
    assert inner.exists(staging)
    assert not inner.exists(manifest(2))

    nxt = ExternalManifestStorage(inner, store)
    result = commit(nxt, Transaction(1, Append([frag()])))
    assert result.version == 3
    assert inner.exists(manifest(2))
    assert not inner.exists(staging)
    entry = store.get(nxt.base_uri, 2)
    assert entry is not None
    assert entry.path == f"{nxt.base_uri}/{manifest(2)}"
    ds = Dataset.open(nxt)
    assert ds.version == 3
    assert ds.count_rows() == 30
    assert ds.uri == inner.uri


class _FirstClaimResponseLost(InMemoryManifestStore):
    """Claims land; the first claim above version 1 answers with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error: Exception | None = error

    def put_if_not_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        super().put_if_not_exists(base_uri, version, path, size, e_tag)
        if version > 1 and self.error is not None:
            error, self.error = self.error, None
            raise error


@pytest.mark.parametrize(
    "error",
    [
        AmbiguousWriteError("response lost after the claim landed"),
        ObjectExistsError("conditional check failed (a client retry of a landed request)"),
    ],
    ids=["lost-response", "own-retry-exists"],
)
def test_a_lost_claim_response_lands_exactly_once_through_the_loop(error: Exception) -> None:
    """The claim landed, the staging object is not yet final: the loop's read-back
    (``resolve``) completes it and finds its own bytes; one attempt, one version."""
    inner = MemoryStorage()
    store = _FirstClaimResponseLost(error)
    view = ExternalManifestStorage(inner, store)
    commit(view, Transaction(0, Overwrite([frag()], SCHEMA)))
    result = commit(view, Transaction(1, Append([frag()])))
    assert store.error is None  # the fault fired
    assert (result.version, result.attempts) == (2, 1)
    assert [e.version for e in list_versions(view)] == [1, 2]
    entry = store.get(view.base_uri, 2)
    assert entry is not None
    assert entry.path.endswith(manifest(2))  # finalized
    assert Dataset.open(view).count_rows() == 20


@pytest.mark.parametrize(
    "staged",
    [
        "_versions/5.manifest-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",  # another version's name
        "data/7.manifest-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",  # outside _versions/
    ],
)
def test_finalize_refuses_an_entry_that_is_not_its_versions_staging_manifest(
    staged: str,
) -> None:
    """A manifest store entry (another implementation's, or damaged) for version 7 that
    points at version 5's staging name would have been copied over version 5's manifest
    with a plain put (or into data/): finalize now refuses it and writes nothing."""
    inner, handler, entry = _entry_for_version_7(staged)
    before = {d: sorted(inner.list(d)) for d in ("_versions", "data")}
    with pytest.raises(StorageError, match="not a staging manifest of that version"):
        handler.finalize(entry)
    assert inner.get(manifest(5, NamingScheme.V1)) == b"version 5"
    assert {d: sorted(inner.list(d)) for d in ("_versions", "data")} == before


def test_a_staging_name_in_unicode_digits_is_not_one() -> None:
    """``\\d`` took ARABIC-INDIC digits: finalize copied such an object to
    ``_versions/\u0667.manifest``; it is not a staging name, so nothing is copied."""
    staged = "_versions/\u0667.manifest-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    assert not is_staging_manifest_name(staged.rpartition("/")[2])
    inner, handler, entry = _entry_for_version_7(staged)
    handler.finalize(entry)
    assert "\u0667.manifest" not in inner.list("_versions")


def _entry_for_version_7(
    staged: str,
) -> tuple[MemoryStorage, ExternalCommitHandler, ManifestLocation]:
    inner = MemoryStorage()
    handler = ExternalCommitHandler(inner, InMemoryManifestStore(), base_uri="ds")
    inner.put(manifest(5, NamingScheme.V1), b"version 5")
    inner.put(staged, b"hostile")
    handler.store.put_if_not_exists("ds", 7, f"ds/{staged}", 7, None)
    entry = handler.store.get("ds", 7)
    assert entry is not None
    return inner, handler, entry
