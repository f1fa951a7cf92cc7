"""Operation and Transaction types: field names, canonical collections, equality, hashing."""

from __future__ import annotations

import typing
import uuid as uuid_mod

import attrs
import pytest
from pyroaring import BitMap64

import txn_engine
from txn_engine import (
    Append,
    DataFile,
    Delete,
    Fragment,
    Operation,
    Overwrite,
    Transaction,
    Update,
    UpdateConfig,
    UpdateMap,
    UpdateMode,
    operation_kind,
)
from txn_engine.ops import OPERATION_KINDS
from txn_engine.transaction import COMMIT_MESSAGE_KEY


def frag(fid: int = 0) -> Fragment:
    return Fragment(fid, [DataFile("x.lance", [0], [0])], 3)


def test_every_operation_is_exported_and_in_the_union() -> None:
    union = set(typing.get_args(Operation))
    assert {cls.__name__ for cls in union} == set(OPERATION_KINDS)
    for kind in OPERATION_KINDS:
        cls = getattr(txn_engine, kind)
        assert cls in union
        assert attrs.has(cls)


def test_field_names_follow_transaction_proto() -> None:
    names = {
        kind: [f.name for f in attrs.fields(getattr(txn_engine, kind))] for kind in OPERATION_KINDS
    }
    assert names["Append"] == ["fragments"]
    assert names["Delete"][:3] == ["updated_fragments", "deleted_fragment_ids", "predicate"]
    assert names["Update"][:7] == [
        "removed_fragment_ids",
        "updated_fragments",
        "new_fragments",
        "fields_modified",
        "mem_wal_to_merge",
        "fields_for_preserving_frag_bitmap",
        "update_mode",
    ]
    assert names["UpdateConfig"] == [
        "config_updates",
        "table_metadata_updates",
        "schema_metadata_updates",
        "field_metadata_updates",
    ]
    assert "preserves_nullability" in names["Merge"]
    assert "preserves_nullability" in names["Project"]


MINIMAL: dict[str, Operation] = {
    "Append": Append([]),
    "Delete": Delete(),
    "Overwrite": Overwrite([], []),
    "CreateIndex": txn_engine.CreateIndex(),
    "Rewrite": txn_engine.Rewrite([]),
    "Merge": txn_engine.Merge([], []),
    "Restore": txn_engine.Restore(1),
    "ReserveFragments": txn_engine.ReserveFragments(1),
    "Update": Update(),
    "Project": txn_engine.Project([]),
    "UpdateConfig": UpdateConfig(),
    "DataReplacement": txn_engine.DataReplacement([]),
    "UpdateMemWalState": txn_engine.UpdateMemWalState(),
    "Clone": txn_engine.Clone(1, "/src"),
    "UpdateBases": txn_engine.UpdateBases([]),
}


@pytest.mark.parametrize("kind", OPERATION_KINDS)
def test_operation_kind(kind: str) -> None:
    op = MINIMAL[kind]
    assert operation_kind(op) == kind
    assert Transaction(1, op).kind == kind


def test_collections_are_canonical_so_equality_and_hashing_work() -> None:
    assert Append([frag()]) == Append((frag(),))
    assert hash(Append([frag()])) == hash(Append((frag(),)))
    assert UpdateMap({"b": "2", "a": None}) == UpdateMap([("a", None), ("b", "2")])
    a = UpdateConfig(field_metadata_updates={2: UpdateMap({"x": "1"}), 1: {"y": None}})
    assert a.field_metadata_updates == (
        (1, UpdateMap({"y": None})),
        (2, UpdateMap({"x": "1"})),
    )
    assert a == UpdateConfig(field_metadata_updates=[(1, {"y": None}), (2, UpdateMap({"x": "1"}))])
    assert len({a, attrs.evolve(a)}) == 1
    assert Overwrite([], [], config_upsert_values={}) == Overwrite([], [])
    assert Overwrite([], [], config_upsert_values={"k": "v"}).config_upserts == {"k": "v"}
    assert Update(update_mode=1).update_mode is UpdateMode.REWRITE_COLUMNS


def test_affected_rows_travel_but_do_not_count_for_equality() -> None:
    rows = BitMap64([(1 << 32) | 5])
    d1 = Delete([frag(1)], [], "x", affected_rows=rows)
    d2 = Delete([frag(1)], [], "x")
    assert d1 == d2
    assert hash(d1) == hash(d2)
    assert d1.affected_rows == rows
    assert Update(affected_rows=[(2 << 32) | 1]).affected_rows == BitMap64([(2 << 32) | 1])


