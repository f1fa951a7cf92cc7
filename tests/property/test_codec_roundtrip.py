"""Codec round-trips for every operation kind: attrs -> pb -> attrs is the identity, and
pb -> attrs -> pb reproduces the bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txn_engine import Transaction, operation_kind, transaction_from_proto, transaction_to_proto
from txn_engine._proto import transaction_pb2
from txn_engine.ops import OPERATION_KINDS
from txn_engine.testing.strategies import OPERATION_STRATEGIES, transactions


def test_every_operation_kind_has_a_strategy() -> None:
    assert set(OPERATION_STRATEGIES) == set(OPERATION_KINDS)


@pytest.mark.parametrize("kind", sorted(OPERATION_STRATEGIES))
@given(data=st.data())
def test_roundtrip(kind: str, data: st.DataObject) -> None:
    txn = data.draw(transactions(OPERATION_STRATEGIES[kind]))
    assert operation_kind(txn.operation) == kind
    pb = transaction_to_proto(txn)
    wire = pb.SerializeToString(deterministic=True)
    parsed = transaction_pb2.Transaction()
    parsed.ParseFromString(wire)
    back = transaction_from_proto(parsed)
    assert back == txn
    assert hash(back) == hash(txn)
    assert transaction_to_proto(back).SerializeToString(deterministic=True) == wire


@given(transactions())
def test_transactions_are_hashable_values(txn: Transaction) -> None:
    again = transaction_from_proto(transaction_to_proto(txn))
    assert {txn, again} == {txn}
