"""The change feed: which rows a range of versions inserted, deleted and updated.

``te.open(uri).changes(start, end)`` (or :func:`changes` here) returns the row changes
of versions ``start`` to ``end`` (both included) as a ``pyarrow.Table``;
:func:`change_reader` streams them as a ``pyarrow.RecordBatchReader`` in bounded memory.
Every row carries the table's columns and

* ``_change_type``: ``insert``, ``delete``, ``update_preimage`` or ``update_postimage``;
* ``_commit_version``: the version that made the change;
* ``_commit_timestamp``: that version's commit time (UTC, microseconds).

How a version's changes are found (:func:`plan_version`, from the manifests only): the
version's manifest is compared with the one before it, fragment by fragment. Rows of a
fragment the version added (or whose deleted rows it restored) are inserts, read at the
version; rows of a fragment it removed, and rows its deletion vectors newly delete, are
deletes, read at the version before (where they are still live). A fragment whose data
files the version replaced in place (a column rewrite) has all its rows deleted and
inserted. Compaction (``Rewrite``), ``ReserveFragments``, index, config and other
metadata commits change no row and yield nothing.

**Updates.** A deleted and an inserted row of the same version are the pre- and
post-image of one update when they are the same row:

* tables with stable row ids (``enable_stable_row_ids=True``): the same ``_rowid``
  (pylance's ``update`` and ``merge_insert`` keep the ids of the rows they rewrite);
* otherwise, when the version is an upsert that recorded its key columns (the
  ``inserted_rows`` key filter of ``te.open(uri).merge_insert`` and
  ``txn_engine.spark.merge`` when it inserts): the same values of those key columns;
* a row rewritten in place (same fragment, same offset): that row;
* otherwise (pylance's own ``update`` / ``merge_insert`` on a table without stable row
  ids, an ``Overwrite``): a ``delete`` and an ``insert``.

Reading needs pylance (the ``lance`` extra). A lease on the version before ``start``
pins the history against cleanup while the feed is read; a version of the range that is
already gone raises :class:`~txn_engine.errors.HistoryUnavailableError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.errors import (
    DatasetNotFoundError,
    HistoryUnavailableError,
    InvalidOperationError,
    SchemaChangedError,
    VersionNotFoundError,
)
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.schema import fields_to_arrow
from txn_engine.leases import Lease
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = [
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "INSERT",
    "NO_ROW_CHANGE",
    "UPDATE_POSTIMAGE",
    "UPDATE_PREIMAGE",
    "RowSelection",
    "VersionChanges",
    "change_batches",
    "change_reader",
    "changes",
    "check_columns",
    "check_range",
    "feed_schema",
    "live_rows",
    "manifest_nanos",
    "pin_history",
    "plan_version",
    "read_version_changes",
    "require_history",
]

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
INSERT = "insert"
DELETE = "delete"
UPDATE_PREIMAGE = "update_preimage"
UPDATE_POSTIMAGE = "update_postimage"
#: Operations (Lance's names) that change no row: compaction, reservations, indices,
#: config and other metadata.
NO_ROW_CHANGE = frozenset(
    {
        "rewrite",
        "reserve_fragments",
        "create_index",
        "update_config",
        "update_mem_wal_state",
        "clone",
        "update_bases",
    }
)
#: Operations that rewrite a fragment's data files in place, keeping its rows.
_IN_PLACE = frozenset({"update", "merge", "project", "data_replacement", "data_overlay"})
#: Schema changes: they change no row of the columns they leave in place.
_SCHEMA_CHANGES = frozenset({"merge", "project"})
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ROW_ID = "_rowid"
_ROW_ADDR = "_rowaddr"
#: Lease on the history a feed reads: long enough for a slow read; renewed meanwhile.
DEFAULT_LEASE_TTL = 600.0


def feed_schema(schema: pa.Schema) -> pa.Schema:
    """The change feed's schema for table columns ``schema``: those, then
    ``_change_type`` (string), ``_commit_version`` (int64), ``_commit_timestamp``."""
    return pa.schema(
        [
            *schema,
            pa.field(CHANGE_TYPE, pa.string(), nullable=False),
            pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
            pa.field(COMMIT_TIMESTAMP, _TIMESTAMP),
        ]
    )


def pin_history(
    storage: Storage, version: int, *, owner: str, ttl: float, renew: bool = True
) -> Lease:
    """A lease keeping ``version`` and every later version (with their files) against
    cleanup until released (renewed meanwhile; with ``renew=False`` it expires after
    ``ttl`` seconds); the one place the change feed and the stream source take leases.
    Raises HistoryUnavailableError when ``version`` is already gone."""
    try:
        return Lease(
            storage, version, ttl=ttl, owner=owner, writes=False, renew_in_background=renew
        )
    except (VersionNotFoundError, DatasetNotFoundError) as exc:
        raise HistoryUnavailableError(
            f"{storage.uri}: version {version} is no longer available (cleaned up?), so "
            "the changes after it cannot be read; read from a later version",
            conflicting_version=version,
        ) from exc


# --------------------------------------------------------------------------- planning


@attrs.frozen
class RowSelection:
    """Rows of one fragment: ``offsets`` (a serialized roaring bitmap of row offsets in
    the fragment) or, when None, every live row."""

    fragment_id: int
    offsets: bytes | None = None
    rows: int = 0


@attrs.frozen
class VersionChanges:
    """What version ``version`` changed, from its manifest and the one before (picklable).

    ``removed`` rows are read at ``version - 1``, ``added`` rows at ``version``.
    ``pairing`` says how updates are recognised: ``"row_id"``, ``"keys"`` (``keys`` names
    the columns) or ``"none"``; ``in_place`` fragments are paired by row offset."""

    version: int
    timestamp_ns: int | None
    operation: str
    removed: tuple[RowSelection, ...] = ()
    added: tuple[RowSelection, ...] = ()
    pairing: str = "none"
    keys: tuple[str, ...] = ()
    in_place: tuple[int, ...] = ()

    @property
    def rows_removed(self) -> int:
        return sum(s.rows for s in self.removed)

    @property
    def rows_added(self) -> int:
        return sum(s.rows for s in self.added)

    @property
    def appends_only(self) -> bool:
        """True when the version removes no row (it may add some)."""
        return not self.removed


def manifest_nanos(manifest: table_pb2.Manifest) -> int | None:
    """A version's commit time (ns since the epoch), None when the manifest has none."""
    if not manifest.HasField("timestamp"):
        return None
    ts = manifest.timestamp
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return int(ts.seconds) * 1_000_000_000 + int(ts.nanos)


