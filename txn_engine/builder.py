"""The pure manifest builder: (current manifest, transaction, version) -> next manifest.

No I/O happens here. Manifests stay protobuf messages (upb, C speed); only the fragments a
transaction carries are converted. Fragments are kept sorted by id, so lookups are binary
searches over the repeated field, never a dict of every fragment.

:func:`validate` raises :class:`~txn_engine.errors.InvalidOperationError` before anything
is written; :func:`build_manifest` assumes a validated transaction but still refuses
anything that would produce an unreadable manifest.
"""

from __future__ import annotations

import time
import uuid as uuid_mod
from collections.abc import Iterable, Sequence

import attrs
from pyroaring import BitMap

from txn_engine._proto import file_pb2, table_pb2
from txn_engine._version import __version__
from txn_engine.errors import InvalidOperationError, LimitExceededError
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS, compute_feature_flags
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    decode_version_sequence,
    encode_row_id_sequence,
    encode_version_sequence,
    fresh_row_id_sequence,
    fresh_version_sequence,
)
from txn_engine.format.schema import max_field_id as _max_field_id
from txn_engine.model import Fragment, LanceField
from txn_engine.ops import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMemWalState,
)
from txn_engine.transaction import Transaction

__all__ = [
    "DEFAULT_DATA_FORMAT",
    "FRAG_REUSE_INDEX",
    "MEM_WAL_INDEX",
    "WRITER_LIBRARY",
    "ManifestState",
    "build_manifest",
    "find_fragment_index",
    "fragment_ids",
    "max_fragment_id",
    "retain_relevant_indices",
    "validate",
]

WRITER_LIBRARY = "txn_engine"
#: Data storage version of new datasets with no data files (what pylance 14.0.2 writes).
DEFAULT_DATA_FORMAT = "2.2"
FRAG_REUSE_INDEX = "__lance_frag_reuse"
MEM_WAL_INDEX = "__lance_mem_wal"
_SYSTEM_INDICES = frozenset({FRAG_REUSE_INDEX, MEM_WAL_INDEX})
_TOMBSTONE = -2


@attrs.frozen
class ManifestState:
    """A version's manifest and its index list (what a manifest file holds)."""

    manifest: table_pb2.Manifest
    indices: tuple[table_pb2.IndexMetadata, ...] = ()


def _writer_version() -> table_pb2.Manifest.WriterVersion:
    return table_pb2.Manifest.WriterVersion(library=WRITER_LIBRARY, version=__version__)


# ---- fragment lookups (binary search over the sorted repeated field) ------------------------


def find_fragment_index(fragments: Sequence[table_pb2.DataFragment], fragment_id: int) -> int:
    """Position of ``fragment_id`` in an id-sorted fragment list, or -1."""
    lo, hi = 0, len(fragments)
    while lo < hi:
        mid = (lo + hi) // 2
        mid_id = fragments[mid].id
        if mid_id < fragment_id:
            lo = mid + 1
        elif mid_id > fragment_id:
            hi = mid
        else:
            return mid
    return -1


def fragment_ids(manifest: table_pb2.Manifest) -> BitMap:
    """Ids of every fragment (walks the list; use only off the hot path)."""
    return BitMap(f.id for f in manifest.fragments)


def max_fragment_id(manifest: table_pb2.Manifest) -> int | None:
    """The high-water mark: the stored one, else the largest id present, else None."""
    stored = manifest.max_fragment_id if manifest.HasField("max_fragment_id") else None
    present = manifest.fragments[-1].id if len(manifest.fragments) else None
    if stored is None:
        return present
    if present is None:
        return stored
    return max(stored, present)


def _schema_ids(fields: Iterable[file_pb2.Field] | Iterable[LanceField]) -> set[int]:
    return {f.id for f in fields}


def _data_format_version(major: int, minor: int) -> str:
    if major == 0:
        return "2.0" if minor == 3 else "0.1"
    return f"{major}.{minor}"


def _format_matches(data_format: str, major: int, minor: int) -> bool:
    declared = data_format.lower()
    actual = _data_format_version(major, minor)
    if declared in ("legacy", "0.1"):
        return actual == "0.1"
    if declared in ("stable", "next"):
        return actual != "0.1"
    return declared == actual


# ---- validation -------------------------------------------------------------------------------


def _invalid(message: str) -> InvalidOperationError:
    return InvalidOperationError(message)


