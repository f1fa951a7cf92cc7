"""Object-store benchmarks: txn_engine against pylance 14.0.2 on emulated S3, Azure and GCS.

    python -m benchmarks.object_stores [--quick] [--stores s3,azure,gcs,local] [--delay-ms 25]
    python -m benchmarks.run --stores ...     # the same, from the main benchmark command

Both engines get the same store through the same Lance-named storage options, in the same
run. Stores (servers on loopback, started and stopped by this module):

* ``s3``: moto's server (requests serialized, as in the integration tests);
* ``azure``: azurite;
* ``gcs``: fake-gcs-server behind the loopback shim that turns object_store's XML-API
  uploads into JSON-API uploads with the same generation precondition (pylance and
  txn_engine both go through it: neither can write to fake-gcs-server without it);
* each also ``+<delay>ms``: behind a loopback proxy that holds every request for a fixed
  delay (default 25 ms, the order of a real S3 PUT), so round trips, not emulator CPU,
  dominate;
* ``local``: local disk (no proxy).

Per store (medians; ratio = txn_engine / pylance):

1. *floor*: one conditional PUT (create-if-absent of a 1 KiB object) through obstore's raw
   client, and one GET; on local disk one exclusive create + write + fsync of file and
   directory (what a durable manifest create costs);
2. *append latency*: one one-fragment Append on tables of 10 / 1,000 / 10,000 fragments,
   cold (from a URI) and warm (pylance: the returned ``LanceDataset``; txn_engine: ``base=``
   an opened ``Dataset``); 1 warm-up and 5 timed commits each (25 on local disk); the
   floor each is held to is a create-if-absent of a manifest that size, 10 timed just
   before the commits (on local disk one before and one after each timed commit: the pairs
   see the same disk); where a proxy is in front of the store, the requests of the last
   timed commit (the request-level profile);
3. *contention*: 1 / 4 / 8 spawned processes x 5 Appends, fresh read version (open the
   latest, commit from that handle) and stale (every commit planned at the starting
   version), all starting at one barrier, one run per cell: commits/s, p50/p99 latency,
   failed commits, attempts per commit, longest single backoff sleep and the share of the
   slowest 1% of commits' latency spent sleeping (txn_engine), and a landed-count check
   (fragments added must equal acknowledged commits: each commit adds one, in a version of
   its own, a group commit or carried as another writer's offer);
4. *threads*: 16 threads of one process x 2 Appends (fresh read version): pylance,
   txn_engine's plain ``commit``, and ``txn_engine.Committer`` (one shared instance).

Results: ``<out>/object_stores.json``; one plot per store ``<out>/object_store_<name>.png``
(latency vs fragments and throughput vs writers, pylance beside). ``python -m
benchmarks.report <out>/object_stores.json`` renders the Markdown tables of
docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import lance
import pyarrow as pa

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

SCHEMA = pa.schema([pa.field("a", pa.int64())])

#: Backoff schedules the contention cells can run under (``--compare-backoff``).
POLICIES: dict[str, Callable[[], RetryPolicy]] = {
    # the default RetryPolicy of this version
    "default": RetryPolicy,
    # the schedule before issue 14: unit from the first attempt, quadratic slots unbounded
    "previous": lambda: RetryPolicy(max_unit=None, max_window=None, chases=3, chase_ranks=0),
    # Lance's own schedule (doubling, 20 attempts)
    "lance": RetryPolicy.lance,
    # the default until the ranked chase: a known winner chased 3 times, then backoff
    "unranked": lambda: RetryPolicy(chases=3, chase_ranks=0),
    # the default without offers (each writer lands its own transaction)
    "no-offers": lambda: RetryPolicy(offer_after=None),
    # offers only after a lost race (the default until early offers)
    "late-offers": lambda: RetryPolicy(offer_early=False),
    # writers told that a txn_engine.Carrier runs for the table (benchmarks.rendezvous_lab)
    "wait-for-carrier": lambda: RetryPolicy(wait_for_carrier=True),
    # the default policy with a txn_engine.Carrier running for the table in the benchmark's
    # own process (the writers are told nothing: they see its beacon)
    "carrier": RetryPolicy,
    # the default before writers hosted a carrier themselves: every writer races
    "racing": lambda: RetryPolicy(host_carrier=False),
}
REPO = Path(__file__).resolve().parents[1]
ALL_STORES = ("s3", "azure", "gcs", "local")


def _emulators() -> Any:
    """tests/integration/emulators.py, loaded by path (the test suite runs in importlib mode,
    so it is not importable by name)."""
    name = "txn_engine_tests_emulators"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, REPO / "tests" / "integration" / "emulators.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# ---- stores ---------------------------------------------------------------------------------


@attrs.frozen
class Store:
    """One store as both engines see it: where datasets go and the one option set."""

    name: str  # "s3", "s3+25ms", ..., "local"
    kind: str  # "s3", "azure", "gcs", "local"
    delay_ms: float
    root: str  # URI prefix datasets are created under
    options: dict[str, str] | None  # Lance-named: pylance and txn_engine get the same dict

    def uri(self, label: str) -> str:
        return f"{self.root}/{label}-{uuid.uuid4().hex[:10]}.lance"


@contextlib.contextmanager
def started_stores(kinds: list[str], delay_ms: float, workdir: Path) -> Iterator[list[Store]]:
    """Start the emulators for ``kinds`` (and their delayed proxies); stop them on exit.
    Each kind gives the direct store, then (if ``delay_ms``) the delayed one."""
    stores: list[Store] = []
    with contextlib.ExitStack() as stack:
        emu = _emulators() if any(k != "local" for k in kinds) else None
        for kind in kinds:
            if kind == "local":
                local = workdir / "local"
                local.mkdir(parents=True, exist_ok=True)
                stores.append(Store("local", "local", 0.0, str(local), None))
                continue
            assert emu is not None
            sdir = workdir / kind
            sdir.mkdir(parents=True, exist_ok=True)
            start = {"s3": emu.start_moto, "azure": emu.start_azurite, "gcs": emu.start_fake_gcs}
            server, info = start[kind](sdir)
            stack.callback(server.stop)
            for delay in dict.fromkeys((0.0, delay_ms)):  # the direct store, then delayed
                name = kind if not delay else f"{kind}+{delay:g}ms"
                if kind == "s3":
                    upstream = info.endpoint
                elif kind == "azure":
                    upstream = info.endpoint.rsplit("/", 1)[0]
                else:
                    upstream = info.endpoint
                if delay or kind == "gcs":
                    proxy = emu.LoopbackProxy(
                        upstream, delay=delay / 1000, gcs_xml_uploads=kind == "gcs"
                    )
                    stack.callback(proxy.stop)
                    _PROXIES[name] = proxy
                    stack.callback(_PROXIES.pop, name, None)
                    endpoint = proxy.endpoint
                else:
                    endpoint = upstream
                if kind == "s3":
                    options = {**info.lance_options(), "aws_endpoint": endpoint}
                elif kind == "azure":
                    options = {
                        **info.lance_options(),
                        "azure_storage_endpoint": f"{endpoint}/{emu.AZURE_ACCOUNT}",
                    }
                else:
                    options = dict(info.lance_options(sdir, endpoint))
                stores.append(
                    Store(name, kind, delay, info.uri("bench").rsplit("/", 1)[0], options)
                )
        yield stores


# ---- helpers ------------------------------------------------------------------------------------

#: The proxy in front of each store (by store name), in the process that started them: the
#: requests it forwarded are the request-level profile of a commit.
_PROXIES: dict[str, Any] = {}


def _request_kind(method: str, path: str) -> str:
    """``LIST``, ``PUT manifest``, ``GET txn``, ... for one forwarded request."""
    name = urllib.parse.unquote(path)
    if method == "GET" and ("list-type=" in name or "comp=list" in name):
        return "LIST"
    for marker, what in (
        ("_transactions/", "txn"),
        ("_versions/", "manifest"),
        ("_latest", "hint"),
        ("/data/", "data"),
        ("_txn_engine/", "probe"),
    ):
        if marker in name:
            return f"{method} {what}"
    return f"{method} other"


@contextlib.contextmanager
def _requests(store: Store) -> Iterator[list[str]]:
    """The kinds of the requests the store's proxy forwards inside the block (none recorded
    for a store without a proxy)."""
    seen: list[str] = []
    proxy = _PROXIES.get(store.name)
    before = len(proxy.requests) if proxy is not None else 0
    try:
        yield seen
    finally:
        if proxy is not None:
            seen.extend(_request_kind(m, p) for m, p, _ in proxy.requests[before:])


def _storage(store: Store, uri: str) -> Storage:
    return open_storage(uri, store.options)


def _one_fragment(store: Store, uri: str) -> tuple[Any, te.Fragment]:
    """A one-row data file written by pylance under ``uri``/data/ (its metadata for both
    engines)."""
    (meta,) = lance.fragment.write_fragments(
        pa.table({"a": [1]}, schema=SCHEMA), uri, storage_options=store.options
    )
    return meta, te.Fragment.from_lance_json(meta.to_json())


def build_table(store: Store, label: str, n_fragments: int) -> str:
    """A dataset of ``n_fragments`` one-row fragments sharing one data file."""
    uri = store.uri(label)
    _, frag = _one_fragment(store, uri)
    frags = tuple(te.Fragment(0, frag.files, 1) for _ in range(n_fragments))
    commit(
        uri,
        te.Transaction(0, te.Overwrite(frags, arrow_to_lance_fields(SCHEMA))),
        storage_options=store.options,
    )
    return uri


def _drop(store: Store, uri: str) -> None:
    """Best-effort removal of a dataset (local disk only: emulators are in-memory or temp)."""
    if store.kind == "local":
        shutil.rmtree(uri, ignore_errors=True)


def _pct(sorted_samples: list[float], q: float) -> float:
    if not sorted_samples:
        return float("nan")
    return sorted_samples[min(len(sorted_samples) - 1, int(q * len(sorted_samples)))]


# ---- 1. the floor -------------------------------------------------------------------------------


def floor(store: Store, runs: int) -> dict[str, float]:
    """Median ms of one conditional PUT (and one GET) of 1 KiB on ``store``; on local disk
    of one exclusive create + write + fsync of the file and of its directory."""
    put, get = _put_floor(store, 1024, runs, with_get=True)
    out = {"put_if_absent_ms": put, "get_ms": get}
    if store.kind != "local":
        raw = getattr(_storage(store, store.uri("floor")), "store")  # noqa: B009
        out["together_ms"] = _concurrent_floor(raw, runs)
    return out


class _FloorProbe:
    """One create-if-absent of ``nbytes`` at a time, timed: a conditional PUT through
    obstore's raw client; on local disk an exclusive create, write and fsync of the file
    and of its directory. Taken between the timed commits of a cell, so that the floor and
    the commit it is held to see the same disk and the same connections."""

    def __init__(self, store: Store, nbytes: int) -> None:
        self._payload = os.urandom(nbytes)
        self._label = f"floor{nbytes}-{os.urandom(4).hex()}"
        self._i = 0
        self._dir_fd: int | None = None
        self._raw: Any = None
        if store.kind == "local":
            self._directory = Path(store.uri(self._label))
            self._directory.mkdir(parents=True)
            self._dir_fd = os.open(self._directory, os.O_RDONLY)
        else:
            self._raw = getattr(_storage(store, store.uri(self._label)), "store")  # noqa: B009

    def once(self) -> float:
        """Seconds for one more create (each of a new name)."""
        self._i += 1
        if self._dir_fd is not None:
            path = self._directory / f"{self._i}.bin"
            start = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, self._payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(self._dir_fd)
            return time.perf_counter() - start
        import obstore

        start = time.perf_counter()
        obstore.put(
            self._raw,
            f"{self._label}/{self._i}.bin",
            self._payload,
            mode="create",
            use_multipart=False,
        )
        return time.perf_counter() - start

    def read_back(self) -> float:
        """Seconds to read the last object created back whole."""
        start = time.perf_counter()
        if self._dir_fd is not None:
            (self._directory / f"{self._i}.bin").read_bytes()
        else:
            import obstore

            bytes(obstore.get(self._raw, f"{self._label}/{self._i}.bin").bytes())
        return time.perf_counter() - start

    def close(self) -> None:
        """Remove the local directory (the emulators are temporary)."""
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
            shutil.rmtree(self._directory)


def _put_floor(
    store: Store, nbytes: int, runs: int, *, with_get: bool = False
) -> tuple[float, float]:
    """Median ms of a create-if-absent of ``nbytes`` (:class:`_FloorProbe`), and of reading
    it back (0 unless ``with_get``); the first create, which also opens the connection, is
    not counted."""
    probe = _FloorProbe(store, nbytes)
    put, get = [], []
    try:
        for i in range(runs + 1):
            elapsed = probe.once()
            read = probe.read_back() if with_get else 0.0
            if i:
                put.append(elapsed)
                get.append(read)
    finally:
        probe.close()
    return 1000 * statistics.median(put), 1000 * statistics.median(get) if with_get else 0.0


def _concurrent_floor(raw: Any, runs: int) -> float:
    """Median ms of a warm guarded commit's request pattern alone: a LIST and a conditional
    PUT of a 1 KiB object sent together (two threads), waited for together. On a store that
    serves requests in parallel it is one round trip; moto serializes its requests, so there
    it is one round trip plus the emulator's time for each."""
    import obstore

    payload = os.urandom(1024)
    samples = []
    for i in range(runs + 1):

        def listing() -> None:
            obstore.list_with_delimiter(raw, "floor")

        def create(i: int = i) -> None:
            obstore.put(raw, f"floor3/{i}.bin", payload, mode="create", use_multipart=False)

        jobs = [listing, create]
        threads = [threading.Thread(target=job) for job in jobs]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if i:
            samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


