"""Hypothesis round-trip properties for every format-layer encoding."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import CorruptManifestError, UnsupportedFeatureError
from txn_engine.format.deletion import (
    decode_deletion_file,
    encode_arrow_deletions,
    encode_bitmap_deletions,
)
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import NamingScheme, manifest_name, parse_manifest_name
from txn_engine.format.rowids import (
    ArraySegment,
    RangeSegment,
    RangeWithBitmapSegment,
    RangeWithHolesSegment,
    Segment,
    SortedArraySegment,
    decode_row_id_segments,
    decode_row_id_sequence,
    decode_version_sequence,
    encode_row_id_segments,
    encode_row_id_sequence,
    encode_version_sequence,
    segment_for_values,
)

U64 = st.integers(0, 2**64 - 1)
U32 = st.integers(0, 2**32 - 1)
text = st.text(max_size=12)

# ----------------------------------------------------------------- manifest files


@st.composite
def fragments(draw: st.DrawFn) -> table_pb2.DataFragment:
    f = table_pb2.DataFragment(id=draw(st.integers(0, 2**32)), physical_rows=draw(U32))
    for _ in range(draw(st.integers(0, 2))):
        f.files.add(
            path=draw(text),
            fields=draw(st.lists(st.integers(-2, 50), max_size=4)),
            file_major_version=2,
            file_size_bytes=draw(U32),
        )
    if draw(st.booleans()):
        f.deletion_file.file_type = draw(st.sampled_from([0, 1]))
        f.deletion_file.read_version = draw(U32)
        f.deletion_file.id = draw(U64)
        f.deletion_file.num_deleted_rows = draw(U32)
    if draw(st.booleans()):
        f.inline_row_ids = encode_row_id_sequence([f.id])
    return f


@st.composite
def manifests(draw: st.DrawFn) -> table_pb2.Manifest:
    m = table_pb2.Manifest(version=draw(st.integers(1, 2**63 - 1)), tag=draw(text))
    m.fragments.extend(draw(st.lists(fragments(), max_size=4)))
    for i, name in enumerate(draw(st.lists(text, max_size=3, unique=True))):
        m.fields.add(name=name, id=i, parent_id=-1, logical_type="int64", nullable=True)
    m.config.update(draw(st.dictionaries(text, text, max_size=3)))
    m.schema_metadata.update(draw(st.dictionaries(text, st.binary(max_size=8), max_size=2)))
    m.reader_feature_flags = draw(st.integers(0, 63))
    m.writer_feature_flags = draw(st.integers(0, 63))
    if draw(st.booleans()):
        m.max_fragment_id = draw(U32)
    m.transaction_file = draw(text)
    # stale offsets a careless caller might carry over: the encoder must clear them
    if draw(st.booleans()):
        m.index_section = draw(U64)
    if draw(st.booleans()):
        m.transaction_section = draw(U64)
    if draw(st.booleans()):
        m.transaction_section_deprecated = draw(U64)
    return m


@st.composite
def indices(draw: st.DrawFn) -> list[table_pb2.IndexMetadata]:
    out = []
    for name in draw(st.lists(text, max_size=3)):
        idx = table_pb2.IndexMetadata(name=name, dataset_version=draw(U32))
        idx.uuid.uuid = draw(st.binary(min_size=16, max_size=16))
        idx.fields.extend(draw(st.lists(st.integers(0, 9), max_size=3)))
        idx.fragment_bitmap = BitMap(draw(st.lists(U32, max_size=5))).serialize()
        out.append(idx)
    return out


@st.composite
def transactions(draw: st.DrawFn) -> transaction_pb2.Transaction | None:
    if not draw(st.booleans()):
        return None
    t = transaction_pb2.Transaction(read_version=draw(U32), uuid=draw(text), tag=draw(text))
    kind = draw(st.sampled_from(["append", "delete", "update_config", "create_index"]))
    getattr(t, kind).SetInParent()
    if kind == "append":
        t.append.fragments.extend(draw(st.lists(fragments(), max_size=2)))
    return t


@given(manifests(), indices(), transactions())
def test_manifest_file_round_trip(
    m: table_pb2.Manifest,
    idx: list[table_pb2.IndexMetadata],
    txn: transaction_pb2.Transaction | None,
) -> None:
    data = encode_manifest_file(m, idx, txn)
    mf = decode_manifest_file(data)
    assert list(mf.indices) == idx
    assert mf.transaction == txn
    assert mf.size == len(data)
    assert mf.manifest.HasField("index_section") == bool(idx)
    assert mf.manifest.HasField("transaction_section") == (txn is not None)
    assert not mf.manifest.HasField("transaction_section_deprecated")
    expected = table_pb2.Manifest()
    expected.CopyFrom(m)
    for field in ("index_section", "transaction_section", "transaction_section_deprecated"):
        expected.ClearField(field)  # type: ignore[arg-type]
    got = table_pb2.Manifest()
    got.CopyFrom(mf.manifest)
    got.ClearField("index_section")
    got.ClearField("transaction_section")
    assert got == expected
    # decode -> encode is a fixed point
    assert encode_manifest_file(mf.manifest, mf.indices, mf.transaction) == data


@given(manifests(), transactions(), st.data())
def test_truncated_manifest_files_are_rejected(
    m: table_pb2.Manifest, txn: transaction_pb2.Transaction | None, data: st.DataObject
) -> None:
    blob = encode_manifest_file(m, (), txn)
    cut = data.draw(st.integers(0, len(blob) - 1))
    try:
        decode_manifest_file(blob[:cut])
    except (CorruptManifestError, UnsupportedFeatureError):
        pass
    else:  # pragma: no cover - would be a silent misread
        raise AssertionError(f"prefix of {cut}/{len(blob)} bytes decoded")


# ----------------------------------------------------------------- naming


@given(st.integers(0, 2**63 - 1), st.sampled_from(list(NamingScheme)))
def test_manifest_names_round_trip(version: int, scheme: NamingScheme) -> None:
    assert parse_manifest_name(manifest_name(version, scheme)) == (version, scheme)


# ----------------------------------------------------------------- row ids


@given(st.lists(U64, unique=True, max_size=200))
def test_row_id_sequence_round_trip(ids: list[int]) -> None:
    assert decode_row_id_sequence(encode_row_id_sequence(ids)) == ids


@given(st.lists(st.integers(0, 5000), unique=True, max_size=300).map(sorted))
def test_sorted_ids_round_trip_through_chosen_segment(ids: list[int]) -> None:
    seg = segment_for_values(ids)
    assert not isinstance(seg, ArraySegment)
    assert list(seg.values()) == ids
    assert len(seg) == len(ids)


@st.composite
def segments(draw: st.DrawFn) -> Segment:
    kind = draw(st.integers(0, 4))
    start = draw(st.integers(0, 2**63))
    span = draw(st.integers(0, 300))
    if kind == 0:
        return RangeSegment(start, start + span)
    if kind == 1:
        holes = draw(st.lists(st.integers(start, start + span), unique=True, max_size=span))
        holes = [h for h in holes if h < start + span]
        return RangeWithHolesSegment(start, start + span, tuple(sorted(holes)))
    if kind == 2:
        bits = draw(st.binary(min_size=(span + 7) // 8, max_size=(span + 7) // 8))
        return RangeWithBitmapSegment(start, start + span, bits)
    values = draw(st.lists(U64, unique=True, max_size=50))
    return SortedArraySegment(tuple(sorted(values))) if kind == 3 else ArraySegment(tuple(values))


@given(st.lists(segments(), max_size=5))
def test_every_segment_kind_round_trips(segs: list[Segment]) -> None:
    data = encode_row_id_segments(segs)
    assert decode_row_id_segments(data) == segs
    expected = [v for s in segs for v in s.values()]
    assert decode_row_id_sequence(data) == expected


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 2**63)), max_size=10))
def test_version_sequence_round_trip(runs: list[tuple[int, int]]) -> None:
    decoded = decode_version_sequence(encode_version_sequence(runs))
    # same per-row versions, canonical (merged, no empty runs)
    assert [v for n, v in decoded for _ in range(n)] == [v for n, v in runs for _ in range(n)]
    assert all(n > 0 for n, _ in decoded)
    assert all(a[1] != b[1] for a, b in itertools.pairwise(decoded))


# ----------------------------------------------------------------- deletion files


@given(st.lists(U32, min_size=1, max_size=300))
def test_deletion_files_round_trip(offsets: list[int]) -> None:
    bm = BitMap(offsets)
    assert decode_deletion_file(encode_arrow_deletions(bm), 0) == bm
    assert decode_deletion_file(encode_bitmap_deletions(bm), 1) == bm
