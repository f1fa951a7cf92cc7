"""Rule U1: concurrent upserts of the same new key conflict (txn_engine.conflicts.upsert)."""

from __future__ import annotations

import random

import attrs
import pytest

from txn_engine import Append, Fragment, Transaction, Update
from txn_engine.codec import transaction_from_proto, transaction_to_proto
from txn_engine.conflicts.detect import check
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.conflicts.upsert import bloom_filter, key_hash, may_contain, upsert_conflict
from txn_engine.model import DataFile


def _frag(rows: int = 1) -> Fragment:
    return Fragment(id=0, files=(DataFile("new.lance", (0,)),), physical_rows=rows)


def _upsert(keys: list[int], field_ids: tuple[int, ...] = (0,)) -> Update:
    hashes = frozenset(key_hash((k,)) for k in keys)
    return Update(
        new_fragments=(_frag(len(keys)),),
        inserted_rows=bloom_filter(field_ids, hashes),
        inserted_key_hashes=hashes,
    )


def test_every_recorded_key_is_found_and_few_others_are() -> None:
    rng = random.Random(7)
    keys = [key_hash((rng.getrandbits(62),)) for _ in range(2000)]
    record = bloom_filter([0], keys)
    assert all(may_contain(record, h) for h in keys)
    others = [key_hash(("other", i)) for i in range(20000)]
    false_positives = sum(may_contain(record, h) for h in others)
    assert false_positives < 20000 * 0.005  # configured for 0.1 %


def test_key_hash_distinguishes_types_and_tuples() -> None:
    assert key_hash((1,)) != key_hash(("1",))
    assert key_hash((1, 2)) != key_hash((12,))
    assert key_hash(("a", "bc")) != key_hash(("ab", "c"))
    assert key_hash((None,)) != key_hash(("",))
    assert key_hash((1.0,)) != key_hash((1,))


def test_empty_filter_holds_nothing() -> None:
    assert not may_contain(bloom_filter([0], []), key_hash((1,)))


def test_same_new_key_conflicts() -> None:
    assert upsert_conflict(_upsert([1, 2]), _upsert([2, 3])) is not None
    assert upsert_conflict(_upsert([1, 2]), _upsert([3, 4])) is None


def test_other_key_columns_conflict_conservatively() -> None:
    assert upsert_conflict(_upsert([1]), _upsert([9], field_ids=(1,))) is not None


def test_rows_added_without_a_record_conflict() -> None:
    mine = _upsert([1])
    assert upsert_conflict(mine, Append((_frag(),))) is not None
    assert upsert_conflict(mine, Update(new_fragments=(_frag(),))) is not None
    assert upsert_conflict(mine, Update(removed_fragment_ids=(3,))) is None


def test_only_an_upsert_that_inserts_is_checked() -> None:
    plain = Update(new_fragments=(_frag(),))
    assert upsert_conflict(plain, Append((_frag(),))) is None
    nothing = _upsert([])
    assert upsert_conflict(nothing, Append((_frag(),))) is None
    # decoded from storage: the exact hashes are not on the wire, so Lance's rules apply
    decoded = transaction_from_proto(transaction_to_proto(Transaction(1, _upsert([1]))))
    assert decoded.operation.inserted_rows is not None  # type: ignore[union-attr]
    assert upsert_conflict(decoded.operation, _upsert([1])) is None


def test_detection_reports_rule_u1_as_retryable() -> None:
    mine = Transaction(3, _upsert([5]))
    for other in (Transaction(3, _upsert([5])), Transaction(3, Append((_frag(),)))):
        conflicts = check(mine, other, other_version=4).conflicts
        assert len(conflicts) == 1
        assert conflicts[0].rule == "U1"
        assert conflicts[0].outcome is Outcome.RETRYABLE
    assert check(mine, Transaction(3, _upsert([6])), other_version=4).compatible
    plain = Transaction(3, Update(new_fragments=(_frag(),)))
    assert check(plain, Transaction(3, Append((_frag(),))), other_version=4).compatible


def test_matrix_cell_update_after_append_is_u1() -> None:
    assert MATRIX[("Update", "Append")].code == "U1"
    assert MATRIX[("Update", "Append")].source == "txn_engine"


@pytest.mark.parametrize("keys", [[1], list(range(100))])
def test_recorded_filter_round_trips_through_the_codec(keys: list[int]) -> None:
    op = _upsert(keys)
    back = transaction_from_proto(transaction_to_proto(Transaction(1, op))).operation
    assert back.inserted_rows is not None  # type: ignore[union-attr]
    assert all(may_contain(back.inserted_rows, key_hash((k,))) for k in keys)  # type: ignore[union-attr,arg-type]
    assert attrs.evolve(op, inserted_key_hashes=None) == back
