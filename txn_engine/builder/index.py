"""Handlers of the index operations: CreateIndex and UpdateMemWalState.

Besides validation and their effect on the manifest, their conflict rules: F1 (two new
indices of one name), I1 (a Rewrite moved fragments my index covers; W1, the Rewrite's side
of it, uses :func:`index_vs_rewrite` too), I2 (indexed fields replaced, either direction),
and the MemWAL rules M2 and M3 (:func:`same_mem_wal`, which the Update's M1 uses).
"""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    MEM_WAL_INDEX,
    SYSTEM_INDICES,
    ManifestState,
    field_ids_of,
    invalid,
    max_fragment_id,
)
from txn_engine.builder._handler import Build, Handler
from txn_engine.builder._policy import Predicate, RuleContext, expect
from txn_engine.format.schema import max_field_id as max_field_id_ever
from txn_engine.model import MemWal, uuid_bytes
from txn_engine.ops import CreateIndex, DataReplacement, Rewrite, Update, UpdateMemWalState
from txn_engine.transaction import Transaction

#: the latest index creation time (ms since 1970) Lance turns into a date: the end of the
#: year 262142, chrono's range; pylance 14 panics listing indices from one past it
MAX_INDEX_CREATED_AT_MS = 8_210_266_876_799_999


def _f1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, CreateIndex)
    other = expect(c.other.operation, CreateIndex)
    same = {i.name for i in mine.new_indices} & {i.name for i in other.new_indices}
    if same:
        c.retry(f"both created index(es) named {sorted(same)}", index_names=same)


def _bitmap_union(indices: Iterable[object]) -> set[int] | None:
    out: set[int] = set()
    for idx in indices:
        bitmap = getattr(idx, "fragment_bitmap", None)
        if bitmap is None:
            return None
        out |= bitmap
    return out


def index_vs_rewrite(
    c: RuleContext, index: CreateIndex, rewrite: Rewrite, moved_reason: str
) -> None:
    """I1 and W1: retryable when the rewrite moved a fragment the new index covers (or the
    index covers unknown fragments). ``moved_reason`` is formatted with ``{ids}``."""
    covered = _bitmap_union(index.new_indices)
    if covered is None:
        c.retry(
            "a new index has no fragment bitmap", index_names=[i.name for i in index.new_indices]
        )
        return
    moved = rewrite.old_fragment_ids & covered
    if moved:
        c.retry(moved_reason.format(ids=sorted(moved)), fragment_ids=moved)


def _i1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, CreateIndex)
    other = expect(c.other.operation, Rewrite)
    index_vs_rewrite(c, mine, other, "the rewrite moved indexed fragment(s) {ids}")


def indexed_fields_replaced(c: RuleContext) -> None:
    """Rule I2 (CreateIndex vs DataReplacement, either side mine): retryable when a
    replaced file's fields are indexed by the new indices."""
    a, b = c.mine.operation, c.other.operation
    index_op, repl_op = (a, b) if isinstance(a, CreateIndex) else (b, a)
    index_op = expect(index_op, CreateIndex)
    repl_op = expect(repl_op, DataReplacement)
    indexed = {f for idx in index_op.new_indices for f in idx.fields}
    replaced = {f for r in repl_op.replacements for f in r.new_file.fields}
    common = indexed & replaced
    if common:
        c.retry(f"field(s) {sorted(common)} are both indexed and replaced", field_ids=common)


def same_mem_wal(c: RuleContext, committed: tuple[MemWal, ...], mine: tuple[MemWal, ...]) -> bool:
    """Lance's pairwise MemWAL check; records a conflict and returns True on a clash."""
    if not committed or not mine:
        return False
    if len(committed) > 1 or len(mine) > 1:
        c.incompatible("committing more than one MemWAL at a time is not supported")
        return True
    if committed[0].id == mine[0].id:
        c.incompatible(
            f"both changed MemWAL {committed[0].id.region}/{committed[0].id.generation}",
            keys=[f"{committed[0].id.region}/{committed[0].id.generation}"],
        )
        return True
    return False


def _m2(c: RuleContext) -> None:
    other = expect(c.other.operation, Update)
    if other.mem_wal_to_merge is None:
        c.incompatible("the Update merged no MemWAL")


def _m3(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateMemWalState)
    other = expect(c.other.operation, UpdateMemWalState)
    if not (other.added or other.updated) or not (mine.added or mine.updated):
        return
    for committed, to_commit in (
        (other.added, mine.added),
        (other.added, mine.updated),
        (other.updated, mine.added),
        (other.updated, mine.updated),
    ):
        if same_mem_wal(c, committed, to_commit):
            return


