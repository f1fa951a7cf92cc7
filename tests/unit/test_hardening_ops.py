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
from txn_engine.ops import CreateIndex, Overwrite, Rewrite, RewriteGroup, RewrittenIndex
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