def test_update_map_semantics() -> None:
    m = UpdateMap({"a": "1", "gone": None})
    assert m.upserted_keys == {"a"}
    assert m.deleted_keys == {"gone"}
    assert m.apply({"gone": "x", "keep": "y"}) == {"a": "1", "keep": "y"}
    assert UpdateMap({"a": "1", "gone": None}, replace=True).apply({"keep": "y"}) == {"a": "1"}


def test_transaction_defaults() -> None:
    t1 = Transaction(3, Append([frag()]))
    t2 = Transaction(3, Append([frag()]))
    assert t1.uuid != t2.uuid
    assert str(uuid_mod.UUID(t1.uuid)) == t1.uuid
    assert t1.tag is None
    assert t1.properties == ()
    assert t1.file_name == f"3-{t1.uuid}.txn"
    t3 = Transaction(
        3, Append([]), uuid="u", tag="", properties={COMMIT_MESSAGE_KEY: "m", "a": "b"}
    )
    assert t3.tag is None
    assert t3.properties == (("__lance_commit_message", "m"), ("a", "b"))
    assert t3.properties_dict == {"a": "b", "__lance_commit_message": "m"}
    assert t3.with_read_version(7).read_version == 7
    assert t3.with_read_version(7).uuid == "u"
    assert t3 == Transaction(
        3, Append(()), uuid="u", properties={"a": "b", COMMIT_MESSAGE_KEY: "m"}
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        t3.read_version = 1  # type: ignore[misc]


def test_update_map_edits_a_protobuf_map_in_place_like_a_dict() -> None:
    """One implementation of the edit: the builder applies it to the manifest's protobuf
    maps (str and bytes values) and ``apply`` to a dict; both give the same result."""
    from txn_engine._proto import table_pb2

    for replace in (False, True):
        edit = UpdateMap({"a": "1", "gone": None, "b": "é"}, replace=replace)
        m = table_pb2.Manifest()
        m.config.update({"keep": "y", "gone": "x"})
        m.schema_metadata.update({"keep": b"y", "gone": b"x"})
        edit.apply_to(m.config)
        edit.apply_to(m.schema_metadata, str.encode)
        expected = edit.apply({"keep": "y", "gone": "x"})
        assert dict(m.config) == expected
        assert dict(m.schema_metadata) == {k: v.encode() for k, v in expected.items()}
    assert expected == {"a": "1", "b": "é"}
    edit = UpdateMap({"absent": None})
    target = {"k": "v"}
    edit.apply_to(target)  # deleting a key that is not there is a no-op
    assert target == {"k": "v"}


def test_overwrite_and_merge_take_the_metadata_their_schema_carries() -> None:
    """A ``pyarrow.Schema`` carries schema-level metadata (``pandas``, a user's keys):
    Overwrite and Merge keep it as their ``schema_metadata`` unless one is given, as
    pylance's operations do; field-level metadata stays on the fields."""
    import pyarrow as pa

    from txn_engine import Merge

    schema = pa.schema(
        [pa.field("id", pa.int64(), metadata={"unit": "cm"})], metadata={"owner": "me"}
    )
    over = Overwrite([frag()], schema)
    assert over.schema_metadata == (("owner", b"me"),)
    assert dict(over.schema[0].metadata) == {"unit": b"cm"}
    assert Overwrite([frag()], schema, schema_metadata={"k": b"v"}).schema_metadata == (
        ("k", b"v"),
    )
    assert Overwrite([frag()], over.schema).schema_metadata == ()  # Lance fields carry none
    assert attrs.evolve(over, fragments=[frag(1)]).schema_metadata == over.schema_metadata
    merge = Merge([frag()], schema)
    assert merge.schema_metadata == (("owner", b"me"),)
    assert Merge([frag()], schema.with_metadata({})).schema_metadata == ()  # clears it
    assert Merge([frag()], merge.schema).schema_metadata is None  # keeps the table's


@pytest.mark.parametrize("metadata", [None, {"owner": b"me"}])
def test_merge_schema_metadata_round_trips_through_the_codec(
    metadata: dict[str, bytes] | None,
) -> None:
    from txn_engine import Merge, transaction_from_proto, transaction_to_proto

    op = Merge([frag()], Overwrite([frag()], []).schema, schema_metadata=metadata)
    txn = Transaction(1, op)
    assert transaction_from_proto(transaction_to_proto(txn)).operation == op