# ---- 2. append latency ------------------------------------------------------------------------


def append_latency(store: Store, n_fragments: int, runs: int, warm: bool) -> dict[str, Any]:
    """Median ms per one-fragment Append for each engine (own table each), and the requests
    of the last timed commit of each (where a proxy sees them)."""
    out: dict[str, Any] = {}
    p_uri = build_table(store, f"lat{n_fragments}p", n_fragments)
    meta, _ = _one_fragment(store, p_uri)
    samples = []
    ds = lance.dataset(p_uri, storage_options=store.options)
    version = ds.version
    for i in range(runs + 1):
        with _requests(store) as requests:
            start = time.perf_counter()
            if warm:
                ds = lance.LanceDataset.commit(
                    ds, lance.LanceOperation.Append([meta]), read_version=ds.version
                )
            else:
                ds = lance.LanceDataset.commit(
                    p_uri,
                    lance.LanceOperation.Append([meta]),
                    read_version=version,
                    storage_options=store.options,
                )
                version = ds.version
            elapsed = time.perf_counter() - start
        if i:
            samples.append(elapsed)
    out["pylance_ms"] = 1000 * statistics.median(samples)
    out["pylance_requests"] = requests
    _drop(store, p_uri)

    t_uri = build_table(store, f"lat{n_fragments}t", n_fragments)
    _, frag = _one_fragment(store, t_uri)
    samples = []
    storage = _storage(store, t_uri)
    base = Dataset.open(storage)
    # the physical floor of this commit: one create-if-absent of a manifest this size. On
    # local disk one before each commit and one after (the pairs see the same disk: its
    # fsyncs vary several-fold from one minute to the next); on an emulator 10 in a block
    # just before the commits (a create of 1.5 MB there leaves it busy after it answers:
    # azurite's warm 10,000-fragment commit took 13-15 ms paired, 10-12 without)
    out["manifest_bytes"] = base.manifest_file.size
    probe = _FloorProbe(store, base.manifest_file.size) if store.kind == "local" else None
    if probe is None:
        out["floor_same_size_ms"], _ = _put_floor(store, base.manifest_file.size, runs * 2)
    floors: list[float] = []
    version = base.version
    for i in range(runs + 1):
        floor_before = probe.once() if probe is not None else 0.0
        with _requests(store) as requests:
            start = time.perf_counter()
            if warm:
                txn = te.Transaction(base.version, te.Append((frag,)))
                result = commit(storage, txn, base=base)
            else:
                result = commit(
                    t_uri,
                    te.Transaction(version, te.Append((frag,))),
                    storage_options=store.options,
                )
                version = result.version
            elapsed = time.perf_counter() - start
        floor_after = probe.once() if probe is not None else 0.0
        if warm:
            base = Dataset.open(storage, version=result.version)  # pylance's handle is free
        if i:
            samples.append(elapsed)
            floors += [floor_before, floor_after]
    if probe is not None:
        probe.close()
        out["floor_same_size_ms"] = 1000 * statistics.median(floors)
    out["txn_engine_ms"] = 1000 * statistics.median(samples)
    out["txn_engine_requests"] = requests
    _drop(store, t_uri)
    return out


