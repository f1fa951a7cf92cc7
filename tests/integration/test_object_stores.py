"""The object-store backends against real emulators on loopback, and the external manifest
store (DynamoDB protocol).

* S3: moto server; Azure: azurite; GCS: fake-gcs-server (see ``emulators.py``). A missing
  emulator fails these tests (``scripts/install_emulators.sh``), it never skips them.
* For each store and backend, the shared conformance suites
  (:mod:`txn_engine.testing.conformance`): the Storage contract through ``open_storage``
  with independent clients (an 8-client ``put_if_absent`` race: exactly one winner per path),
  and the CommitHandler contract of the store's own conditional put; then a commit through
  :func:`txn_engine.commit.commit` of fragments written by pylance 14.0.2, read back by
  pylance. pylance talks to fake-gcs-server through a service-account file with
  ``gcs_base_url`` (it can list and read; fake-gcs-server does not implement the XML-API
  uploads pylance writes with, so GCS data files are written locally by pylance and uploaded).
* pylance and txn_engine appending to one S3 / Azure dataset at the same time: both land.
* The external manifest store on S3 + DynamoDB (moto): the CommitHandler suites (one winner
  per version, a crash between claim and finalize completed by the next reader / writer,
  lost claim responses settled exactly once), and interop with pylance's ``s3+ddb://``.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import emulators as emu
import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

from txn_engine import writers
from txn_engine.commit import commit
from txn_engine.contention.carrier import hosted
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    AtomicityUnsupportedError,
    InvalidStorageArgumentError,
    LimitExceededError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from txn_engine.format.io import read_manifest_bytes
from txn_engine.format.naming import (
    U64_MAX,
    NamingScheme,
    list_versions,
    manifest_name,
    scan_versions,
)
from txn_engine.ops import Append
from txn_engine.retry import RetryPolicy
from txn_engine.storage import (
    Atomicity,
    CommitHandler,
    DynamoDBManifestStore,
    ExternalCommitHandler,
    ExternalManifestStorage,
    FsspecStorage,
    ManifestLocation,
    ObstoreStorage,
    StoreCommitHandler,
    open_storage,
)
from txn_engine.storage.base import Storage, get_bounded, read_concurrency
from txn_engine.testing.conformance import (
    CommitHandlerConformance,
    HandlerStorage,
    PendingCommitConformance,
    StorageConformance,
)
from txn_engine.transaction import Transaction

THREADS = 8
FAST_RETRY = RetryPolicy(max_attempts=60, initial_unit=0.01, max_delay=0.2)


# ---- backends -----------------------------------------------------------------------------------


@attrs.frozen
class Backend:
    """One emulated object store, through one txn_engine backend (obstore or fsspec)."""

    name: str  # "s3", "azure", "gcs"
    impl: str  # "obstore", "fsspec"
    info: Any
    lance_options: dict[str, str]  # what pylance gets for this store
    pylance_writes: bool  # can pylance write data files / commit there?
    options_for: Callable[[str], dict[str, str]]  # Lance-named options for an endpoint
    endpoint: str  # where txn_engine talks to the store (the server, or a shim in front)
    upstream: str  # the server itself (http://127.0.0.1:P)

    def uri(self, prefix: str) -> str:
        return str(self.info.uri(emu.unique_name(prefix)))

    def options(self, *, fresh: bool = False, endpoint: str | None = None) -> dict[str, Any]:
        """Lance-named options selecting this backend; ``fresh`` asks for a separate client
        (``skip_instance_cache``: fsspec and obstore share one otherwise); ``endpoint`` routes the
        requests through a proxy."""
        opts: dict[str, Any] = {
            **self.options_for(endpoint or self.endpoint),
            "txn_engine_backend": self.impl,
        }
        if fresh:
            opts["skip_instance_cache"] = True
        return opts

    def storage(self, uri: str, *, fresh: bool = False) -> Storage:
        return open_storage(uri, self.options(fresh=fresh))


def _gcs_lance_options(info: Any, tmp: Path) -> dict[str, str]:
    # object_store reads the endpoint from a service-account file's ``gcs_base_url``
    return dict(info.lance_options(tmp))


BACKENDS = [f"{store}-{impl}" for store in ("s3", "azure", "gcs") for impl in ("obstore", "fsspec")]


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """Each emulated store through each backend (servers start lazily, once per session).

    fake-gcs-server does not implement the XML-API upload object_store sends (pylance and
    obstore alike), so on GCS txn_engine talks to it through a loopback shim that turns
    each such upload into the equivalent JSON-API upload with the same generation
    precondition (``emulators.LoopbackProxy(gcs_xml_uploads=True)``); fsspec uses the
    JSON API directly and goes through the same shim unchanged.
    """
    store, impl = request.param.split("-")
    if store == "s3":
        info = request.getfixturevalue("moto_server")
        return Backend(
            "s3",
            impl,
            info,
            info.lance_options(),
            True,
            lambda endpoint: {**info.lance_options(), "aws_endpoint": endpoint},
            info.endpoint,
            info.endpoint,
        )
    if store == "azure":
        info = request.getfixturevalue("azurite_server")
        upstream = info.endpoint.rsplit("/", 1)[0]
        return Backend(
            "azure",
            impl,
            info,
            info.lance_options(),
            True,
            lambda endpoint: {
                **info.lance_options(),
                "azure_storage_endpoint": f"{endpoint}/{emu.AZURE_ACCOUNT}",
            },
            upstream,
            upstream,
        )
    info = request.getfixturevalue("fake_gcs_server")
    tmp = tmp_path_factory.mktemp("gcs")
    shim = emu.LoopbackProxy(info.endpoint, gcs_xml_uploads=True)
    request.addfinalizer(shim.stop)  # noqa: PT021 (a fixture that returns, per param)
    return Backend(
        "gcs",
        impl,
        info,
        _gcs_lance_options(info, tmp),
        False,
        lambda endpoint: dict(info.lance_options(tmp, endpoint)),
        shim.endpoint,
        info.endpoint,
    )


def _table(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(range(start, start + n), pa.int64()),
            "b": pa.array([f"r{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def _fragments(backend: Backend, uri: str, table: pa.Table, tmp_path: Path) -> list[Any]:
    """pylance-written fragments whose data files are under ``uri``/data/."""
    if backend.pylance_writes:
        return list(write_fragments(table, uri, storage_options=backend.lance_options))
    local = tmp_path / f"local-{time.monotonic_ns()}.lance"
    frags = list(write_fragments(table, str(local)))
    storage = backend.storage(uri)
    for path in (local / "data").iterdir():
        storage.put(f"data/{path.name}", path.read_bytes())
    return frags


# ---- the Storage and CommitHandler contracts on each store (the shared suites) ------------------


def test_backend_selection(backend: Backend) -> None:
    """open_storage picks the backend the options name, bound to the URI as given."""
    uri = backend.uri("select")
    st = backend.storage(uri)
    if backend.impl == "fsspec":
        assert isinstance(st, FsspecStorage)
        assert st.atomicity is Atomicity.CONDITIONAL_PUT
    else:
        assert isinstance(st, ObstoreStorage)
    assert st.uri == uri
    assert read_concurrency(st) > 1  # every read is a round trip: a commit overlaps them


class TestObjectStoreConformance(StorageConformance):
    """The Storage contract through ``open_storage(uri, options)``, with independent clients
    (own connections and caches), on every store and backend."""

    race_rounds = 5
    race_switch_interval = None
    partial_read_size = 64 * 1024
    partial_read_versions = 8

    @pytest.fixture
    def storage(self, backend: Backend) -> Storage:
        self.backend = backend
        return backend.storage(backend.uri("contract"))

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        return [storage, *(self.backend.storage(storage.uri, fresh=True) for _ in range(n - 1))]


class TestStoreHandlerOnObjectStores(CommitHandlerConformance):
    """The store's own conditional put decides (the default for s3://, gs://, az://)."""

    race_rounds = 3
    race_switch_interval = None
    writer_threads = 4
    commits_per_writer = 2

    @pytest.fixture
    def handler(self, backend: Backend) -> CommitHandler:
        self.backend = backend
        return StoreCommitHandler(backend.storage(backend.uri("handler")))

    def clients(self, handler: CommitHandler, n: int) -> list[CommitHandler]:
        uri = handler.storage.uri
        fresh = (StoreCommitHandler(self.backend.storage(uri, fresh=True)) for _ in range(n - 1))
        return [handler, *fresh]


