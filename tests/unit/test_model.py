"""Model value types: canonical forms, protobuf conversion, pylance JSON conversion (pylance
itself reading it back: ``tests/integration/test_model_pylance.py``)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from txn_engine import (
    BasePath,
    DataFile,
    DeletionFile,
    DeletionFileType,
    ExternalFile,
    Fragment,
    IndexDetails,
    IndexFile,
    IndexMetadata,
    LanceField,
    MemWal,
    MemWalId,
    MemWalState,
)
from txn_engine.errors import InvalidOperationError

#: What pylance 14.0.2's FragmentMetadata.to_json() returns (pylance14-and-environment.md).
PYLANCE_JSON: dict[str, Any] = {
    "id": 0,
    "files": [
        {
            "path": "0110100110001111010100005b18f476cae33d301dc6552e8c.lance",
            "fields": [0, 1],
            "column_indices": [0, 1],
            "file_major_version": 2,
            "file_minor_version": 2,
            "file_size_bytes": 634,
            "base_id": None,
        }
    ],
    "physical_rows": 2,
    "deletion_file": None,
    "row_id_meta": None,
    "created_at_version_meta": None,
    "last_updated_at_version_meta": None,
    "overlays": [],
}

STABLE_JSON: dict[str, Any] = {
    **PYLANCE_JSON,
    "id": 3,
    "deletion_file": {
        "read_version": 1,
        "id": 16658043522493979129,
        "file_type": "bitmap",
        "num_deleted_rows": 3,
        "base_id": None,
    },
    "row_id_meta": {"Inline": [10, 4, 10, 2, 16, 10]},
    "created_at_version_meta": {"inline": [10, 8, 10, 4, 10, 2, 16, 10, 16, 1]},
    "last_updated_at_version_meta": {"external": {"path": "v.bin", "offset": 4, "size": 9}},
}


def test_from_lance_json_accepts_dict_text_bytes_and_objects() -> None:
    expected = Fragment(
        0,
        [DataFile(PYLANCE_JSON["files"][0]["path"], [0, 1], [0, 1], 2, 2, 634)],
        physical_rows=2,
    )
    assert Fragment.from_lance_json(PYLANCE_JSON) == expected
    assert Fragment.from_lance_json(json.dumps(PYLANCE_JSON)) == expected
    assert Fragment.from_lance_json(json.dumps(PYLANCE_JSON).encode()) == expected
    # any object with to_json(), as pylance's FragmentMetadata (the real one: integration)
    obj = type("Meta", (), {"to_json": lambda self: dict(PYLANCE_JSON)})()
    assert Fragment.from_lance_json(obj) == expected


def test_from_lance_json_keeps_deletion_and_sequence_metadata() -> None:
    frag = Fragment.from_lance_json(STABLE_JSON)
    assert frag.id == 3
    assert frag.deletion_file == DeletionFile(
        DeletionFileType.BITMAP, 1, 16658043522493979129, num_deleted_rows=3
    )
    assert frag.num_deleted_rows == 3
    assert frag.row_id_sequence == bytes([10, 4, 10, 2, 16, 10])
    assert frag.created_at_version_sequence == bytes([10, 8, 10, 4, 10, 2, 16, 10, 16, 1])
    assert frag.last_updated_at_version_sequence == ExternalFile("v.bin", 4, 9)
    assert frag.deletion_file is not None
    assert frag.deletion_file.file_name(3) == "3-1-16658043522493979129.bin"


def test_to_lance_json_is_what_pylance_writes_and_reads() -> None:
    # pylance itself parsing it back: tests/integration/test_model_pylance.py
    for data in (PYLANCE_JSON, STABLE_JSON):
        frag = Fragment.from_lance_json(data)
        out = frag.to_lance_json()
        assert out == data
        assert Fragment.from_lance_json(out) == frag


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"files": []}, "physical_rows"),
        ({"physical_rows": 1}, "files"),
        ({**PYLANCE_JSON, "overlays": [{"x": 1}]}, "overlays"),
        ({**PYLANCE_JSON, "deletion_file": {"read_version": 1, "id": 2, "file_type": "?"}}, "type"),
        ({**PYLANCE_JSON, "row_id_meta": {"Weird": []}}, "kind"),
        ("[1, 2]", "JSON object"),
        ("{not json", "fragment"),
    ],
)
def test_from_lance_json_refuses_malformed_input(data: Any, message: str) -> None:
    with pytest.raises(InvalidOperationError, match=message):
        Fragment.from_lance_json(data)


def test_proto_round_trips() -> None:
    frag = Fragment(
        7,
        [DataFile("x.lance", [0, -2], [0, 1], 2, 1, 10, base_id=3)],
        physical_rows=11,
        deletion_file=DeletionFile(0, 4, 5, 6, base_id=2),
        row_id_sequence=b"\x01",
        last_updated_at_version_sequence=ExternalFile("l", 1, 2),
        created_at_version_sequence=b"",
    )
    pb = frag.to_proto()
    assert pb.WhichOneof("created_at_version_sequence") == "inline_created_at_versions"
    assert Fragment.from_proto(pb) == frag
    index = IndexMetadata(
        uuid="12345678-1234-5678-1234-567812345678",
        name="i",
        fields=[1],
        dataset_version=3,
        fragment_bitmap={0, 5, 70000},
        index_details=IndexDetails("/lance.table.BTreeIndexDetails", b"\x01"),
        index_version=2,
        created_at=99,
        base_id=1,
        files=[IndexFile("page_data.lance", 10)],
        covering_fields=[2],
    )
    assert IndexMetadata.from_proto(index.to_proto()) == index
    assert not index.is_vector
    base = BasePath(2, "s3://b", name="n", is_dataset_root=True)
    assert BasePath.from_proto(base.to_proto()) == base
    wal = MemWal(MemWalId("r", 4), "m", "w", b"e", MemWalState.FLUSHED, "o", 9)
    assert MemWal.from_proto(wal.to_proto()) == wal
    field = LanceField(3, -1, "c", "int64", metadata={"k": b"v"}, encoding=1, type=2)
    assert LanceField.from_proto(field.to_proto()) == field


def test_values_are_canonical_frozen_and_hashable() -> None:
    a = DataFile("p", [0, 1], [0, 1])
    b = DataFile("p", (0, 1), (0, 1))
    assert a == b
    assert hash(a) == hash(b)
    assert Fragment(0, [a], 1) == Fragment(0, (b,), 1)
    assert LanceField(0, -1, "x", "int64", metadata={"b": b"2", "a": b"1"}).metadata == (
        ("a", b"1"),
        ("b", b"2"),
    )
    i1 = IndexMetadata("12345678-1234-5678-1234-567812345678", "i", [0], 1, [3, 1])
    assert i1.fragment_bitmap == frozenset({1, 3})
    assert len({i1, attrs.evolve(i1)}) == 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.path = "q"  # type: ignore[misc]
    assert DeletionFileType.BITMAP.suffix == "bin"
    assert DeletionFileType.ARROW_ARRAY.suffix == "arrow"


def test_uuid_text_is_the_canonical_form_or_empty() -> None:
    import uuid

    from txn_engine.model import uuid_text

    u = uuid.uuid4()
    assert uuid_text(u.bytes) == str(u)
    assert uuid_text(bytearray(u.bytes)) == str(u)
    assert uuid_text(b"") == ""
    assert uuid_text(b"\x01" * 15) == ""
