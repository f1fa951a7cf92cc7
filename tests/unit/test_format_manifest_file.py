"""Manifest file codec: layout, offsets, strict validation (one test per bad input)."""

from __future__ import annotations

import struct

import pytest

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import CorruptManifestError, UnsupportedFeatureError
from txn_engine.format.flags import check_writer_flags
from txn_engine.format.manifest_file import (
    FOOTER_SIZE,
    decode_manifest_file,
    encode_manifest_file,
    inline_transaction_offset,
)


def _manifest(version: int = 3) -> table_pb2.Manifest:
    m = table_pb2.Manifest(version=version, transaction_file="2-abc.txn")
    m.writer_version.library = "txn_engine"
    m.writer_version.version = "0.1.0"
    frag = m.fragments.add(id=0, physical_rows=10)
    frag.files.add(path="x.lance", fields=[0], column_indices=[0])
    m.max_fragment_id = 0
    return m


def _txn() -> transaction_pb2.Transaction:
    txn = transaction_pb2.Transaction(read_version=2, uuid="0" * 8 + "-" + "0" * 27)
    txn.append.fragments.add(id=0, physical_rows=1)
    return txn


def _index(name: str = "idx") -> table_pb2.IndexMetadata:
    idx = table_pb2.IndexMetadata(name=name, fields=[0], dataset_version=2)
    idx.uuid.uuid = bytes(range(16))
    return idx


def test_layout_without_indices_puts_transaction_first() -> None:
    data = encode_manifest_file(_manifest(), (), _txn())
    pos, major, minor, magic = struct.unpack("<QHH4s", data[-FOOTER_SIZE:])
    assert (major, minor, magic) == (0, 2, b"LANC")
    (txn_len,) = struct.unpack_from("<I", data, 0)
    assert pos == 4 + txn_len
    mf = decode_manifest_file(data)
    assert mf.manifest.transaction_section == 0
    assert not mf.manifest.HasField("index_section")
    assert not mf.manifest.HasField("transaction_section_deprecated")
    assert mf.transaction == _txn()
    assert mf.indices == ()
    assert mf.size == len(data)


def test_layout_with_indices_puts_index_section_first() -> None:
    data = encode_manifest_file(_manifest(), [_index("a"), _index("b")], _txn())
    mf = decode_manifest_file(data)
    assert mf.manifest.index_section == 0
    (index_len,) = struct.unpack_from("<I", data, 0)
    assert mf.manifest.transaction_section == 4 + index_len
    assert [i.name for i in mf.indices] == ["a", "b"]
    assert mf.transaction == _txn()


def test_no_sections_manifest_at_offset_zero() -> None:
    data = encode_manifest_file(_manifest(), (), None)
    mf = decode_manifest_file(data)
    assert struct.unpack("<Q", data[-16:-8])[0] == 0
    assert mf.transaction is None
    assert not mf.manifest.HasField("transaction_section")


def test_stale_offsets_are_cleared_and_input_not_mutated() -> None:
    m = _manifest()
    m.index_section = 999
    m.transaction_section = 12345
    m.transaction_section_deprecated = 777
    before = m.SerializeToString()
    mf = decode_manifest_file(encode_manifest_file(m, (), None))
    assert not mf.manifest.HasField("index_section")
    assert not mf.manifest.HasField("transaction_section")
    assert not mf.manifest.HasField("transaction_section_deprecated")
    assert m.SerializeToString() == before


@pytest.mark.parametrize("owned", [False, True])
def test_owned_manifest_is_encoded_in_place_and_left_as_it_was(owned: bool) -> None:
    """``owned=True`` (the commit loop's freshly built manifest) sets the offsets on the
    caller's manifest for the serialization instead of on a copy: the bytes are the same
    as from a copy, and the manifest is left without offsets afterwards, also when the
    serialization fails."""
    m = _manifest()
    before = m.SerializeToString(deterministic=True)
    data = encode_manifest_file(m, [_index("a")], _txn(), owned=owned)
    assert data == encode_manifest_file(_manifest(), [_index("a")], _txn())
    assert m.SerializeToString(deterministic=True) == before
    assert not m.HasField("index_section")
    assert not m.HasField("transaction_section")
    mf = decode_manifest_file(data)
    assert mf.manifest.index_section == 0
    assert mf.manifest.transaction_section > 0
    with pytest.raises(AttributeError):  # fails after the index offset was set
        encode_manifest_file(m, [_index("a")], 42, owned=owned)  # type: ignore[arg-type]
    assert m.SerializeToString(deterministic=True) == before


def test_field_21_is_read_when_field_23_is_absent() -> None:
    txn_blob = _txn().SerializeToString()
    m = _manifest()
    m.transaction_section_deprecated = 0
    body = m.SerializeToString()
    data = (
        struct.pack("<I", len(txn_blob))
        + txn_blob
        + struct.pack("<I", len(body))
        + body
        + struct.pack("<QHH4s", 4 + len(txn_blob), 0, 1, b"LANC")
    )
    mf = decode_manifest_file(data)
    assert inline_transaction_offset(mf.manifest) == 0
    assert mf.transaction == _txn()


