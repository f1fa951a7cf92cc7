"""txn_engine.verify: passes on good histories written by txn_engine, and every invariant it
checks is caught when deliberately broken (pylance-written and old-release histories:
``tests/integration/test_verify_pylance.py`` and ``test_historical_fixtures.py``)."""

from __future__ import annotations

import attrs
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.commit import commit
from txn_engine.format.deletion import write_deletion_vector
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import NamingScheme, manifest_path
from txn_engine.model import DeletionFile, Fragment
from txn_engine.ops import Append, Delete, Overwrite
from txn_engine.storage.base import Storage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import SyntheticRows
from txn_engine.transaction import Transaction
from txn_engine.verify import verify


def _synthetic(storage: Storage) -> SyntheticRows:
    rows = SyntheticRows()
    first = (rows.fragment([(0, 0), (1, 0), (2, 0)]), rows.fragment([(3, 0), (4, 0)]))
    commit(storage, Transaction(0, Overwrite(first, SCHEMA)))
    return rows


def _forge(storage: Storage, edit: object) -> None:
    """Write the next version as a copy of the latest manifest changed by ``edit``."""
    entry, mf = read_manifest(storage)
    m = table_pb2.Manifest()
    m.CopyFrom(mf.manifest)
    m.version = entry.version + 1
    edit(m)  # type: ignore[operator]
    txn = read_transaction(storage, entry, mf)
    txn.uuid = f"forged-{entry.version + 1}"
    storage.put_if_absent(
        manifest_path(entry.version + 1, entry.scheme), encode_manifest_file(m, (), txn)
    )


def test_finds_fragment_ids_reused_and_a_high_water_mark_going_down() -> None:
    storage = MemoryStorage()
    rows = _synthetic(storage)
    v = commit(storage, Transaction(1, Delete(deleted_fragment_ids=(1,)))).version
    assert verify(storage).ok

    def bring_back(m: table_pb2.Manifest) -> None:
        m.fragments.append(rows.fragment([(9, 0)]).with_id(1).to_proto())
        m.max_fragment_id = 1

    _forge(storage, bring_back)
    report = verify(storage)
    found = {(f.version, f.invariant) for f in report.findings}
    assert (v + 1, "ids-never-reused") in found
    assert not report.ok

    storage = MemoryStorage()
    rows = _synthetic(storage)
    commit(storage, Transaction(1, Append((rows.fragment([(5, 0)]),))))

    def lower(m: table_pb2.Manifest) -> None:
        del m.fragments[-1]
        m.max_fragment_id = 1

    _forge(storage, lower)
    assert "high-water mark went down" in " ".join(str(f) for f in verify(storage).findings)


def test_finds_max_fragment_id_below_an_id_in_use() -> None:
    storage = MemoryStorage()
    _synthetic(storage)
    _forge(storage, lambda m: setattr(m, "max_fragment_id", 0))
    assert any(f.invariant == "max-fragment-id" for f in verify(storage).findings)


def test_finds_bad_deletion_files_and_missing_data_files() -> None:
    storage = MemoryStorage()
    _synthetic(storage)
    beyond = write_deletion_vector(storage, 0, 1, BitMap([7]))

    def corrupt(m: table_pb2.Manifest) -> None:
        m.fragments[0].deletion_file.CopyFrom(beyond)
        m.reader_feature_flags |= 1
        m.writer_feature_flags |= 1

    _forge(storage, corrupt)
    report = verify(storage)
    assert [f.invariant for f in report.errors] == ["deletion-file"]
    assert "deletes offset 7, past the fragment's 3 rows" in report.findings[0].detail
    # synthetic data files do not exist: found only when asked
    assert all(f.invariant != "data-files" for f in report.findings)
    missing = verify(storage, data_files=True, deep=True)
    assert sum(f.invariant == "data-files" for f in missing.findings) == 2 * 2


def test_a_fully_deleted_fragment_is_a_warning() -> None:
    storage = MemoryStorage()
    _synthetic(storage)
    everything = write_deletion_vector(storage, 1, 1, BitMap([0, 1]))
    frag = Fragment.from_proto(read_manifest(storage)[1].manifest.fragments[1])
    frag = attrs.evolve(frag, deletion_file=DeletionFile.from_proto(everything))
    commit(storage, Transaction(1, Delete(updated_fragments=(frag,))))
    report = verify(storage)
    assert report.ok
    assert [f.severity for f in report.findings] == ["warning"]


def test_an_unreadable_manifest_is_a_read_failure_not_damage() -> None:
    """A manifest that cannot be read (permission denied, an outage) is reported as such,
    not as a decode failure; the other versions are still checked."""
    from txn_engine.errors import StorageError
    from txn_engine.testing.faults import Fault, FaultyStorage

    store, rows = MemoryStorage(), SyntheticRows()
    commit(store, Transaction(0, Overwrite((rows.fragment([(0, 0)]),), SCHEMA)))
    commit(store, Transaction(1, Append((rows.fragment([(1, 0)]),))))
    denied = FaultyStorage(store)
    for method in ("get", "get_range", "size"):
        denied.add(
            Fault(
                method,
                manifest_path(1, NamingScheme.V2),
                times=None,
                error=lambda m, p: StorageError(f"{p}: permission denied"),
            )
        )
    report = verify(denied)
    assert [(f.version, f.invariant) for f in report.findings] == [(1, "manifest-reads")]
    assert "permission denied" in report.findings[0].detail


def test_a_transaction_carried_by_two_versions_is_an_exactly_once_finding() -> None:
    """A version that carried other transactions (offers, a group commit's members) stands
    for each of them: one of them in a second version is reported, as a uuid landing twice
    is; carried once, nothing is."""
    from txn_engine.contention.offers import carrying

    storage = MemoryStorage()
    rows = _synthetic(storage)
    offered = Transaction(1, Append((rows.fragment([(10, 1)]),)))
    commit(storage, carrying(Transaction(1, Append((rows.fragment([(11, 1)]),))), [offered]))
    assert [f for f in verify(storage).findings if f.invariant == "exactly-once"] == []
    again = attrs.evolve(offered, operation=Append((rows.fragment([(12, 1)]),)))
    commit(storage, carrying(Transaction(2, Append((rows.fragment([(13, 1)]),))), [again]))
    found = [f for f in verify(storage).findings if f.invariant == "exactly-once"]
    assert len(found) == 1
    assert offered.uuid in found[0].detail
    assert found[0].version == 3


def test_a_branch_file_pylance_could_not_have_written_is_a_refs_error() -> None:
    storage = MemoryStorage()
    _synthetic(storage)
    body = b'{"parentBranch": null, "parentVersion": 1}'
    storage.put("_refs/branches/%C3%A9.json", body)  # the branch "é", as pylance names it
    assert verify(storage).findings == ()
    storage.put("_refs/branches/..%2F..%2Fx.json", body)
    report = verify(storage)
    assert not report.ok
    (finding,) = report.errors
    assert finding.invariant == "refs"
    assert "_refs/branches/..%2F..%2Fx.json" in finding.detail
