"""Serializable isolation: the pure check and its place in the retry planner."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from txn_engine.codec import transaction_to_proto
from txn_engine.conflicts.detect import Conflict
from txn_engine.conflicts.isolation import (
    ISOLATION_CONFIG,
    READ_PREDICATE,
    read_predicate,
    serializable_conflict,
    table_isolation,
)
from txn_engine.conflicts.planner import Winner, plan_retry
from txn_engine.conflicts.rebase import ConflictOptions, at_table_level, options_for
from txn_engine.errors import InvalidOperationError
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import Append, Delete, Rewrite, RewriteGroup, Update
from txn_engine.transaction import Transaction


def _frag(rows: int = 10, fid: int = 0) -> Fragment:
    return Fragment(fid, (DataFile(f"f{fid}-{rows}.lance", (0,), (0,), 2, 2, 10),), rows)


def _never(version: int, frags: Sequence[Fragment], predicate: str) -> bool:
    return False


def _always(version: int, frags: Sequence[Fragment], predicate: str) -> bool:
    return True


DELETE = Transaction(1, Delete([], [5], predicate="id < 10"))
APPEND = Transaction(1, Append([_frag()]))


def test_what_a_transaction_read() -> None:
    assert read_predicate(DELETE) == "id < 10"
    assert read_predicate(Transaction(1, Update())) is None
    upd = Transaction(1, Update(), properties={READ_PREDICATE: ""})
    assert read_predicate(upd) == ""  # every row


def test_added_rows_conflict_only_when_they_match_or_cannot_be_checked() -> None:
    assert serializable_conflict(DELETE, APPEND, 2, _never) is None
    assert "matching" in (serializable_conflict(DELETE, APPEND, 2, _always) or "")
    assert serializable_conflict(DELETE, APPEND, 2, None) is not None  # never a guess
    empty = Transaction(1, Append([_frag(0)]))
    assert serializable_conflict(DELETE, empty, 2, _always) is None  # added no rows
    every = Transaction(1, Update(), properties={READ_PREDICATE: " "})
    assert serializable_conflict(every, APPEND, 2, _never) is not None
    unknown = Transaction(1, Update())
    assert serializable_conflict(unknown, APPEND, 2, _never) is not None
    # blind appends and other writers are never refused for a read they did not make
    assert serializable_conflict(APPEND, APPEND, 2, _always) is None
    rewrite = Transaction(1, Rewrite([RewriteGroup([_frag(10, 1)], [_frag(10)])]))
    assert serializable_conflict(DELETE, rewrite, 2, _always) is None
    moved = Transaction(1, Update(new_fragments=[_frag(3)]))
    assert serializable_conflict(DELETE, moved, 2, _always) is not None


def _plan(mine: Transaction, options: ConflictOptions) -> object:
    return plan_retry(
        mine,
        [Winner(2, transaction_to_proto(APPEND))],
        latest_version=2,
        latest_fragments=(),
        initial_fragments=lambda fid: None,
        read_dv=lambda fid, pb: pytest.fail("no deletion vector is needed"),
        options=options,
    )


def test_the_planner_refuses_a_matching_append_only_when_serializable() -> None:
    snapshot = _plan(DELETE, ConflictOptions())
    assert not isinstance(snapshot, Conflict)
    ok = _plan(DELETE, ConflictOptions(isolation="serializable", row_matcher=_never))
    assert not isinstance(ok, Conflict)
    refused = _plan(DELETE, ConflictOptions(isolation="serializable", row_matcher=_always))
    assert isinstance(refused, Conflict)
    assert refused.rule == "SER"
    assert refused.retryable
    assert not isinstance(_plan(APPEND, ConflictOptions(isolation="serializable")), Conflict)


def test_isolation_levels_are_checked_and_given_a_matcher() -> None:
    with pytest.raises(InvalidOperationError, match="isolation"):
        ConflictOptions(isolation="repeatable-read")
    plain = options_for(None, None, "x")
    assert plain.isolation == "snapshot"
    assert plain.row_matcher is not None  # asked only if the table asks for serializable
    opts = options_for(None, "serializable", "/t")
    assert opts is not None
    assert opts.row_matcher is not None
    mine = options_for(ConflictOptions(row_matcher=_never), "serializable", "/t")
    assert mine is not None
    assert mine.row_matcher is _never


def test_the_table_config_is_a_floor_never_a_ceiling() -> None:
    assert table_isolation({}) == "snapshot"
    assert table_isolation({ISOLATION_CONFIG: "snapshot"}) == "snapshot"
    assert table_isolation({ISOLATION_CONFIG: "serializable"}) == "serializable"
    # a level this version does not know is taken as the strongest it knows
    assert table_isolation({ISOLATION_CONFIG: "strict-serializable"}) == "serializable"
    snapshot, serial = ConflictOptions(), ConflictOptions(isolation="serializable")
    table = {ISOLATION_CONFIG: "serializable"}
    assert at_table_level(snapshot, table).isolation == "serializable"
    assert at_table_level(snapshot, {}) is snapshot
    assert at_table_level(serial, {ISOLATION_CONFIG: "snapshot"}) is serial  # never weaker
    kept = at_table_level(ConflictOptions(row_matcher=_never), table)
    assert kept.row_matcher is _never


def test_an_upserts_keys_are_checked_against_the_rows_an_append_added() -> None:
    from txn_engine.conflicts.upsert import added_keys_collide, bloom_filter

    upsert = Transaction(
        1,
        Update(
            new_fragments=[_frag(2, 7)],
            inserted_rows=bloom_filter([0], [11, 12]),
            inserted_key_hashes=frozenset({11, 12}),
        ),
    )
    seen: list[tuple[int, tuple[int, ...]]] = []

    def reader(hashes: frozenset[int] | None):  # type: ignore[no-untyped-def]
        def read(version: int, frags: Sequence[Fragment], ids: Sequence[int]):  # type: ignore[no-untyped-def]
            seen.append((version, tuple(ids)))
            return hashes

        return read

    assert not added_keys_collide(upsert, APPEND, 2, reader(frozenset({1, 2})))
    assert seen == [(2, (0,))]
    assert added_keys_collide(upsert, APPEND, 2, reader(frozenset({2, 12})))
    assert added_keys_collide(upsert, APPEND, 2, reader(None))  # unreadable: a conflict
    plain = Transaction(1, Update(new_fragments=[_frag(2, 7)]))
    assert added_keys_collide(plain, APPEND, 2, reader(frozenset()))  # records no keys
    filtered = Transaction(1, Update(inserted_rows=bloom_filter([0], [5])))
    assert added_keys_collide(upsert, filtered, 2, reader(frozenset()))  # the filter rule's
