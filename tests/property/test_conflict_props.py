"""Hypothesis properties of conflict detection and of concurrent deletes.

* Oracles: the fragment-overlap rules (D1 without affected rows, O1, W2) and the config /
  table-metadata key rule (K, C2) agree with brute-force set definitions.
* Concurrent deletes planned at one version on one fragment, committed in sequence: with
  ``affected_rows`` (Lance's rebase) and with the opt-in ``derive_affected_rows`` option,
  a delete lands iff its rows are disjoint from every delete that landed before it; the
  final deletion vector is exactly the union of the landed deletes (no deletion lost, none
  invented) -- the result of running the landed deletes serially. Without either, every
  delete after the first is retryable (pylance 14's behaviour).
"""

from __future__ import annotations

import uuid
from collections import Counter

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from txn_engine.commit import commit
from txn_engine.conflicts.detect import detect
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.errors import CommitStateUnknownError, RetryableConflictError, StorageError
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.naming import list_versions
from txn_engine.model import DataFile, DeletionFile, Fragment, LanceField
from txn_engine.ops import (
    Append,
    Delete,
    Overwrite,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
    UpdateMap,
)
from txn_engine.retry import RetryPolicy
from txn_engine.storage import MemoryStorage
from txn_engine.testing.faults import Fault, FaultyStorage, SimulatedCrash
from txn_engine.transaction import Transaction

IDS = st.frozensets(st.integers(0, 6), max_size=4)
KEYS = st.dictionaries(st.sampled_from("abcd"), st.one_of(st.none(), st.just("v")), max_size=3)


def _f(fid: int) -> Fragment:
    return Fragment(fid, (DataFile(f"f{fid}.lance", (0,)),), 10, DeletionFile(0, 1, fid + 1, 1))


def _rows_op(kind: str, updated: frozenset[int], removed: frozenset[int]) -> Delete | Update:
    frags = [_f(i) for i in sorted(updated)]
    if kind == "Delete":
        return Delete(frags, deleted_fragment_ids=sorted(removed))
    return Update(removed_fragment_ids=sorted(removed), updated_fragments=frags)


@given(
    st.sampled_from(["Delete", "Update"]), st.sampled_from(["Delete", "Update"]), IDS, IDS, IDS, IDS
)
def test_d1_without_affected_rows_is_fragment_overlap(
    mk: str,
    ok: str,
    mu: frozenset[int],
    mr: frozenset[int],
    ou: frozenset[int],
    orm: frozenset[int],
) -> None:
    mine = Transaction(1, _rows_op(mk, mu, mr))
    other = Transaction(1, _rows_op(ok, ou, orm))
    conflicts = detect(mine, other, other_version=2)
    overlap = (mu | mr) & (ou | orm)
    assert bool(conflicts) == bool(overlap)
    assert all(c.outcome is Outcome.RETRYABLE for c in conflicts)
    if conflicts:
        assert conflicts[0].fragment_ids == overlap


@given(IDS.filter(bool), IDS.filter(bool), IDS, IDS)
def test_o1_and_w2_are_old_fragment_overlap(
    old_a: frozenset[int], old_b: frozenset[int], upd: frozenset[int], rem: frozenset[int]
) -> None:
    rw_a = Transaction(1, Rewrite([RewriteGroup([_f(i) for i in sorted(old_a)], [])]))
    rw_b = Transaction(1, Rewrite([RewriteGroup([_f(i) for i in sorted(old_b)], [])]))
    assert bool(detect(rw_a, rw_b, other_version=2)) == bool(old_a & old_b)
    rows = Transaction(1, _rows_op("Delete", upd, rem))
    expected = bool(old_a & (upd | rem))
    assert bool(detect(rw_a, rows, other_version=2)) == expected  # Rewrite vs Delete (O1)
    assert bool(detect(rows, rw_a, other_version=2)) == expected  # Delete vs Rewrite (O1)


def _clash(a: dict[str, str | None], b: dict[str, str | None]) -> bool:
    """Brute force: some key upserted by one side is upserted or deleted by the other."""
    return any(a[key] is not None or b[key] is not None for key in set(a) & set(b))


@given(KEYS, KEYS, KEYS, KEYS)
def test_config_and_table_metadata_key_rules(
    ca: dict[str, str | None],
    cb: dict[str, str | None],
    ta: dict[str, str | None],
    tb: dict[str, str | None],
) -> None:
    def cfg(c: dict[str, str | None], t: dict[str, str | None]) -> Transaction:
        return Transaction(
            1,
            UpdateConfig(
                config_updates=UpdateMap(c) if c else None,
                table_metadata_updates=UpdateMap(t) if t else None,
            ),
        )

    conflicts = detect(cfg(ca, ta), cfg(cb, tb), other_version=2)
    assert bool(conflicts) == (_clash(ca, cb) or _clash(ta, tb))
    assert all(c.outcome is Outcome.INCOMPATIBLE for c in conflicts)
    # K: Overwrite with config upserts vs UpdateConfig
    ups = {k: "v" for k, v in ca.items() if v is not None}
    ow = Transaction(1, Overwrite([], (), config_upsert_values=ups))
    got = detect(ow, cfg(cb, {}), other_version=2)
    assert bool(got) == _clash(dict(ups), cb)


# ---- concurrent deletes in one fragment, through the commit loop ----------------------------

ROWS = st.frozensets(st.integers(0, 19), min_size=1, max_size=6)


def _fragment(rows: int = 40) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 10),), rows)


def _dataset() -> MemoryStorage:
    store = MemoryStorage()
    data = DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 10)
    commit(
        store,
        Transaction(0, Overwrite([Fragment(0, (data,), 40)], (LanceField(0, -1, "id", "int64"),))),
    )
    return store


