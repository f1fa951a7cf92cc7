"""Spark filters pushed down to pylance's scanner, as a Lance SQL filter string.

PySpark (4.1+) hands a Python data source the conjuncts of a query's ``WHERE`` as
:class:`pyspark.sql.datasource.Filter` values (``EqualTo``, ``GreaterThan``, ``In``,
``IsNull``, ``Not``, ``StringStartsWith``, ...). :func:`translate` turns the ones whose
meaning is the same in Spark and in Lance's filter language into one SQL expression for
``LanceFragment.to_batches(filter=...)`` and returns the others, which Spark evaluates
after the scan. A filter is pushed only when:

* it names a top-level column (no ``a.b`` paths) of an integer, string, boolean or date
  type (floating-point comparisons are left to Spark: Lance orders ``-0.0`` before ``0.0``
  and Spark does not; ``IS NULL``/``IS NOT NULL`` are pushed for every type);
* its value is a Python value of the matching kind (``int`` within the column's range,
  ``str``, ``bool``, ``datetime.date``); ``None`` values, timestamps, decimals and binary
  values are not pushed.

The module imports nothing from pyspark: filters are recognised by class name and fields,
so it is usable (and testable) wherever the filter objects come from.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["pushable", "translate", "translate_one"]

_COMPARISONS: Mapping[str, str] = MappingProxyType(
    {
        "EqualTo": "=",
        "GreaterThan": ">",
        "GreaterThanOrEqual": ">=",
        "LessThan": "<",
        "LessThanOrEqual": "<=",
    }
)
_STRING_FUNCTIONS: Mapping[str, str] = MappingProxyType(
    {
        "StringStartsWith": "starts_with",
        "StringEndsWith": "ends_with",
        "StringContains": "contains",
    }
)


def _kind(arrow_type: pa.DataType) -> str | None:
    """The literal kind a column type accepts in a pushed comparison, or None."""
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "str"
    if pa.types.is_date32(arrow_type) or pa.types.is_date64(arrow_type):
        return "date"
    return None


def _int_range(arrow_type: pa.DataType) -> tuple[int, int]:
    bits = arrow_type.bit_width
    if pa.types.is_signed_integer(arrow_type):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _column(attribute: Any, schema: pa.Schema) -> tuple[str, pa.DataType] | None:
    """(quoted column reference, Arrow type) for a top-level column, else None."""
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    name = attribute[0]
    if not isinstance(name, str) or "`" in name:
        return None
    index = schema.get_field_index(name)
    if index < 0:
        return None
    return f"`{name}`", schema.field(index).type


def _literal(value: Any, arrow_type: pa.DataType) -> str | None:
    """``value`` as a Lance SQL literal comparable with a column of ``arrow_type``."""
    kind = _kind(arrow_type)
    if kind == "bool":
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        low, high = _int_range(arrow_type)
        return str(value) if low <= value <= high else None
    if kind == "str":
        return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else None
    if kind == "date":
        if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
            return None
        return f"date '{value.isoformat()}'"
    return None


def translate_one(spark_filter: Any, schema: pa.Schema) -> str | None:
    """One Spark filter as a Lance SQL expression over ``schema``, or None when it is not
    pushed (see the module docstring for what is)."""
    name = type(spark_filter).__name__
    if name in ("IsNull", "IsNotNull"):
        column = _column(spark_filter.attribute, schema)
        if column is None:
            return None
        return f"{column[0]} IS {'NOT ' if name == 'IsNotNull' else ''}NULL"
    if name == "Not":
        inner = translate_one(spark_filter.child, schema)
        return None if inner is None else f"NOT ({inner})"
    column = _column(getattr(spark_filter, "attribute", None), schema)
    if column is None:
        return None
    ref, arrow_type = column
    if name in _COMPARISONS:
        literal = _literal(spark_filter.value, arrow_type)
        return None if literal is None else f"{ref} {_COMPARISONS[name]} {literal}"
    if name == "EqualNullSafe":
        if spark_filter.value is None:
            return f"{ref} IS NULL"
        literal = _literal(spark_filter.value, arrow_type)
        return None if literal is None else f"({ref} IS NOT NULL AND {ref} = {literal})"
    if name == "In":
        values = tuple(spark_filter.value)
        if not values:
            return None
        literals = [_literal(v, arrow_type) for v in values]
        if any(lit is None for lit in literals):
            return None
        return f"{ref} IN ({', '.join(str(lit) for lit in literals)})"
    if name in _STRING_FUNCTIONS:
        if _kind(arrow_type) != "str":
            return None
        literal = _literal(spark_filter.value, arrow_type)
        return None if literal is None else f"{_STRING_FUNCTIONS[name]}({ref}, {literal})"
    return None


def translate(filters: Iterable[Any], schema: pa.Schema) -> tuple[str | None, list[Any]]:
    """(Lance SQL filter for the pushed conjuncts or None, filters Spark must still apply).

    The returned filters are the input objects themselves (Spark matches them by
    reference)."""
    pushed: list[str] = []
    rest: list[Any] = []
    for spark_filter in filters:
        expression = translate_one(spark_filter, schema)
        if expression is None:
            rest.append(spark_filter)
        else:
            pushed.append(f"({expression})")
    return (" AND ".join(pushed) if pushed else None), rest


def pushable(filters: Sequence[Any], schema: pa.Schema) -> list[bool]:
    """For each filter, whether :func:`translate` pushes it."""
    return [translate_one(f, schema) is not None for f in filters]