class CreateIndexHandler(Handler[CreateIndex]):
    """Add index segments and remove others by uuid; fragments are left alone.

    pylance 14.0.2 checks none of the rules below (measured: it commits an index over a
    fragment id never written, over field ids absent from the schema, or the same uuid
    twice); each of them would leave a manifest that describes indices wrongly:

    * every fragment id of a new index's bitmap exists or existed (at most the id
      high-water mark): a higher id would claim coverage of rows a later Append writes;
    * every field id of a new (non-system) index is in the schema or was dropped from
      it since the writer read (a concurrent Project; the index is then dropped like any
      index on a dropped field); an id the dataset never used is refused;
    * no uuid appears twice among the new indices (a re-added existing uuid replaces its
      entry, as in pylance 14).

    Removing a uuid that is not there is allowed: a concurrent CreateIndex may have
    removed it already.
    """

    keeps_fields = True

    touches_fragments = False
    rules: Mapping[str, Predicate] = MappingProxyType(
        {"F1": _f1, "I1": _i1, "I2": indexed_fields_replaced}
    )

    def validate(self, current: ManifestState | None, txn: Transaction, op: CreateIndex) -> None:
        assert current is not None  # the driver refuses CreateIndex without a dataset
        manifest = current.manifest
        high = max_fragment_id(manifest)
        schema_ids = field_ids_of(manifest.fields)
        ever: list[int] = []  # max field id ever used, computed lazily
        seen: set[str] = set()
        for index in op.new_indices:
            key = str(uuid_mod.UUID(bytes=uuid_bytes(index.uuid, "CreateIndex: a new index")))
            if key in seen:
                raise invalid(f"CreateIndex: uuid {key} is given to two new indices")
            seen.add(key)
            if index.created_at is not None and index.created_at > MAX_INDEX_CREATED_AT_MS:
                # pylance 14 panics listing the table's indices ("Invalid timestamp in
                # index metadata", measured) from one past this on
                raise invalid(
                    f"CreateIndex: index {index.name!r} created_at {index.created_at} is past "
                    f"the latest time Lance reads ({MAX_INDEX_CREATED_AT_MS} ms since 1970)"
                )
            if index.fragment_bitmap:
                beyond = sorted(f for f in index.fragment_bitmap if high is None or f > high)
                if beyond:
                    raise invalid(
                        f"CreateIndex: index {index.name!r} covers fragments {beyond} that "
                        f"never existed (the highest fragment id is {high})"
                    )
            if index.name in SYSTEM_INDICES:
                continue  # a system index's field ids do not name columns
            unknown = [f for f in index.fields if f not in schema_ids]
            if unknown:
                if not ever:
                    ever.append(max_field_id_ever(manifest))
                unknown = [f for f in unknown if f < 0 or f > ever[0]]
            if unknown:
                raise invalid(
                    f"CreateIndex: index {index.name!r} is on field ids {unknown} that the "
                    "dataset schema does not hold and never held"
                )

    def apply(self, build: Build, op: CreateIndex) -> list[int] | None:
        # pylance 14 removes exactly the listed uuids: a new index with the name of an
        # existing one is another segment of it (delta index), not a replacement (Lance
        # 1.0 replaced by name; measured). A re-added uuid replaces its old entry.
        removed = {
            uuid_bytes(i.uuid, "CreateIndex: an index")
            for i in (*op.removed_indices, *op.new_indices)
        }
        build.indices = [i for i in build.indices if i.uuid.uuid not in removed]
        build.indices.extend(i.to_proto() for i in op.new_indices)
        return None


class UpdateMemWalStateHandler(Handler[UpdateMemWalState]):
    """Always refused by :func:`~txn_engine.builder.validate`; not exported from
    :mod:`txn_engine` (the type stays in :mod:`txn_engine.ops` for decoding and the conflict
    rules of transactions other writers commit).

    pylance 14.0.2 redesigned both this transaction and the ``__lance_mem_wal`` index
    details: a Lance-1.0-layout MemWAL index makes every later pylance 14 write fail to
    decode it, and pylance 14 no longer carries ``Update.mem_wal_to_merge`` on the wire.
    :meth:`apply` builds the Lance 1.0 layout for callers that skip validation knowingly.
    """

    touches_fragments = False
    rules: Mapping[str, Predicate] = MappingProxyType({"M2": _m2, "M3": _m3})

    def validate(
        self, current: ManifestState | None, txn: Transaction, op: UpdateMemWalState
    ) -> None:
        # pylance 14.0.2 redesigned both this transaction and the __lance_mem_wal index
        # details (docs/format-notes.md): a Lance-1.0-layout MemWAL index makes every later
        # pylance 14 write fail to decode it. Refuse rather than break the dataset.
        raise invalid(
            "UpdateMemWalState: pylance 14 uses a different MemWAL index layout; committing "
            "the Lance 1.0 layout would make the dataset unwritable for pylance 14"
        )

    def apply(self, build: Build, op: UpdateMemWalState) -> list[int] | None:
        build.indices = _mem_wal_index(build.indices, op, build.version)
        return None


def _mem_wal_index(
    indices: list[table_pb2.IndexMetadata], op: UpdateMemWalState, version: int
) -> list[table_pb2.IndexMetadata]:
    existing = next((i for i in indices if i.name == MEM_WAL_INDEX), None)
    details = table_pb2.MemWalIndexDetails()
    if existing is not None:
        details.ParseFromString(existing.index_details.value)
    elif op.updated or op.removed:
        raise invalid("UpdateMemWalState: no MemWAL index to update")
    removed = {(w.id.region, w.id.generation) for w in (*op.removed, *op.updated)}
    kept = [w for w in details.mem_wal_list if (w.id.region, w.id.generation) not in removed]
    for wal in (*op.added, *op.updated):
        pb = attrs.evolve(wal, last_updated_dataset_version=version).to_proto()
        kept.append(pb)
    new_details = table_pb2.MemWalIndexDetails(mem_wal_list=kept)
    index = table_pb2.IndexMetadata(name=MEM_WAL_INDEX, dataset_version=version)
    index.uuid.uuid = uuid_mod.uuid4().bytes
    index.index_details.type_url = "/lance.table.MemWalIndexDetails"
    index.index_details.value = new_details.SerializeToString()
    return [i for i in indices if i.name != MEM_WAL_INDEX] + [index]
