"""Hypothesis strategies for table schemas (Arrow and Lance).

* :func:`arrow_types` / :func:`arrow_schemas`: Arrow types and schemas Lance can store
  (primitives, temporal, decimal, fixed-size, dictionary, and nested list / large list /
  struct / map up to ``max_depth``), optionally with a leading non-null ``rid`` int64
  identity column (what :mod:`txn_engine.testing.model` tracks rows by);
* :func:`lance_field_schemas`: the same as Lance fields (ids assigned pre-order by
  :func:`txn_engine.format.schema.arrow_to_lance_fields`), ready for ``Overwrite`` /
  ``Merge`` operations;
* :func:`~txn_engine.testing.strategies.lance_schemas` (re-exported) draws Lance fields
  directly.

Requires the ``hypothesis`` and ``pyarrow`` test dependencies.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.model import LanceField
from txn_engine.testing.strategies import lance_schemas

__all__ = [
    "arrow_schemas",
    "arrow_types",
    "column_names",
    "lance_field_schemas",
    "lance_schemas",
    "primitive_types",
]


def _pa() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa


def primitive_types() -> list[Any]:
    """The plain Arrow primitives every Lance file version stores unchanged: booleans,
    integers, floats, strings and binaries (variable and fixed width), dates."""
    pa = _pa()
    return [
        pa.bool_(),
        pa.int8(),
        pa.uint8(),
        pa.int16(),
        pa.uint16(),
        pa.int32(),
        pa.uint32(),
        pa.int64(),
        pa.uint64(),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.binary(1),
        pa.binary(16),
        pa.date32(),
        pa.date64(),
    ]


def _leaves() -> st.SearchStrategy[Any]:
    pa = _pa()
    return st.sampled_from(
        [
            *primitive_types(),
            pa.timestamp("us"),
            pa.timestamp("ns", tz="UTC"),
            pa.time64("us"),
            pa.duration("ms"),
            pa.decimal128(12, 3),
            pa.list_(pa.float32(), 4),
            pa.dictionary(pa.int32(), pa.string()),
        ]
    )


def column_names() -> st.SearchStrategy[str]:
    """Short column names (letters, digits, ``_``), never ``rid``."""
    return st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8).filter(
        lambda n: n != "rid"
    )


def arrow_types(max_depth: int = 2) -> st.SearchStrategy[Any]:
    """Arrow data types Lance can store, nested up to ``max_depth`` levels."""
    pa = _pa()
    leaves = _leaves()
    if max_depth <= 0:
        return leaves
    inner = arrow_types(max_depth - 1)
    structs = st.lists(
        st.tuples(column_names(), inner, st.booleans()),
        min_size=1,
        max_size=3,
        unique_by=lambda t: t[0],
    ).map(lambda fs: pa.struct([pa.field(n, t, nullable=nn) for n, t, nn in fs]))
    return st.one_of(
        leaves,
        st.builds(pa.list_, inner),
        st.builds(pa.large_list, inner),
        structs,
        st.builds(pa.map_, st.sampled_from([pa.string(), pa.int32()]), inner),
    )


def arrow_schemas(
    *, max_columns: int = 6, max_depth: int = 2, with_rid: bool = False
) -> st.SearchStrategy[Any]:
    """``pyarrow.Schema`` values of 1..``max_columns`` columns (plus a leading non-null
    ``rid`` int64 column when ``with_rid``)."""
    pa = _pa()
    columns = st.lists(
        st.tuples(column_names(), arrow_types(max_depth), st.booleans()),
        min_size=1,
        max_size=max_columns,
        unique_by=lambda t: t[0],
    )

    def build(cols: list[tuple[str, Any, bool]]) -> Any:
        fields = [pa.field(n, t, nullable=nn) for n, t, nn in cols]
        if with_rid:
            fields.insert(0, pa.field("rid", pa.int64(), nullable=False))
        return pa.schema(fields)

    return columns.map(build)


def lance_field_schemas(
    *, max_columns: int = 6, max_depth: int = 2, with_rid: bool = False
) -> st.SearchStrategy[tuple[LanceField, ...]]:
    """Lance schemas (fields with pre-order ids from 0) converted from
    :func:`arrow_schemas`."""
    return arrow_schemas(max_columns=max_columns, max_depth=max_depth, with_rid=with_rid).map(
        arrow_to_lance_fields
    )
