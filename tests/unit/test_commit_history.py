"""Missing history is never "no conflict" (issue: a commit skipped versions that cleanup had
removed and landed an Append on top of an Overwrite it never saw).

Every version between a transaction's read version and the latest must be read and checked;
when one is gone (cleaned up, deleted by hand) or cannot be read, the commit raises
HistoryUnavailableError and writes no manifest. The read version itself must still exist
(rebase and affected-row derivation need it). A transaction that already landed is still
found by its uuid when the versions it landed in are kept.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txn_engine.commit import CommitResult, commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    HistoryUnavailableError,
    IncompatibleTransactionError,
    VersionNotFoundError,
)
from txn_engine.format.io import latest_version, read_manifest
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Delete, Overwrite, UpdateConfig, UpdateMap
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.faults import Fault, FaultyStorage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag(rows: int = 10) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def append(store: Storage, read_version: int | None = None) -> CommitResult:
    rv = latest_version(store).version if read_version is None else read_version
    return commit(store, Transaction(rv, Append([frag()])))


def remove(store: Storage, version: int, scheme: NamingScheme = NamingScheme.V2) -> None:
    """What cleanup does to an old version: its manifest is deleted."""
    store.delete(f"_versions/{manifest_name(version, scheme)}")


def versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def test_append_planned_before_a_cleaned_up_overwrite_is_refused() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    append(store)  # 2: the version our writer plans against
    planned = Transaction(2, Append([frag()]))
    commit(store, Transaction(2, Overwrite([frag()], SCHEMA)))  # 3
    append(store)  # 4
    for v in (1, 2, 3):  # cleanup keeps only the latest
        remove(store, v)
    with pytest.raises(HistoryUnavailableError) as info:
        commit(store, planned)
    err = info.value
    assert isinstance(err, IncompatibleTransactionError)
    assert not err.retryable
    assert err.read_version == 2
    assert err.conflicting_version == 2
    assert "re-plan" in str(err)
    assert versions(store) == [4]  # nothing landed


def test_a_gap_between_read_version_and_latest_is_refused() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    planned = Transaction(1, Delete(updated_fragments=(), deleted_fragment_ids=(0,)))
    commit(store, Transaction(1, Overwrite([frag()], SCHEMA)))  # 2
    append(store)  # 3
    remove(store, 2)  # a hole in the middle: 1 and 3 are still there
    with pytest.raises(HistoryUnavailableError) as info:
        commit(store, planned)
    assert info.value.conflicting_version == 2
    assert "version 2" in str(info.value)
    assert versions(store) == [1, 3]


def test_a_missing_read_version_is_refused_even_without_newer_versions_missing() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    append(store)  # 2
    planned = Transaction(2, Append([frag()]))
    append(store)  # 3
    remove(store, 1)
    remove(store, 2)
    with pytest.raises(HistoryUnavailableError) as info:
        commit(store, planned)
    assert info.value.conflicting_version == 2
    assert versions(store) == [3]


def test_v1_naming_gap_is_refused_too() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)), naming=NamingScheme.V1)
    planned = Transaction(1, Append([frag()]))
    commit(store, Transaction(1, Overwrite([frag()], SCHEMA)))  # 2
    append(store)  # 3
    remove(store, 2, NamingScheme.V1)
    with pytest.raises(HistoryUnavailableError):
        commit(store, planned)


def test_read_version_newer_than_latest_is_still_version_not_found() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    with pytest.raises(VersionNotFoundError):
        commit(store, Transaction(5, Append([frag()])))


def test_complete_history_with_older_versions_cleaned_still_commits() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    append(store)  # 2
    append(store)  # 3
    remove(store, 1)  # older than the read version: not needed
    planned = Transaction(2, Append([frag()]))
    append(store)  # 4
    result = commit(store, planned)
    assert result.version == 5
    assert versions(store) == [2, 3, 4, 5]


def test_landed_transaction_is_found_by_uuid_before_the_history_check() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    txn = Transaction(1, Append([frag()]))
    first = commit(store, txn)  # 2
    append(store)  # 3
    remove(store, 1)  # its read version is gone, the version it landed in is kept
    again = commit(store, txn)
    assert again.already_committed
    assert again.version == first.version


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=7),
    data=st.data(),
)
def test_any_removed_version_in_the_checked_range_refuses(n: int, data: st.DataObject) -> None:
    """Property: with versions 1..n, a transaction read at r, and any non-empty set of
    versions in [r, n-1] removed (the latest is never removed), the commit never lands;
    with none removed in that range it lands at n + 1."""
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    for _ in range(n - 1):
        append(store)
    r = data.draw(st.integers(min_value=1, max_value=n), label="read_version")
    removed = data.draw(st.sets(st.integers(min_value=1, max_value=n - 1)), label="removed")
    for v in removed:
        remove(store, v)
    planned = Transaction(r, Append([frag()]))
    if any(r <= v for v in removed):
        with pytest.raises(HistoryUnavailableError):
            commit(store, planned)
        assert max(versions(store)) == n
    else:
        assert commit(store, planned).version == n + 1


# ---- a create that lands in a slot freed by cleanup ------------------------------------------


def config(value: str) -> UpdateConfig:
    return UpdateConfig(config_updates=UpdateMap({"k": value}))


def _twin_then_cleanup(inner: Storage, kind: str) -> None:
    """Another writer takes version 2 and 3 and a cleanup removes 2 (no longer latest)."""
    if kind == "overwrite":
        commit(inner, Transaction(1, Overwrite([frag()], SCHEMA)))
        append(inner)
    elif kind == "overwrite-above":  # the version above our slot replaces the table
        append(inner)
        commit(inner, Transaction(2, Overwrite([frag()], SCHEMA)))
    else:
        commit(inner, Transaction(1, config("theirs")))
        append(inner)
    remove(inner, 2)


@pytest.mark.parametrize("kind", ["overwrite", "overwrite-above", "config"])
@pytest.mark.parametrize("mine", ["append", "config"])
def test_create_in_a_slot_freed_by_cleanup_is_withdrawn(kind: str, mine: str) -> None:
    inner = MemoryStorage()
    commit(inner, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    store = FaultyStorage(inner)
    twin = Fault(
        "put_if_absent",
        "_versions/*",
        mode="hook",
        hook=lambda _m, _p: _twin_then_cleanup(inner, kind),
    )
    store.add(twin)
    op = Append([frag()]) if mine == "append" else config("mine")
    with pytest.raises(HistoryUnavailableError, match="withdrawn") as info:
        commit(store, Transaction(1, op))
    assert info.value.conflicting_version == 2
    assert versions(inner) == [1, 3]  # our manifest in the freed slot 2 is gone again
    assert read_manifest(inner, 3)[1].manifest.config.get("k") != "mine"


def test_a_follower_built_on_ours_keeps_the_commit() -> None:
    inner = MemoryStorage()
    commit(inner, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    store = FaultyStorage(inner)
    # right after our create of version 2, another writer appends version 3 on top of it
    store.add(Fault("exists", "_versions/*", mode="hook", hook=lambda _m, _p: append(inner)))
    result = commit(store, Transaction(1, Append([frag()])))
    assert result.version == 2
    assert versions(inner) == [1, 2, 3]
    ours = result.transaction.operation.fragments[0].files[0].path  # type: ignore[attr-defined]
    top = read_manifest(inner, 3)[1].manifest
    assert ours in {f.path for fr in top.fragments for f in fr.files}


def test_settling_against_a_huge_foreign_file_reads_only_its_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hostile object at the version name our create lost on is never read whole: the
    read-back is bounded by the manifest cap; the version is then unreadable history."""
    import importlib

    from txn_engine.storage import RecordingStorage

    commit_mod = importlib.import_module("txn_engine.loop.create")
    monkeypatch.setattr(commit_mod, "MAX_MANIFEST_BYTES", 1000)
    inner = MemoryStorage()
    commit(inner, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    junk = f"_versions/{manifest_name(2, NamingScheme.V2)}"
    rec = RecordingStorage(inner)
    store = FaultyStorage(rec)
    store.add(
        Fault(
            "put_if_absent",
            "_versions/*",
            mode="hook",
            hook=lambda *_: inner.put(junk, b"x" * 5000),
        )
    )
    with pytest.raises(HistoryUnavailableError, match="version 2"):
        commit(store, Transaction(1, Append([frag()])))
    reads = [c[0] for c in rec.calls if c[1] == junk and c[0] in ("get", "get_range", "size")]
    assert reads[0] == "size"  # the settle read stopped at the size
    assert "get" not in reads
    assert versions(inner) == [1, 2]


def _stale_base_then_cleaned(store: MemoryStorage) -> Dataset:
    """Versions 1-4 in ``store``; returns a Dataset base taken at version 2, after which 3 and
    4 landed and a cleanup removed 1-3 (so version 3's slot is free again)."""
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    append(store)  # 2
    base = Dataset.open(store)
    append(store)  # 3
    append(store)  # 4
    for v in (1, 2, 3):
        remove(store, v)
    return base


@pytest.mark.parametrize("mine", ["index", "config", "append"])
def test_warm_commit_into_a_slot_freed_by_cleanup_is_withdrawn(mine: str) -> None:
    """A Dataset base taken at v2; v3 and v4 land and cleanup removes 1-3: the direct create
    of v3 succeeds in the freed slot, and v4 (built on the removed v3) does not carry our
    change, whatever it is (an index, a config key, fragments): withdrawn, not acknowledged."""
    import uuid as uuid_mod

    from txn_engine.model import IndexDetails, IndexMetadata
    from txn_engine.ops import CreateIndex

    store = MemoryStorage()
    base = _stale_base_then_cleaned(store)
    op: object
    if mine == "index":
        op = CreateIndex(
            [
                IndexMetadata(
                    uuid=str(uuid_mod.uuid4()),
                    name="i",
                    fields=(0,),
                    dataset_version=2,
                    fragment_bitmap=frozenset({0}),
                    index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
                )
            ]
        )
    elif mine == "config":
        op = config("mine")
    else:
        op = Append([frag()])
    with pytest.raises(HistoryUnavailableError):
        commit(store, Transaction(2, op), base=base, assume_latest=True)  # type: ignore[arg-type]
    assert versions(store) == [4]  # nothing of ours left in the history


def test_a_table_replacing_follower_cannot_prove_lineage_and_refuses_safely() -> None:
    """An Overwrite landing right on top of our fresh version carries nothing of ours: the
    commit is refused (withdrawn), and nothing is lost, since the Overwrite's table does not
    depend on ours."""
    inner = MemoryStorage()
    commit(inner, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    store = FaultyStorage(inner)
    store.add(
        Fault(
            "exists",
            "_versions/*",
            mode="hook",
            hook=lambda _m, _p: commit(inner, Transaction(2, Overwrite([frag(7)], SCHEMA))),
        )
    )
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, Transaction(1, Append([frag()])))
    assert versions(inner) == [1, 3]
    top = read_manifest(inner, 3)[1].manifest
    assert [f.physical_rows for f in top.fragments] == [7]  # the Overwrite's table, intact


def test_a_fragment_id_reused_by_the_removed_twin_is_not_taken_for_ours() -> None:
    """The removed twin appended a fragment with the very id ours got (same high-water
    mark), and the version above it changed that fragment (a new column, a deletion): the
    id matches, the data files do not, so ours is withdrawn."""
    inner = MemoryStorage()
    commit(inner, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    store = FaultyStorage(inner)

    def twin(_m: str, _p: str) -> None:
        append(inner)  # 2: fragment 1, the id our append gets too
        top = read_manifest(inner, 2)[1].manifest
        mine = next(f for f in top.fragments if f.id == 1)
        deleted = Fragment.from_proto(mine)
        commit(inner, Transaction(2, Delete(updated_fragments=(deleted,))))  # 3 touches it
        remove(inner, 2)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=twin))
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, Transaction(1, Append([frag()])))
    assert versions(inner) == [1, 3]


class ConcurrentMemory(MemoryStorage):
    """An in-memory store that declares concurrent requests, like an object store."""

    read_concurrency = 8


def test_a_withdrawn_commit_leaves_no_transaction_copy() -> None:
    """The ``.txn`` copy goes out beside the lineage check on an object store; when the
    check withdraws our manifest, the copy is deleted too (nothing of ours is left)."""
    store = ConcurrentMemory()
    base = _stale_base_then_cleaned(store)
    mine = Transaction(2, Append([frag()]))
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, mine, base=base, assume_latest=True)
    assert versions(store) == [4]
    assert not store.exists(f"_transactions/2-{mine.uuid}.txn")