def test_manifest_footer_first_in_one_request(backend: Backend) -> None:
    """obstore on S3 and GCS answers a suffix range with the tail and the object's size
    (``get_tail``: one request for a manifest's last block); on Azure, which has no suffix
    ranges, it says so (None) and the reader reads the first block with the size
    (``get_head``, on every store). Either way the manifest reader returns the bytes as
    stored."""
    uri = backend.uri("tail")
    st = backend.storage(uri)
    body = bytes(range(256)) * 700  # 179,200 bytes: more than two 64 KiB blocks
    st.put("blob.bin", body)
    tail_reader = getattr(st, "get_tail", None)
    head_reader = getattr(st, "get_head", None)
    if backend.impl == "obstore":  # the first block and the size, on every store
        assert head_reader is not None
        assert head_reader("blob.bin", 100) == (body[:100], len(body))
        assert head_reader("blob.bin", 10**6) == (body, len(body))
        with pytest.raises(ObjectNotFoundError):
            head_reader("missing.bin", 100)
    if backend.impl == "fsspec":
        assert tail_reader is None
    elif backend.name == "azure":
        assert tail_reader is not None
        assert tail_reader("blob.bin", 100) is None
    else:
        assert tail_reader is not None
        assert tail_reader("blob.bin", 100) == (body[-100:], len(body))
        assert tail_reader("blob.bin", 10**6) == (body, len(body))
        with pytest.raises(ObjectNotFoundError):
            tail_reader("missing.bin", 100)
    created = writers.overwrite(uri, [], _table(0, 1).schema, storage_options=backend.options())
    path = created.manifest_path
    assert read_manifest_bytes(st, path) == st.get(path)