# ---- 3. contention (processes) ------------------------------------------------------------------

_START: Any = None  # a multiprocessing Barrier shared by one pool's workers


def _init_worker(barrier: Any) -> None:
    global _START
    _START = barrier


@contextlib.contextmanager
def _recording_sleeps() -> Iterator[list[float]]:
    """Record every backoff sleep txn_engine's commit loop takes in this process."""
    slept: list[float] = []
    original = RetryBudget.wait

    def wait(self: RetryBudget) -> bool:
        before = len(self.slept)
        ok = original(self)
        slept.extend(self.slept[before:])
        return ok

    RetryBudget.wait = wait  # type: ignore[method-assign]
    try:
        yield slept
    finally:
        RetryBudget.wait = original  # type: ignore[method-assign]


def _writer(
    engine: str,
    store: Store,
    uri: str,
    n: int,
    stale: bool,
    read_version: int,
    start_gate: Callable[[], Any],
    policy: str = "default",
) -> dict[str, Any]:
    """``n`` one-fragment Appends by one writer; its latencies, failures and sleeps."""
    retry = POLICIES[policy]()
    meta, frag = _one_fragment(store, uri)
    storage = _storage(store, uri)
    if engine == "txn_engine":
        # the once-per-process atomicity probe and the connection pool, before the clock
        warm = f"_txn_engine/bench-warmup-{uuid.uuid4().hex}"
        storage.put_if_absent(warm, b"")
        storage.delete(warm)
        stale_base = Dataset.open(storage, version=read_version)
    else:
        lance.dataset(uri, storage_options=store.options)
    lat: list[float] = []
    slept_per_commit: list[float] = []
    errors: list[str] = []
    attempts = 0
    start_gate()
    first = time.time()
    with _recording_sleeps() as slept:
        for _ in range(n):
            start = time.perf_counter()
            slept_before = len(slept)
            try:
                if engine == "pylance":
                    if stale:
                        lance.LanceDataset.commit(
                            uri,
                            lance.LanceOperation.Append([meta]),
                            read_version=read_version,
                            storage_options=store.options,
                        )
                    else:
                        ds = lance.dataset(uri, storage_options=store.options)
                        lance.LanceDataset.commit(
                            ds, lance.LanceOperation.Append([meta]), read_version=ds.version
                        )
                elif stale:
                    result = commit(
                        storage,
                        te.Transaction(read_version, te.Append((frag,))),
                        base=stale_base.manifest_file,
                        retry_policy=retry,
                    )
                    attempts += result.attempts
                else:
                    base = Dataset.open(storage)
                    result = commit(
                        storage,
                        te.Transaction(base.version, te.Append((frag,))),
                        base=base,
                        retry_policy=retry,
                    )
                    attempts += result.attempts
                lat.append(time.perf_counter() - start)
                slept_per_commit.append(sum(slept[slept_before:]))
            except Exception as exc:  # a failed commit is a measured outcome
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    return {
        "latencies": lat,
        "failures": len(errors),
        "errors": errors[:3],
        "attempts": attempts,
        "sleeps": list(slept),
        "slept_per_commit": slept_per_commit,
        "first": first,
        "last": time.time(),
    }