def _check_new_fragments(
    current: ManifestState | None, fragments: Sequence[Fragment], schema_ids: set[int], what: str
) -> None:
    seen: set[int] = set()
    data_format = (
        current.manifest.data_format.version
        if current is not None and current.manifest.HasField("data_format")
        else None
    )
    ever_used: list[int] = []  # max field id ever used by the dataset, computed lazily
    for frag in fragments:
        if frag.physical_rows < 0:
            raise _invalid(f"{what}: fragment has negative physical_rows")
        if frag.id:
            if frag.id in seen:
                raise _invalid(f"{what}: duplicate fragment id {frag.id}")
            seen.add(frag.id)
            if (
                current is not None
                and find_fragment_index(current.manifest.fragments, frag.id) >= 0
            ):
                raise _invalid(f"{what}: fragment id {frag.id} is already in use")
        if not frag.files:
            raise _invalid(f"{what}: fragment {frag.id} has no data files")
        for df in frag.files:
            unknown = [f for f in df.fields if f >= 0 and f not in schema_ids]
            if unknown and current is not None:
                # ids of columns dropped since the writer planned (a concurrent Project) are
                # fine: readers ignore them, and pylance 14 accepts such files too
                if not ever_used:
                    ever_used.append(_max_field_id(current.manifest))
                unknown = [f for f in unknown if f > ever_used[0]]
            if unknown:
                raise _invalid(
                    f"{what}: data file {df.path} holds field ids {unknown} that are not in the "
                    "dataset schema and were never used by it (schema mismatch)"
                )
            if df.column_indices and len(df.column_indices) != len(df.fields):
                raise _invalid(
                    f"{what}: data file {df.path} has {len(df.fields)} fields but "
                    f"{len(df.column_indices)} column indices"
                )
            if data_format and not _format_matches(
                data_format, df.file_major_version, df.file_minor_version
            ):
                raise _invalid(
                    f"{what}: data file {df.path} is Lance file format "
                    f"{_data_format_version(df.file_major_version, df.file_minor_version)}, "
                    f"the dataset stores {data_format} (data-format mismatch)"
                )


def _check_existing(current: ManifestState, ids: Iterable[int], what: str) -> None:
    seen: set[int] = set()
    for fid in ids:
        if fid in seen:
            raise _invalid(f"{what}: fragment id {fid} listed twice")
        seen.add(fid)
        if find_fragment_index(current.manifest.fragments, fid) < 0:
            raise _invalid(
                f"{what}: fragment {fid} does not exist in version {current.manifest.version}"
            )


def _check_schema(fields: Sequence[LanceField], what: str) -> None:
    ids: set[int] = set()
    for f in fields:
        if f.id < 0:
            raise _invalid(f"{what}: field {f.name!r} has no id")
        if f.id in ids:
            raise _invalid(f"{what}: duplicate field id {f.id}")
        if f.parent_id != -1 and f.parent_id not in ids:
            raise _invalid(f"{what}: field {f.name!r} comes before its parent {f.parent_id}")
        ids.add(f.id)