# ---- commits through txn_engine, read back by pylance -------------------------------------------


def test_commit_read_back_by_pylance(backend: Backend, tmp_path: Path) -> None:
    uri = backend.uri("commit")
    opts = backend.options()
    first = _fragments(backend, uri, _table(0, 300), tmp_path)
    created = writers.overwrite(uri, first, _table(0, 1).schema, storage_options=opts)
    assert created.version == 1

    latencies = []
    for i in range(3):
        frags = [
            writers.as_fragment(f)
            for f in _fragments(backend, uri, _table(300 + 100 * i, 100), tmp_path)
        ]
        start = time.perf_counter()
        result = commit(uri, Transaction(created.version + i, Append(frags)), storage_options=opts)
        latencies.append(time.perf_counter() - start)
        assert result.version == 2 + i
        assert result.attempts == 1

    assert [e.version for e in list_versions(backend.storage(uri))] == [1, 2, 3, 4]
    ds = lance.dataset(uri, storage_options=backend.lance_options)
    assert ds.version == 4
    assert ds.count_rows() == 600
    assert ds.to_table().sort_by("a").equals(_table(0, 600))
    newest = ds.get_transactions(1)[0]
    assert newest is not None
    assert newest.uuid == result.transaction.uuid
    assert newest.read_version == 3
    print(
        f"\n[{backend.name}/{backend.impl}] txn_engine Append commit latency: "
        f"{', '.join(f'{x * 1000:.0f}' for x in latencies)} ms"
    )


