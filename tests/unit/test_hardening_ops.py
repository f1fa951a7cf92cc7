"""Operations a caller builds are input too: a field that cannot be written is an
InvalidOperationError before anything is written, never an escaped ValueError."""

from __future__ import annotations

import attrs
import pytest

from txn_engine.codec import transaction_to_proto
from txn_engine.commit import commit
from txn_engine.errors import InvalidOperationError
from txn_engine.format.naming import list_versions
from txn_engine.model import DataFile, Fragment, IndexMetadata, LanceField
from txn_engine.ops import Append, CreateIndex, Overwrite, Rewrite, RewriteGroup, RewrittenIndex
from txn_engine.retry import RetryPolicy
from txn_engine.storage import MemoryStorage
from txn_engine.transaction import Transaction


def _seeded_table() -> tuple[MemoryStorage, int, Fragment]:
    store = MemoryStorage()
    frag = Fragment(0, (DataFile("a.lance", (0,), (0,), 2, 2, 10),), 10)
    commit(store, Transaction(0, Overwrite([frag], (LanceField(0, -1, "id", "int64"),))))
    return store, 1, frag


@pytest.mark.parametrize("bad", ["", "not-a-uuid", "zz"])
def test_a_uuid_that_is_not_one_is_an_invalid_operation(bad: str) -> None:
    """A Rewrite's rewritten index or a CreateIndex's index named by a string that is no
    uuid let uuid.UUID's ValueError escape commit (and transaction encoding)."""
    store, version, frag = _seeded_table()
    new = attrs.evolve(frag, files=(attrs.evolve(frag.files[0], path="b.lance"),))
    ops = [
        Rewrite([RewriteGroup([frag], [new])], rewritten_indices=[RewrittenIndex(bad, bad)]),
        CreateIndex(new_indices=[IndexMetadata(bad, "idx", (0,), version, frozenset({0}))]),
    ]
    for op in ops:
        txn = Transaction(version, op)
        with pytest.raises(InvalidOperationError, match="is not a uuid"):
            transaction_to_proto(txn)
        with pytest.raises(InvalidOperationError, match="is not a uuid"):
            commit(store, txn, retry_policy=RetryPolicy(max_attempts=1))
    assert [e.version for e in list_versions(store)] == [1]  # nothing was written


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"id": 2**64}, "fragment id past a u64"),
        ({"physical_rows": 2**70}, "row count past a u64"),
    ],
)
def test_a_fragment_value_past_its_field_is_an_invalid_operation(
    change: dict[str, int], field: str
) -> None:
    """protobuf's 'Value out of range' ValueError escaped commit for these."""
    store, version, frag = _seeded_table()
    new = attrs.evolve(frag, files=(attrs.evolve(frag.files[0], path="b.lance"),), **change)
    txn = Transaction(version, Append([new]))
    with pytest.raises(InvalidOperationError, match="does not fit its Lance field"):
        transaction_to_proto(txn)
    with pytest.raises(InvalidOperationError, match="does not fit its Lance field"):
        commit(store, txn, retry_policy=RetryPolicy(max_attempts=1))
    assert [e.version for e in list_versions(store)] == [1], field


def test_a_negative_file_size_is_an_invalid_operation() -> None:
    store, version, frag = _seeded_table()
    bad = attrs.evolve(frag.files[0], path="b.lance", file_size_bytes=-5)
    with pytest.raises(InvalidOperationError, match="does not fit its Lance field"):
        commit(store, Transaction(version, Append([attrs.evolve(frag, files=(bad,))])))


@pytest.mark.parametrize(
    "path", ["", "../x.lance", "/abs.lance", "a//b.lance", "./a.lance", "a\x00b"]
)
def test_a_data_file_path_no_reader_can_open_is_refused(path: str) -> None:
    """pylance 14.0.2 commits these (measured: '../x.lance', '', '/abs.lance') and every
    scan of the table then fails; txn_engine refuses them and writes nothing."""
    store, version, frag = _seeded_table()
    bad = attrs.evolve(frag, files=(attrs.evolve(frag.files[0], path=path),))
    with pytest.raises(InvalidOperationError, match="cannot be read back"):
        commit(store, Transaction(version, Append([bad])), retry_policy=RetryPolicy(max_attempts=1))
    assert [e.version for e in list_versions(store)] == [1]
