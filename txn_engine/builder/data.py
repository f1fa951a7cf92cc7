"""Handlers of the data operations: Append, Overwrite, Merge, Project, DataReplacement.

Besides validation and their effect on the manifest, their conflict rules: N1 and N2
(a schema change without ``preserves_nullability`` under rows written against the old
one), K and K2 (Overwrite's config keys), C5 (Merge against schema/field metadata edits),
O1 (the fragments Merge and DataReplacement modify), and DataReplacement's E1-E3 (its
target fragments or fields removed or changed) and P1 (two replacements of one field).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    DEFAULT_DATA_FORMAT,
    TOMBSTONE,
    ManifestState,
    carry_sequences,
    check_existing,
    check_new_fragments,
    check_newly_written,
    check_schema,
    data_format_version,
    extend_sorted,
    field_ids_of,
    find_fragment_index,
    invalid,
    new_fragment_pb,
    sort_fragments,
    uses_stable_row_ids,
)
from txn_engine.builder._handler import Build, Handler
from txn_engine.builder._policy import Predicate, RuleContext, expect
from txn_engine.builder._touches import config_keys, fragments_overlap, replaced_fragment_ids
from txn_engine.builder.index import indexed_fields_replaced
from txn_engine.builder.metadata import metadata_edits_retry
from txn_engine.format.rowids import fresh_version_sequence
from txn_engine.model import Fragment
from txn_engine.ops import Append, DataReplacement, Delete, Merge, Overwrite, Project, Update
from txn_engine.transaction import Transaction


def _existing(current: ManifestState | None) -> ManifestState:
    assert current is not None  # the driver refuses these operations without a dataset
    return current


def nullability_kept(c: RuleContext) -> None:
    """Rule N1: the other (Merge or Project) changed the schema my rows were written
    against; retryable unless it preserves nullability."""
    other = c.other.operation
    if not isinstance(other, (Merge, Project)):
        raise TypeError("N1 applies to Merge/Project only")
    if not other.preserves_nullability:
        c.retry("the schema changed without preserves_nullability")


def _k2(c: RuleContext) -> None:
    config_keys(c)
    if not c.conflicts:
        c.retry("a concurrent Overwrite replaced the table")


def _n2(c: RuleContext) -> None:
    mine = expect(c.mine.operation, Project)
    if not mine.preserves_nullability:
        c.retry("rows were written under the old schema and preserves_nullability is not set")


def _e1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, DataReplacement)
    other = expect(c.other.operation, Delete)
    gone = replaced_fragment_ids(mine) & frozenset(other.deleted_fragment_ids)
    if gone:
        c.incompatible(f"target fragment(s) {sorted(gone)} were removed", fragment_ids=gone)


def _e2(c: RuleContext) -> None:
    mine = expect(c.mine.operation, DataReplacement)
    other = expect(c.other.operation, Update)
    targets = replaced_fragment_ids(mine)
    gone = targets & frozenset(other.removed_fragment_ids)
    if gone:
        c.incompatible(f"target fragment(s) {sorted(gone)} were removed", fragment_ids=gone)
        return
    changed = targets & frozenset(f.id for f in other.updated_fragments)
    if changed:
        c.retry(f"target fragment(s) {sorted(changed)} were updated", fragment_ids=changed)


def _e3(c: RuleContext) -> None:
    mine = expect(c.mine.operation, DataReplacement)
    other = expect(c.other.operation, Project)
    if not other.preserves_nullability:
        c.retry("the schema changed without preserves_nullability")
        return
    kept = {f.id for f in other.schema}
    for r in mine.replacements:
        dropped = set(r.new_file.fields) - kept
        if dropped:
            c.incompatible(
                f"target field(s) {sorted(dropped)} in fragment {r.fragment_id} were dropped",
                fragment_ids=[r.fragment_id],
                field_ids=dropped,
            )
            return


def _p1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, DataReplacement)
    other = expect(c.other.operation, DataReplacement)
    for r in mine.replacements:
        for o in other.replacements:
            if r.fragment_id != o.fragment_id:
                continue
            common = set(r.new_file.fields) & set(o.new_file.fields)
            if common:
                c.retry(
                    f"both replaced field(s) {sorted(common)} of fragment {r.fragment_id}",
                    fragment_ids=[r.fragment_id],
                    field_ids=common,
                )
                return


class AppendHandler(Handler[Append]):
    """Add fragments; unassigned ids (0) continue after the high-water mark."""

    keeps_indices = True
    keeps_fields = True
    only_adds = True

    rules: Mapping[str, Predicate] = MappingProxyType({"N1": nullability_kept})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Append) -> None:
        current = _existing(current)
        check_new_fragments(current, op.fragments, field_ids_of(current.manifest.fields), txn.kind)

    def explicit_ids(self, op: Append) -> Iterable[int]:
        return [f.id for f in op.fragments]

    def apply(self, build: Build, op: Append) -> list[int] | None:
        m = build.manifest
        appended = [
            new_fragment_pb(f, build.ids, m, build.stable, build.version) for f in op.fragments
        ]
        extend_sorted(m, appended)
        return [pb.id for pb in appended]


class OverwriteHandler(Handler[Overwrite]):
    """Replace schema, fragments and indices (creates the dataset when there is none)."""

    replaces_table = True

    creates = True
    rules: Mapping[str, Predicate] = MappingProxyType({"K": config_keys, "K2": _k2})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Overwrite) -> None:
        kind = txn.kind
        check_schema(op.schema, kind, current)
        if op.initial_bases and current is not None:
            raise invalid("Overwrite.initial_bases is only allowed when creating a dataset")
        ids = field_ids_of(op.schema)
        stable = None if current is None else uses_stable_row_ids(current)
        check_new_fragments(None, op.fragments, ids, kind, stable=stable)
        versions = {
            (df.file_major_version, df.file_minor_version) for f in op.fragments for df in f.files
        }
        if len({data_format_version(*v) for v in versions}) > 1:
            raise invalid("Overwrite: data files of different Lance file versions")

    def apply(self, build: Build, op: Overwrite) -> list[int] | None:
        m = build.manifest
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        m.schema_metadata.clear()
        for k, v in op.schema_metadata:
            m.schema_metadata[k] = v
        if build.current is None:  # a new table: whether it has stable row ids is known now
            for f in op.fragments:
                check_newly_written(f, "Overwrite", build.stable)
        del m.fragments[:]
        # pylance 14 gives every fragment of an Overwrite a new id (an id given is ignored),
        # after the high-water mark (Lance 1.0 restarted at 0), so an id is never reused
        # for different data.
        m.fragments.extend(
            new_fragment_pb(f.with_id(0), build.ids, m, build.stable, build.version)
            for f in op.fragments
        )
        build.indices = []
        for k, s in op.config_upsert_values or ():
            m.config[k] = s
        fallback = m.data_format.version if m.HasField("data_format") else DEFAULT_DATA_FORMAT
        m.data_format.file_format = "lance"
        m.data_format.version = _infer_data_format(op.fragments, fallback)
        if build.current is None:
            m.base_paths.extend(b.to_proto() for b in op.initial_bases)
        sort_fragments(m)
        return None


def _infer_data_format(frags: Sequence[Fragment], fallback: str) -> str:
    for frag in frags:
        for df in frag.files:
            return data_format_version(df.file_major_version, df.file_minor_version)
    return fallback


class MergeHandler(Handler[Merge]):
    """Restate every fragment (with new data files) under a new schema."""

    prunes_indices = True
    rules: Mapping[str, Predicate] = MappingProxyType({"C5": metadata_edits_retry})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Merge) -> None:
        current = _existing(current)
        kind = txn.kind
        check_schema(op.schema, kind, current)
        restated, new = _merge_split(current.manifest, op.fragments)
        stable = uses_stable_row_ids(current)
        for existing in current.manifest.fragments:
            listed = restated.get(existing.id)
            if listed is None:
                raise invalid(f"Merge must list every fragment; fragment {existing.id} is missing")
            _check_restated(existing, listed, stable)
        check_new_fragments(current, new, field_ids_of(op.schema), kind, stable=stable)

    def explicit_ids(self, op: Merge) -> Iterable[int]:
        return [f.id for f in op.fragments]

    def apply(self, build: Build, op: Merge) -> list[int] | None:
        m, stable, version = build.manifest, build.stable, build.version
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        if op.schema_metadata is not None:  # None: the table's is kept
            m.schema_metadata.clear()
            for k, v in op.schema_metadata:
                m.schema_metadata[k] = v
        merged: list[table_pb2.DataFragment] = []
        seen: set[int] = set()
        for given in op.fragments:
            pos = -1 if given.id in seen else find_fragment_index(m.fragments, given.id)
            if pos < 0:  # a new fragment (an id 0 after fragment 0 too): as Append's
                merged.append(new_fragment_pb(given, build.ids, m, stable, version))
                continue
            seen.add(given.id)
            pb = given.to_proto()
            old = m.fragments[pos]
            if stable and list(old.files) != list(pb.files):
                # pylance 14: a fragment that gained (or changed) data files was updated
                # at this version; untouched fragments keep their version sequences.
                pb.inline_last_updated_at_versions = fresh_version_sequence(
                    pb.physical_rows, version
                )
            carry_sequences(old, pb)
            merged.append(pb)
        del m.fragments[:]
        m.fragments.extend(merged)
        sort_fragments(m)
        return None


def _merge_split(
    manifest: table_pb2.Manifest, fragments: Sequence[Fragment]
) -> tuple[dict[int, Fragment], list[Fragment]]:
    """A Merge's fragments as pylance 14 reads them: the first one listed with an existing
    fragment's id restates it; the others are new (id 0: assigned at commit, as an
    Append's; another id: reserved). Refused as pylance refuses them: an id other than 0
    listed twice, an existing fragment listed after a new one (an id-0 fragment before
    fragment 0 would be taken for it)."""
    restated: dict[int, Fragment] = {}
    new: list[Fragment] = []
    new_ids: set[int] = set()
    for frag in fragments:
        exists = frag.id not in restated and find_fragment_index(manifest.fragments, frag.id) >= 0
        if exists:
            if new:
                raise invalid(
                    f"Merge lists existing fragment {frag.id} after a new fragment (id "
                    f"{new[0].id}): list every existing fragment first, then the new ones"
                )
            restated[frag.id] = frag
        elif frag.id and (frag.id in restated or frag.id in new_ids):
            raise invalid(
                f"Merge: fragment id {frag.id} listed twice (a new fragment takes id 0, "
                "assigned at commit, or an id of its own)"
            )
        else:
            new_ids.add(frag.id)
            new.append(frag)
    return restated, new


def _check_restated(existing: table_pb2.DataFragment, listed: Fragment, stable: bool) -> None:
    """A Merge's restatement of an existing fragment keeps its rows: the same physical
    rows, its deletion file or none (pylance 14 commits another one, then fails every
    scan: the file is not there), and its stable row ids exactly when the table has them."""
    fid = existing.id
    if listed.physical_rows != existing.physical_rows:
        raise invalid(f"Merge changed physical_rows of fragment {fid}")
    given = listed.deletion_file
    if given is not None and (
        not existing.HasField("deletion_file") or given.to_proto() != existing.deletion_file
    ):
        raise invalid(
            f"Merge: fragment {fid} carries deletion file _deletions/{given.file_name(fid)}, "
            "which is not the one it has: a Merge keeps each fragment's deletions (list "
            "the fragment as the table has it); commit deletions with a Delete"
        )
    if stable and listed.row_id_sequence is None:
        raise invalid(
            f"Merge dropped the stable row ids of existing fragment {fid} (pylance 14 refuses "
            "it): list the fragment with its row_id_sequence, as the table has it; new "
            "fragments (id 0) go after the existing ones"
        )
    if not stable and listed.row_id_sequence is not None:
        raise invalid(
            f"Merge: fragment {fid} carries stable row ids (row_id_sequence), but this table "
            "does not use stable row ids (pylance 14: 'All fragments must have row ids'): "
            "drop its row_id_sequence"
        )


class ProjectHandler(Handler[Project]):
    """Keep a subset of the fields; data files left with no kept field are dropped."""

    prunes_indices = True
    rules: Mapping[str, Predicate] = MappingProxyType({"N2": _n2})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Project) -> None:
        current = _existing(current)
        if not op.schema and current.manifest.fields:
            raise invalid("Project cannot drop every column (pylance: 'Cannot drop all columns')")
        check_schema(op.schema, txn.kind, current)
        extra = field_ids_of(op.schema) - field_ids_of(current.manifest.fields)
        if extra:
            raise invalid(
                f"Project can only keep existing fields; unknown field ids {sorted(extra)}"
            )

    def apply(self, build: Build, op: Project) -> list[int] | None:
        m = build.manifest
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        keep = field_ids_of(op.schema)
        for frag in m.fragments:
            for i in range(len(frag.files) - 1, -1, -1):
                fields = [f for f in frag.files[i].fields if f >= 0]
                if fields and not any(f in keep for f in fields):
                    del frag.files[i]
        return None


class DataReplacementHandler(Handler[DataReplacement]):
    """Replace the data file holding some columns of existing fragments."""

    rules: Mapping[str, Predicate] = MappingProxyType(
        {
            "E1": _e1,
            "E2": _e2,
            "E3": _e3,
            "I2": indexed_fields_replaced,
            "O1": fragments_overlap,
            "P1": _p1,
        }
    )

    def validate(
        self, current: ManifestState | None, txn: Transaction, op: DataReplacement
    ) -> None:
        current = _existing(current)
        check_existing(current, {g.fragment_id for g in op.replacements}, txn.kind)
        field_sets = {g.new_file.fields for g in op.replacements}
        if len(field_sets) > 1:
            raise invalid("DataReplacement: every new file must hold the same fields")

    def apply(self, build: Build, op: DataReplacement) -> list[int] | None:
        m, stable, version = build.manifest, build.stable, build.version
        for group in op.replacements:
            pos = find_fragment_index(m.fragments, group.fragment_id)
            if pos < 0:
                raise invalid(f"DataReplacement: fragment {group.fragment_id} does not exist")
            frag = m.fragments[pos]
            new = group.new_file
            replaced = False
            for df in frag.files:
                if (
                    tuple(df.fields) == new.fields
                    and df.file_major_version == new.file_major_version
                    and df.file_minor_version == new.file_minor_version
                ):
                    df.path = new.path
                    df.file_size_bytes = new.file_size_bytes
                    replaced = True
            if not replaced:
                # pylance 14: the replaced columns are tombstoned (-2) in the files holding
                # them (a file left with only tombstones is dropped later) and the new file
                # is added; a column no file holds (all nulls so far) is simply added
                moved = set(new.fields)
                for df in frag.files:
                    for i, field_id in enumerate(df.fields):
                        if field_id in moved:
                            df.fields[i] = TOMBSTONE
                frag.files.append(new.to_proto())
            if stable:  # pylance 14: every row of the fragment was updated at this version
                frag.inline_last_updated_at_versions = fresh_version_sequence(
                    frag.physical_rows, version
                )
        return [g.fragment_id for g in op.replacements]
