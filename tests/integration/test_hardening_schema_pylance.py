"""Deep schemas written by pylance 14.0.2: what pylance reads, txn_engine reads too."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine.dataset import Dataset
from txn_engine.errors import LimitExceededError
from txn_engine.format.schema import MAX_SCHEMA_DEPTH, arrow_to_fields


def _write_deep(path: Path, levels: int) -> pa.Schema:
    dtype = pa.int32()
    for _ in range(levels - 1):
        dtype = pa.struct([pa.field("a", dtype)])
    table = pa.table({"c": pa.nulls(3, dtype), "x": pa.array([1, 2, 3], pa.int64())})
    lance.write_dataset(table, str(path))
    return table.schema


def test_the_deepest_schema_pylance_shows_reads_the_same(tmp_path: Path) -> None:
    # 63 levels is the most pyarrow imports from pylance (64 fails in lance's .schema)
    _write_deep(tmp_path / "t", 63)
    theirs = lance.dataset(str(tmp_path / "t")).schema
    assert Dataset.open(str(tmp_path / "t")).schema.equals(theirs, check_metadata=True)


def test_deeper_than_pylance_shows_is_still_ours_up_to_the_limit(tmp_path: Path) -> None:
    written = _write_deep(tmp_path / "t", MAX_SCHEMA_DEPTH)
    with pytest.raises(pa.ArrowInvalid):  # pylance's Python API cannot hand it over
        _ = lance.dataset(str(tmp_path / "t")).schema
    ds = Dataset.open(str(tmp_path / "t"))
    ours = ds.schema
    assert ours.field("c").type.equals(written.field("c").type)
    assert arrow_to_fields(ours) == list(ds.manifest_pb.fields)
    assert ds.count_rows() == 3


def test_beyond_the_limit_only_the_arrow_schema_is_refused(tmp_path: Path) -> None:
    _write_deep(tmp_path / "t", MAX_SCHEMA_DEPTH + 1)
    theirs = lance.dataset(str(tmp_path / "t"))
    ds = Dataset.open(str(tmp_path / "t"))
    assert ds.count_rows() == theirs.count_rows() == 3
    assert [v.version for v in ds.versions()] == [v["version"] for v in theirs.versions()]
    with pytest.raises(LimitExceededError) as exc:
        _ = ds.schema
    assert exc.value.limit == "schema depth"


def test_the_deepest_allowed_schema_goes_through_pyspark(tmp_path: Path) -> None:
    """The Spark planner turns Dataset.schema into a StructType: at the limit, pyspark's
    own (recursive) schema code still works; one level deeper is a typed error first."""
    from txn_engine.spark._read import arrow_to_spark_schema, spark_arrow_schema

    _write_deep(tmp_path / "t", MAX_SCHEMA_DEPTH)
    spark_schema = arrow_to_spark_schema(Dataset.open(str(tmp_path / "t")).schema)
    assert spark_schema.fieldNames() == ["c", "x"]
    assert repr(spark_schema).startswith("StructType(")
    assert spark_schema.json().startswith("{")
    assert spark_schema.simpleString().startswith("struct<c:struct<a:")
    assert spark_arrow_schema(spark_schema).names == ["c", "x"]
