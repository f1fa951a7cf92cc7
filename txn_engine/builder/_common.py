"""What every operation handler of the builder shares: the manifest state, fragment lookups
(binary searches over the id-sorted repeated field), the validation checks several
operations make, id assignment, stable-row-id bookkeeping, index retention and the steps
that finish every manifest. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
from pyroaring import BitMap

from txn_engine._proto import file_pb2, table_pb2
from txn_engine._version import __version__
from txn_engine.errors import FormatError, InvalidOperationError, LimitExceededError
from txn_engine.format.flags import (
    FLAG_DISABLE_TRANSACTION_FILE,
    FLAG_STABLE_ROW_IDS,
    compute_feature_flags,
)
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    encode_row_id_sequence,
    fresh_row_id_sequence,
    fresh_version_sequence,
)
from txn_engine.format.schema import fields_to_arrow
from txn_engine.format.schema import max_field_id as max_field_id_ever
from txn_engine.model import Fragment, LanceField, decode_fragment_bitmap
from txn_engine.transaction import Transaction

WRITER_LIBRARY = "txn_engine"
#: Data storage version of new datasets with no data files (what pylance 14.0.2 writes).
DEFAULT_DATA_FORMAT = "2.2"
FRAG_REUSE_INDEX = "__lance_frag_reuse"
MEM_WAL_INDEX = "__lance_mem_wal"
SYSTEM_INDICES = frozenset({FRAG_REUSE_INDEX, MEM_WAL_INDEX})
TOMBSTONE = -2


@attrs.frozen
class ManifestState:
    """A version's manifest and its index list (what a manifest file holds)."""

    manifest: table_pb2.Manifest
    indices: tuple[table_pb2.IndexMetadata, ...] = ()


def writer_version() -> table_pb2.Manifest.WriterVersion:
    return table_pb2.Manifest.WriterVersion(library=WRITER_LIBRARY, version=__version__)


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


def field_ids_of(fields: Iterable[file_pb2.Field] | Iterable[LanceField]) -> set[int]:
    return {f.id for f in fields}


def data_format_version(major: int, minor: int) -> str:
    if major == 0:
        return "2.0" if minor == 3 else "0.1"
    return f"{major}.{minor}"


def format_matches(data_format: str, major: int, minor: int) -> bool:
    declared = data_format.lower()
    actual = data_format_version(major, minor)
    if declared in ("legacy", "0.1"):
        return actual == "0.1"
    if declared in ("stable", "next"):
        return actual != "0.1"
    return declared == actual


def invalid(message: str) -> InvalidOperationError:
    return InvalidOperationError(message)


def _check_data_path(path: str, what: str) -> None:
    """A new data file's path must name a file a reader can open under ``data/`` (or its
    base): pylance 14 commits ``""``, ``"../x.lance"`` or ``"/x.lance"`` and then fails
    every scan; txn_engine refuses them before anything is written."""
    if (
        not path
        or "\x00" in path
        or path.startswith("/")
        or any(segment in ("", ".", "..") for segment in path.split("/"))
    ):
        raise invalid(
            f"{what}: data file path {path[:200]!r} cannot be read back (empty, absolute, "
            "a NUL, or an empty, '.' or '..' segment)"
        )


def uses_stable_row_ids(current: ManifestState) -> bool:
    return bool(current.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)


def check_newly_written(frag: Fragment, what: str, stable: bool | None) -> None:
    """A new fragment (its id assigned at commit) must come as its writer wrote it: no
    deletion file (the file's name holds the fragment id, so renumbered, no reader would
    find it: pylance 14 refuses it for Overwrite, and commits it for Append, Update, Merge
    and Rewrite, then fails every scan), and no stable row ids on a table without them
    (``stable`` False; pylance 14: "All fragments must have row ids", and after such a
    commit it refuses every later one). ``stable`` None: not known yet (a new table)."""
    if frag.deletion_file is not None:
        remedy = (
            "use Delete to commit deletions against existing fragments, or Merge to change "
            "their schema"
            if what == "Overwrite"
            else "commit the fragment as written, then delete its rows with a Delete"
        )
        raise invalid(
            f"{what} fragments must be newly written, but fragment {frag.id} carries deletion "
            f"file _deletions/{frag.deletion_file.file_name(frag.id)} (a new fragment gets its "
            f"id at commit, and a deletion file is found by its fragment's id): {remedy}"
        )
    if stable is False and frag.row_id_sequence is not None:
        raise invalid(
            f"{what}: fragment {frag.id} carries stable row ids (row_id_sequence), but this "
            "table does not use stable row ids (pylance 14: 'All fragments must have row "
            "ids'): drop its row_id_sequence"
        )


