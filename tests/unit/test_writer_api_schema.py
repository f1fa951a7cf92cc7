"""Schema enforcement on append (txn_engine.schema_check): lossless conversions only."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_engine.errors import InvalidOperationError, SchemaMismatchError
from txn_engine.schema_check import conform, is_lossless

TABLE = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.large_string()),
        pa.field("score", pa.float64()),
        pa.field("s", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string())])),
    ]
)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (pa.int8(), pa.int64()),
        (pa.int32(), pa.int64()),
        (pa.uint32(), pa.int64()),
        (pa.uint8(), pa.uint16()),
        (pa.int16(), pa.float32()),
        (pa.int32(), pa.float64()),
        (pa.float16(), pa.float32()),
        (pa.float32(), pa.float64()),
        (pa.string(), pa.large_string()),
        (pa.large_string(), pa.string()),
        (pa.binary(), pa.large_binary()),
        (pa.date32(), pa.date64()),
        (pa.timestamp("ms"), pa.timestamp("us")),
        (pa.list_(pa.int32()), pa.large_list(pa.int64())),
        (pa.null(), pa.string()),
    ],
)
def test_lossless_conversions(src: pa.DataType, dst: pa.DataType) -> None:
    assert is_lossless(src, dst)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (pa.int64(), pa.int32()),
        (pa.int64(), pa.uint64()),
        (pa.uint64(), pa.int64()),
        (pa.int32(), pa.uint32()),
        (pa.int32(), pa.float32()),
        (pa.int64(), pa.float64()),
        (pa.float64(), pa.float32()),
        (pa.float64(), pa.int64()),
        (pa.string(), pa.int64()),
        (pa.int64(), pa.string()),
        (pa.binary(), pa.string()),
        (pa.timestamp("us"), pa.timestamp("ms")),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("us")),
        (pa.list_(pa.int64()), pa.list_(pa.int32())),
    ],
)
def test_lossy_conversions(src: pa.DataType, dst: pa.DataType) -> None:
    assert not is_lossless(src, dst)


def test_widening_is_applied_and_columns_reordered() -> None:
    data = pa.table(
        {
            "score": pa.array([1.5, 2.5], pa.float32()),
            "id": pa.array([1, 2], pa.int32()),
            "name": pa.array(["a", "b"], pa.string()),
        }
    )
    out = conform(data, TABLE)
    assert out.schema.equals(TABLE)
    assert out.column("id").to_pylist() == [1, 2]
    assert out.column("score").to_pylist() == [1.5, 2.5]
    assert out.column("s").to_pylist() == [None, None]  # missing nullable column: nulls


def test_string_into_int64_is_refused_naming_column_and_types() -> None:
    data = pa.table({"id": pa.array(["0", "1"], pa.string())})
    with pytest.raises(SchemaMismatchError) as info:
        conform(data, TABLE)
    err = info.value
    assert isinstance(err, InvalidOperationError)
    assert (err.column, err.expected, err.actual) == ("id", "int64", "string")
    assert "'id'" in str(err)
    assert "int64" in str(err)
    assert "string" in str(err)


def test_nested_member_is_named() -> None:
    struct = pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.string())])
    data = pa.table({"s": pa.array([{"x": 1, "y": "a"}], struct)})
    with pytest.raises(SchemaMismatchError) as info:
        conform(data, TABLE)
    assert (info.value.column, info.value.expected, info.value.actual) == ("s.x", "int32", "int64")


def test_extra_and_missing_required_columns_are_refused() -> None:
    with pytest.raises(SchemaMismatchError, match="'extra'") as info:
        conform(pa.table({"id": [1], "extra": [2]}), TABLE)
    assert info.value.column == "extra"
    required = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    with pytest.raises(SchemaMismatchError, match="missing") as info:
        conform(pa.table({"v": [1]}), required)
    assert info.value.column == "id"


def test_opt_in_casts_values_that_fit_and_still_refuses_those_that_do_not() -> None:
    small = pa.schema([pa.field("id", pa.int32())])
    out = conform(pa.table({"id": pa.array([1, 2], pa.int64())}), small, allow_lossy_cast=True)
    assert out.column("id").type == pa.int32()
    assert out.column("id").to_pylist() == [1, 2]
    with pytest.raises(SchemaMismatchError) as info:
        conform(pa.table({"id": pa.array([1 << 40], pa.int64())}), small, allow_lossy_cast=True)
    assert info.value.column == "id"
    numbers = pa.schema([pa.field("id", pa.int64())])
    with pytest.raises(SchemaMismatchError):  # "x" is no number even when opted in
        conform(pa.table({"id": ["1", "x"]}), numbers, allow_lossy_cast=True)
    parsed = conform(pa.table({"id": ["1", "7"]}), numbers, allow_lossy_cast=True)
    assert parsed.column("id").to_pylist() == [1, 7]


# ---- the conversions the Spark source accepts, now the one table for both paths -----------


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (pa.decimal128(10, 2), pa.decimal128(12, 3)),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="Europe/Paris")),
        (pa.string(), pa.dictionary(pa.int32(), pa.string())),
        (pa.dictionary(pa.int8(), pa.string()), pa.large_string()),
        (pa.list_(pa.float32()), pa.list_(pa.float32(), 2)),
        (pa.date64(), pa.date32()),
    ],
)
def test_spark_conversions_are_lossless_here_too(src: pa.DataType, dst: pa.DataType) -> None:
    assert is_lossless(src, dst)
    assert is_lossless(src, dst, same_struct_fields=True)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (pa.decimal128(10, 2), pa.decimal128(10, 3)),  # an integer digit lost
        (pa.decimal128(10, 2), pa.decimal128(12, 1)),  # a fraction digit lost
        (pa.list_(pa.float32(), 3), pa.list_(pa.float32(), 2)),
        (pa.dictionary(pa.int8(), pa.int64()), pa.int32()),
    ],
)
def test_lossy_spark_style_conversions_are_refused(src: pa.DataType, dst: pa.DataType) -> None:
    assert not is_lossless(src, dst)


def test_struct_fields_left_out_must_be_nullable_and_spark_wants_them_all() -> None:
    a = pa.field("a", pa.int64())
    data = pa.struct([a])
    assert is_lossless(data, pa.struct([a, pa.field("b", pa.string())]))
    assert not is_lossless(data, pa.struct([a, pa.field("b", pa.string(), nullable=False)]))
    assert not is_lossless(
        data, pa.struct([a, pa.field("b", pa.string())]), same_struct_fields=True
    )


def test_values_that_do_not_fit_fail_the_cast_with_a_typed_error() -> None:
    """Accepted by type, refused by value: never padded, cut or truncated."""
    fixed = pa.schema([pa.field("v", pa.list_(pa.float32(), 2))])
    ok = conform(pa.table({"v": pa.array([[1.0, 2.0]], pa.list_(pa.float32()))}), fixed)
    assert ok.column("v").to_pylist() == [[1.0, 2.0]]
    with pytest.raises(SchemaMismatchError, match="'v'"):
        conform(pa.table({"v": pa.array([[1.0, 2.0, 3.0]], pa.list_(pa.float32()))}), fixed)
    day = pa.schema([pa.field("d", pa.date32())])
    whole = pa.array([86_400_000 * 3], pa.date64())
    assert conform(pa.table({"d": whole}), day).column("d").to_pylist()[0].day == 4
    with pytest.raises(SchemaMismatchError, match="'d'"):
        conform(pa.table({"d": pa.array([86_400_000 * 3 + 5], pa.date64())}), day)