def validate(current: ManifestState | None, txn: Transaction) -> None:
    """Raise InvalidOperationError if ``txn`` cannot apply to ``current`` (None: no dataset).

    Checks fragment ids (unknown, duplicate, reused), schema and data-format consistency and
    the per-operation rules (Merge keeps every fragment, Clone only creates, ...).
    """
    op = txn.operation
    kind = txn.kind
    if current is None:
        if not isinstance(op, (Overwrite, Clone)):
            raise _invalid(f"{kind} needs an existing dataset; create one with Overwrite first")
    elif isinstance(op, Clone):
        raise _invalid("Clone only creates a dataset; the target already holds one")
    if current is not None and txn.read_version > current.manifest.version:
        raise _invalid(
            f"read_version {txn.read_version} is newer than the latest version "
            f"{current.manifest.version}"
        )
    schema_ids = _schema_ids(current.manifest.fields) if current is not None else set()
    if isinstance(op, Append):
        assert current is not None
        _check_new_fragments(current, op.fragments, schema_ids, kind)
    elif isinstance(op, Overwrite):
        _check_schema(op.schema, kind)
        if op.initial_bases and current is not None:
            raise _invalid("Overwrite.initial_bases is only allowed when creating a dataset")
        ids = _schema_ids(op.schema)
        _check_new_fragments(None, op.fragments, ids, kind)
        versions = {
            (df.file_major_version, df.file_minor_version) for f in op.fragments for df in f.files
        }
        if len({_data_format_version(*v) for v in versions}) > 1:
            raise _invalid("Overwrite: data files of different Lance file versions")
    elif isinstance(op, (Delete, Update)):
        assert current is not None
        removed = op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids
        updated = [f.id for f in op.updated_fragments]
        both = set(removed) & set(updated)
        if both:
            raise _invalid(f"{kind}: fragments {sorted(both)} are both updated and removed")
        _check_existing(current, [*removed, *updated], kind)
        for frag in op.updated_fragments:
            pos = find_fragment_index(current.manifest.fragments, frag.id)
            if frag.physical_rows != current.manifest.fragments[pos].physical_rows:
                raise _invalid(f"{kind}: fragment {frag.id} changed physical_rows")
        if isinstance(op, Update):
            _check_new_fragments(current, op.new_fragments, schema_ids, kind)
    elif isinstance(op, Merge):
        assert current is not None
        _check_schema(op.schema, kind)
        given: dict[int, Fragment] = {}
        for frag in op.fragments:
            if frag.id in given:
                raise _invalid(f"Merge: fragment id {frag.id} listed twice")
            given[frag.id] = frag
        for existing in current.manifest.fragments:
            listed = given.get(existing.id)
            if listed is None:
                raise _invalid(f"Merge must list every fragment; fragment {existing.id} is missing")
            if listed.physical_rows != existing.physical_rows:
                raise _invalid(f"Merge changed physical_rows of fragment {existing.id}")
    elif isinstance(op, Project):
        assert current is not None
        _check_schema(op.schema, kind)
        extra = _schema_ids(op.schema) - schema_ids
        if extra:
            raise _invalid(
                f"Project can only keep existing fields; unknown field ids {sorted(extra)}"
            )
    elif isinstance(op, Rewrite):
        assert current is not None
        olds = [f.id for g in op.groups for f in g.old_fragments]
        _check_existing(current, olds, kind)
        stable = bool(current.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
        for group in op.groups:
            if not group.old_fragments:
                raise _invalid("Rewrite: a group has no old fragments")
            _check_new_fragments(current, group.new_fragments, schema_ids, kind)
            if stable and any(f.row_id_sequence is None for f in group.new_fragments):
                raise _invalid(
                    "Rewrite on a stable-row-id dataset: every new fragment must carry the "
                    "row ids of the rows it took over (row_id_sequence)"
                )
        known = {bytes(i.uuid.uuid) for i in current.indices}
        for ri in op.rewritten_indices:
            if uuid_mod.UUID(ri.old_id).bytes not in known:
                raise _invalid(f"Rewrite: rewritten index {ri.old_id} does not exist")
    elif isinstance(op, DataReplacement):
        assert current is not None
        _check_existing(current, {g.fragment_id for g in op.replacements}, kind)
        field_sets = {g.new_file.fields for g in op.replacements}
        if len(field_sets) > 1:
            raise _invalid("DataReplacement: every new file must hold the same fields")
    elif isinstance(op, Restore):
        assert current is not None
        if op.version < 1 or op.version > current.manifest.version:
            raise _invalid(f"Restore: version {op.version} does not exist")
    elif isinstance(op, ReserveFragments):
        if op.num_fragments < 0:
            raise _invalid("ReserveFragments: num_fragments must be >= 0")
    elif isinstance(op, UpdateConfig):
        assert current is not None
        for field_id, _ in op.field_metadata_updates:
            if field_id not in schema_ids:
                raise _invalid(f"UpdateConfig: field with id {field_id} does not exist")
    elif isinstance(op, UpdateBases):
        assert current is not None
        _merge_bases(current.manifest, op)  # raises on name/path clashes
    elif isinstance(op, UpdateMemWalState):
        # pylance 14.0.2 redesigned both this transaction and the __lance_mem_wal index
        # details (docs/format-notes.md): a Lance-1.0-layout MemWAL index makes every later
        # pylance 14 write fail to decode it. Refuse rather than break the dataset.
        raise _invalid(
            "UpdateMemWalState: pylance 14 uses a different MemWAL index layout; committing "
            "the Lance 1.0 layout would make the dataset unwritable for pylance 14"
        )


# ---- index retention (lance-format.md §6.2) ---------------------------------------------------


def _bitmap(index: table_pb2.IndexMetadata) -> BitMap | None:
    return BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else None


def _covers_an_existing_fragment(
    index: table_pb2.IndexMetadata, fragments: Sequence[table_pb2.DataFragment]
) -> bool:
    bm = _bitmap(index)
    if bm is None:
        return False
    return any(find_fragment_index(fragments, fid) >= 0 for fid in bm)


def retain_relevant_indices(
    indices: Sequence[table_pb2.IndexMetadata],
    schema_ids: set[int],
    fragments: Sequence[table_pb2.DataFragment],
) -> list[table_pb2.IndexMetadata]:
    """Indices that survive a change of fragments or schema (``fragments`` sorted by id).

    Indices on a field that left the schema are dropped (system indices exempt). Among
    same-name indices (segments), those whose bitmap covers no existing fragment are
    dropped, unless all are such: then the oldest is kept. pylance 14.0.2 applies this to
    vector indices too and keeps a lone empty index (Lance 1.0 dropped empty vector
    indices; measured). Bitmaps themselves are left alone.
    """
    if not indices:
        return []
    kept = [
        i for i in indices if i.name in _SYSTEM_INDICES or all(f in schema_ids for f in i.fields)
    ]
    groups: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in kept:
        if index.name != FRAG_REUSE_INDEX:
            groups.setdefault(index.name, []).append(index)
    drop: set[int] = set()
    for group in groups.values():
        if len(group) == 1:
            continue
        non_empty = [i for i in group if _covers_an_existing_fragment(i, fragments)]
        if non_empty:
            keep = {id(i) for i in non_empty}
        else:
            keep = {id(min(group, key=lambda i: i.dataset_version))}
        drop.update(id(i) for i in group if id(i) not in keep)
    return [i for i in kept if id(i) not in drop]


# ---- the builder -------------------------------------------------------------------------------


class _Ids:
    """Hands out fragment ids for fragments that arrive unassigned (id 0), skipping ids
    the same transaction gives explicitly (so the two can never collide)."""

    def __init__(self, start: int, explicit: Iterable[int] = ()) -> None:
        self.next = start
        self._explicit = {i for i in explicit if i}

    def take(self) -> int:
        while self.next in self._explicit:
            self.next += 1
        value = self.next
        self.next += 1
        return value


def _explicit_ids(op: object) -> list[int]:
    if isinstance(op, (Append, Overwrite)):
        return [f.id for f in op.fragments]
    if isinstance(op, Update):
        return [f.id for f in op.new_fragments]
    if isinstance(op, Rewrite):
        return [f.id for g in op.groups for f in g.new_fragments]
    return []


def _extend_sorted(m: table_pb2.Manifest, new: Sequence[table_pb2.DataFragment]) -> None:
    """Append fragments and keep the list sorted by id: a plain append when the new ids
    come after the last one in order (the usual case), a full sort otherwise."""
    last = m.fragments[-1].id if len(m.fragments) else -1
    in_order = True
    for pb in new:
        if pb.id <= last:
            in_order = False
        last = max(last, pb.id)
    m.fragments.extend(new)
    if not in_order:
        _sort_fragments(m)


def _new_fragment_pb(
    frag: Fragment, ids: _Ids, m: table_pb2.Manifest, stable: bool, version: int
) -> table_pb2.DataFragment:
    pb = frag.to_proto()
    if pb.id == 0:
        pb.id = ids.take()
    if stable:
        _assign_row_ids(pb, m)
        if pb.WhichOneof("last_updated_at_version_sequence") is None:
            pb.inline_last_updated_at_versions = fresh_version_sequence(pb.physical_rows, version)
        if pb.WhichOneof("created_at_version_sequence") is None:
            pb.inline_created_at_versions = fresh_version_sequence(pb.physical_rows, version)
    return pb


def _assign_row_ids(pb: table_pb2.DataFragment, m: table_pb2.Manifest) -> None:
    """Give ``pb`` stable row ids from ``m.next_row_id``: all of them when it has none, the
    missing tail when its inline sequence is shorter than its rows (merge-insert inserts)."""
    if pb.WhichOneof("row_id_sequence") is None:
        pb.inline_row_ids = fresh_row_id_sequence(m.next_row_id, pb.physical_rows)
        m.next_row_id += pb.physical_rows
    elif pb.HasField("inline_row_ids"):
        existing = decode_row_id_sequence(pb.inline_row_ids)
        missing = pb.physical_rows - len(existing)
        if missing < 0:
            raise _invalid(
                f"fragment {pb.id} has {len(existing)} row ids but {pb.physical_rows} rows"
            )
        if missing:
            existing.extend(range(m.next_row_id, m.next_row_id + missing))
            m.next_row_id += missing
            pb.inline_row_ids = encode_row_id_sequence(existing)


def _expand_runs(data: bytes, n_rows: int) -> list[int]:
    versions: list[int] = []
    for count, v in decode_version_sequence(data):
        versions.extend([v] * count)
    if len(versions) < n_rows:
        versions.extend([1] * (n_rows - len(versions)))
    return versions


class _CreatedAt:
    """Created-at version of existing rows by stable row id (for rows an Update moves).

    Looks in the fragments the update touched first and scans the others only for ids it
    did not find there (which a well-formed Update never needs).
    """

    def __init__(self, manifest: table_pb2.Manifest, touched: Iterable[int]) -> None:
        self._manifest = manifest
        self._touched = sorted(set(touched))

    def _scan(self, frag: table_pb2.DataFragment, wanted: set[int], out: dict[int, int]) -> None:
        if not frag.HasField("inline_row_ids"):
            return
        row_ids = decode_row_id_sequence(frag.inline_row_ids)
        if wanted.isdisjoint(row_ids):
            return
        if frag.HasField("inline_created_at_versions"):
            versions = _expand_runs(frag.inline_created_at_versions, len(row_ids))
        else:
            versions = [1] * len(row_ids)
        for offset, row_id in enumerate(row_ids):
            if row_id in wanted:
                out[row_id] = versions[offset]
                wanted.discard(row_id)

    def lookup(self, row_ids: Iterable[int]) -> dict[int, int]:
        wanted = set(row_ids)
        out: dict[int, int] = {}
        frags = self._manifest.fragments
        for fid in self._touched:
            if not wanted:
                return out
            pos = find_fragment_index(frags, fid)
            if pos >= 0:
                self._scan(frags[pos], wanted, out)
        if wanted:
            touched = set(self._touched)
            for frag in frags:
                if not wanted:
                    break
                if frag.id not in touched:
                    self._scan(frag, wanted, out)
        return out


def _update_new_fragments(
    current: table_pb2.Manifest,
    m: table_pb2.Manifest,
    indices: list[table_pb2.IndexMetadata],
    op: Update,
    ids: _Ids,
    stable: bool,
    version: int,
) -> list[table_pb2.DataFragment]:
    """New fragments of an Update with ids and, on stable-row-id datasets, row ids and
    version sequences: rows that carry their old row id keep their created-at version,
    inserted rows are created now; every row was last updated now (pylance 14)."""
    # Lance's "register pure rewritten fragments in index bitmaps" step is not applied:
    # pylance 14.0.2 never applies it on its own commit path (measured), and index
    # bitmaps must match what it writes.
    out = []
    touched = [*op.removed_fragment_ids, *(f.id for f in op.updated_fragments)]
    created_at = _CreatedAt(current, touched) if stable else None
    for frag in op.new_fragments:
        pb = frag.to_proto()
        if pb.id == 0:
            pb.id = ids.take()
        if created_at is not None:
            carried = (
                decode_row_id_sequence(pb.inline_row_ids) if pb.HasField("inline_row_ids") else []
            )
            known = created_at.lookup(carried) if carried else {}
            _assign_row_ids(pb, m)
            runs = [(1, known.get(row_id, version)) for row_id in carried]
            runs.append((pb.physical_rows - len(carried), version))
            pb.inline_created_at_versions = encode_version_sequence(runs)
            pb.inline_last_updated_at_versions = fresh_version_sequence(pb.physical_rows, version)
        out.append(pb)
    return out


def _sort_fragments(m: table_pb2.Manifest) -> None:
    frags = list(m.fragments)
    if all(frags[i].id < frags[i + 1].id for i in range(len(frags) - 1)):
        return
    ordered = sorted((f for f in frags), key=lambda f: f.id)
    copies = [table_pb2.DataFragment() for _ in ordered]
    for dst, src in zip(copies, ordered, strict=True):
        dst.CopyFrom(src)
    del m.fragments[:]
    m.fragments.extend(copies)


def _drop_tombstoned(m: table_pb2.Manifest, only: list[int] | None) -> None:
    if only is None:
        for frag in m.fragments:
            _drop_tombstoned_files(frag)
        return
    for fid in only:
        pos = find_fragment_index(m.fragments, fid)
        if pos >= 0:
            _drop_tombstoned_files(m.fragments[pos])


def _drop_tombstoned_files(frag: table_pb2.DataFragment) -> None:
    for i in range(len(frag.files) - 1, -1, -1):
        fields = frag.files[i].fields
        if len(fields) and all(f == _TOMBSTONE for f in fields):
            del frag.files[i]


def _remove_fragments(m: table_pb2.Manifest, ids: Iterable[int]) -> None:
    positions = sorted(
        (p for p in (find_fragment_index(m.fragments, fid) for fid in ids) if p >= 0), reverse=True
    )
    for pos in positions:
        del m.fragments[pos]


def _replace_fragments(m: table_pb2.Manifest, frags: Iterable[Fragment]) -> None:
    for frag in frags:
        pos = find_fragment_index(m.fragments, frag.id)
        if pos < 0:
            raise _invalid(f"fragment {frag.id} does not exist")
        pb = frag.to_proto()
        old = m.fragments[pos]
        _carry_sequences(old, pb)
        old.CopyFrom(pb)


def _carry_sequences(old: table_pb2.DataFragment, pb: table_pb2.DataFragment) -> None:
    """Copy into ``pb`` the stable-row-id / version sequences of ``old`` that ``pb`` (a
    restatement of the same fragment) does not carry itself."""
    for oneof in (
        "row_id_sequence",
        "last_updated_at_version_sequence",
        "created_at_version_sequence",
    ):
        name = old.WhichOneof(oneof)
        if name is None or pb.WhichOneof(oneof) is not None:
            continue
        value = getattr(old, str(name))
        if isinstance(value, bytes):
            setattr(pb, str(name), value)
        else:
            getattr(pb, str(name)).CopyFrom(value)


def _set_bitmap(index: table_pb2.IndexMetadata, bm: BitMap) -> None:
    index.fragment_bitmap = bm.serialize()


def _apply_update_map_bytes(
    target: object, entries: Iterable[tuple[str, str | None]], replace: bool
) -> None:
    mapping = target  # a protobuf map<string, bytes>
    if replace:
        mapping.clear()  # type: ignore[attr-defined]
    for key, value in entries:
        if value is None:
            if key in mapping:  # type: ignore[operator]
                del mapping[key]  # type: ignore[attr-defined]
        else:
            mapping[key] = value.encode()  # type: ignore[index]


def _apply_update_map_str(
    target: object, entries: Iterable[tuple[str, str | None]], replace: bool
) -> None:
    mapping = target
    if replace:
        mapping.clear()  # type: ignore[attr-defined]
    for key, value in entries:
        if value is None:
            if key in mapping:  # type: ignore[operator]
                del mapping[key]  # type: ignore[attr-defined]
        else:
            mapping[key] = value  # type: ignore[index]


def _merge_bases(m: table_pb2.Manifest, op: UpdateBases) -> list[table_pb2.BasePath]:
    names = {b.name for b in m.base_paths if b.HasField("name")}
    paths = {b.path for b in m.base_paths}
    next_id = max((b.id for b in m.base_paths), default=0) + 1
    out = []
    ids = {b.id for b in m.base_paths}
    for base in op.new_bases:
        if base.id and base.id in ids:
            raise _invalid(f"UpdateBases: base id {base.id} is already in use")
        if base.name is not None and base.name in names:
            raise _invalid(f"UpdateBases: a base named {base.name!r} already exists")
        if base.path in paths:
            raise _invalid(f"UpdateBases: a base with path {base.path!r} already exists")
        pb = base.to_proto()
        if pb.id == 0:
            pb.id = next_id
        next_id = max(next_id, pb.id + 1)
        ids.add(pb.id)
        if base.name is not None:
            names.add(base.name)
        paths.add(base.path)
        out.append(pb)
    return out


def _infer_data_format(frags: Sequence[Fragment], fallback: str) -> str:
    for frag in frags:
        for df in frag.files:
            return _data_format_version(df.file_major_version, df.file_minor_version)
    return fallback


def _mem_wal_index(
    indices: list[table_pb2.IndexMetadata], op: UpdateMemWalState, version: int
) -> list[table_pb2.IndexMetadata]:
    existing = next((i for i in indices if i.name == MEM_WAL_INDEX), None)
    details = table_pb2.MemWalIndexDetails()
    if existing is not None:
        details.ParseFromString(existing.index_details.value)
    elif op.updated or op.removed:
        raise _invalid("UpdateMemWalState: no MemWAL index to update")
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


def build_manifest(
    current: ManifestState | None,
    txn: Transaction,
    *,
    version: int,
    transaction_file: str,
    timestamp_ns: int | None = None,
    restore_source: ManifestState | None = None,
    clone_source: ManifestState | None = None,
    stable_row_ids: bool = False,
) -> ManifestState:
    """The manifest and indices of ``version`` = ``txn`` applied to ``current``.

    Pure: inputs are never mutated. ``restore_source`` (Restore) and ``clone_source`` (Clone)
    are the manifests those operations copy. ``stable_row_ids`` only matters when creating
    (asking for it on an existing dataset without them raises InvalidOperationError).
    """
    op = txn.operation
    ts = time.time_ns() if timestamp_ns is None else timestamp_ns
    if isinstance(op, Restore):
        if restore_source is None:
            raise _invalid("Restore needs the manifest of the version it restores")
        m = table_pb2.Manifest()
        m.CopyFrom(restore_source.manifest)
        indices = [_copy_index(i) for i in restore_source.indices]
        if current is not None:
            # pylance 14 keeps the id high-water marks of the latest version, so fragment
            # ids and stable row ids of the abandoned versions are never handed out again.
            high = max_fragment_id(current.manifest)
            restored_high = max_fragment_id(m)
            if high is not None:
                m.max_fragment_id = high if restored_high is None else max(high, restored_high)
            m.next_row_id = max(m.next_row_id, current.manifest.next_row_id)
        _finish_common(m, version, transaction_file, ts, txn, recompute_flags=False)
        return ManifestState(m, tuple(indices))
    if isinstance(op, Clone):
        if clone_source is None:
            raise _invalid("Clone needs the manifest of the version it clones")
        return _build_clone(clone_source, txn, op, version, transaction_file, ts)

    m = table_pb2.Manifest()
    if current is not None:
        m.CopyFrom(current.manifest)
        stable = bool(current.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
        if stable_row_ids and not stable:
            raise _invalid("stable row ids cannot be switched on for an existing dataset")
        indices = [_copy_index(i) for i in current.indices]
    else:
        stable = stable_row_ids
        indices = []
    high = max_fragment_id(m) if current is not None else None
    ids = _Ids(0 if high is None else high + 1, _explicit_ids(op))
    schema_changed = False
    touches_fragments = True
    restated: list[int] | None = None  # fragments this op wrote (None: maybe all)

    if isinstance(op, Append):
        appended = [_new_fragment_pb(f, ids, m, stable, version) for f in op.fragments]
        _extend_sorted(m, appended)
        restated = [pb.id for pb in appended]
    elif isinstance(op, Overwrite):
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        m.schema_metadata.clear()
        for k, v in op.schema_metadata:
            m.schema_metadata[k] = v
        del m.fragments[:]
        # pylance 14 continues after the high-water mark (Lance 1.0 restarted at 0), so an
        # id is never reused for different data.
        m.fragments.extend(_new_fragment_pb(f, ids, m, stable, version) for f in op.fragments)
        indices = []
        for k, s in op.config_upsert_values or ():
            m.config[k] = s
        fallback = m.data_format.version if m.HasField("data_format") else DEFAULT_DATA_FORMAT
        m.data_format.file_format = "lance"
        m.data_format.version = _infer_data_format(op.fragments, fallback)
        if current is None:
            m.base_paths.extend(b.to_proto() for b in op.initial_bases)
        _sort_fragments(m)
    elif isinstance(op, Delete):
        _remove_fragments(m, op.deleted_fragment_ids)
        _replace_fragments(m, op.updated_fragments)
    elif isinstance(op, Update):
        _remove_fragments(m, op.removed_fragment_ids)
        _replace_fragments(m, op.updated_fragments)
        if op.fields_modified and op.updated_fragments:
            modified = set(op.fields_modified)
            updated = BitMap(f.id for f in op.updated_fragments)
            for index in indices:
                bm = _bitmap(index)
                if bm is not None and modified & set(index.fields):
                    _set_bitmap(index, bm - updated)
        assert current is not None
        added = _update_new_fragments(current.manifest, m, indices, op, ids, stable, version)
        _extend_sorted(m, added)
        restated = [f.id for f in op.updated_fragments] + [pb.id for pb in added]
    elif isinstance(op, CreateIndex):
        # pylance 14 removes exactly the listed uuids: a new index with the name of an
        # existing one is another segment of it (delta index), not a replacement (Lance
        # 1.0 replaced by name; measured). A re-added uuid replaces its old entry.
        removed = {uuid_mod.UUID(i.uuid).bytes for i in (*op.removed_indices, *op.new_indices)}
        indices = [i for i in indices if i.uuid.uuid not in removed]
        indices.extend(i.to_proto() for i in op.new_indices)
        touches_fragments = False
    elif isinstance(op, Rewrite):
        restated = _apply_rewrite(m, indices, op, ids, stable, version)
    elif isinstance(op, Merge):
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        if op.schema_metadata:
            m.schema_metadata.clear()
            for k, v in op.schema_metadata:
                m.schema_metadata[k] = v
        merged: list[table_pb2.DataFragment] = []
        for given in op.fragments:  # ids are kept as given (id 0 is a real fragment here)
            pb = given.to_proto()
            pos = find_fragment_index(m.fragments, given.id)
            old = m.fragments[pos] if pos >= 0 else None
            if stable and (old is None or list(old.files) != list(pb.files)):
                # pylance 14: a fragment that gained (or changed) data files was updated
                # at this version; untouched fragments keep their version sequences.
                pb.inline_last_updated_at_versions = fresh_version_sequence(
                    pb.physical_rows, version
                )
            if old is not None:
                _carry_sequences(old, pb)
            elif stable and pb.WhichOneof("created_at_version_sequence") is None:
                pb.inline_created_at_versions = fresh_version_sequence(pb.physical_rows, version)
            merged.append(pb)
        del m.fragments[:]
        m.fragments.extend(merged)
        _sort_fragments(m)
        schema_changed = True
    elif isinstance(op, Project):
        del m.fields[:]
        m.fields.extend(f.to_proto() for f in op.schema)
        keep = _schema_ids(op.schema)
        for frag in m.fragments:
            for i in range(len(frag.files) - 1, -1, -1):
                fields = [f for f in frag.files[i].fields if f >= 0]
                if fields and not any(f in keep for f in fields):
                    del frag.files[i]
        schema_changed = True
    elif isinstance(op, ReserveFragments):
        stored = m.max_fragment_id if m.HasField("max_fragment_id") else 0
        m.max_fragment_id = stored + op.num_fragments
        touches_fragments = False
    elif isinstance(op, UpdateConfig):
        if op.config_updates is not None:
            _apply_update_map_str(m.config, op.config_updates.entries, op.config_updates.replace)
        if op.table_metadata_updates is not None:
            u = op.table_metadata_updates
            _apply_update_map_str(m.table_metadata, u.entries, u.replace)
        if op.schema_metadata_updates is not None:
            u = op.schema_metadata_updates
            _apply_update_map_bytes(m.schema_metadata, u.entries, u.replace)
        if op.field_metadata_updates:
            by_id = {f.id: f for f in m.fields}
            for field_id, u in op.field_metadata_updates:
                field = by_id.get(field_id)
                if field is None:
                    raise _invalid(f"UpdateConfig: field with id {field_id} does not exist")
                _apply_update_map_bytes(field.metadata, u.entries, u.replace)
        touches_fragments = False
    elif isinstance(op, DataReplacement):
        _apply_data_replacement(m, op, stable, version)
        restated = [g.fragment_id for g in op.replacements]
    elif isinstance(op, UpdateMemWalState):
        indices = _mem_wal_index(indices, op, version)
        touches_fragments = False
    elif isinstance(op, UpdateBases):
        m.base_paths.extend(_merge_bases(m, op))
        touches_fragments = False
    else:  # pragma: no cover - exhaustive over Operation
        raise _invalid(f"unknown operation {txn.kind}")

    if isinstance(op, Delete):
        restated = [f.id for f in op.updated_fragments]
    if touches_fragments:
        _drop_tombstoned(m, restated)
    if (touches_fragments or schema_changed) and isinstance(op, (Delete, Update, Merge, Project)):
        indices = retain_relevant_indices(indices, _schema_ids(m.fields), m.fragments)
    if len(m.fragments):
        top = m.fragments[-1].id
        if top > 0xFFFFFFFF:  # Manifest.max_fragment_id is a u32
            raise LimitExceededError(
                f"fragment id {top} does not fit the manifest's u32 max_fragment_id "
                "(fragment ids exhausted)",
                limit="max_fragment_id",
            )
        m.max_fragment_id = max(m.max_fragment_id, top) if m.HasField("max_fragment_id") else top
    if not m.HasField("data_format"):
        m.data_format.file_format = "lance"
        m.data_format.version = DEFAULT_DATA_FORMAT
    _finish_common(m, version, transaction_file, ts, txn, stable=stable, indices=indices)
    return ManifestState(m, tuple(indices))


def _copy_index(index: table_pb2.IndexMetadata) -> table_pb2.IndexMetadata:
    copy = table_pb2.IndexMetadata()
    copy.CopyFrom(index)
    return copy


def _finish_common(
    m: table_pb2.Manifest,
    version: int,
    transaction_file: str,
    ts: int,
    txn: Transaction,
    *,
    recompute_flags: bool = True,
    stable: bool = False,
    indices: Sequence[table_pb2.IndexMetadata] = (),
) -> None:
    m.version = version
    m.transaction_file = transaction_file
    m.timestamp.seconds = ts // 1_000_000_000
    m.timestamp.nanos = ts % 1_000_000_000
    m.ClearField("index_section")
    m.ClearField("transaction_section")
    m.ClearField("transaction_section_deprecated")
    if recompute_flags:
        m.writer_version.CopyFrom(_writer_version())
        m.tag = txn.tag or ""
        reader, writer = compute_feature_flags(m, stable_row_ids=stable, indices=indices)
        m.reader_feature_flags = reader
        m.writer_feature_flags = writer


def _apply_rewrite(
    m: table_pb2.Manifest,
    indices: list[table_pb2.IndexMetadata],
    op: Rewrite,
    ids: _Ids,
    stable: bool,
    version: int,
) -> list[int]:
    """Apply the groups and remap index bitmaps; returns the new fragments' ids."""
    replacements: list[tuple[BitMap, BitMap]] = []
    new_ids: list[int] = []
    for group in op.groups:
        # rewritten fragments carry their rows' ids and version sequences (compaction
        # computes them); only unassigned fragment ids are filled in here
        new_pbs = [_new_fragment_pb(f, ids, m, False, version) for f in group.new_fragments]
        old_ids = [f.id for f in group.old_fragments]
        positions = [find_fragment_index(m.fragments, fid) for fid in old_ids]
        if any(p < 0 for p in positions):
            missing = [fid for fid, p in zip(old_ids, positions, strict=True) if p < 0]
            raise _invalid(f"Rewrite: old fragments {missing} no longer exist")
        for pos in sorted(positions, reverse=True):
            del m.fragments[pos]
        # reserved ids usually sort after every existing one: a plain append
        _extend_sorted(m, new_pbs)
        new_ids.extend(p.id for p in new_pbs)
        replacements.append((BitMap(old_ids), BitMap(p.id for p in new_pbs)))
    rewritten = {ri.old_id: ri for ri in op.rewritten_indices}
    for index in indices:
        key = str(uuid_mod.UUID(bytes=index.uuid.uuid)) if len(index.uuid.uuid) == 16 else ""
        ri = rewritten.get(key)
        if not stable and ri is None:
            continue
        bm = _bitmap(index)
        if bm is not None:
            for old, new in replacements:
                overlap = bm & old
                if not overlap:
                    continue
                if overlap != old:
                    raise _invalid(
                        f"Rewrite: index {index.name} covers only part of a group being "
                        "compacted (split of indexed and non-indexed data)"
                    )
                bm = (bm - old) | new
            _set_bitmap(index, bm)
        if ri is not None:
            index.uuid.uuid = uuid_mod.UUID(ri.new_id).bytes
            if ri.new_index_details is not None:
                index.index_details.type_url = ri.new_index_details.type_url
                index.index_details.value = ri.new_index_details.value
            index.index_version = ri.new_index_version
            if ri.new_index_files:
                del index.files[:]
                for f in ri.new_index_files:
                    index.files.add(path=f.path, size_bytes=f.size_bytes)
    return new_ids


def _apply_data_replacement(
    m: table_pb2.Manifest, op: DataReplacement, stable: bool, version: int
) -> None:
    for group in op.replacements:
        pos = find_fragment_index(m.fragments, group.fragment_id)
        if pos < 0:
            raise _invalid(f"DataReplacement: fragment {group.fragment_id} does not exist")
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
                        df.fields[i] = _TOMBSTONE
            frag.files.append(new.to_proto())
        if stable:  # pylance 14: every row of the fragment was updated at this version
            frag.inline_last_updated_at_versions = fresh_version_sequence(
                frag.physical_rows, version
            )


def _build_clone(
    source: ManifestState,
    txn: Transaction,
    op: Clone,
    version: int,
    transaction_file: str,
    ts: int,
) -> ManifestState:
    m = table_pb2.Manifest()
    m.CopyFrom(source.manifest)
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
        copy = _copy_index(index)
        if not copy.HasField("base_id"):
            copy.base_id = new_base
        indices.append(copy)
    if op.branch_name is not None:
        m.branch = op.branch_name
    else:
        m.ClearField("branch")
    stable = bool(m.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    _finish_common(m, version, transaction_file, ts, txn, stable=stable, indices=indices)
    return ManifestState(m, tuple(indices))
