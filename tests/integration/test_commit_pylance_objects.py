"""txn_engine.commit takes pylance's own objects: the Transaction pylance plans
(``*_uncommitted``, ``read_transaction``) and a ``LanceDataset`` as ``base=``; anything else
is refused with a typed error that says what was expected."""

from __future__ import annotations

from pathlib import Path

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.errors import IncompatibleTransactionError, InvalidOperationError

pytestmark = pytest.mark.pylance


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table()["id"].to_pylist())


def test_commit_takes_a_pylance_transaction_and_a_lance_dataset_base(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), uri)
    planned = lf.write_fragments(
        pa.table({"id": pa.array([4], pa.int64())}), uri, return_transaction=True
    )
    base = lance.dataset(uri)
    result = te.commit(uri, planned, base=base)  # pylance's Transaction, pylance's dataset
    assert result.version == 2
    assert isinstance(result.transaction, te.Transaction)
    assert result.transaction.kind == "Append"
    assert _ids(uri) == [1, 2, 3, 4]
    again = te.commit(uri, planned)  # the same pylance transaction: found, not landed twice
    assert (again.version, again.already_committed) == (2, True)
    # a transaction pylance recorded, committed again by txn_engine on a copy
    recorded = lance.dataset(uri).read_transaction(2)
    assert te.commit(uri, recorded).already_committed


def test_a_pylance_transaction_keeps_its_read_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri)
    planned = lf.write_fragments(
        pa.table({"id": pa.array([2], pa.int64())}), uri, return_transaction=True
    )
    lance.write_dataset(pa.table({"id": pa.array([9], pa.int64())}), uri, mode="overwrite")
    with pytest.raises(IncompatibleTransactionError):
        te.commit(uri, planned)  # planned at 1, an Overwrite landed at 2: the lost update
    assert _ids(uri) == [9]


def test_other_objects_are_refused_when_committed(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri)
    with pytest.raises(InvalidOperationError, match="Transaction"):
        te.commit(uri, {"read_version": 1})
    txn = te.Transaction(1, te.Append(fragments=()))
    with pytest.raises(InvalidOperationError, match="LanceDataset"):
        te.commit(uri, txn, base="not a dataset")
