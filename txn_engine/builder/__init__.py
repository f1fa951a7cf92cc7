"""The pure manifest builder: (current manifest, transaction, version) -> next manifest.

No I/O happens here. Manifests stay protobuf messages (upb, C speed); only the fragments a
transaction carries are converted. Fragments are kept sorted by id, so lookups are binary
searches over the repeated field, never a dict of every fragment.

:func:`validate` raises :class:`~txn_engine.errors.InvalidOperationError` before anything
is written; :func:`build_manifest` assumes a validated transaction but still refuses
anything that would produce an unreadable manifest.

Everything specific to one operation type (its validation, its effect on the manifest,
its conflict rules and rebase) is in its handler, one module per family: :mod:`.data`
(Append, Overwrite, Merge, Project, DataReplacement), :mod:`.rows` (Delete, Update),
:mod:`.compaction` (Rewrite, ReserveFragments), :mod:`.index` (CreateIndex,
UpdateMemWalState), :mod:`.metadata` (UpdateConfig, UpdateBases), :mod:`.versions`
(Restore, Clone), one instance each in :data:`HANDLERS`. The two functions here are the drivers:
they add the steps common to every operation (dataset presence, read version, fragment
ids, tombstoned files, index retention, the id high-water mark, version, timestamp, writer
version, feature flags); :mod:`txn_engine.conflicts` drives the conflict hooks.
"""

from __future__ import annotations

import time

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    DEFAULT_DATA_FORMAT,
    FRAG_REUSE_INDEX,
    MEM_WAL_INDEX,
    WRITER_LIBRARY,
    Ids,
    ManifestState,
    copy_index,
    drop_tombstoned,
    field_ids_of,
    find_fragment_index,
    finish_common,
    fragment_ids,
    invalid,
    max_fragment_id,
    retain_relevant_indices,
)
from txn_engine.builder._handler import Build, Handler, Sources, Whole
from txn_engine.builder._policy import (
    DeletionReader,
    FragmentLookup,
    PendingDeletionFile,
    Predicate,
    Rebased,
    RebaseTarget,
    RowClash,
    RuleContext,
)
from txn_engine.builder._registry import HANDLERS, handler_for
from txn_engine.errors import LimitExceededError
from txn_engine.format.flags import FLAG_DELETION_FILES, FLAG_STABLE_ROW_IDS
from txn_engine.transaction import Transaction

__all__ = [
    "DEFAULT_DATA_FORMAT",
    "FRAG_REUSE_INDEX",
    "HANDLERS",
    "MAX_TIMESTAMP_NS",
    "MEM_WAL_INDEX",
    "WRITER_LIBRARY",
    "DeletionReader",
    "FragmentLookup",
    "Handler",
    "ManifestState",
    "PendingDeletionFile",
    "Predicate",
    "RebaseTarget",
    "Rebased",
    "RowClash",
    "RuleContext",
    "build_manifest",
    "find_fragment_index",
    "fragment_ids",
    "handler_for",
    "max_fragment_id",
    "retain_relevant_indices",
    "validate",
]

#: the latest manifest commit time Lance can read (i64 nanoseconds since 1970: 2262-04-11)
MAX_TIMESTAMP_NS = 2**63 - 1


def validate(current: ManifestState | None, txn: Transaction) -> None:
    """Raise InvalidOperationError if ``txn`` cannot apply to ``current`` (None: no dataset).

    Checks fragment ids (unknown, duplicate, reused), schema and data-format consistency and
    the per-operation rules (Merge keeps every fragment, Clone only creates, ...).
    """
    op = txn.operation
    handler = handler_for(op)
    kind = txn.kind
    if current is None:
        if not handler.creates:
            raise invalid(f"{kind} needs an existing dataset; create one with Overwrite first")
    elif handler.only_creates:
        raise invalid(f"{kind} only creates a dataset; the target already holds one")
    if current is not None and txn.read_version > current.manifest.version:
        raise invalid(
            f"read_version {txn.read_version} is newer than the latest version "
            f"{current.manifest.version}"
        )
    handler.validate(current, txn, op)


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
    handler = handler_for(op)
    ts = _commit_time(timestamp_ns)
    whole = handler.whole(current, op, Sources(restore=restore_source, clone=clone_source))
    if whole is not None:
        return _finish_whole(whole, txn, version, transaction_file, ts)
    m, stable, indices = _start(current, stable_row_ids)
    high = max_fragment_id(m) if current is not None else None
    ids = Ids(0 if high is None else high + 1, handler.explicit_ids(op))
    build = Build(current, m, indices, ids, stable, version)
    restated = handler.apply(build, op)  # fragments the op wrote (None: maybe all)
    indices = build.indices
    if handler.touches_fragments:
        drop_tombstoned(m, restated)
    if handler.prunes_indices:
        indices = retain_relevant_indices(indices, field_ids_of(m.fields), m.fragments)
    _raise_max_fragment_id(m)
    if not m.HasField("data_format"):
        m.data_format.file_format = "lance"
        m.data_format.version = DEFAULT_DATA_FORMAT
    finish_common(
        m,
        version,
        transaction_file,
        ts,
        txn,
        stable=stable,
        indices=indices,
        deletion_files=_deletion_files(current, m, restated if handler.only_adds else None),
    )
    return ManifestState(m, tuple(indices))