def test_truncated_file() -> None:
    data = encode_manifest_file(_manifest(), (), _txn())
    with pytest.raises(CorruptManifestError, match=r"bad magic|too short"):
        decode_manifest_file(data[:-5])
    with pytest.raises(CorruptManifestError, match="too short"):
        decode_manifest_file(data[:10])


def test_wrong_magic() -> None:
    data = bytearray(encode_manifest_file(_manifest(), (), None))
    data[-4:] = b"LANX"
    with pytest.raises(CorruptManifestError, match="magic"):
        decode_manifest_file(bytes(data))


def test_manifest_offset_out_of_range() -> None:
    data = bytearray(encode_manifest_file(_manifest(), (), None))
    struct.pack_into("<Q", data, len(data) - 16, 10_000)
    with pytest.raises(CorruptManifestError, match="outside the file"):
        decode_manifest_file(bytes(data))


def test_manifest_length_mismatch() -> None:
    data = bytearray(encode_manifest_file(_manifest(), (), None))
    struct.pack_into("<I", data, 0, 3)
    with pytest.raises(CorruptManifestError, match="does not end at the footer"):
        decode_manifest_file(bytes(data))


def test_section_offset_out_of_range() -> None:
    m = _manifest()
    body_probe = encode_manifest_file(m, (), None)
    # A manifest that claims an index section far past the manifest position.
    m.index_section = 5_000
    body = m.SerializeToString()
    data = struct.pack("<I", len(body)) + body + struct.pack("<QHH4s", 0, 0, 2, b"LANC")
    assert len(data) != len(body_probe)
    with pytest.raises(CorruptManifestError, match="index section offset"):
        decode_manifest_file(data)


def test_section_length_past_manifest() -> None:
    data = bytearray(encode_manifest_file(_manifest(), (), _txn()))
    struct.pack_into("<I", data, 0, 1_000_000)
    with pytest.raises(CorruptManifestError, match="inline transaction"):
        decode_manifest_file(bytes(data))


def test_garbage_protobuf() -> None:
    garbage = b"\xff\xff\xff\xff\xff\xff\xff"
    data = struct.pack("<I", len(garbage)) + garbage + struct.pack("<QHH4s", 0, 0, 2, b"LANC")
    with pytest.raises(CorruptManifestError, match="undecodable manifest"):
        decode_manifest_file(data)


def test_garbage_inline_transaction() -> None:
    garbage = b"\x0a\xff\xff\xff\xff\x0f"
    m = _manifest()
    m.transaction_section = 0
    body = m.SerializeToString()
    data = (
        struct.pack("<I", len(garbage))
        + garbage
        + struct.pack("<I", len(body))
        + body
        + struct.pack("<QHH4s", 4 + len(garbage), 0, 2, b"LANC")
    )
    with pytest.raises(CorruptManifestError, match="transaction"):
        decode_manifest_file(data)


def test_unknown_reader_flag_refuses_reading() -> None:
    m = _manifest()
    m.reader_feature_flags = 1 | 64
    data = encode_manifest_file(m, (), None)
    with pytest.raises(UnsupportedFeatureError, match="reader feature flag 64") as info:
        decode_manifest_file(data)
    assert info.value.flag == 64
    assert info.value.kind == "reader"
    assert decode_manifest_file(data, check_flags=False).manifest.reader_feature_flags == 65


def test_unknown_writer_flag_refuses_writing_but_reads() -> None:
    m = _manifest()
    m.writer_feature_flags = 8 | 256
    mf = decode_manifest_file(encode_manifest_file(m, (), None))
    assert mf.manifest.writer_feature_flags == 264
    with pytest.raises(UnsupportedFeatureError, match="writer feature flag 256") as info:
        check_writer_flags(mf.manifest)
    assert (info.value.flag, info.value.kind) == (256, "writer")


def test_known_flags_pass() -> None:
    m = _manifest()
    m.reader_feature_flags = 1 | 2 | 16
    m.writer_feature_flags = 1 | 2 | 8 | 16 | 32
    mf = decode_manifest_file(encode_manifest_file(m, (), None))
    check_writer_flags(mf.manifest)
    assert mf.manifest.writer_feature_flags == 59


def test_covering_index_flag_128_is_understood_and_64_is_not() -> None:
    """pylance 14 sets 128 for covering indices (and reads them); 64 (overlays) it refuses."""
    from txn_engine.format.flags import check_reader_flags, check_writer_flags

    m = table_pb2.Manifest(version=3, reader_feature_flags=128 | 1, writer_feature_flags=128 | 8)
    check_reader_flags(m)
    check_writer_flags(m)
    m.reader_feature_flags = 64
    with pytest.raises(UnsupportedFeatureError, match="reader feature flag 64"):
        check_reader_flags(m)
