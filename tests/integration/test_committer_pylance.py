"""Group commits are ordinary Lance versions: pylance 14.0.2 reads every grouped version,
and every row of every caller is there exactly once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.format.io import read_transaction
from txn_engine.storage import LocalStorage
from txn_engine.transaction import GROUP_MEMBERS_KEY

pytestmark = pytest.mark.pylance


def test_pylance_reads_every_grouped_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([-1], pa.int64())}), uri)
    threads, per_thread = 8, 4
    barrier = threading.Barrier(threads)
    with te.Committer(uri) as committer:

        def work(w: int) -> list[int]:
            barrier.wait()
            versions = []
            for i in range(per_thread):
                rows = pa.table({"id": pa.array([w * 100 + i], pa.int64())})
                frags = [
                    te.Fragment.from_lance_json(m.to_json()) for m in lf.write_fragments(rows, uri)
                ]
                txn = te.Transaction(1, te.Append(fragments=tuple(frags)))
                versions.append(committer.commit(txn, timeout=120).version)
            return versions

        with ThreadPoolExecutor(threads) as pool:
            landed = [v for chunk in pool.map(work, range(threads)) for v in chunk]
    expected = sorted([-1] + [w * 100 + i for w in range(threads) for i in range(per_thread)])
    ds = lance.dataset(uri)
    assert sorted(ds.to_table()["id"].to_pylist()) == expected
    assert len(ds.versions()) - 1 == len(committer.groups)
    assert max(landed) == ds.version
    store = LocalStorage(uri)
    grouped = 0
    for v in ds.versions()[1:]:
        version = v["version"]
        table = lance.dataset(uri, version=version).to_table()  # every version reads
        pb = read_transaction(store, version)
        members = pb.transaction_properties.get(GROUP_MEMBERS_KEY)
        grouped += bool(members)
        # pylance sees the group's Append with the member list among its properties
        txn = ds.read_transaction(version)
        assert txn.transaction_properties.get(GROUP_MEMBERS_KEY) == members
        assert table.num_rows >= 1
    assert grouped >= 1


def test_a_transaction_submitted_twice_is_read_once_by_pylance(tmp_path: Path) -> None:
    """A caller resubmitting after its wait timed out: the copy queued beside the first (one
    group) and the copy submitted after the group landed add their rows once, as pylance
    reads the table."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([-1], pa.int64())}), uri)

    def append(ids: list[int]) -> te.Transaction:
        rows = pa.table({"id": pa.array(ids, pa.int64())})
        frags = [te.Fragment.from_lance_json(m.to_json()) for m in lf.write_fragments(rows, uri)]
        return te.Transaction(1, te.Append(fragments=tuple(frags)))

    twice, other = append([1, 2]), append([3])
    with te.Committer(uri) as committer:
        futures = committer.submit_all([twice, other, twice])
        assert {f.result(timeout=60).version for f in futures} == {2}
        assert [f.result().already_committed for f in futures] == [False, False, True]
        again = committer.commit(twice, timeout=60)
        assert (again.version, again.already_committed) == (2, True)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert sorted(ds.to_table()["id"].to_pylist()) == [-1, 1, 2, 3]
    members = ds.read_transaction(2).transaction_properties[GROUP_MEMBERS_KEY].split(",")
    assert sorted(members) == sorted([twice.uuid, other.uuid])
