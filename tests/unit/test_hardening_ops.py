"""Operations a caller builds are input too: a field that cannot be written is an
InvalidOperationError before anything is written, never an escaped ValueError."""

from __future__ import annotations

import attrs
import pytest

from txn_engine.codec import transaction_to_proto
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import InvalidOperationError, VersionNotFoundError
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


@pytest.mark.parametrize("ts", [-1, -(2**63), 2**63, 2**64, 2**70, 1.5, True, "1"])
def test_a_commit_time_lance_cannot_read_is_refused(ts: object) -> None:
    """pylance 14 reads a manifest time as i64 nanoseconds since 1970 and shows one outside
    (2**63 and up, or negative) as 1970-01-01 (measured); txn_engine wrote any of them."""
    store, version, frag = _seeded_table()
    with pytest.raises(InvalidOperationError, match="timestamp_ns must be an integer"):
        commit(store, Transaction(version, Append([frag])), timestamp_ns=ts)  # type: ignore[arg-type]
    assert [v.version for v in list_versions(store)] == [1]  # nothing written


def test_the_last_commit_time_lance_can_read_is_taken() -> None:
    store, version, frag = _seeded_table()
    result = commit(store, Transaction(version, Append([frag])), timestamp_ns=2**63 - 1)
    (info,) = [v for v in Dataset.open(store).versions() if v.version == result.version]
    assert info.timestamp is not None
    assert info.timestamp.year == 2262


@pytest.mark.parametrize("read", [-1, 2**63, 2**64, 1.5, True, "1", None])
def test_a_read_version_that_is_no_version_number_is_refused(read: object) -> None:
    """1.5 failed formatting a manifest name (ValueError), "1" and None comparing
    (TypeError), -1 went on to the history check."""
    store, _, frag = _seeded_table()
    with pytest.raises(InvalidOperationError, match="read_version is a version number"):
        commit(store, Transaction(read, Append([frag])))  # type: ignore[arg-type]
    assert [v.version for v in list_versions(store)] == [1]


@pytest.mark.parametrize("version", [-1, 2**63, 2**64, -(2**70)])
def test_opening_a_version_no_table_can_have_is_version_not_found(version: int) -> None:
    # manifest_name's ValueError ("outside the main-line range") escaped Dataset.open
    store, _, _ = _seeded_table()
    with pytest.raises(VersionNotFoundError):
        Dataset.open(store, version=version)
    with pytest.raises(VersionNotFoundError):
        Dataset.open(store).checkout(version)


@pytest.mark.parametrize("version", [1.5, True, b"1"])
def test_opening_a_version_that_is_no_number_is_an_invalid_operation(version: object) -> None:
    store, _, _ = _seeded_table()
    with pytest.raises(InvalidOperationError, match="a version is a whole number"):
        Dataset.open(store, version=version)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"deadline": -1.0}, {"deadline": float("nan")}, {"max_slots": 0}],
)
def test_a_retry_policy_out_of_range_is_an_invalid_operation(kwargs: dict[str, float]) -> None:
    # still a ValueError for callers that catch that; NaN deadline was taken
    with pytest.raises(InvalidOperationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_data_file_listing_a_field_twice_is_refused() -> None:
    """pylance 14 commits it, then every scan fails ("The projection specified ...")."""
    store, version, _ = _seeded_table()
    twice = Fragment(0, (DataFile("c.lance", (0, 0), (0, 1), 2, 2, 10),), 10)
    with pytest.raises(InvalidOperationError, match="lists a field id twice"):
        commit(store, Transaction(version, Append([twice])))
    tombstones = Fragment(0, (DataFile("d.lance", (0, -2, -2), (0, -1, -1), 2, 2, 10),), 10)
    assert commit(store, Transaction(version, Append([tombstones]))).version == 2
    assert [v.version for v in list_versions(store)] == [1, 2]
