"""Property: arrow -> Lance fields -> arrow round-trips; ids are unique and pre-order."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from txn_engine.format.schema import arrow_to_fields, fields_to_arrow

_leaf = st.sampled_from(
    [
        pa.int8(),
        pa.int32(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
        pa.bool_(),
        pa.string(),
        pa.large_binary(),
        pa.date32(),
        pa.timestamp("ms"),
        pa.timestamp("us", tz="UTC"),
        pa.decimal128(12, 3),
        pa.binary(8),
        pa.list_(pa.float32(), 3),
        pa.duration("s"),
        pa.dictionary(pa.int16(), pa.string()),
    ]
)
_names = st.text(alphabet="abcdefghij", min_size=1, max_size=5)


def _types(depth: int) -> st.SearchStrategy[pa.DataType]:
    if depth == 0:
        return _leaf
    inner = _types(depth - 1)
    return st.one_of(
        _leaf,
        st.builds(pa.list_, inner),
        st.builds(pa.large_list, inner),
        st.lists(st.tuples(_names, inner), min_size=1, max_size=3, unique_by=lambda t: t[0]).map(
            lambda fs: pa.struct([pa.field(n, t) for n, t in fs])
        ),
        st.builds(pa.map_, st.just(pa.string()), inner),
    )


schemas = st.lists(
    st.tuples(_names, _types(3), st.booleans()), min_size=1, max_size=6, unique_by=lambda t: t[0]
).map(lambda fs: pa.schema([pa.field(n, t, nullable=nn) for n, t, nn in fs]))


@given(schemas, st.integers(0, 1000))
def test_roundtrip(schema: pa.Schema, first_id: int) -> None:
    fields = arrow_to_fields(schema, first_id=first_id)
    ids = [f.id for f in fields]
    assert ids == list(range(first_id, first_id + len(fields)))
    seen = {-1}
    for f in fields:
        assert f.parent_id in seen
        seen.add(f.id)
    assert fields_to_arrow(fields).equals(schema)