def _process_worker(args: tuple[str, Store, str, int, bool, int, str]) -> dict[str, Any]:
    engine, store, uri, n, stale, read_version, policy = args
    return _writer(engine, store, uri, n, stale, read_version, _START.wait, policy)


def _latest_version(store: Store, uri: str) -> int:
    return Dataset.open(_storage(store, uri)).version


def _fragment_count(store: Store, uri: str) -> int:
    """Fragments in the latest version: every benchmark commit adds exactly one, whether it
    landed in a version of its own, in a group commit or carried as an offer."""
    return len(Dataset.open(_storage(store, uri)).manifest_pb.fragments)


def _summarize(engine: str, results: list[dict[str, Any]], landed: int) -> dict[str, Any]:
    elapsed = max(r["last"] for r in results) - min(r["first"] for r in results)
    lat = sorted(x for r in results for x in r["latencies"])
    ok = len(lat)
    sleeps = [s for r in results for s in r["sleeps"]]
    # the slowest 1% of commits: how much of their latency was backoff sleep
    pairs = sorted(
        (x, z) for r in results for x, z in zip(r["latencies"], r["slept_per_commit"], strict=True)
    )
    tail = pairs[min(len(pairs) - 1, int(0.99 * len(pairs))) :] if pairs else []
    errors = [e for r in results for e in r["errors"]]
    return {
        "commits_per_s": ok / elapsed if elapsed > 0 else float("nan"),
        "p50_ms": 1000 * _pct(lat, 0.5),
        "p99_ms": 1000 * _pct(lat, 0.99),
        "max_ms": 1000 * lat[-1] if lat else float("nan"),
        "commits": ok,
        "failures": sum(r["failures"] for r in results),
        "errors": errors[:3],
        # fragments added minus acknowledged commits (each commit adds one fragment):
        # nonzero means a lost, doubled or phantom commit
        "unaccounted": landed - ok,
        "attempts_per_commit": (
            sum(r["attempts"] for r in results) / ok if ok and engine == "txn_engine" else None
        ),
        "max_sleep_ms": 1000 * max(sleeps) if sleeps else (0.0 if engine == "txn_engine" else None),
        "sleeps": len(sleeps),
        "tail_sleep_share": (
            sum(z for _, z in tail) / sum(x for x, _ in tail)
            if tail and engine != "pylance"
            else None
        ),
    }