def check_new_fragments(
    current: ManifestState | None,
    fragments: Sequence[Fragment],
    schema_ids: set[int],
    what: str,
    *,
    stable: bool | None = None,
    numbered_deletions: bool = False,
) -> None:
    """Refuse new fragments no reader could use (see :func:`check_newly_written`; ``stable``
    is whether the table uses stable row ids, ``current``'s when not given), with ids
    already in use, paths outside the table, fields the schema never had, ...
    ``numbered_deletions``: a fragment with an explicit id may carry a deletion file (a
    Rewrite carrying deletions that landed after it was planned)."""
    if stable is None and current is not None:
        stable = uses_stable_row_ids(current)
    seen: set[int] = set()
    data_format = (
        current.manifest.data_format.version
        if current is not None and current.manifest.HasField("data_format")
        else None
    )
    ever_used: list[int] = []  # max field id ever used by the dataset, computed lazily
    for frag in fragments:
        if frag.physical_rows < 0:
            raise invalid(f"{what}: fragment has negative physical_rows")
        if numbered_deletions and frag.id and frag.deletion_file is not None:
            check_newly_written(attrs.evolve(frag, deletion_file=None), what, stable)
        else:
            check_newly_written(frag, what, stable)
        if frag.id:
            if frag.id in seen:
                raise invalid(f"{what}: duplicate fragment id {frag.id}")
            seen.add(frag.id)
            if (
                current is not None
                and find_fragment_index(current.manifest.fragments, frag.id) >= 0
            ):
                raise invalid(f"{what}: fragment id {frag.id} is already in use")
        if not frag.files:
            raise invalid(f"{what}: fragment {frag.id} has no data files")
        for df in frag.files:
            _check_data_path(df.path, what)
            unknown = [f for f in df.fields if f >= 0 and f not in schema_ids]
            if unknown and current is not None:
                # ids of columns dropped since the writer planned (a concurrent Project) are
                # fine: readers ignore them, and pylance 14 accepts such files too
                if not ever_used:
                    ever_used.append(max_field_id_ever(current.manifest))
                unknown = [f for f in unknown if f > ever_used[0]]
            if unknown:
                raise invalid(
                    f"{what}: data file {df.path} holds field ids {unknown} that are not in the "
                    "dataset schema and were never used by it (schema mismatch)"
                )
            live = [f for f in df.fields if f >= 0]
            if len(set(live)) != len(live):
                # pylance 14 commits it, then every scan fails "The projection specified
                # ..." (measured)
                raise invalid(f"{what}: data file {df.path} lists a field id twice: {df.fields}")
            if df.column_indices and len(df.column_indices) != len(df.fields):
                raise invalid(
                    f"{what}: data file {df.path} has {len(df.fields)} fields but "
                    f"{len(df.column_indices)} column indices"
                )
            if data_format and not format_matches(
                data_format, df.file_major_version, df.file_minor_version
            ):
                raise invalid(
                    f"{what}: data file {df.path} is Lance file format "
                    f"{data_format_version(df.file_major_version, df.file_minor_version)}, "
                    f"the dataset stores {data_format} (data-format mismatch)"
                )


def check_existing(current: ManifestState, ids: Iterable[int], what: str) -> None:
    seen: set[int] = set()
    for fid in ids:
        if fid in seen:
            raise invalid(f"{what}: fragment id {fid} listed twice")
        seen.add(fid)
        if find_fragment_index(current.manifest.fragments, fid) < 0:
            raise invalid(
                f"{what}: fragment {fid} does not exist in version {current.manifest.version}"
            )


