"""A Dataset base on a store without concurrent requests (local disk, memory): the first
attempt creates ``read_version + 1`` straight away and one listing taken *after* the create
decides the lineage check (``commit.py``: ``list_after``; ``docs/architecture.md``,
*Listing after the create*).

Each case below is one a listing taken before the create, or an existence check after it,
decides differently or at a higher cost: a stale base whose next version (or next two) a
cleanup removed, a base a writer made stale, and a ``_versions/`` directory large enough
that the version hint replaces listings (there the listing comes first, as before).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from pyroaring import BitMap

from txn_engine.commit import CommitResult, commit
from txn_engine.dataset import Dataset
from txn_engine.errors import HistoryUnavailableError
from txn_engine.format.deletion import write_deletion_vector
from txn_engine.format.io import latest_version, read_manifest
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import (
    TXN_HINT_PATH,
    NamingScheme,
    hint_replaces_listing,
    list_versions,
    manifest_name,
    scan_versions,
)
from txn_engine.model import DataFile, DeletionFile, Fragment, LanceField
from txn_engine.ops import Append, Delete, Overwrite
from txn_engine.storage import LocalStorage, MemoryStorage, RecordingStorage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag(rows: int = 10) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def append(store: Storage) -> CommitResult:
    return commit(store, Transaction(latest_version(store).version, Append([frag()])))


def remove(store: Storage, version: int) -> None:
    """What a cleanup does to an old version: its manifest is deleted."""
    store.delete(f"_versions/{manifest_name(version, NamingScheme.V2)}")


def versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


@pytest.fixture(params=["memory", "local"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    def make() -> Storage:
        if request.param == "memory":
            return MemoryStorage()
        return LocalStorage(tmp_path / f"t{uuid.uuid4().hex[:8]}.lance")

    return make


def _table(store: Storage, n: int) -> None:
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    for _ in range(n - 1):
        append(store)


def test_uncontended_commit_is_one_create_then_one_listing(
    make_store: Callable[[], Storage],
) -> None:
    store = make_store()
    _table(store, 3)
    rec = RecordingStorage(store)
    r = commit(rec, Transaction(3, Append([frag()])), base=Dataset.open(store))
    assert r.version == 4
    assert r.attempts == 1
    assert [c[0] for c in rec.calls] == ["put_if_absent", "list"]
    assert rec.calls[0][1] == f"_versions/{manifest_name(4, NamingScheme.V2)}"


def test_a_slot_freed_below_a_kept_version_is_withdrawn(make_store: Callable[[], Storage]) -> None:
    """Base 2; 3 and 4 land; a cleanup removes 3. Our create of 3 succeeds in the freed slot;
    the listing after it shows 4, which was built on the removed 3: withdrawn."""
    store = make_store()
    _table(store, 2)
    base = Dataset.open(store)
    append(store)  # 3
    append(store)  # 4
    remove(store, 3)
    rec = RecordingStorage(store)
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(rec, Transaction(2, Append([frag()])), base=base)
    mine = f"_versions/{manifest_name(3, NamingScheme.V2)}"
    assert ("put_if_absent", mine) in rec.calls
    assert ("delete", mine) in rec.calls
    assert versions(store) == [1, 2, 4]


def test_two_freed_slots_are_caught_where_the_existence_check_is_not(
    make_store: Callable[[], Storage],
) -> None:
    """Base 2; 3, 4 and 5 land; a cleanup removes 3 and 4. The existence check of 4 after our
    create of 3 finds nothing (assume_latest accepts, and version 5 does not descend from
    ours: the documented cost of assume_latest). The listing after the create shows 5 above
    a gap: withdrawn, nothing of ours left."""
    store = make_store()
    _table(store, 2)
    base = Dataset.open(store)
    for _ in range(3):
        append(store)  # 3, 4, 5
    remove(store, 3)
    remove(store, 4)
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, Transaction(2, Append([frag()])), base=base)
    assert versions(store) == [1, 2, 5]
    r = commit(store, Transaction(2, Append([frag()])), base=base, assume_latest=True)
    assert r.version == 3  # accepted by the existence check alone
    files = [
        {d.path for f in read_manifest(store, v)[1].manifest.fragments for d in f.files}
        for v in (3, 5)
    ]
    assert files[0] - files[1]  # our data file is not in version 5


def test_a_stale_base_loses_the_create_and_the_loop_checks_every_version(
    make_store: Callable[[], Storage],
) -> None:
    store = make_store()
    _table(store, 2)
    base = Dataset.open(store)
    append(store)  # 3: unseen by the base
    rec = RecordingStorage(store)
    r = commit(rec, Transaction(2, Append([frag()])), base=base)
    assert r.version == 4
    assert r.attempts == 2
    kinds = [c[0] for c in rec.calls]
    assert kinds[0] == "put_if_absent"
    assert "list" in kinds
    assert versions(store) == [1, 2, 3, 4]


def _long_table(root: Path, n: int) -> LocalStorage:
    """``n`` versions: two real commits, the rest the second manifest under the next V2
    names (what a long history looks like to a listing), ``_versions/`` past one block."""
    store = LocalStorage(root)
    _table(store, 2)
    second = decode_manifest_file(store.get(f"_versions/{manifest_name(2, NamingScheme.V2)}"))
    for v in range(3, n + 1):
        second.manifest.version = v
        data = encode_manifest_file(second.manifest, second.indices, second.transaction)
        store.put_if_absent(f"_versions/{manifest_name(v, NamingScheme.V2)}", data)
    assert hint_replaces_listing(store)
    return store


def test_past_one_directory_block_the_listing_comes_first(tmp_path: Path) -> None:
    """Where ``_versions/`` is past one block the version hint replaces listings, and a
    listing from the hint rests on versions created as the latest: it cannot vouch for ours
    in a freed slot. So there the first attempt lists first (as the loop does), and a gap
    below the latest is missing history before anything is written."""
    store = _long_table(tmp_path / "big.lance", 300)
    base = Dataset.open(store)
    for _ in range(3):
        append(store)  # 301, 302, 303
    remove(store, 301)
    remove(store, 302)
    rec = RecordingStorage(store)
    with pytest.raises(HistoryUnavailableError):
        commit(rec, Transaction(300, Append([frag()])), base=base)
    assert "put_if_absent" not in [c[0] for c in rec.calls]
    assert versions(store)[-2:] == [300, 303]


def test_the_listing_after_the_create_never_comes_from_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If ``_versions/`` grows past one block between the decision and the listing, the
    listing after the create still lists (``scan_versions(hint=False)``)."""
    store = _long_table(tmp_path / "grown.lance", 300)
    base = Dataset.open(store)
    driver = sys.modules["txn_engine.loop.driver"]
    monkeypatch.setattr(driver, "hint_replaces_listing", lambda _s: False)

    def no_hint(*_a: object) -> None:
        raise AssertionError("the hint was read")

    monkeypatch.setattr("txn_engine.format.naming._scan_from_hint", no_hint)
    assert commit(store, Transaction(300, Append([frag()])), base=base).version == 301
    listed = scan_versions(store, since=300, hint=False).latest
    assert listed is not None
    assert listed.version == 301