def contention(
    store: Store,
    procs: list[int],
    per: int,
    runs: int,
    modes: tuple[bool, ...],
    *,
    engines: tuple[str, ...] = ("pylance", "txn_engine"),
    policy: str = "default",
) -> list[dict[str, Any]]:
    """Each (processes, read version) cell for ``engines``: medians over ``runs`` runs;
    txn_engine commits with the ``policy`` backoff schedule (see :data:`POLICIES`)."""
    ctx = mp.get_context("spawn")
    rows = []
    for n in procs:
        with ctx.Pool(n, initializer=_init_worker, initargs=(ctx.Barrier(n),)) as pool:
            for stale in modes:
                row: dict[str, Any] = {
                    "processes": n,
                    "read_version": "stale" if stale else "fresh",
                    "policy": policy,
                }
                for engine in engines:
                    samples = []
                    for r in range(runs):
                        uri = build_table(store, f"c{engine[0]}{n}{int(stale)}r{r}", 10)
                        rv = _latest_version(store, uri)
                        before = _fragment_count(store, uri)
                        carrier = (
                            te.Carrier(_storage(store, uri)).start()
                            if policy == "carrier" and engine == "txn_engine"
                            else None
                        )
                        try:
                            results = pool.map(
                                _process_worker,
                                [(engine, store, uri, per, stale, rv, policy)] * n,
                                chunksize=1,
                            )
                        finally:
                            if carrier is not None:
                                carrier.close()
                        landed = _fragment_count(store, uri) - before
                        summary = _summarize(engine, results, landed)
                        summary["versions"] = _latest_version(store, uri) - rv
                        samples.append(summary)
                        _drop(store, uri)
                    row[engine] = _median_cell(samples)
                if "pylance" in row:
                    row["throughput_ratio"] = _ratio(
                        row["txn_engine"]["commits_per_s"], row["pylance"]["commits_per_s"]
                    )
                rows.append(row)
                print(describe_contention(store.name, row), flush=True)
    return rows


