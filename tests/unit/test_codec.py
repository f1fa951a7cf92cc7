"""The protobuf codec: per-arm encoders/decoders, legacy forms, unknown operations."""

from __future__ import annotations

import pytest

from txn_engine import (
    Append,
    DataFile,
    Fragment,
    Overwrite,
    Rewrite,
    RewriteGroup,
    Transaction,
    Update,
    UpdateConfig,
    UpdateMap,
    transaction_from_proto,
    transaction_to_proto,
)
from txn_engine._proto import transaction_pb2
from txn_engine.codec import ARM_KINDS, decode_operation, encode_operation, operation_kind_of
from txn_engine.errors import FormatError, UnknownOperationError
from txn_engine.model import MemWal, MemWalId
from txn_engine.ops import OPERATION_KINDS, operation_kind

UUID = "8c1d8a52-63a5-4b27-9d8c-4f4b1f1c2a10"


def frag(fid: int) -> Fragment:
    return Fragment(fid, [DataFile(f"{fid}.lance", [0], [0])], 5)


def test_transaction_header_fields() -> None:
    txn = Transaction(4, Append([frag(0)]), uuid=UUID, tag="t", properties={"k": "v"})
    pb = transaction_to_proto(txn)
    assert (pb.read_version, pb.uuid, pb.tag) == (4, UUID, "t")
    assert dict(pb.transaction_properties) == {"k": "v"}
    assert pb.WhichOneof("operation") == "append"
    assert len(pb.append.fragments) == 1
    assert transaction_from_proto(pb) == txn


def test_empty_operations_still_select_their_arm() -> None:
    for op, arm in [
        (Append([]), "append"),
        (UpdateConfig(), "update_config"),
        (Rewrite([]), "rewrite"),
        (Update(), "update"),
    ]:
        pb = transaction_pb2.Transaction()
        encode_operation(op, pb)
        assert pb.WhichOneof("operation") == arm
        assert decode_operation(pb) == op


def test_absent_or_unknown_operation_is_a_typed_error() -> None:
    pb = transaction_pb2.Transaction(read_version=3, uuid=UUID)
    with pytest.raises(UnknownOperationError, match="read version 3"):
        transaction_from_proto(pb)
    pb.data_overlay.SetInParent()  # pylance 14's DataOverlay (115): not supported
    with pytest.raises(UnknownOperationError):
        transaction_from_proto(pb)
    assert issubclass(UnknownOperationError, FormatError)


def test_operation_kind_of_names_every_arm_without_decoding() -> None:
    """One naming of operation kinds: a message's kind is the decoded operation's kind,
    every Lance kind has its arm, and arms this library cannot decode are named too (the
    history listing shows pylance's DataOverlay versions by name)."""
    assert sorted(ARM_KINDS.values()) == sorted(OPERATION_KINDS)
    assert operation_kind_of(transaction_pb2.Transaction()) is None
    for arm, kind in ARM_KINDS.items():
        pb = transaction_pb2.Transaction()
        getattr(pb, arm).SetInParent()
        assert operation_kind_of(pb) == kind
        assert operation_kind(decode_operation(pb)) == kind
    pb = transaction_pb2.Transaction()
    pb.create_index.SetInParent()
    assert operation_kind_of(pb) == "CreateIndex"
    pb.data_overlay.SetInParent()
    assert operation_kind_of(pb) == "DataOverlay"


def test_legacy_rewrite_fields_become_the_first_group() -> None:
    pb = transaction_pb2.Transaction(uuid=UUID)
    pb.rewrite.old_fragments.add().CopyFrom(frag(1).to_proto())
    pb.rewrite.new_fragments.add().CopyFrom(frag(0).to_proto())
    group = pb.rewrite.groups.add()
    group.old_fragments.add().CopyFrom(frag(2).to_proto())
    op = decode_operation(pb)
    assert op == Rewrite([RewriteGroup([frag(1)], [frag(0)]), RewriteGroup([frag(2)], [])])


def test_legacy_update_config_is_translated() -> None:
    pb = transaction_pb2.Transaction(uuid=UUID)
    c = pb.update_config
    c.upsert_values["a"] = "1"
    c.delete_keys.append("gone")
    c.schema_metadata["s"] = "x"
    c.field_metadata[3].metadata["f"] = "y"
    op = decode_operation(pb)
    assert op == UpdateConfig(
        config_updates=UpdateMap({"a": "1", "gone": None}),
        schema_metadata_updates=UpdateMap({"s": "x"}, replace=True),
        field_metadata_updates={3: UpdateMap({"f": "y"}, replace=True)},
    )
    # re-encoded in the current form only
    again = transaction_pb2.Transaction()
    encode_operation(op, again)
    assert len(again.update_config.upsert_values) == 0
    assert again.update_config.HasField("config_updates")


def test_mixing_legacy_and_current_update_config_is_an_error() -> None:
    pb = transaction_pb2.Transaction(uuid=UUID)
    pb.update_config.upsert_values["a"] = "1"
    pb.update_config.config_updates.update_entries.add(key="b", value="2")
    with pytest.raises(FormatError, match="mixes"):
        decode_operation(pb)


def test_update_map_entry_without_value_deletes() -> None:
    op = UpdateConfig(config_updates=UpdateMap({"a": None, "b": "", "c": "3"}, replace=True))
    pb = transaction_pb2.Transaction()
    encode_operation(op, pb)
    entries = {
        e.key: (e.HasField("value"), e.value)
        for e in pb.update_config.config_updates.update_entries
    }
    assert entries == {"a": (False, ""), "b": (True, ""), "c": (True, "3")}
    assert pb.update_config.config_updates.replace
    assert decode_operation(pb) == op


def test_overwrite_config_absent_and_present() -> None:
    for values in (None, {"k": "v"}):
        op = Overwrite([frag(0)], [], config_upsert_values=values)
        pb = transaction_pb2.Transaction()
        encode_operation(op, pb)
        assert dict(pb.overwrite.config_upsert_values) == (values or {})
        assert decode_operation(pb) == op


def test_in_memory_only_fields_are_not_serialized() -> None:
    op = Update(
        removed_fragment_ids=[1],
        mem_wal_to_merge=MemWal(MemWalId("r", 1)),
        affected_rows=[(1 << 32) | 4],
    )
    pb = transaction_pb2.Transaction()
    encode_operation(op, pb)
    back = decode_operation(pb)
    assert isinstance(back, Update)
    assert back.mem_wal_to_merge is None
    assert back.affected_rows is None
    assert back.removed_fragment_ids == (1,)
    assert not pb.update.compacted_sstables  # field 5 is pylance 14's compacted_sstables
