"""Schema metadata (schema-level and field-level) through every conversion and writer call,
with pylance 14.0.2 as the oracle: the same call made with pylance and with txn_engine, on
two copies of one table, reads back (``lance.dataset(uri).schema``) with the same metadata.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te

pytestmark = pytest.mark.pylance

LO = lance.LanceOperation
META = {b"owner": b"me", b"pandas": b'{"index_columns": []}'}
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), metadata={b"unit": b"cm"}), pa.field("v", pa.string())],
    metadata=META,
)
TABLE = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)
PLAIN = pa.table({"id": [9], "v": ["x"]})  # no metadata at all
Call = Callable[[str], Any]


def metadata(uri: str) -> tuple[dict[bytes, bytes], dict[str, dict[bytes, bytes]]]:
    """The latest version's schema metadata and field metadata, as pylance reads them."""
    schema = lance.dataset(uri).schema
    return dict(schema.metadata or {}), {f.name: dict(f.metadata or {}) for f in schema}


def _udf(batch: pa.RecordBatch) -> pa.RecordBatch:
    field = pa.field("w", pa.int64(), metadata={b"k": b"v"})
    return pa.record_batch([pa.array([1] * len(batch))], schema=pa.schema([field]))


def _merge_columns(uri: str, schema_metadata: dict[bytes, bytes] | None) -> Any:
    """pylance's Merge adding column ``w`` (as ``merge_columns`` plans it); its schema a
    ``pyarrow.Schema`` with ``schema_metadata`` (None: the ``LanceSchema`` as returned)."""
    ds = lance.dataset(uri)
    frags, schema = [], None
    for frag in ds.get_fragments():
        meta, schema = frag.merge_columns(_udf, columns=["id"])
        frags.append(meta)
    assert schema is not None
    if schema_metadata is not None:
        schema = schema.to_pyarrow().with_metadata(schema_metadata)
    return LO.Merge(frags, schema)


def _overwrite(uri: str, schema: Any) -> Any:
    return LO.Overwrite(schema(uri) if callable(schema) else schema, lf.write_fragments(TABLE, uri))