def _content(fragment: table_pb2.DataFragment) -> bytes:
    """The identity of a fragment's data (files and overlays), deletions aside."""
    parts = [f.SerializeToString(deterministic=True) for f in fragment.files]
    parts += [o.SerializeToString(deterministic=True) for o in fragment.overlays]
    return b"\x00".join(parts)


def live_rows(fragment: table_pb2.DataFragment) -> int:
    """A fragment's live rows as its manifest entry records them."""
    deleted = fragment.deletion_file.num_deleted_rows if fragment.HasField("deletion_file") else 0
    return max(0, int(fragment.physical_rows) - int(deleted))


def _deleted(storage: Storage, fragment: table_pb2.DataFragment) -> BitMap:
    if not fragment.HasField("deletion_file"):
        return BitMap()
    return read_deletion_vector(
        storage, fragment.id, fragment.deletion_file, physical_rows=int(fragment.physical_rows)
    )


def _selection(fragment_id: int, offsets: BitMap) -> RowSelection:
    return RowSelection(fragment_id, offsets.serialize(), len(offsets))


def _diff_fragments(
    storage: Storage,
    before: table_pb2.Manifest | None,
    after: table_pb2.Manifest,
    operation: str,
) -> tuple[list[RowSelection], list[RowSelection], list[int]]:
    """(removed, added, in-place fragment ids) between two manifests."""
    old = {f.id: f for f in before.fragments} if before is not None else {}
    new = {f.id: f for f in after.fragments}
    removed: list[RowSelection] = []
    added: list[RowSelection] = []
    in_place: list[int] = []
    replaced = operation == "overwrite"  # an Overwrite's fragments are all new rows
    for fid in sorted(old.keys() | new.keys()):
        a, b = old.get(fid), new.get(fid)
        if b is None or (a is not None and replaced):
            assert a is not None
            removed.append(RowSelection(fid, None, live_rows(a)))
            if b is not None:
                added.append(RowSelection(fid, None, live_rows(b)))
            continue
        if a is None:
            added.append(RowSelection(fid, None, live_rows(b)))
            continue
        if _content(a) != _content(b):
            removed.append(RowSelection(fid, None, live_rows(a)))
            added.append(RowSelection(fid, None, live_rows(b)))
            if operation in _IN_PLACE and a.physical_rows == b.physical_rows:
                in_place.append(fid)
            continue
        if a.deletion_file.SerializeToString(
            deterministic=True
        ) == b.deletion_file.SerializeToString(deterministic=True):
            continue
        dv_a, dv_b = _deleted(storage, a), _deleted(storage, b)
        if gone := dv_b - dv_a:
            removed.append(_selection(fid, gone))
        if back := dv_a - dv_b:
            added.append(_selection(fid, back))
    return removed, added, in_place