def check_schema(
    fields: Sequence[LanceField], what: str, current: ManifestState | None = None
) -> None:
    """Refuse a schema no reader could use: a field without an id, a repeated id, a child
    before its parent, a NUL in a name (pylance 14 aborts the whole process converting it
    to Arrow, measured), or a schema this library cannot turn into Arrow (an unknown
    logical type: pylance 14 panics reading it) where ``current``'s schema still can be
    (a table already holding types only a newer Lance knows is not judged). A schema
    nested deeper than this library converts is allowed: Lance reads it."""
    ids: set[int] = set()
    for f in fields:
        if f.id < 0:
            raise invalid(f"{what}: field {f.name!r} has no id")
        if "\x00" in f.name:
            raise invalid(f"{what}: field name {f.name!r} holds a NUL character")
        if f.id in ids:
            raise invalid(f"{what}: duplicate field id {f.id}")
        if f.parent_id != -1 and f.parent_id not in ids:
            raise invalid(f"{what}: field {f.name!r} comes before its parent {f.parent_id}")
        ids.add(f.id)
    try:
        fields_to_arrow(fields)
    except LimitExceededError:
        return  # deeper than this library converts, not than Lance reads: allowed
    except FormatError as exc:
        if current is not None:
            try:
                fields_to_arrow(current.manifest.fields)
            except FormatError:
                return  # not readable here before either: not this commit's doing
        raise invalid(f"{what}: no reader could use this schema ({exc})") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # pyarrow's own refusals of values a caller put in a field: a name or metadata
        # with a lone surrogate (UnicodeEncodeError), ... (the commit would refuse it
        # when encoding the transaction; refused here first)
        raise invalid(f"{what}: a field cannot be converted to Arrow ({exc})") from None


def index_bitmap(index: table_pb2.IndexMetadata) -> BitMap | None:
    if not index.fragment_bitmap:
        return None
    return decode_fragment_bitmap(index.fragment_bitmap, index.name)


def covers_an_existing_fragment(
    index: table_pb2.IndexMetadata, fragments: Sequence[table_pb2.DataFragment]
) -> bool:
    bm = index_bitmap(index)
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
        i for i in indices if i.name in SYSTEM_INDICES or all(f in schema_ids for f in i.fields)
    ]
    groups: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in kept:
        if index.name != FRAG_REUSE_INDEX:
            groups.setdefault(index.name, []).append(index)
    drop: set[int] = set()
    for group in groups.values():
        if len(group) == 1:
            continue
        non_empty = [i for i in group if covers_an_existing_fragment(i, fragments)]
        if non_empty:
            keep = {id(i) for i in non_empty}
        else:
            keep = {id(min(group, key=lambda i: i.dataset_version))}
        drop.update(id(i) for i in group if id(i) not in keep)
    return [i for i in kept if id(i) not in drop]


class Ids:
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


def extend_sorted(m: table_pb2.Manifest, new: Sequence[table_pb2.DataFragment]) -> None:
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
        sort_fragments(m)


def new_fragment_pb(
    frag: Fragment, ids: Ids, m: table_pb2.Manifest, stable: bool, version: int
) -> table_pb2.DataFragment:
    pb = frag.to_proto()
    if pb.id == 0:
        pb.id = ids.take()
    if stable:
        assign_row_ids(pb, m)
        # pylance 14 ignores version sequences given with a newly written fragment: its
        # rows were created (and last updated) by this version
        pb.inline_last_updated_at_versions = fresh_version_sequence(pb.physical_rows, version)
        pb.inline_created_at_versions = fresh_version_sequence(pb.physical_rows, version)
    return pb