# name: (what pylance does, what txn_engine does)
WRITER_CALLS: dict[str, tuple[Call, Call]] = {
    "overwrite": (
        lambda u: lance.write_dataset(
            TABLE.replace_schema_metadata({"new": "1"}), u, mode="overwrite"
        ),
        lambda u: te.open(u).overwrite(TABLE.replace_schema_metadata({"new": "1"})),
    ),
    "overwrite without metadata": (
        lambda u: lance.write_dataset(PLAIN, u, mode="overwrite"),
        lambda u: te.open(u).overwrite(PLAIN),
    ),
    "append": (
        lambda u: lance.write_dataset(PLAIN.replace_schema_metadata({"o": "1"}), u, mode="append"),
        lambda u: te.open(u).append(PLAIN.replace_schema_metadata({"o": "1"})),
    ),
    "add_columns (SQL)": (
        lambda u: lance.dataset(u).add_columns({"w": "id * 2"}),
        lambda u: te.open(u).add_columns({"w": "id * 2"}),
    ),
    "add_columns (a function; the new field has metadata)": (
        lambda u: lance.dataset(u).add_columns(_udf, read_columns=["id"]),
        lambda u: te.open(u).add_columns(_udf, read_columns=["id"]),
    ),
    "drop_columns": (
        lambda u: lance.dataset(u).drop_columns(["v"]),
        lambda u: te.open(u).drop_columns(["v"]),
    ),
    "update": (
        lambda u: lance.dataset(u).update({"v": "'z'"}, where="id = 1"),
        lambda u: te.open(u).update({"v": "'z'"}, where="id = 1"),
    ),
    "merge_insert (the source has metadata of its own)": (
        lambda u: (
            lance.dataset(u)
            .merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(pa.table({"id": [3, 4], "v": ["q", "r"]}).replace_schema_metadata({"s": "1"}))
        ),
        lambda u: te.open(u).merge_insert(
            pa.table({"id": [3, 4], "v": ["q", "r"]}).replace_schema_metadata({"s": "1"}), on="id"
        ),
    ),
    "update_config schema_metadata": (
        lambda u: lance.dataset(u).update_schema_metadata({"owner": "you", "pandas": None}),
        lambda u: te.open(u).update_config(schema_metadata={"owner": "you", "pandas": None}),
    ),
    "replace the schema metadata": (
        lambda u: lance.dataset(u).replace_schema_metadata({"only": "1"}),
        lambda u: te.commit(
            u,
            te.Transaction(
                1,
                te.UpdateConfig(schema_metadata_updates=te.UpdateMap({"only": "1"}, replace=True)),
            ),
        ),
    ),
    "field metadata update": (
        lambda u: lance.dataset(u).update_field_metadata({"v": {"k": "x"}}),
        lambda u: te.commit(
            u,
            te.Transaction(
                1, te.UpdateConfig(field_metadata_updates={1: te.UpdateMap({"k": "x"})})
            ),
        ),
    ),
    "compact": (
        lambda u: lance.dataset(u).optimize.compact_files(),
        lambda u: te.open(u).compact(),
    ),
    # the pylance operations, committed by pylance / converted and committed by txn_engine
    "LanceOperation.Overwrite, a pyarrow.Schema": (
        lambda u: lance.LanceDataset.commit(
            u, _overwrite(u, SCHEMA.with_metadata({"n": "1"})), read_version=1
        ),
        lambda u: te.commit(
            u, lance.Transaction(1, _overwrite(u, SCHEMA.with_metadata({"n": "1"})))
        ),
    ),
    "LanceOperation.Overwrite, the table's LanceSchema": (
        lambda u: lance.LanceDataset.commit(
            u, _overwrite(u, lambda x: lance.dataset(x).lance_schema), read_version=1
        ),
        lambda u: te.commit(
            u, lance.Transaction(1, _overwrite(u, lambda x: lance.dataset(x).lance_schema))
        ),
    ),
    "LanceOperation.Merge, the LanceSchema merge_columns returns": (
        lambda u: lance.LanceDataset.commit(u, _merge_columns(u, None), read_version=1),
        lambda u: te.commit(u, lance.Transaction(1, _merge_columns(u, None))),
    ),
    "LanceOperation.Merge, a pyarrow.Schema with other metadata": (
        lambda u: lance.LanceDataset.commit(u, _merge_columns(u, {b"m": b"2"}), read_version=1),
        lambda u: te.commit(u, lance.Transaction(1, _merge_columns(u, {b"m": b"2"}))),
    ),
    "LanceOperation.Merge, a pyarrow.Schema without metadata (clears it)": (
        lambda u: lance.LanceDataset.commit(u, _merge_columns(u, {}), read_version=1),
        lambda u: te.commit(u, lance.Transaction(1, _merge_columns(u, {}))),
    ),
    "LanceOperation.Project, the table's LanceSchema": (
        lambda u: lance.LanceDataset.commit(
            u, LO.Project(lance.dataset(u).lance_schema), read_version=1
        ),
        lambda u: te.commit(u, lance.Transaction(1, LO.Project(lance.dataset(u).lance_schema))),
    ),
}


@pytest.mark.parametrize("name", list(WRITER_CALLS))
def test_a_call_keeps_the_metadata_pylance_keeps(tmp_path: Path, name: str) -> None:
    theirs_call, ours_call = WRITER_CALLS[name]
    theirs, ours = str(tmp_path / "pylance.lance"), str(tmp_path / "txn_engine.lance")
    lance.write_dataset(TABLE, theirs, max_rows_per_file=2)
    shutil.copytree(theirs, ours)
    theirs_call(theirs)
    ours_call(ours)
    assert lance.dataset(ours).version > 1  # the call committed
    assert metadata(ours) == metadata(theirs)


@pytest.mark.parametrize(
    "create",
    [
        lambda u: te.open(u).append(TABLE),
        lambda u: te.open(u).overwrite(TABLE),
        lambda u: te.commit(
            u, lance.Transaction(0, LO.Overwrite(SCHEMA, lf.write_fragments(TABLE, u)))
        ),
    ],
    ids=["append", "overwrite", "LanceOperation.Overwrite"],
)
def test_a_table_created_keeps_the_metadata_write_dataset_keeps(
    tmp_path: Path, create: Call
) -> None:
    theirs, ours = str(tmp_path / "pylance.lance"), str(tmp_path / "txn_engine.lance")
    lance.write_dataset(TABLE, theirs)
    create(ours)
    assert metadata(ours) == metadata(theirs) == (META, {"id": {b"unit": b"cm"}, "v": {}})