def _columns_only(
    removed: Sequence[RowSelection], added: Sequence[RowSelection], in_place: Sequence[int]
) -> bool:
    """True when every fragment changed was rewritten in place (same rows, other
    columns): the columns a reader keeps are unchanged."""
    ids = set(in_place)
    return all(s.offsets is None and s.fragment_id in ids for s in (*removed, *added))


def _key_columns(txn: Any, schema: table_pb2.Manifest) -> tuple[str, ...]:
    """The key columns an upsert recorded (its ``inserted_rows`` filter), top-level."""
    if txn.WhichOneof("operation") != "update" or not txn.update.HasField("inserted_rows"):
        return ()
    names = {f.id: f.name for f in schema.fields if f.parent_id == -1}
    ids = tuple(txn.update.inserted_rows.field_ids)
    if not ids or any(i not in names for i in ids):
        return ()
    return tuple(names[i] for i in ids)


def check_columns(manifest: table_pb2.Manifest, columns: pa.Schema, operation: str) -> None:
    """Every column of ``columns`` is in ``manifest``'s schema with the same type, else
    SchemaChangedError naming the version and the column."""
    schema = fields_to_arrow(list(manifest.fields), dict(manifest.schema_metadata))
    for field in columns:
        index = schema.get_field_index(field.name)
        found = None if index < 0 else schema.field(index).type
        if found != field.type:
            now = "is gone" if found is None else f"is {found}"
            raise SchemaChangedError(
                f"version {manifest.version} ({operation}) changed column {field.name!r} "
                f"(it was {field.type}, it {now})",
                version=int(manifest.version),
                operation=operation,
                column=field.name,
                remedy=f"read up to version {manifest.version - 1}, then start a new read "
                f"at version {manifest.version}",
            )