def _median_cell(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("commits_per_s", "p50_ms", "p99_ms"):
        out[key] = statistics.median(s[key] for s in samples)
    for key in ("attempts_per_commit", "max_sleep_ms", "tail_sleep_share"):
        values = [s[key] for s in samples if s[key] is not None]
        out[key] = statistics.median(values) if values else None
    out["max_ms"] = max(s["max_ms"] for s in samples)
    for key in ("failures", "unaccounted", "commits", "sleeps", "versions"):
        out[key] = sum(s.get(key, 0) for s in samples)
    out["errors"] = [e for s in samples for e in s["errors"]][:3]
    out["runs"] = [s["commits_per_s"] for s in samples]
    return out


# ---- 4. threads of one process ----------------------------------------------------------------


def _committer_class() -> Any:
    return getattr(te, "Committer", None)


def threads(store: Store, n_threads: int, per: int) -> dict[str, Any]:
    """``n_threads`` threads of this process appending ``per`` times each (fresh read
    version): pylance, txn_engine's ``commit``, and ``txn_engine.Committer`` if present."""
    row: dict[str, Any] = {"threads": n_threads}
    engines = ["pylance", "txn_engine"]
    if _committer_class() is not None:
        engines.append("committer")
    for engine in engines:
        row[engine] = _thread_cell(store, engine, n_threads, per)
    row["throughput_ratio"] = _ratio(
        row["txn_engine"]["commits_per_s"], row["pylance"]["commits_per_s"]
    )
    if "committer" in row:
        row["committer_ratio"] = _ratio(
            row["committer"]["commits_per_s"], row["pylance"]["commits_per_s"]
        )
    return row


def _thread_cell(store: Store, engine: str, n_threads: int, per: int) -> dict[str, Any]:
    uri = build_table(store, f"th{engine[0]}{n_threads}", 10)
    rv = _latest_version(store, uri)
    before = _fragment_count(store, uri)
    barrier = threading.Barrier(n_threads)
    results: list[dict[str, Any]] = [{} for _ in range(n_threads)]
    committer = (
        _committer_class()(uri, storage_options=store.options) if engine == "committer" else None
    )

    def work(i: int) -> None:
        if committer is not None:
            results[i] = _committer_writer(committer, store, uri, per, barrier.wait)
        else:
            results[i] = _writer(engine, store, uri, per, False, rv, barrier.wait)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if committer is not None:
        with contextlib.suppress(Exception):
            committer.close()
    landed = _fragment_count(store, uri) - before
    cell = _summarize("pylance" if engine == "pylance" else "txn_engine", results, landed)
    # a group commit (or a carried offer) lands many transactions in one version
    cell["versions"] = _latest_version(store, uri) - rv
    _drop(store, uri)
    return cell


def _committer_writer(
    committer: Any, store: Store, uri: str, n: int, start_gate: Callable[[], Any]
) -> dict[str, Any]:
    _, frag = _one_fragment(store, uri)
    storage = _storage(store, uri)
    lat: list[float] = []
    errors: list[str] = []
    start_gate()
    first = time.time()
    for _ in range(n):
        start = time.perf_counter()
        try:
            version = Dataset.open(storage).version  # plan at the latest, as the others do
            committer.commit(te.Transaction(version, te.Append((frag,))))
            lat.append(time.perf_counter() - start)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    return {
        "latencies": lat,
        "failures": len(errors),
        "errors": errors[:3],
        "attempts": 0,
        "sleeps": [],
        "slept_per_commit": [0.0] * len(lat),
        "first": first,
        "last": time.time(),
    }


# ---- the run ----------------------------------------------------------------------------------


def _ratio(t: float, p: float) -> float:
    return t / p if p else float("nan")


def describe_contention(store: str, row: dict[str, Any]) -> str:
    """One printed line for a contention cell."""
    t = row["txn_engine"]
    text = f"   [{store}] {row['processes']} procs {row['read_version']:<5} "
    if "pylance" in row:
        p = row["pylance"]
        text += (
            f"pylance {p['commits_per_s']:6.1f}/s ({p['p50_ms']:.0f}/{p['p99_ms']:.0f} ms, "
            f"{p['failures']} failed)  "
        )
    text += (
        f"txn_engine[{row['policy']}] {t['commits_per_s']:6.1f}/s "
        f"({t['p50_ms']:.0f}/{t['p99_ms']:.0f} ms, {t['failures']} failed, "
        f"{t['attempts_per_commit'] or 0:.2f} attempts, longest sleep "
        f"{t['max_sleep_ms'] or 0:.0f} ms, tail sleep share {t['tail_sleep_share'] or 0:.0%}, "
        f"{t.get('commits', 0)} commits in {t.get('versions', 0)} versions, "
        f"{t.get('unaccounted', 0)} unaccounted)"
    )
    if "throughput_ratio" in row:
        text += f"  ratio {row['throughput_ratio']:.2f}"
    return text


@attrs.frozen
class Sizes:
    """How much of each workload: table sizes, timed commits, floor samples, processes,
    commits per process, runs per cell, read-version modes (stale?), threads, commits per
    thread; on local disk, where a cell takes a fraction of a second, commits per process
    and runs per cell of its own (``local_per``, ``local_runs``: a cell of 5 commits per
    process is decided by a single backoff sleep there)."""

    fragments: tuple[int, ...]
    runs: int
    floor_runs: int
    procs: tuple[int, ...]
    per: int
    contention_runs: int
    modes: tuple[bool, ...]
    threads: int
    per_thread: int
    local_per: int = 5
    local_runs: int = 1
    #: timed commits per Append latency cell on local disk (sub-millisecond commits, whose
    #: fsyncs vary from one to the next: 5 samples decide little there)
    local_latency_runs: int = 5

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            return cls((10,), 2, 3, (2,), 2, 1, (False,), 2, 2)
        return cls((10, 1_000, 10_000), 5, 15, (1, 4, 8), 8, 1, (False, True), 16, 2, 20, 3, 25)


def run(
    stores: list[str],
    *,
    quick: bool,
    delay_ms: float,
    out_dir: Path,
    workdir: Path,
    compare_backoff: bool = False,
    sizes: Sizes | None = None,
    plots_dir: Path | None = None,
) -> dict[str, Any]:
    """Every workload on every store; writes ``object_stores.json`` and the plots.

    ``plots_dir``: where the plots go (default ``out_dir``). ``compare_backoff``: on every
    delayed store, also run the contended cells (4 and 8 processes) without offers
    (``POLICIES["no-offers"]``), with offers made only after a lost race
    (``POLICIES["late-offers"]``), with the previous retry schedule
    (``POLICIES["unranked"]``: no ranked chase) and with a :class:`txn_engine.Carrier`
    running in this process (``"carrier"``: the writers in the default policy), txn_engine
    only.
    """
    sizes = sizes or Sizes.of(quick)
    results: dict[str, Any] = {
        "quick": quick,
        "delay_ms": delay_ms,
        "sizes": attrs.asdict(sizes),
        "stores": [],
    }
    with started_stores(stores, delay_ms, workdir) as started:
        for store in started:
            print(f"== {store.name}", flush=True)
            entry: dict[str, Any] = {
                "store": store.name,
                "kind": store.kind,
                "delay_ms": store.delay_ms,
            }
            entry["floor"] = floor(store, sizes.floor_runs)
            print(f"   floor: {entry['floor']}", flush=True)
            if quick and store.delay_ms and sizes == Sizes.of(True):  # smoke: the floor only
                results["stores"].append(entry)
                continue
            latency = []
            latency_runs = sizes.local_latency_runs if store.kind == "local" else sizes.runs
            for n in sizes.fragments:
                for warm in (False, True):
                    cell = append_latency(store, n, latency_runs, warm)
                    row = {
                        "fragments": n,
                        "mode": "warm" if warm else "cold",
                        **cell,
                        "ratio": _ratio(cell["txn_engine_ms"], cell["pylance_ms"]),
                        "floor_ratio": _ratio(
                            cell["txn_engine_ms"], entry["floor"]["put_if_absent_ms"]
                        ),
                        "same_size_floor_ratio": _ratio(
                            cell["txn_engine_ms"], cell["floor_same_size_ms"]
                        ),
                    }
                    latency.append(row)
                    print(
                        f"   {n:>6} fragments {row['mode']:<4} pylance {row['pylance_ms']:8.1f} ms"
                        f"  txn_engine {row['txn_engine_ms']:8.1f} ms  ratio {row['ratio']:.2f}"
                        f"  vs floor {row['floor_ratio']:.2f}"
                        f" (same size {row['same_size_floor_ratio']:.2f})",
                        flush=True,
                    )
            entry["append_latency"] = latency
            local = store.kind == "local"
            entry["contention"] = contention(
                store,
                list(sizes.procs),
                sizes.local_per if local else sizes.per,
                sizes.local_runs if local else sizes.contention_runs,
                sizes.modes,
            )
            if compare_backoff and store.delay_ms:
                previous = [
                    row
                    for policy in ("no-offers", "late-offers", "unranked", "racing", "carrier")
                    for row in contention(
                        store,
                        [n for n in sizes.procs if n >= 4] or list(sizes.procs),
                        sizes.per,
                        sizes.contention_runs,
                        sizes.modes,
                        engines=("txn_engine",),
                        policy=policy,
                    )
                ]
                compared = {x["processes"] for x in previous}
                entry["backoff"] = previous + [
                    {k: v for k, v in r.items() if k != "pylance"}
                    for r in entry["contention"]
                    if r["processes"] in compared
                ]
            entry["threads"] = threads(store, sizes.threads, sizes.per_thread)
            th = entry["threads"]
            print(
                f"   {th['threads']} threads: pylance {th['pylance']['commits_per_s']:.1f}/s "
                f"txn_engine {th['txn_engine']['commits_per_s']:.1f}/s"
                + (
                    f" Committer {th['committer']['commits_per_s']:.1f}/s"
                    if "committer" in th
                    else " (no txn_engine.Committer yet)"
                ),
                flush=True,
            )
            results["stores"].append(entry)
            # written after every store: a long run interrupted keeps what it measured
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "object_stores.json").write_text(json.dumps(results, indent=2))
            plots = plots_dir or out_dir
            plots.mkdir(parents=True, exist_ok=True)
            plot(entry, plots / f"object_store_{_slug(entry['store'])}.png")
            plot_tail(results, plots / "object_store_tail.png")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "object_stores.json").write_text(json.dumps(results, indent=2))
    return results


