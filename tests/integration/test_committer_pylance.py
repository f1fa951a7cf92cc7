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