def plan_version(
    storage: Storage,
    version: int,
    columns: pa.Schema | None = None,
    *,
    before: table_pb2.Manifest | None = None,
    after: table_pb2.Manifest | None = None,
) -> VersionChanges:
    """What ``version`` changed (see the module docstring), read from its manifest and
    transaction and the manifest of ``version - 1`` (pass either manifest when you have
    it). With ``columns``, a version that reads rows whose schema lacks one of them (or
    retypes it) raises SchemaChangedError. Raises VersionNotFoundError for a missing
    version."""
    if after is None:
        entry, manifest_file = read_manifest(storage, version)
        current = manifest_file.manifest
        txn = read_transaction(storage, entry, manifest_file)
    else:  # the transaction only: the head of the manifest file
        current, txn = after, read_transaction(storage, version)
    operation = str(txn.WhichOneof("operation"))
    stamp = manifest_nanos(current)
    if operation in NO_ROW_CHANGE and not (operation == "clone" and version == 1):
        # (a branch's first version is a Clone of its parent: its rows are all new there)
        return VersionChanges(version, stamp, operation)
    if before is None and version > 1:
        before = read_manifest(storage, version - 1)[1].manifest
    removed, added, in_place = _diff_fragments(storage, before, current, operation)
    if operation in _SCHEMA_CHANGES and _columns_only(removed, added, in_place):
        if columns is not None:
            check_columns(current, columns, operation)
        return VersionChanges(version, stamp, operation)
    if columns is not None:
        if added:
            check_columns(current, columns, operation)
        if removed and before is not None:
            check_columns(before, columns, operation)
    pairing, keys = "none", tuple[str, ...]()
    stable = bool(current.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    if operation != "overwrite" and removed and added:
        if stable:
            pairing = "row_id"
        elif keys := _key_columns(txn, current):
            pairing = "keys"
    return VersionChanges(
        version,
        stamp,
        operation,
        tuple(removed),
        tuple(added),
        pairing,
        tuple(keys),
        tuple(in_place) if pairing != "row_id" else (),
    )


# --------------------------------------------------------------------------- reading


class _Reader:
    """pylance datasets at the versions one feed reads (the last two kept)."""

    def __init__(self, uri: str, lance_storage_options: Mapping[str, str] | None) -> None:
        self._uri = uri
        self._options = dict(lance_storage_options) if lance_storage_options else None
        self._open: dict[int, Any] = {}

    def fragment(self, version: int, fragment_id: int) -> Any:
        import lance

        dataset = self._open.get(version)
        if dataset is None:
            dataset = lance.dataset(self._uri, version=version, storage_options=self._options)
            if len(self._open) >= 2:
                self._open.pop(min(self._open))
            self._open[version] = dataset
        fragment = dataset.get_fragment(fragment_id)
        if fragment is None:
            raise HistoryUnavailableError(
                f"{self._uri}: fragment {fragment_id} is not in version {version}",
                conflicting_version=version,
            )
        return fragment

    def scan(
        self, version: int, selection: RowSelection, columns: Sequence[str], batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """The selected rows of one fragment at ``version``: ``columns`` plus
        ``_rowid`` / ``_rowaddr`` when asked for, in batches of at most ``batch_rows``."""
        fragment = self.fragment(version, selection.fragment_id)
        plain = [c for c in columns if c not in (_ROW_ID, _ROW_ADDR)]
        wanted = None
        if selection.offsets is not None:
            wanted = pa.array(BitMap.deserialize(selection.offsets).to_array(), pa.uint64())
        for batch in fragment.to_batches(
            columns=plain,
            batch_size=batch_rows,
            with_row_id=_ROW_ID in columns,
            with_row_address=True,
        ):
            if wanted is not None:
                offsets = pc.bit_wise_and(
                    batch.column(_ROW_ADDR), pa.scalar(0xFFFFFFFF, pa.uint64())
                )
                batch = batch.filter(pc.is_in(offsets, value_set=wanted))
            if batch.num_rows:
                yield batch.select(list(columns))


def _identity(batch: pa.RecordBatch, changes: VersionChanges, fragment_id: int) -> pa.Array:
    """The values that tie a deleted row to its re-inserted self (see the docstring)."""
    if changes.pairing == "row_id":
        return batch.column(_ROW_ID)
    if fragment_id in changes.in_place:
        return batch.column(_ROW_ADDR)
    if len(changes.keys) == 1:
        return batch.column(changes.keys[0])
    rows = zip(*(batch.column(k).to_pylist() for k in changes.keys), strict=True)
    return pa.array([repr(row) for row in rows], pa.string())


def _identity_columns(changes: VersionChanges) -> list[str]:
    if changes.pairing == "row_id":
        return [_ROW_ID]
    return [*changes.keys, _ROW_ADDR]


def _updated(
    reader: _Reader, changes: VersionChanges, batch_rows: int
) -> tuple[pa.Array, pa.Array]:
    """(identities of rows both removed and added by the version: updates, addresses of
    in-place rows that are updates), from a scan of the identity columns only."""
    if changes.pairing == "none" and not changes.in_place:
        return pa.array([], pa.uint64()), pa.array([], pa.uint64())
    sides: list[dict[bool, list[pa.Array]]] = []
    for version, selections in (
        (changes.version - 1, changes.removed),
        (changes.version, changes.added),
    ):
        found: dict[bool, list[pa.Array]] = {True: [], False: []}
        for selection in selections:
            place = selection.fragment_id in changes.in_place
            if changes.pairing == "none" and not place:
                continue
            cols = _identity_columns(changes)
            for batch in reader.scan(version, selection, cols, batch_rows):
                found[place].append(_identity(batch, changes, selection.fragment_id))
        sides.append(found)
    out = []
    for place in (False, True):
        old, new = sides[0][place], sides[1][place]
        if not old or not new:
            out.append(pa.array([], pa.uint64()))
            continue
        old_all = pa.concat_arrays(old)
        both = old_all.filter(pc.is_in(old_all, value_set=pa.concat_arrays(new), skip_nulls=True))
        out.append(pc.unique(both))
    return out[0], out[1]


def _tagged(
    batch: pa.RecordBatch,
    columns: pa.Schema,
    changes: VersionChanges,
    kinds: tuple[str, str],
    updates: pa.Array,
) -> pa.RecordBatch:
    """``batch``'s table columns cast to ``columns``, with the change columns appended;
    ``kinds`` is (plain, update) change type."""
    n = batch.num_rows
    if len(updates):
        flags = pc.is_in(batch.column("__identity"), value_set=updates, skip_nulls=True)
        kind = pc.if_else(pc.fill_null(flags, False), kinds[1], kinds[0])
    else:
        kind = pa.array([kinds[0]] * n, pa.string())
    stamp = changes.timestamp_ns
    values = [batch.column(f.name).cast(f.type) for f in columns]
    values += [
        kind,
        pa.array([changes.version] * n, pa.int64()),
        pa.array([None if stamp is None else stamp // 1000] * n, _TIMESTAMP),
    ]
    return pa.RecordBatch.from_arrays(values, schema=feed_schema(columns))


def read_version_changes(
    uri: str,
    changes: VersionChanges,
    columns: pa.Schema,
    *,
    lance_storage_options: Mapping[str, str] | None = None,
    batch_rows: int = 8192,
    reader: Any = None,
) -> Iterator[pa.RecordBatch]:
    """The change rows of one planned version (needs pylance): deletes and pre-images
    (read at ``version - 1``) first, then inserts and post-images (read at ``version``),
    in batches of at most ``batch_rows`` rows of :func:`feed_schema` ``(columns)``."""
    scans = reader if reader is not None else _Reader(uri, lance_storage_options)
    by_key, by_place = _updated(scans, changes, batch_rows)
    extra = _identity_columns(changes) if changes.pairing != "none" or changes.in_place else []
    wanted = list(dict.fromkeys([*columns.names, *extra]))
    sides = (
        (changes.version - 1, changes.removed, (DELETE, UPDATE_PREIMAGE)),
        (changes.version, changes.added, (INSERT, UPDATE_POSTIMAGE)),
    )
    for version, selections, kinds in sides:
        for selection in selections:
            place = selection.fragment_id in changes.in_place
            updates = by_place if place else by_key
            for batch in scans.scan(version, selection, wanted, batch_rows):
                if len(updates):
                    ident = _identity(batch, changes, selection.fragment_id)
                    batch = pa.RecordBatch.from_arrays(
                        [*batch.columns, ident], names=[*batch.schema.names, "__identity"]
                    )
                yield _tagged(batch, columns, changes, kinds, updates)


# --------------------------------------------------------------------------- the feed


def check_range(storage: Storage, start: int, end: int | None) -> tuple[int, int]:
    """``(start, end)`` of a feed (``end`` None: the latest), InvalidOperationError when
    outside the history (``start`` may be one past ``end``: an empty feed)."""
    from txn_engine.format.io import latest_version

    latest = latest_version(storage).version
    last = latest if end is None else end
    if type(start) is not int or type(last) is not int:
        raise InvalidOperationError(f"versions are whole numbers, got {start!r}, {end!r}")
    if start < 1 or last > latest or start > last + 1:
        raise InvalidOperationError(
            f"{storage.uri}: change feed range {start}..{last} is not within versions "
            f"1..{latest} (start may be one past the end: an empty feed)"
        )
    return start, last


def require_history(storage: Storage, first: int, last: int) -> None:
    """Every version from ``first`` to ``last`` is still there (HistoryUnavailableError
    naming the first missing one)."""
    from txn_engine.format.naming import scan_versions

    listing = scan_versions(storage, since=first)
    for version in range(first, last + 1):
        if listing.get(version) is None:
            raise HistoryUnavailableError(
                f"{storage.uri}: version {version} is gone (cleaned up?), so the changes "
                f"of versions {first}..{last} cannot be read; read from a later version",
                conflicting_version=version,
            )


def change_batches(
    uri: str | os.PathLike[str],
    start: int,
    end: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
    batch_rows: int = 8192,
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """(the feed's schema, an iterator of its batches) for versions ``start`` to ``end``
    (default: the latest). The history is leased until the iterator is exhausted or
    closed. Raises InvalidOperationError (a range outside the history, an unknown
    column), HistoryUnavailableError, SchemaChangedError (while iterating)."""
    text = os.fspath(uri)
    storage = open_storage(text, storage_options)
    first, last = check_range(storage, start, end)
    held = pin_history(storage, max(1, first - 1), owner="txn_engine change feed", ttl=lease_ttl)
    try:
        require_history(storage, max(1, first - 1), last)
        # the columns as the range starts (as of the version before it); a change of
        # them within the range raises SchemaChangedError naming the version
        _, first_file = read_manifest(storage, max(1, first - 1) if first <= last else last)
        table = fields_to_arrow(list(first_file.manifest.fields), {})
        if columns is not None:
            missing = [c for c in columns if table.get_field_index(c) < 0]
            if missing:
                raise InvalidOperationError(
                    f"columns {missing} are not in the table as the range starts "
                    f"(columns: {table.names})"
                )
            table = pa.schema([table.field(c) for c in columns])
    except BaseException:
        held.release()
        raise
    if lance_storage_options is None and storage_options is not None:
        lance_storage_options = {str(k): str(v) for k, v in storage_options.items()}
    return feed_schema(table), _batches(
        text, storage, first, last, table, held, lance_storage_options, batch_rows
    )


def _batches(
    uri: str,
    storage: Storage,
    first: int,
    last: int,
    columns: pa.Schema,
    held: Lease,
    lance_storage_options: Mapping[str, str] | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    before: table_pb2.Manifest | None = None
    try:
        if first <= last:
            before = read_manifest(storage, first - 1)[1].manifest if first > 1 else None
            if before is not None:
                check_columns(before, columns, "start")
        reader = _Reader(uri, lance_storage_options)
        for version in range(first, last + 1):
            current = read_manifest(storage, version)[1].manifest
            planned = plan_version(storage, version, columns, before=before, after=current)
            before = current
            yield from read_version_changes(
                uri, planned, columns, batch_rows=batch_rows, reader=reader
            )
    finally:
        held.release()


def change_reader(
    uri: str | os.PathLike[str], start: int, end: int | None = None, **options: Any
) -> pa.RecordBatchReader:
    """The change feed of versions ``start`` to ``end`` as a ``RecordBatchReader``
    (bounded memory: one batch of rows at a time, plus the identities of one version's
    changed rows when it has updates to pair). Options as for :func:`change_batches`."""
    schema, batches = change_batches(uri, start, end, **options)
    return pa.RecordBatchReader.from_batches(schema, batches)


def changes(
    uri: str | os.PathLike[str], start: int, end: int | None = None, **options: Any
) -> pa.Table:
    """The change feed of versions ``start`` to ``end`` (default: the latest) as one
    ``pyarrow.Table`` (see the module docstring; :func:`change_reader` for large ranges)."""
    return change_reader(uri, start, end, **options).read_all()
