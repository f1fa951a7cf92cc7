"""Handlers of the version-level operations: Restore and Clone. Both take the manifest of
another version whole instead of changing the current one."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from txn_engine._proto import table_pb2
from txn_engine.builder._common import ManifestState, copy_index, invalid, max_fragment_id
from txn_engine.builder._handler import Handler, Sources, Whole
from txn_engine.builder._policy import Predicate
from txn_engine.builder.metadata import metadata_edits_incompatible
from txn_engine.ops import Clone, Restore
from txn_engine.transaction import Transaction


def _needed(source: ManifestState | None, message: str) -> ManifestState:
    if source is None:
        raise invalid(message)
    return source


def _copy(manifest: table_pb2.Manifest) -> table_pb2.Manifest:
    m = table_pb2.Manifest()
    m.CopyFrom(manifest)
    return m


class RestoreHandler(Handler[Restore]):
    """The next version is a copy of an earlier one (writer version and flags included).

    Conflicts: C6 (a concurrent schema/field metadata edit cannot survive it)."""

    replaces_table = True

    rules: Mapping[str, Predicate] = MappingProxyType({"C6": metadata_edits_incompatible})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Restore) -> None:
        assert current is not None  # the driver refuses Restore without a dataset
        if op.version < 1 or op.version > current.manifest.version:
            raise invalid(f"Restore: version {op.version} does not exist")

    def whole(self, current: ManifestState | None, op: Restore, sources: Sources) -> Whole | None:
        source = _needed(sources.restore, "Restore needs the manifest of the version it restores")
        m = _copy(source.manifest)
        indices = [copy_index(i) for i in source.indices]
        if current is not None:
            # pylance 14 keeps the id high-water marks of the latest version, so fragment
            # ids and stable row ids of the abandoned versions are never handed out again.
            high = max_fragment_id(current.manifest)
            restored_high = max_fragment_id(m)
            if high is not None:
                m.max_fragment_id = high if restored_high is None else max(high, restored_high)
            m.next_row_id = max(m.next_row_id, current.manifest.next_row_id)
        return Whole(m, indices, recompute_flags=False)


class CloneHandler(Handler[Clone]):
    """Create a dataset whose files stay in the source: every file and index without a
    base gets the new base that points at the source."""

    replaces_table = True

    creates = True
    only_creates = True

    def validate(self, current: ManifestState | None, txn: Transaction, op: Clone) -> None:
        """Nothing beyond the common checks (the driver refuses a Clone onto a dataset)."""

    def whole(self, current: ManifestState | None, op: Clone, sources: Sources) -> Whole | None:
        source = _needed(sources.clone, "Clone needs the manifest of the version it clones")
        m = _copy(source.manifest)
        new_base = max((b.id for b in m.base_paths), default=-1) + 1
        for frag in m.fragments:
            for df in frag.files:
                if not df.HasField("base_id"):
                    df.base_id = new_base
            if frag.HasField("deletion_file") and not frag.deletion_file.HasField("base_id"):
                frag.deletion_file.base_id = new_base
        base = m.base_paths.add(id=new_base, is_dataset_root=True, path=op.ref_path)
        if op.ref_name is not None:
            base.name = op.ref_name
        indices = []
        for index in source.indices:
            copy = copy_index(index)
            if not copy.HasField("base_id"):
                copy.base_id = new_base
            indices.append(copy)
        if op.branch_name is not None:
            m.branch = op.branch_name
        else:
            m.ClearField("branch")
        return Whole(m, indices)
