"""Schema enforcement for appended data: lossless conversions only, unless asked.

:func:`conform` takes Arrow data and the table's schema and returns the data in the
table's schema, or raises :class:`~txn_engine.errors.SchemaMismatchError` naming the
column and both types. What converts without asking (no value can change):

* the same type, or ``null`` to anything (a column of nulls);
* integers to a wider integer of the same signedness, unsigned to a strictly wider signed;
* integers of at most 24 bits (``int8/16``, ``uint8/16``) to ``float``, at most 53 bits
  (``int8/16/32``, ``uint8/16/32``) to ``double``; ``halffloat`` -> ``float`` -> ``double``;
* ``string`` <-> ``large_string`` <-> ``string_view``, the same for binary;
  ``date32`` <-> ``date64`` (a ``date64`` that is not a whole day fails the cast);
  a timestamp to a finer unit, both with a time zone or both without;
  a decimal into one that keeps every digit (scale and integer digits);
  a value type into a dictionary of it, a dictionary into its value type;
* lists (of any list kind; into a ``fixed_size_list`` when every list has its length, else
  the cast fails) and structs whose children convert that way (struct children matched by
  name; a table field the data leaves out must be nullable and becomes null).

Everything else (``int64`` -> ``int32``, ``double`` -> ``float``, ``string`` ->
``int64``, ...) is refused; with ``allow_lossy_cast=True`` it is cast value by value with
Arrow's safe cast, which still fails (SchemaMismatchError) for a value that does not fit.

Columns are matched by name: extra columns are refused, a missing nullable column becomes
nulls, a missing non-nullable column is refused.

The Spark data source checks its DataFrame's schema with the same :func:`is_lossless`
(``same_struct_fields=True``), so both paths accept and refuse the same conversions.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.errors import SchemaMismatchError

__all__ = ["check_schema", "conform", "is_lossless"]

_INT_BITS: Mapping[str, tuple[int, bool]] = MappingProxyType(
    {
        "int8": (8, True),
        "int16": (16, True),
        "int32": (32, True),
        "int64": (64, True),
        "uint8": (8, False),
        "uint16": (16, False),
        "uint32": (32, False),
        "uint64": (64, False),
    }
)
_FLOAT_MANTISSA: Mapping[str, int] = MappingProxyType({"halffloat": 11, "float": 24, "double": 53})
_FLOAT_ORDER: tuple[str, ...] = ("halffloat", "float", "double")
_TS_ORDER: tuple[str, ...] = ("s", "ms", "us", "ns")


def _family(t: pa.DataType) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_view(t, "string"):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or _is_view(t, "binary"):
        return "binary"
    return None


def _is_view(t: pa.DataType, kind: str) -> bool:
    return str(t) == f"{kind}_view"


def _is_list(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or (hasattr(pa.types, "is_list_view") and pa.types.is_list_view(t))
        or (hasattr(pa.types, "is_large_list_view") and pa.types.is_large_list_view(t))
    )


def is_lossless(src: pa.DataType, dst: pa.DataType, *, same_struct_fields: bool = False) -> bool:
    """Whether every value of type ``src`` converts to ``dst`` unchanged (see module): the
    one table both the Python writer API and the Spark source use. Where a value could still
    not fit (a list of the wrong length for a ``fixed_size_list``, a ``date64`` that is not a
    whole day), the value-by-value safe cast refuses it; nothing is ever padded or cut.

    ``same_struct_fields=True`` (the Spark source: a DataFrame carries every struct field)
    requires a struct's fields to be exactly the table's, by name; otherwise the data may
    leave out table fields, which become nulls.
    """
    if src.equals(dst) or pa.types.is_null(src):
        return True

    def inner(s: pa.DataType, d: pa.DataType) -> bool:
        return is_lossless(s, d, same_struct_fields=same_struct_fields)

    if pa.types.is_dictionary(dst):
        return inner(src.value_type if pa.types.is_dictionary(src) else src, dst.value_type)
    if pa.types.is_dictionary(src):
        return inner(src.value_type, dst)
    s, d = str(src), str(dst)
    if s in _INT_BITS and d in _INT_BITS:
        (sb, ss), (db, ds) = _INT_BITS[s], _INT_BITS[d]
        return (ss == ds and db >= sb) or (not ss and ds and db > sb)
    if s in _INT_BITS and d in _FLOAT_MANTISSA:
        return _INT_BITS[s][0] <= _FLOAT_MANTISSA[d]
    if s in _FLOAT_MANTISSA and d in _FLOAT_MANTISSA:
        return _FLOAT_ORDER.index(s) <= _FLOAT_ORDER.index(d)
    fam = _family(src)
    if fam is not None:
        return fam == _family(dst)
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(
            dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
        )
    if pa.types.is_date(src) and pa.types.is_date(dst):
        return True  # date64 -> date32: a value that is not a whole day fails the safe cast
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        # the same instants: another zone name changes how they print, not what they are
        return (src.tz is None) == (dst.tz is None) and _TS_ORDER.index(
            src.unit
        ) <= _TS_ORDER.index(dst.unit)
    if pa.types.is_fixed_size_list(dst) and (_is_list(src) or pa.types.is_fixed_size_list(src)):
        if pa.types.is_fixed_size_list(src) and src.list_size != dst.list_size:
            return False
        return inner(src.value_type, dst.value_type)  # a list: its lengths checked at cast
    if (_is_list(src) or pa.types.is_fixed_size_list(src)) and _is_list(dst):
        return inner(src.value_type, dst.value_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        dst_fields = {dst.field(i).name: dst.field(i) for i in range(dst.num_fields)}
        src_names = {src.field(i).name for i in range(src.num_fields)}
        if same_struct_fields and src_names != set(dst_fields):
            return False
        if any(not f.nullable for n, f in dst_fields.items() if n not in src_names):
            return False
        for i in range(src.num_fields):
            f = src.field(i)
            target = dst_fields.get(f.name)
            if target is None or not inner(f.type, target.type):
                return False
        return True
    return False


def _first_lossy(src: pa.DataType, dst: pa.DataType, path: str) -> tuple[str, str, str]:
    """(column path, expected, actual) of the innermost struct member that is lossy."""
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        dst_names = {dst.field(i).name: dst.field(i) for i in range(dst.num_fields)}
        for i in range(src.num_fields):
            f = src.field(i)
            target = dst_names.get(f.name)
            if target is None:
                return f"{path}.{f.name}", "absent", str(f.type)
            if not is_lossless(f.type, target.type):
                return _first_lossy(f.type, target.type, f"{path}.{f.name}")
    return path, str(dst), str(src)


def check_schema(
    data_schema: pa.Schema, table_schema: pa.Schema, *, allow_lossy: bool = False
) -> None:
    """Raise SchemaMismatchError if data of ``data_schema`` cannot be appended to a table
    of ``table_schema`` (see the module docstring); return None if it can."""
    names = set(table_schema.names)
    for f in data_schema:
        if f.name not in names:
            raise SchemaMismatchError(
                f"column {f.name!r} ({f.type}) is not in the table schema; add it first "
                "(Table.add_columns) or drop it from the data",
                column=f.name,
                expected=None,
                actual=str(f.type),
            )
        target = table_schema.field(f.name)
        if not allow_lossy and not is_lossless(f.type, target.type):
            column, expected, actual = _first_lossy(f.type, target.type, f.name)
            raise SchemaMismatchError(
                f"column {column!r}: the data's type {actual} cannot be converted to the "
                f"table's type {expected} without loss; cast it, or pass "
                "allow_lossy_cast=True to convert value by value",
                column=column,
                expected=expected,
                actual=actual,
            )
    present = set(data_schema.names)
    for target in table_schema:
        if target.name not in present and not target.nullable:
            raise SchemaMismatchError(
                f"column {target.name!r} ({target.type}, not nullable) is missing from the data",
                column=target.name,
                expected=str(target.type),
                actual=None,
            )


def conform(data: Any, table_schema: pa.Schema, *, allow_lossy_cast: bool = False) -> pa.Table:
    """``data`` (a ``pyarrow.Table`` or ``RecordBatch``) in ``table_schema``: columns in
    the table's order and types, missing nullable ones as nulls. Raises
    SchemaMismatchError (see the module docstring)."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    check_schema(table.schema, table_schema, allow_lossy=allow_lossy_cast)
    columns = []
    for target in table_schema:
        if target.name not in table.schema.names:
            columns.append(pa.nulls(table.num_rows, target.type))
            continue
        column = table.column(target.name)
        if not column.type.equals(target.type):
            try:
                column = column.cast(target.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"column {target.name!r}: a value of type {column.type} does not fit the "
                    f"table's type {target.type} ({exc})",
                    column=target.name,
                    expected=str(target.type),
                    actual=str(column.type),
                ) from exc
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table_schema)