def _plan_delete(store: MemoryStorage, rows: frozenset[int], *, affected: bool) -> Transaction:
    _, mf = read_manifest(store, 1)
    base = Fragment.from_proto(mf.manifest.fragments[0])
    dv = write_deletion_vector(store, 0, 1, BitMap(rows))
    updated = attrs.evolve(base, deletion_file=DeletionFile.from_proto(dv))
    addresses = BitMap64(sorted(rows)) if affected else None  # fragment 0: address == offset
    return Transaction(1, Delete([updated], predicate="p", affected_rows=addresses))


def _final_dv(store: MemoryStorage) -> BitMap:
    _, mf = read_manifest(store)
    frag = mf.manifest.fragments[0]
    if not frag.HasField("deletion_file"):
        return BitMap()
    return read_deletion_vector(store, 0, frag.deletion_file)


def _run(
    writers: list[frozenset[int]], *, affected: bool, derive: bool, beyond_lance: bool = False
) -> tuple[list[bool], BitMap]:
    store = _dataset()
    planned = [_plan_delete(store, rows, affected=affected) for rows in writers]
    options = ConflictOptions(derive_affected_rows=derive, rebase_rows=beyond_lance)
    landed: list[bool] = []
    for txn in planned:
        try:
            commit(store, txn, conflict_options=options)
        except RetryableConflictError:
            landed.append(False)
        else:
            landed.append(True)
    return landed, _final_dv(store)


def _serial_oracle(writers: list[frozenset[int]]) -> tuple[list[bool], BitMap]:
    deleted: set[int] = set()
    landed = []
    for rows in writers:
        ok = not (rows & deleted)
        landed.append(ok)
        if ok:
            deleted |= rows
    return landed, BitMap(deleted)


@given(st.lists(ROWS, min_size=2, max_size=4))
def test_concurrent_deletes_with_affected_rows_match_serial_execution(
    writers: list[frozenset[int]],
) -> None:
    assert _run(writers, affected=True, derive=False) == _serial_oracle(writers)


@given(st.lists(ROWS, min_size=2, max_size=4))
def test_derive_affected_rows_option_matches_serial_execution(
    writers: list[frozenset[int]],
) -> None:
    assert _run(writers, affected=False, derive=True) == _serial_oracle(writers)


@given(st.lists(ROWS, min_size=2, max_size=4), st.booleans())
def test_overlapping_deletes_merge_beyond_lance(
    writers: list[frozenset[int]], affected: bool
) -> None:
    """By default (``rebase_rows``) every concurrent delete of one fragment lands, with or
    without recorded rows, and the result is the serial one: each delete removes the rows
    it matched that are still there, so a row deleted twice is deleted once."""
    landed, dv = _run(writers, affected=affected, derive=False, beyond_lance=True)
    assert landed == [True] * len(writers)
    assert dv == BitMap(frozenset().union(*writers))


@given(st.lists(ROWS, min_size=2, max_size=3))
def test_lance_mode_without_affected_rows_retries_every_later_delete(
    writers: list[frozenset[int]],
) -> None:
    landed, dv = _run(writers, affected=False, derive=False)
    assert landed == [True] + [False] * (len(writers) - 1)
    assert dv == BitMap(writers[0])


# ---- exactly once under storage faults ----------------------------------------------------------

FAULTS: list[tuple[Fault, ...]] = [
    (),
    (Fault("put_if_absent", "_versions/*", mode="after"),),
    (Fault("put_if_absent", "_versions/*", mode="before"),),
    (Fault("put_if_absent", "_versions/*", mode="before", times=None),),
    (Fault("put_if_absent", "_versions/*", mode="crash_before"),),
    (Fault("put_if_absent", "_versions/*", mode="crash_after"),),
    (
        Fault("put_if_absent", "_versions/*", mode="after"),
        Fault("get", "_versions/*", mode="before", times=None),
    ),
    (Fault("put", "_transactions/*", mode="before"),),
    (Fault("list", "_versions", mode="before"),),
]


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(FAULTS) - 1)), min_size=1, max_size=12)
)
def test_every_transaction_lands_exactly_once_under_faults(steps: list[tuple[int, int]]) -> None:
    """Writers retry their transactions through arbitrary storage faults (lost responses,
    failed creates, crashes before/after the manifest create, unreadable read-backs); each
    transaction ends up in exactly one version, and every report of success names it."""
    inner = _dataset()
    store = FaultyStorage(inner)
    txns = [Transaction(1, Append([_fragment()])) for _ in range(4)]
    reported: dict[str, int] = {}
    fast = RetryPolicy(max_attempts=50, sleep=lambda s: None)
    for index, fault_set in steps:
        store.clear()
        for fault in FAULTS[fault_set]:
            store.add(attrs.evolve(fault, fired=0, seen=0))
        txn = txns[index]
        try:
            result = commit(store, txn, retry_policy=fast)
        except (CommitStateUnknownError, StorageError, SimulatedCrash):
            continue
        assert reported.setdefault(txn.uuid, result.version) == result.version
    store.clear()
    for txn in txns:
        result = commit(store, txn, retry_policy=fast)
        assert reported.setdefault(txn.uuid, result.version) == result.version
    history = [read_transaction(inner, e).uuid for e in list_versions(inner)]
    assert [e.version for e in list_versions(inner)] == list(range(1, len(history) + 1))
    counts = Counter(history)
    assert all(counts[t.uuid] == 1 for t in txns)
    assert len(history) == 1 + len(txns)
    assert {reported[t.uuid] for t in txns} == set(range(2, 2 + len(txns)))