@pytest.mark.parametrize("impl", ["obstore", "fsspec"])
@pytest.mark.parametrize("store", ["s3", "azure"])
def test_pylance_and_txn_engine_append_concurrently(
    store: str, impl: str, request: pytest.FixtureRequest
) -> None:
    info = request.getfixturevalue("moto_server" if store == "s3" else "azurite_server")
    lance_opts = info.lance_options()
    # one option set for both: pylance ignores txn_engine's own option
    engine_opts = {**lance_opts, "txn_engine_backend": impl}
    uri = info.uri(emu.unique_name("mixed"))
    lance.write_dataset(_table(0, 50), uri, storage_options=lance_opts)
    rounds = 4
    pending_frags = [
        [
            writers.as_fragment(f)
            for f in write_fragments(_table(1000 * (r + 1), 10), uri, storage_options=lance_opts)
        ]
        for r in range(rounds)
    ]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    uuids: list[str] = []
    attempts: list[int] = []

    def pylance_writer() -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                lance.write_dataset(
                    _table(-1000 * (r + 1), 10), uri, mode="append", storage_options=engine_opts
                )
        except BaseException as exc:
            errors.append(exc)

    def txn_engine_writer() -> None:
        try:
            barrier.wait()
            storage = open_storage(uri, engine_opts)
            for r in range(rounds):
                # every commit reads version 1: it must check (and pass) all newer appends
                result = commit(
                    storage, Transaction(1, Append(pending_frags[r])), retry_policy=FAST_RETRY
                )
                uuids.append(result.transaction.uuid)
                attempts.append(result.attempts)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pylance_writer), threading.Thread(target=txn_engine_writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ds = lance.dataset(uri, storage_options=lance_opts)
    assert ds.version == 1 + 2 * rounds
    assert ds.count_rows() == 50 + 2 * 10 * rounds
    values = set(ds.to_table(columns=["a"])["a"].to_pylist())
    for r in range(rounds):
        assert 1000 * (r + 1) in values
        assert -1000 * (r + 1) in values
    landed = {t.uuid for t in ds.get_transactions(ds.version) if t is not None}
    assert set(uuids) <= landed
    # racing pylance alone (no other process offers), it hosted no carrier
    assert hosted(open_storage(uri, engine_opts).uri) is None
    assert len(set(uuids)) == rounds
    print(
        f"\n[{store}/{impl}] pylance + txn_engine appends: all {2 * rounds} landed; txn_engine "
        f"manifest-create attempts per commit: {attempts}"
    )


# ---- the external manifest store ----------------------------------------------------------------
# The protocol itself (one winner per version, a version written before onboarding, a crash
# between claim and finalize, lost and retried claim responses, concurrent commits) is tested
# in memory in tests/unit/test_commit_handlers.py through the shared suites; here it runs on
# S3 + DynamoDB (moto) and against pylance's ``s3+ddb://``.


class ClaimOnly:
    """A handler whose commits stop right after the claim (a writer that crashed)."""

    def __init__(self, handler: ExternalCommitHandler) -> None:
        self.inner = handler
        self.claimed: ManifestLocation | None = None
        self.final = ""

    @property
    def storage(self) -> Storage:
        return self.inner.storage

    def commit(self, version: int, path: str, data: bytes) -> None:
        self.claimed = self.inner.claim(version, path, data)
        self.final = path

    def resolve(self, version: int, path: str) -> bool:
        return self.inner.storage.exists(path)

    def finish_pending(self) -> list[str]:
        return self.inner.finish_pending()


def _concurrent_appends(
    make: Callable[[], Storage], frags: list[Any], per_thread: int
) -> list[Any]:
    barrier = threading.Barrier(THREADS)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        storage = make()
        try:
            barrier.wait()
            for _ in range(per_thread):
                ds = Dataset.open(storage)
                txn = Transaction(ds.version, Append([writers.as_fragment(f) for f in frags]))
                r = commit(storage, txn, retry_policy=FAST_RETRY, base=ds)
                with lock:
                    results.append(r)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


# ---- DynamoDB on moto ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ddb_table(moto_server: Any) -> str:
    name = "txn-engine-manifests"
    DynamoDBManifestStore.create_table(moto_server.boto3_client("dynamodb"), name)
    return name


def _ddb_store(moto_server: Any, table: str) -> DynamoDBManifestStore:
    return DynamoDBManifestStore(
        table,
        endpoint_url=moto_server.endpoint,
        region_name=emu.S3_REGION,
        aws_access_key_id=emu.S3_KEY,
        aws_secret_access_key=emu.S3_SECRET,
    )


def _ddb_options(moto_server: Any) -> dict[str, Any]:
    return {**moto_server.fsspec_options(), "dynamodb_endpoint": moto_server.endpoint}


def test_dynamodb_store_semantics(moto_server: Any, ddb_table: str) -> None:
    store = _ddb_store(moto_server, ddb_table)
    base = emu.unique_name("ddb-sem")
    assert store.get_latest(base) is None
    assert store.get(base, 1) is None
    for v in (1, 2, 9, 10):  # numeric range key: 10 is later than 9
        store.put_if_not_exists(base, v, f"{base}/_versions/{v}.manifest-x", 5, None)
    with pytest.raises(ObjectExistsError):
        store.put_if_not_exists(base, 9, "elsewhere", 1, None)
    with pytest.raises(ObjectNotFoundError):
        store.put_if_exists(base, 3, "nowhere", 1, None)
    store.put_if_exists(base, 10, f"{base}/_versions/10.manifest", 7, "etag-1")
    latest = store.get_latest(base)
    assert latest == ManifestLocation(
        base, 10, f"{base}/_versions/10.manifest", 7, "etag-1", "txn_engine"
    )
    entry = store.get(base, 9)
    assert entry is not None
    assert entry.path.endswith("9.manifest-x")
    assert entry.size == 5

    client = moto_server.boto3_client("dynamodb")
    client.create_table(
        TableName="wrong-keys",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(InvalidStorageArgumentError, match="base_uri"):
        _ddb_store(moto_server, "wrong-keys")


class TestExternalHandlerOnDynamoDB(CommitHandlerConformance, PendingCommitConformance):
    """The CommitHandler suites on S3 (moto) with DynamoDB (moto) deciding: the 8-way claim
    race (one winner per version, no staging object left), lost and retried claim responses,
    a crash between claim and finalize, concurrent writers."""

    race_rounds = 3
    race_switch_interval = None
    writer_threads = 4
    commits_per_writer = 2

    @pytest.fixture
    def handler(self, moto_server: Any, ddb_table: str) -> CommitHandler:
        self.server, self.table = moto_server, ddb_table
        uri = moto_server.uri(emu.unique_name("ddb-handler"))
        return ExternalCommitHandler(
            open_storage(uri, moto_server.lance_options()), _ddb_store(moto_server, ddb_table)
        )

    def clients(self, handler: CommitHandler, n: int) -> list[CommitHandler]:
        options = {**self.server.fsspec_options(), "skip_instance_cache": True}
        fresh = (
            ExternalCommitHandler(
                open_storage(handler.storage.uri, options), _ddb_store(self.server, self.table)
            )
            for _ in range(n - 1)
        )
        return [handler, *fresh]

    def leave_pending(self, handler: CommitHandler, version: int, path: str, data: bytes) -> None:
        assert isinstance(handler, ExternalCommitHandler)
        handler.claim(version, path, data)


def test_dynamodb_commits_interoperate_with_pylance(moto_server: Any, ddb_table: str) -> None:
    name = emu.unique_name("ddb-interop")
    uri = f"s3+ddb://{moto_server.bucket}/{name}?ddbTableName={ddb_table}"
    lance_opts = {**moto_server.lance_options(), "dynamodb_endpoint": moto_server.endpoint}
    opts = _ddb_options(moto_server)
    # pylance creates the dataset through DynamoDB; txn_engine appends through the same table
    lance.write_dataset(_table(0, 30), uri, storage_options=lance_opts)
    storage = open_storage(uri, opts)
    assert isinstance(storage, ExternalManifestStorage)
    assert storage.base_uri == name
    frags = list(
        write_fragments(
            _table(100, 10), moto_server.uri(name), storage_options=moto_server.lance_options()
        )
    )
    latencies = []
    for i in range(3):
        start = time.perf_counter()
        result = commit(
            uri,
            Transaction(1 + i, Append([writers.as_fragment(f) for f in frags])),
            storage_options=opts,
        )
        latencies.append(time.perf_counter() - start)
        assert result.version == 2 + i
    entry = _ddb_store(moto_server, ddb_table).get(name, 4)
    assert entry is not None
    assert entry.path.endswith("_versions/18446744073709551611.manifest")
    assert entry.committer == "txn_engine"
    ds = lance.dataset(uri, storage_options=lance_opts)
    assert ds.version == 4
    assert ds.count_rows() == 60

    # A txn_engine writer that crashed after claiming version 5 is repaired by pylance's reader.
    crashed = ClaimOnly(storage.commit_handler)
    commit(HandlerStorage(crashed), Transaction(4, Append([writers.as_fragment(f) for f in frags])))
    assert crashed.claimed is not None
    assert crashed.claimed.version == 5
    assert not storage.inner.exists(crashed.final)
    ds = lance.dataset(uri, storage_options=lance_opts)
    assert ds.version == 5
    assert ds.count_rows() == 70
    assert storage.inner.exists(crashed.final)
    # pylance appends on top; txn_engine sees it
    lance.write_dataset(_table(200, 5), uri, mode="append", storage_options=lance_opts)
    assert Dataset.open(open_storage(uri, opts)).version == 6
    print(
        f"\n[s3+dynamodb] txn_engine Append commit latency: "
        f"{', '.join(f'{x * 1000:.0f}' for x in latencies)} ms"
    )


def test_dynamodb_concurrent_writers_txn_engine_and_pylance(
    moto_server: Any, ddb_table: str
) -> None:
    name = emu.unique_name("ddb-mixed")
    uri = f"s3+ddb://{moto_server.bucket}/{name}?ddbTableName={ddb_table}"
    lance_opts = {**moto_server.lance_options(), "dynamodb_endpoint": moto_server.endpoint}
    lance.write_dataset(_table(0, 10), uri, storage_options=lance_opts)
    frags = list(
        write_fragments(
            _table(100, 10), moto_server.uri(name), storage_options=moto_server.lance_options()
        )
    )
    opts = _ddb_options(moto_server)
    errors: list[BaseException] = []
    rounds = 3

    def pylance_writer() -> None:
        try:
            for r in range(rounds):
                lance.write_dataset(
                    _table(-10 * (r + 1), 1), uri, mode="append", storage_options=lance_opts
                )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=pylance_writer)
    thread.start()
    results = _concurrent_appends(lambda: open_storage(uri, opts), frags, 1)
    thread.join()
    assert errors == []
    total = 1 + rounds + THREADS
    assert sorted(r.version for r in results) == sorted({r.version for r in results})
    ds = lance.dataset(uri, storage_options=lance_opts)
    assert ds.version == total
    assert ds.count_rows() == 10 + rounds + 10 * THREADS
    names = open_storage(moto_server.uri(name), moto_server.fsspec_options()).list("_versions")
    assert len(names) == total  # every version finalized, no staging objects left


# ---- lost responses, on every store and backend -------------------------------------------------


def _manifest_write(method: str, path: str, body: bytes) -> bool:
    """Whether a proxied request creates a main-line manifest: the name is in the URL (S3,
    Azure, GCS XML API) or in the upload's metadata part (gcsfs's multipart upload)."""
    if method not in {"PUT", "POST"}:
        return False
    return "/_versions/" in urllib.parse.unquote(path) or b"/_versions/" in body[:4096]


def test_lost_manifest_create_response_commits_exactly_once(
    backend: Backend, tmp_path: Path, loopback_proxy: Callable[..., Any]
) -> None:
    """The server creates the manifest, the response never arrives: the commit must land
    exactly once (the backend's retry sees its own object, or the write is ambiguous and the
    commit loop reads it back), never twice and never as a false conflict."""
    uri = backend.uri("lost")
    first = _fragments(backend, uri, _table(0, 10), tmp_path)
    writers.overwrite(uri, first, _table(0, 1).schema, storage_options=backend.options())
    drops: list[str] = []

    def drop(method: str, path: str, body: bytes) -> bool:
        if _manifest_write(method, path, body) and not drops:
            drops.append(path)
            return True
        return False

    proxy = loopback_proxy(
        backend.upstream, drop_response=drop, gcs_xml_uploads=backend.name == "gcs"
    )
    options = backend.options(endpoint=proxy.endpoint, fresh=True)
    frags = [writers.as_fragment(f) for f in _fragments(backend, uri, _table(10, 5), tmp_path)]
    result = commit(
        uri, Transaction(1, Append(frags)), storage_options=options, retry_policy=FAST_RETRY
    )
    assert proxy.dropped == 1
    assert result.version == 2
    assert [e.version for e in list_versions(backend.storage(uri))] == [1, 2]
    ds = Dataset.open(uri, storage_options=backend.options())
    assert ds.version == 2
    assert ds.count_rows() == 15
    assert ds.transaction().uuid == result.transaction.uuid


# ---- stores that ignore conditional writes (issue 11, finding 3) --------------------------------


@pytest.mark.parametrize("impl", ["obstore", "fsspec"])
def test_store_ignoring_if_none_match_is_refused(
    impl: str, moto_server: Any, tmp_path: Path, loopback_proxy: Callable[..., Any]
) -> None:
    """A proxy in front of moto drops ``If-None-Match``: without the probe, two writers both
    "create" one manifest and one acknowledged commit vanishes. With it, the first manifest
    create through that store raises AtomicityUnsupportedError naming the way out, nothing
    is committed and the probe leaves nothing behind."""
    info = moto_server
    strip = loopback_proxy(info.endpoint, strip_headers=frozenset({"if-none-match"}))
    direct = {**info.lance_options(), "txn_engine_backend": impl}
    stripped = {**direct, "aws_endpoint": strip.endpoint}
    uri = info.uri(emu.unique_name("ignores-inm"))
    frags = list(write_fragments(_table(0, 10), uri, storage_options=info.lance_options()))
    writers.overwrite(uri, frags, _table(0, 1).schema, storage_options=direct)  # probe passes

    more = [writers.as_fragment(f) for f in frags]
    with pytest.raises(AtomicityUnsupportedError) as refused:
        commit(uri, Transaction(1, Append(more)), storage_options=stripped)
    message = str(refused.value)
    assert "s3+ddb://" in message
    assert "txn_engine_unsafe_no_atomicity_check" in message
    assert emu.S3_SECRET not in message.replace("txn-engine-tests", "")
    store = open_storage(uri, direct)
    assert [e.version for e in list_versions(store)] == [1]  # nothing committed
    assert store.list("_txn_engine/probe") == []  # the probe cleaned up
    assert any("if-none-match" not in {k.lower() for k in h} for m, _, h in strip.requests)

    # what the probe prevents: with the check switched off, two writers both "win" v2
    unsafe = {**stripped, "txn_engine_unsafe_no_atomicity_check": "true"}
    a, b = open_storage(uri, unsafe), open_storage(uri, unsafe)
    a.put_if_absent("_versions/x.manifest", b"writer a")
    b.put_if_absent("_versions/x.manifest", b"writer b")  # no ObjectExistsError: a is lost
    assert store.get("_versions/x.manifest") == b"writer b"
    store.delete("_versions/x.manifest")

    # the probe runs once per process per store, bucket and prefix
    def probe_puts() -> int:
        return sum(1 for m, p, _ in strip.requests if m == "PUT" and "/_txn_engine/probe/" in p)

    before = probe_puts()
    for _ in range(2):
        with pytest.raises(AtomicityUnsupportedError):
            open_storage(uri, stripped).put_if_absent("_versions/y.manifest", b"y")
    # a refused store is probed again (it may be fixed); a proven one is not
    assert probe_puts() == before + 4
    counting = loopback_proxy(info.endpoint)
    proven = {**direct, "aws_endpoint": counting.endpoint}
    open_storage(uri, proven).put_if_absent("_versions/z1.manifest", b"1")
    open_storage(uri, proven).put_if_absent("_versions/z2.manifest", b"2")
    assert sum(1 for m, p, _ in counting.requests if "/_txn_engine/probe/" in p and m == "PUT") == 2


@pytest.mark.parametrize("impl", ["obstore", "fsspec"])
def test_environment_credentials_as_for_pylance(
    impl: str, moto_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No credentials in the options: both backends take them (and object_store's
    ``AWS_ENDPOINT``/``AWS_ALLOW_HTTP``) from the environment, as pylance does."""
    info = moto_server
    for name, value in {
        "AWS_ACCESS_KEY_ID": emu.S3_KEY,
        "AWS_SECRET_ACCESS_KEY": emu.S3_SECRET,
        "AWS_REGION": emu.S3_REGION,
        "AWS_ENDPOINT": info.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    uri = info.uri(emu.unique_name("env"))
    lance.write_dataset(_table(0, 5), uri)  # pylance, environment only
    storage = open_storage(uri, {"txn_engine_backend": impl})
    assert isinstance(storage, ObstoreStorage if impl == "obstore" else FsspecStorage)
    assert Dataset.open(storage).count_rows() == 5
    storage.put_if_absent("_versions/probe-env.manifest", b"x")
    assert open_storage(uri, info.lance_options()).get("_versions/probe-env.manifest") == b"x"


def test_cli_log_and_show_take_lance_option_names(moto_server: Any, capsys: Any) -> None:
    """Every CLI command takes the storage options a user gives pylance (``-o``), and no
    secret value appears in what it prints."""
    import json

    from txn_engine.apps.cli import main

    uri = moto_server.uri(emu.unique_name("cli"))
    options = moto_server.lance_options()
    lance.write_dataset(pa.table({"id": [1, 2]}), uri, storage_options=options)
    lance.write_dataset(pa.table({"id": [3]}), uri, mode="append", storage_options=options)
    flags = [f"-o{k}={v}" for k, v in options.items()]
    assert main(["log", uri, "--json", *flags]) == 0
    out = capsys.readouterr().out
    assert [v["version"] for v in json.loads(out)] == [1, 2]
    assert main(["show", uri, "--version", "1", *flags]) == 0
    shown = capsys.readouterr().out
    assert "2" in shown
    for text in (out, shown):
        assert options["aws_secret_access_key"] not in text
    assert main(["log", uri, "-o", "no_such_option=1"]) == 1
    err = capsys.readouterr().err
    assert "unknown storage option" in err
    assert "aws_access_key_id" in err  # the accepted names are listed


def test_the_commit_loop_lists_one_page_of_a_long_history(
    backend: Backend, loopback_proxy: Callable[..., Any]
) -> None:
    """1,200 versions in ``_versions/`` (two S3 pages of 1,000 names): listing everything
    takes two LIST requests there; what the commit loop asks for (every version from one
    near the top, or the latest only) takes one on every store through obstore, since V2
    names list newest first. The partial listing agrees with the full one on every version
    it must hold."""
    uri = backend.uri("pages")
    st = backend.storage(uri)
    names = [manifest_name(v, NamingScheme.V2) for v in range(1, 1201)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: st.put(f"_versions/{n}", b""), names))
    proxy = loopback_proxy(backend.upstream, gcs_xml_uploads=backend.name == "gcs")
    via = open_storage(uri, backend.options(endpoint=proxy.endpoint, fresh=True))

    def lists() -> int:
        return sum(1 for method, _path, _h in proxy.requests if method == "GET")

    full = scan_versions(via)
    pages = lists()  # S3 answers 1,000 names a page; azurite and fake-gcs-server more
    if backend.name == "s3":
        assert pages == 2
    ours = 1 if backend.impl == "obstore" else pages  # fsspec has no ordered listing
    partial = scan_versions(via, since=1195)
    assert lists() == pages + ours
    assert partial.latest == full.latest
    assert partial.after(1194) == full.after(1194)
    assert partial.get(1195) == full.get(1195)
    latest_only = scan_versions(via, since=U64_MAX)
    assert lists() == pages + 2 * ours
    assert latest_only.latest == full.latest


def test_a_bounded_read_is_one_request_on_obstore(
    backend: Backend, loopback_proxy: Callable[..., Any]
) -> None:
    """``get_bounded`` (the read-back of a lost create: the winner's manifest, which the
    loser builds on next) is one GET through obstore, the size taken from the response
    before its body is read: an object over the bound is refused (LimitExceededError), a
    missing one is ObjectNotFoundError. fsspec asks the size first (two or more requests). One
    request less per lost race made the difference between writers that retry on the
    winner in two round trips and the last winner, back in three (docs/performance.md)."""
    uri = backend.uri("bounded")
    st = backend.storage(uri)
    body = bytes(range(256)) * 40  # 10,240 bytes
    st.put("blob.bin", body)
    proxy = loopback_proxy(backend.upstream, gcs_xml_uploads=backend.name == "gcs")
    via = open_storage(uri, backend.options(endpoint=proxy.endpoint, fresh=True))
    assert get_bounded(via, "blob.bin", len(body)) == body
    methods = [m for m, _p, _h in proxy.requests if "blob.bin" in urllib.parse.unquote(_p)]
    if backend.impl == "obstore":
        assert methods == ["GET"]
    else:  # the size first, then the bytes (gcsfs also checks it is not a directory)
        assert len(methods) >= 2
    with pytest.raises(LimitExceededError) as err:
        get_bounded(via, "blob.bin", len(body) - 1)
    assert err.value.limit == "max_bytes"
    with pytest.raises(ObjectNotFoundError):
        get_bounded(via, "missing.bin", 100)