def assign_row_ids(pb: table_pb2.DataFragment, m: table_pb2.Manifest) -> None:
    """Give ``pb`` stable row ids from ``m.next_row_id``: all of them when it has none, the
    missing tail when its inline sequence is shorter than its rows (merge-insert inserts)."""
    if pb.WhichOneof("row_id_sequence") is None:
        pb.inline_row_ids = fresh_row_id_sequence(m.next_row_id, pb.physical_rows)
        m.next_row_id += pb.physical_rows
    elif pb.HasField("inline_row_ids"):
        existing = decode_row_id_sequence(pb.inline_row_ids)
        missing = pb.physical_rows - len(existing)
        if missing < 0:
            raise invalid(
                f"fragment {pb.id} has {len(existing)} row ids but {pb.physical_rows} rows"
            )
        if missing:
            existing.extend(range(m.next_row_id, m.next_row_id + missing))
            m.next_row_id += missing
            pb.inline_row_ids = encode_row_id_sequence(existing)


def sort_fragments(m: table_pb2.Manifest) -> None:
    frags = list(m.fragments)
    if all(frags[i].id < frags[i + 1].id for i in range(len(frags) - 1)):
        return
    ordered = sorted((f for f in frags), key=lambda f: f.id)
    copies = [table_pb2.DataFragment() for _ in ordered]
    for dst, src in zip(copies, ordered, strict=True):
        dst.CopyFrom(src)
    del m.fragments[:]
    m.fragments.extend(copies)


def drop_tombstoned(m: table_pb2.Manifest, only: list[int] | None) -> None:
    if only is None:
        for frag in m.fragments:
            drop_tombstoned_files(frag)
        return
    for fid in only:
        pos = find_fragment_index(m.fragments, fid)
        if pos >= 0:
            drop_tombstoned_files(m.fragments[pos])


def drop_tombstoned_files(frag: table_pb2.DataFragment) -> None:
    for i in range(len(frag.files) - 1, -1, -1):
        fields = frag.files[i].fields
        if len(fields) and all(f == TOMBSTONE for f in fields):
            del frag.files[i]


def remove_fragments(m: table_pb2.Manifest, ids: Iterable[int]) -> None:
    positions = sorted(
        (p for p in (find_fragment_index(m.fragments, fid) for fid in ids) if p >= 0), reverse=True
    )
    for pos in positions:
        del m.fragments[pos]


def replace_fragments(m: table_pb2.Manifest, frags: Iterable[Fragment]) -> None:
    for frag in frags:
        pos = find_fragment_index(m.fragments, frag.id)
        if pos < 0:
            raise invalid(f"fragment {frag.id} does not exist")
        pb = frag.to_proto()
        old = m.fragments[pos]
        carry_sequences(old, pb)
        old.CopyFrom(pb)


def carry_sequences(old: table_pb2.DataFragment, pb: table_pb2.DataFragment) -> None:
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


def set_bitmap(index: table_pb2.IndexMetadata, bm: BitMap) -> None:
    index.fragment_bitmap = bm.serialize()


def copy_index(index: table_pb2.IndexMetadata) -> table_pb2.IndexMetadata:
    copy = table_pb2.IndexMetadata()
    copy.CopyFrom(index)
    return copy


def finish_common(
    m: table_pb2.Manifest,
    version: int,
    transaction_file: str,
    ts: int,
    txn: Transaction,
    *,
    recompute_flags: bool = True,
    stable: bool = False,
    indices: Sequence[table_pb2.IndexMetadata] = (),
    deletion_files: bool | None = None,
) -> None:
    m.version = version
    m.transaction_file = transaction_file
    m.timestamp.seconds = ts // 1_000_000_000
    m.timestamp.nanos = ts % 1_000_000_000
    m.ClearField("index_section")
    m.ClearField("transaction_section")
    m.ClearField("transaction_section_deprecated")
    if recompute_flags:
        m.writer_version.CopyFrom(writer_version())
        m.tag = txn.tag or ""
        reader, writer = compute_feature_flags(
            m,
            stable_row_ids=stable,
            indices=indices,
            deletion_files=deletion_files,
            inline_transaction_only=not transaction_file,
        )
        m.reader_feature_flags = reader
        m.writer_feature_flags = writer
    elif transaction_file:  # flags copied from an older version (Restore): flag 32 says
        m.writer_feature_flags &= ~FLAG_DISABLE_TRANSACTION_FILE  # whether a .txn is there
    else:
        m.writer_feature_flags |= FLAG_DISABLE_TRANSACTION_FILE
