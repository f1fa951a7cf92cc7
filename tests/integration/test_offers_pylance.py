"""Offers on a real object store (moto S3 through obstore): writers that lose races are
carried by other writers' versions, pylance 14.0.2 reads every such version, every row of
every caller is there exactly once, and pylance appends on top."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

from txn_engine import Carrier, writers
from txn_engine.commit import CommitResult, commit
from txn_engine.contention.offers import CARRIER_KEY, OFFERS_DIR, carried_uuids
from txn_engine.dataset import Dataset
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import BEACON_PREFIX
from txn_engine.ops import Append
from txn_engine.retry import RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.transaction import Transaction

from . import emulators as emu

pytestmark = pytest.mark.pylance


def _run_threads(work: Any, chunks: list[Any]) -> None:
    """``work(chunk)`` in one thread per chunk; returns when all are done."""
    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"a": pa.array(range(start, start + n), pa.int64())})


def test_carried_versions_are_lance_versions(moto_server: Any) -> None:
    opts = moto_server.lance_options()
    uri = moto_server.uri(emu.unique_name("offers"))
    lance.write_dataset(_rows(0, 1), uri, storage_options=opts)
    storage = open_storage(uri, opts)
    n_writers, per_writer = 6, 4
    expected = [0]
    results: list[CommitResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    carriers = 0
    for round_ in range(5):  # until some version carried another writer's offer
        pending = []
        for w in range(n_writers):
            chunk = []
            for i in range(per_writer):
                start = 1000 * (100 * round_ + 10 * w + i + 1)
                expected.extend(range(start, start + 3))
                frags = write_fragments(_rows(start, 3), uri, storage_options=opts)
                chunk.append([writers.as_fragment(f) for f in frags])
            pending.append(chunk)
        barrier = threading.Barrier(n_writers)

        def work(chunk: list[list[Any]], barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                for frags in chunk:
                    base = Dataset.open(storage)
                    r = commit(storage, Transaction(base.version, Append(frags)), base=base)
                    with lock:
                        results.append(r)
            except BaseException as exc:
                errors.append(exc)

        _run_threads(work, pending)
        assert errors == []
        ds = lance.dataset(uri, storage_options=opts)
        carriers = sum(
            len(carried_uuids(read_transaction(storage, v["version"]))) > 1
            for v in ds.versions()[1:]
        )
        if carriers:
            break
    assert carriers >= 1, "no version carried an offer in 5 rounds of 6 contending writers"
    ds = lance.dataset(uri, storage_options=opts)
    assert sorted(ds.to_table()["a"].to_pylist()) == sorted(expected)
    # each caller's transaction is in exactly the version it was told
    seen: dict[str, list[int]] = {}
    for v in ds.versions()[1:]:
        version = v["version"]
        assert lance.dataset(uri, version=version, storage_options=opts).count_rows() >= 1
        for u in carried_uuids(read_transaction(storage, version)):
            seen.setdefault(u, []).append(version)
    for r in results:
        assert seen[r.transaction.uuid] == [r.version]
    assert any(r.carried for r in results)
    # pylance appends on top of carried versions and sees everything
    lance.write_dataset(_rows(-5, 5), uri, mode="append", storage_options=opts)
    ds = lance.dataset(uri, storage_options=opts)
    assert ds.count_rows() == len(expected) + 5
    # offers are withdrawn once their writers know the outcome
    deadline = 50
    while storage.list(OFFERS_DIR) and deadline:
        threading.Event().wait(0.1)
        deadline -= 1
    assert storage.list(OFFERS_DIR) == []


def test_stress_on_s3_verifies_runs_with_carried_versions(moto_server: Any) -> None:
    """`txn-engine stress` on moto S3, appends only, 4 writers: writers carry each other
    (fewer versions than commits) and the verdict still accounts for every commit (the
    journal fold applies every transaction a version carried); pylance reads the same
    rows."""
    from txn_engine.apps.stress import run_stress

    opts = moto_server.lance_options()
    for attempt in range(3):  # until a run has a carrier (contention is not guaranteed)
        uri = moto_server.uri(emu.unique_name("stress-offers"))
        report = run_stress(
            uri,
            writers=4,
            commits=10,
            mix={"append": 1},
            seed=attempt,
            storage_options=opts,
            progress=None,
        )
        assert report.ok, report.render()
        assert report.committed == 40
        assert report.pylance_rows == report.expected_rows == report.txn_engine_rows
        if report.versions < 41:
            break
    assert report.versions < 41, "no version carried another writer's commit in 3 runs"


def test_stress_with_a_carrier_on_s3(moto_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`txn-engine stress --carrier` on moto S3: the writers (default policy) see the
    carrier's beacon and wait for it, its versions carry their Appends, and the verdict
    accounts for every commit."""
    from txn_engine.apps.cli import main

    opts = moto_server.lance_options()
    uri = moto_server.uri(emu.unique_name("stress-carrier"))
    args = ["stress", uri, "--writers", "4", "--commits", "8", "--mix", "append=1"]
    for key, value in opts.items():
        args += ["-o", f"{key}={value}"]
    assert main([*args, "--carrier", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"]
    assert report["committed"] == 32
    assert report["carrier_versions"] >= 1
    assert report["versions"] <= 1 + 32  # carried commits share versions
    assert report["pylance_rows"] == report["expected_rows"] == report["txn_engine_rows"]


def test_an_offer_travels_in_its_name_on_s3(moto_server: Any) -> None:
    """On S3 (obstore) a small offer's name carries it: a helper's scan is one LIST and
    the offer it finds is the transaction posted, byte for byte."""
    import uuid

    from txn_engine.contention.offers import OfferScan, Posting, inline_offer
    from txn_engine.storage import RecordingStorage
    from txn_engine.storage.base import OBJECT_KEY_BYTES, max_path_bytes

    opts = moto_server.lance_options()
    name = emu.unique_name("inline-offer")
    uri = moto_server.uri(name)
    lance.write_dataset(_rows(0, 1), uri, storage_options=opts)
    storage = open_storage(uri, opts)
    # the dataset's key prefix (``name/``) is what the 1,024-byte keys lose
    assert max_path_bytes(storage) == OBJECT_KEY_BYTES - len(f"{name}/".encode())
    bucket_root = open_storage(f"s3://{moto_server.bucket}", opts)
    assert max_path_bytes(bucket_root) == OBJECT_KEY_BYTES
    (meta,) = write_fragments(_rows(10, 3), uri, storage_options=opts)
    txn = Transaction(1, Append([writers.as_fragment(meta)]))
    posting = Posting(storage, txn, 9, str(uuid.uuid4()))
    posting._thread.join()
    name = posting.path.rsplit("/", 1)[-1]
    assert storage.list(OFFERS_DIR) == [name]
    assert inline_offer(name) == storage.get(posting.path)
    recording = RecordingStorage(storage)
    scan = OfferScan(recording, after=1, known=[])
    scan._thread.join()
    found = scan.take()
    assert found is not None
    assert [o.transaction.uuid for o in found] == [txn.uuid]
    assert found[0].transaction.operation == txn.operation
    assert [method for method, _ in recording.calls] == ["list"]
    posting.withdraw()


def test_a_carriers_versions_are_lance_versions(moto_server: Any) -> None:
    """Writers told of a txn_engine.Carrier on S3: the carrier lands their commits in
    versions of its own (an empty Append carrying theirs) that pylance reads and appends on."""
    opts = moto_server.lance_options()
    uri = moto_server.uri(emu.unique_name("carrier"))
    lance.write_dataset(_rows(0, 1), uri, storage_options=opts)
    storage = open_storage(uri, opts)
    expected = [0]
    pending = []
    for w in range(4):
        chunk = []
        for i in range(3):
            start = 1000 * (10 * w + i + 1)
            expected.extend(range(start, start + 3))
            frags = write_fragments(_rows(start, 3), uri, storage_options=opts)
            chunk.append([writers.as_fragment(f) for f in frags])
        pending.append(chunk)
    results: list[CommitResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(pending))
    told = RetryPolicy(wait_for_carrier=True)

    def work(chunk: list[list[Any]]) -> None:
        try:
            barrier.wait()
            for frags in chunk:
                base = Dataset.open(storage)
                txn = Transaction(base.version, Append(frags))
                r = commit(storage, txn, base=base, retry_policy=told)
                with lock:
                    results.append(r)
        except BaseException as exc:
            errors.append(exc)

    with Carrier(storage) as carrier:
        _run_threads(work, pending)
    assert errors == []
    assert carrier.error is None
    assert carrier.versions, "the carrier created no version"
    ds = lance.dataset(uri, storage_options=opts)
    assert sorted(ds.to_table()["a"].to_pylist()) == sorted(expected)
    for version in carrier.versions:  # pylance opens each and sees an Append's rows
        pb = read_transaction(storage, version)
        assert CARRIER_KEY in pb.transaction_properties
        assert len(carried_uuids(pb)) >= 2  # its own (empty) and at least one writer's
        assert lance.dataset(uri, version=version, storage_options=opts).count_rows() >= 4
    for r in results:
        if r.version in carrier.versions:
            assert r.carried
    lance.write_dataset(_rows(-5, 5), uri, mode="append", storage_options=opts)
    assert lance.dataset(uri, storage_options=opts).count_rows() == len(expected) + 5


def test_txn_engine_carry_lands_the_offers_of_writers_on_s3(
    moto_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``txn-engine carry URI -o ... --for 4s --json`` beside 4 writers in the default
    policy (they list its beacon when they open the table, and wait for it): every commit
    lands once, it reports exactly the versions it created, and pylance 14.0.2 lists, reads
    and appends with its beacon in ``_versions/``."""
    from txn_engine.apps.cli import main

    opts = moto_server.lance_options()
    uri = moto_server.uri(emu.unique_name("carry"))
    lance.write_dataset(_rows(0, 1), uri, storage_options=opts)
    storage = open_storage(uri, opts)
    pending = [
        [
            [
                writers.as_fragment(f)
                for f in write_fragments(_rows(s, 2), uri, storage_options=opts)
            ]
            for s in range(100 * w, 100 * w + 8, 2)
        ]
        for w in range(1, 5)
    ]
    cli_args = ["carry", uri, "--for", "4s", "--json"]
    for key, value in opts.items():
        cli_args += ["-o", f"{key}={value}"]
    codes: list[int] = []
    cli = threading.Thread(target=lambda: codes.append(main(cli_args)))
    cli.start()
    deadline = time.monotonic() + 3
    while not any(n.startswith(BEACON_PREFIX) for n in storage.list("_versions")):
        assert time.monotonic() < deadline, "the carrier wrote no beacon"
        time.sleep(0.05)
    results: list[CommitResult] = []
    lock = threading.Lock()

    def work(chunk: list[list[Any]]) -> None:
        for frags in chunk:
            base = Dataset.open(storage)
            r = commit(storage, Transaction(base.version, Append(frags)), base=base)
            with lock:
                results.append(r)

    _run_threads(work, pending)
    # the beacon in _versions/ is not a version to pylance: it lists, reads and appends
    assert any(n.startswith(BEACON_PREFIX) for n in storage.list("_versions"))
    ds = lance.dataset(uri, storage_options=opts)
    assert [v["version"] for v in ds.versions()] == list(range(1, ds.version + 1))
    lance.write_dataset(_rows(-3, 3), uri, mode="append", storage_options=opts)
    cli.join(30)
    assert codes == [0]
    reported = json.loads(capsys.readouterr().out)["versions"]
    created = [
        v
        for v in range(1, Dataset.open(storage).version + 1)
        if CARRIER_KEY in read_transaction(storage, v).transaction_properties
    ]
    assert reported == created
    assert len(results) == 16
    assert any(r.carried and r.attempts == 0 for r in results)  # some never raced
    assert lance.dataset(uri, storage_options=opts).count_rows() == 1 + 16 * 2 + 3
    assert not any(n.startswith(BEACON_PREFIX) for n in storage.list("_versions"))  # taken down
