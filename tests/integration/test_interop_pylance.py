"""pylance 14.0.2 objects are converted where they enter (txn_engine.commit, the writer
API, txn_engine.interop); the library's values hold only its own types and refuse a
pylance object with a typed error naming the conversion; anything else is refused right
there with a typed error too."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

import txn_engine as te
from txn_engine import interop, writers
from txn_engine.dataset import as_base
from txn_engine.errors import InvalidOperationError


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), path, max_rows_per_file=5)
    return path


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table().column("id").to_pylist())


def test_lance_operation_append_in_a_transaction(uri: str) -> None:
    frags = write_fragments(_rows(10, 2), uri)
    planned = lance.Transaction(1, lance.LanceOperation.Append(frags))
    txn = interop.as_transaction(planned)
    assert isinstance(txn.operation, te.Append)
    assert all(isinstance(f, te.Fragment) for f in txn.operation.fragments)
    assert te.commit(uri, planned).version == 2  # commit converts pylance's transaction
    assert _ids(uri) == list(range(12))


def test_fragment_metadata_in_an_operation(uri: str) -> None:
    frags = write_fragments(_rows(10, 1), uri)
    op = te.Append(fragments=interop.as_fragments(frags))
    assert op.fragments == tuple(te.Fragment.from_lance_json(f.to_json()) for f in frags)


def test_pylance_merge_insert_transaction_commits(uri: str) -> None:
    ds = lance.dataset(uri)
    planned, _ = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute_uncommitted(_rows(8, 4))
    )
    txn = interop.as_transaction(planned)
    assert txn.kind == "Update"
    assert (txn.read_version, txn.uuid) == (1, planned.uuid)
    te.commit(uri, txn)
    assert _ids(uri) == list(range(12))
    # and the transaction pylance reads back from our commit is the same operation
    back = interop.as_transaction(lance.dataset(uri).read_transaction(2))
    assert back.operation == txn.operation


def test_read_transaction_of_every_kind_converts(uri: str) -> None:
    ds = lance.dataset(uri)
    ds.delete("id < 3")
    lance.dataset(uri).add_columns({"y": "id * 2"})
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).update({"y": "0"}, where="id = 5")
    lance.dataset(uri).drop_columns(["y"])
    lance.dataset(uri).update_config({"k": "v"})
    lance.dataset(uri, version=2).restore()
    ours = te.Dataset.open(uri)
    for version in range(1, ours.version + 1):
        from_pylance = interop.as_transaction(lance.dataset(uri).read_transaction(version))
        mine = ours.transaction(version)
        assert from_pylance.kind == mine.kind
        assert from_pylance.read_version == mine.read_version
        assert from_pylance.uuid == mine.uuid


def test_merge_columns_schema_for_add_columns(uri: str) -> None:
    ds = lance.dataset(uri)
    frags, schema = [], None
    for frag in ds.get_fragments():
        meta, schema = frag.merge_columns({"y": "id + 100"}, columns=["id"])
        frags.append(meta)
    writers.add_columns(uri, frags, schema, read_version=ds.version)
    table = lance.dataset(uri).to_table()
    assert table.column("y").to_pylist() == [i + 100 for i in table.column("id").to_pylist()]
    fields = interop.as_fields(schema)
    assert [(f.name, f.id, f.parent_id) for f in fields] == [("id", 0, -1), ("y", 1, -1)]


def test_pylance_index_in_create_index(uri: str) -> None:
    ds = lance.dataset(uri)
    index = ds.create_index_uncommitted(
        "id", "BTREE", name="idx", fragment_ids=[f.fragment_id for f in ds.get_fragments()]
    )
    op = te.CreateIndex(new_indices=interop.as_indices([index]))
    assert isinstance(op.new_indices[0], te.IndexMetadata)
    assert op.new_indices[0].fragment_bitmap == frozenset({0, 1})
    te.commit(uri, te.Transaction(ds.version, op))
    assert [i["name"] for i in lance.dataset(uri).list_indices()] == ["idx"]
    assert "idx" in lance.dataset(uri).scanner(filter="id = 3").explain_plan()


def test_lance_dataset_as_base(uri: str) -> None:
    ds = lance.dataset(uri)
    base = as_base(ds)
    assert isinstance(base, te.Dataset)
    assert base.version == ds.version
    frags = write_fragments(_rows(10, 1), uri)
    te.commit(uri, te.Transaction(ds.version, te.Append(interop.as_fragments(frags))), base=base)
    assert _ids(uri) == list(range(11))


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: te.Append(fragments=[1, 2]), "a txn_engine.Fragment"),
        (lambda: te.Append(fragments=None), "a sequence of fragments"),
        (lambda: te.Transaction(1, "Append"), "txn_engine operation"),
        (lambda: te.Transaction(1, object()), "txn_engine operation"),
        (lambda: interop.as_operation(object()), "lance.LanceOperation"),
        (lambda: te.CreateIndex(new_indices=["idx"]), "a txn_engine.IndexMetadata"),
        (lambda: interop.as_indices(["idx"]), "pylance Index"),
        (lambda: interop.as_fragments([1, 2]), "txn_engine.Fragment or a pylance FragmentMetadata"),
        (lambda: te.Project(schema=[{"name": "id"}]), "LanceField"),
        (lambda: interop.as_transaction(lance.LanceOperation.Restore(1)), "pylance Transaction"),
        (lambda: as_base("/tmp/x"), "LanceDataset"),
    ],
)
def test_anything_else_is_refused_when_built(build: object, expected: str) -> None:
    with pytest.raises(InvalidOperationError, match="expected") as info:
        build()  # type: ignore[operator]
    assert expected in str(info.value)


def test_a_single_fragment_metadata_is_not_a_list(uri: str) -> None:
    (frag,) = write_fragments(_rows(10, 1), uri)
    with pytest.raises(InvalidOperationError, match="sequence of fragments"):
        te.Append(fragments=frag)


def _refused(build: object, *expected: str) -> None:
    with pytest.raises(InvalidOperationError, match="expected") as info:
        build()  # type: ignore[operator]
    for text in expected:
        assert text in str(info.value)


def test_pylance_objects_in_the_librarys_values_are_refused_naming_the_conversion(
    uri: str,
) -> None:
    """Values hold only the library's types: each pylance object is refused with the
    txn_engine.interop call that converts it, or committing pylance's own transaction."""
    ds = lance.dataset(uri)
    frags = write_fragments(_rows(10, 1), uri)
    index = ds.create_index_uncommitted(
        "id", "BTREE", name="idx", fragment_ids=[f.fragment_id for f in ds.get_fragments()]
    )
    commit_instead = "or pass pylance's own operation/transaction to txn_engine.commit"
    _refused(
        lambda: te.Append(frags),
        "a pylance FragmentMetadata",
        "txn_engine.interop.as_fragments",
        commit_instead,
    )
    _refused(
        lambda: te.Transaction(1, lance.LanceOperation.Append(frags)),
        "a pylance Append",
        "txn_engine.interop.as_operation",
        commit_instead,
    )
    _refused(lambda: te.CreateIndex(new_indices=[index]), "a pylance Index", "interop.as_indices")
    _refused(lambda: te.Project(ds.lance_schema), "a pylance LanceSchema", "interop.as_fields")
    _refused(
        lambda: te.Overwrite([], ds.lance_schema), "a pylance LanceSchema", "interop.as_fields"
    )
    new_file = frags[0].data_files()[0]
    _refused(
        lambda: te.DataReplacementGroup(0, new_file), "a pylance DataFile", "interop.as_data_file"
    )
    _refused(
        lambda: te.Merge(frags, interop.as_fields(ds.lance_schema)),
        "a pylance FragmentMetadata",
    )


def test_the_committer_converts_a_pylance_transaction(uri: str) -> None:
    frags = write_fragments(_rows(10, 2), uri)
    with te.Committer(uri) as committer:
        result = committer.commit(lance.Transaction(1, lance.LanceOperation.Append(frags)))
    assert result.version == 2
    assert _ids(uri) == list(range(12))