def _slug(name: str) -> str:
    return name.replace("+", "_")


def plot_tail(results: dict[str, Any], path: Path) -> bool:
    """p99 - p50 of txn_engine's contended cells on the delayed stores, in round trips (the
    store's measured conditional PUT): with no carrier (``racing``), the default (writers
    host one) and a carrier started for the run (``carrier``), those of them measured
    (``--compare-backoff``); False (nothing drawn) when no store has the default and a
    carrier."""
    stores = []
    for entry in results["stores"]:
        rows = {
            (r["policy"], r["processes"], r["read_version"]): r for r in entry.get("backoff", [])
        }
        cells = sorted({(n, rv) for (pol, n, rv) in rows if pol == "carrier"})
        if cells and all(("default", n, rv) in rows for n, rv in cells):
            stores.append((entry, rows, cells))
    if not stores:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(stores), figsize=(4.2 * len(stores), 3.8), sharey=True)
    for ax, (entry, rows, cells) in zip(axes if len(stores) > 1 else [axes], stores, strict=True):
        rt = entry["floor"]["put_if_absent_ms"]
        xs = range(len(cells))
        series = [
            (policy, label)
            for policy, label in (
                ("racing", "no carrier (host_carrier=False)"),
                ("default", "default (writers host one)"),
                ("carrier", "a carrier started"),
            )
            if all((policy, n, rv) in rows for n, rv in cells)
        ]
        width = 0.8 / len(series)
        for k, (policy, label) in enumerate(series):
            tails = [
                (
                    rows[(policy, n, rv)]["txn_engine"]["p99_ms"]
                    - rows[(policy, n, rv)]["txn_engine"]["p50_ms"]
                )
                / rt
                for n, rv in cells
            ]
            offset = (k - (len(series) - 1) / 2) * width
            ax.bar([x + offset for x in xs], tails, width=width, label=label)
        ax.set_xticks(list(xs), [f"{n} {rv}" for n, rv in cells])
        ax.set_title(f"{entry['store']} (round trip {rt:.0f} ms)")
        ax.grid(True, axis="y", alpha=0.3)
    first = axes[0] if len(stores) > 1 else axes
    first.set_ylabel("p99 - p50, in round trips")
    first.legend(fontsize=8)
    fig.suptitle("The contention tail of txn_engine: p99 - p50 per schedule")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot(entry: dict[str, Any], path: Path) -> None:
    """Latency vs fragments and throughput vs writers for one store, pylance beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    for mode in ("cold", "warm"):
        sel = [r for r in entry["append_latency"] if r["mode"] == mode]
        xs = [r["fragments"] for r in sel]
        left.plot(xs, [r["pylance_ms"] for r in sel], "o--", label=f"pylance 14.0.2 ({mode})")
        left.plot(xs, [r["txn_engine_ms"] for r in sel], "s-", label=f"txn_engine ({mode})")
    left.axhline(
        entry["floor"]["put_if_absent_ms"],
        color="grey",
        lw=1,
        ls=":",
        label="floor: one conditional PUT",
    )
    left.set_xscale("log")
    left.set_xlabel("fragments in table")
    left.set_ylabel("median Append latency (ms)")
    left.set_title(f"Append latency, {entry['store']}")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    for mode in ("fresh", "stale"):
        sel = [r for r in entry["contention"] if r["read_version"] == mode]
        xs = [r["processes"] for r in sel]
        if not xs:
            continue
        right.plot(
            xs, [r["pylance"]["commits_per_s"] for r in sel], "o--", label=f"pylance ({mode})"
        )
        right.plot(
            xs, [r["txn_engine"]["commits_per_s"] for r in sel], "s-", label=f"txn_engine ({mode})"
        )
    right.set_xlabel("writer processes")
    right.set_ylabel("commits/s (median)")
    right.set_title(f"Appends under contention, {entry['store']}")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The object-store options (shared with ``python -m benchmarks.run``)."""
    parser.add_argument(
        "--delay-ms", type=float, default=25.0, help="per-request delay of the slow variants"
    )
    parser.add_argument(
        "--plots", default=None, help="directory of the plots (default: --out; docs: docs)"
    )
    parser.add_argument(
        "--compare-backoff",
        action="store_true",
        help="also run the 4/8-process cells on delayed stores with the previous retry schedule",
    )


def parse_stores(text: str) -> list[str]:
    """``s3,azure`` -> ["s3", "azure"]; ``all`` -> every store."""
    names = list(ALL_STORES) if text.strip() == "all" else [s.strip() for s in text.split(",")]
    unknown = [s for s in names if s not in ALL_STORES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown store(s) {unknown}; choose from {ALL_STORES}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.object_stores", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke on moto")
    parser.add_argument(
        "--stores",
        type=parse_stores,
        default=list(ALL_STORES),
        help="comma-separated: s3, azure, gcs, local, or all (default: all)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    add_arguments(parser)
    args = parser.parse_args(argv)
    stores = ["s3"] if args.quick else args.stores
    with tempfile.TemporaryDirectory() as tmp:
        run(
            stores,
            quick=args.quick,
            delay_ms=args.delay_ms,
            out_dir=Path(args.out),
            workdir=Path(tmp),
            compare_backoff=args.compare_backoff,
            plots_dir=Path(args.plots) if args.plots else None,
        )
    print(f"results: {Path(args.out) / 'object_stores.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