def _commit_time(timestamp_ns: int | None) -> int:
    """The commit time to write: ``timestamp_ns``, or now when None; InvalidOperationError
    when Lance could not read it back."""
    if timestamp_ns is None:
        return time.time_ns()
    if type(timestamp_ns) is int and 0 <= timestamp_ns <= MAX_TIMESTAMP_NS:
        return timestamp_ns
    # Lance reads a commit time as i64 nanoseconds since the epoch: pylance 14 shows
    # one outside that range (or before 1970) as 1970-01-01, so it is refused here
    raise invalid(
        f"timestamp_ns must be an integer from 0 to {MAX_TIMESTAMP_NS} (nanoseconds "
        f"since 1970, as Lance reads it), got {timestamp_ns!r}"
    )


def _finish_whole(
    whole: Whole, txn: Transaction, version: int, transaction_file: str, ts: int
) -> ManifestState:
    """The manifest of ``version`` from one taken whole from another version (Restore,
    Clone), with the steps common to every operation done."""
    m = whole.manifest
    stable = bool(m.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    finish_common(
        m,
        version,
        transaction_file,
        ts,
        txn,
        recompute_flags=whole.recompute_flags,
        stable=stable,
        indices=whole.indices,
    )
    return ManifestState(m, tuple(whole.indices))


def _start(
    current: ManifestState | None, stable_row_ids: bool
) -> tuple[table_pb2.Manifest, bool, list[table_pb2.IndexMetadata]]:
    """``(manifest, stable row ids, indices)`` to build on: copies of ``current``'s (an
    empty manifest when creating, with stable row ids when ``stable_row_ids``)."""
    m = table_pb2.Manifest()
    if current is None:
        return m, stable_row_ids, []
    m.CopyFrom(current.manifest)
    stable = bool(current.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    if stable_row_ids and not stable:
        raise invalid("stable row ids cannot be switched on for an existing dataset")
    return m, stable, [copy_index(i) for i in current.indices]


def _raise_max_fragment_id(m: table_pb2.Manifest) -> None:
    """Raise ``m``'s max fragment id to its highest fragment id (LimitExceededError when
    that does not fit the u32 field)."""
    if len(m.fragments):
        top = m.fragments[-1].id
        if top > 0xFFFFFFFF:  # Manifest.max_fragment_id is a u32
            raise LimitExceededError(
                f"fragment id {top} does not fit the manifest's u32 max_fragment_id "
                "(fragment ids exhausted)",
                limit="max_fragment_id",
            )
        m.max_fragment_id = max(m.max_fragment_id, top) if m.HasField("max_fragment_id") else top


def _deletion_files(
    current: ManifestState | None, m: table_pb2.Manifest, restated: list[int] | None
) -> bool | None:
    """Whether ``m`` has a deletion file, when that follows from the fragments an
    operation that only adds (``Handler.only_adds``) gave ids in ``restated`` (None: scan).
    A base whose deletion-files flag is clear has none (Lance sets the flag exactly when
    one exists) and keeps its fragments as they were, so only the new ones need a look: an
    Append to a 10,000-fragment table checks its own fragment instead of 10,000. A base
    with the flag set is scanned like any other."""
    if current is None or restated is None:
        return None
    if current.manifest.reader_feature_flags & FLAG_DELETION_FILES:
        return None
    frags = m.fragments
    for fid in restated:
        pos = find_fragment_index(frags, fid)
        if pos >= 0 and frags[pos].HasField("deletion_file"):
            return True
    return False