def test_a_commit_begun_on_a_one_block_directory_writes_no_hint(tmp_path: Path) -> None:
    """The version hint is read and written only past one directory block; whether a commit
    writes it is decided when the commit begins (one stat), so the commit whose create takes
    ``_versions/`` past the block writes none, and the next commit writes it."""
    store = LocalStorage(tmp_path / "edge.lance")
    _table(store, 2)
    second = decode_manifest_file(store.get(f"_versions/{manifest_name(2, NamingScheme.V2)}"))
    v = 2
    while True:  # fill the first block, up to the last version that still fits in it
        probe = f"_versions/{manifest_name(v + 1, NamingScheme.V2)}"
        second.manifest.version = v + 1
        store.put_if_absent(probe, encode_manifest_file(second.manifest, second.indices, None))
        if hint_replaces_listing(store):
            store.delete(probe)  # a directory never shrinks: its size stays past the block
            break
        v += 1
    assert hint_replaces_listing(store)
    # rebuild the same versions in a fresh directory (one block), then commit on it
    fresh = LocalStorage(tmp_path / "fresh.lance")
    for name in store.list("_versions"):
        fresh.put_if_absent(f"_versions/{name}", store.get(f"_versions/{name}"))
    assert not hint_replaces_listing(fresh)
    r = commit(fresh, Transaction(v, Append([frag()])), base=Dataset.open(fresh))
    assert r.version == v + 1
    assert hint_replaces_listing(fresh)  # our create took it past the block
    assert not fresh.exists(TXN_HINT_PATH)
    r = commit(fresh, Transaction(v + 1, Append([frag()])), base=Dataset.open(fresh))
    assert fresh.get(TXN_HINT_PATH) == b'{"version":%d}' % r.version


def _delete(store: Storage, read_version: int, rows: set[int]) -> Transaction:
    """A Delete of ``rows`` of fragment 0, planned on ``read_version``."""
    _, mf = read_manifest(store, read_version)
    base = Fragment.from_proto(next(f for f in mf.manifest.fragments if f.id == 0))
    dv = write_deletion_vector(store, 0, read_version, BitMap(rows))
    updated = attrs.evolve(base, deletion_file=DeletionFile.from_proto(dv))
    return Transaction(read_version, Delete([updated], predicate="x"))


class _Concurrent(MemoryStorage):
    """Declares concurrent requests: its creates are guarded (an object store's path)."""

    read_concurrency = 8


@pytest.mark.parametrize("guarded", [False, True], ids=["list-after", "guarded"])
def test_a_stale_base_whose_history_is_gone_is_withdrawn_though_the_next_touched_ours(
    guarded: bool,
) -> None:
    """Base 1; another writer's Delete lands 2 and a Delete of the same fragment lands 3 on
    it; a cleanup keeps only 3. Our Delete (planned on 1) creates 2 in the freed slot; 3 is
    listed above it and changed the fragment ours changed, so the lineage check alone would
    give it the benefit of the doubt. The version ours was built on is gone from the listing
    (found by the cleanup state machine): withdrawn, nothing acknowledged."""
    store: Storage = _Concurrent() if guarded else MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))  # 1
    base = Dataset.open(store)
    mine = _delete(store, 1, {0, 1})
    commit(store, _delete(store, 1, {5}))  # 2
    commit(store, _delete(store, 2, {5, 6}))  # 3, on 2: touches fragment 0 too
    remove(store, 1)
    remove(store, 2)
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, mine, base=base)
    assert versions(store) == [3]
