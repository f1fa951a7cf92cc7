"""Rebase: moving a checked transaction onto the latest version (``lance-format.md`` §7.3).

* Delete / Update: when a concurrent Delete/Update changed the deletion vector of a fragment
  I also changed (rule D1 marked it), my deletion vector is recomputed as *latest deletion
  vector* union *my affected rows*, written as a new ``.bin`` file named with the latest version,
  and my transaction's ``read_version`` moves to the latest version. If both sides deleted
  or updated the same row, the result is a retryable :class:`Conflict` (rule ``ROWS``). A
  fragment whose rows all end up deleted is removed instead. Without rebasing work the
  read version still moves.
* Every other operation is returned unchanged: it is rebuilt on the latest manifest by the
  builder. (Lance also folds fragment-reuse indices of concurrent compactions into a
  CreateIndex/Rewrite, but only for transactions it holds in memory: the fragment-reuse index
  of a Rewrite is never serialized, so a transaction read from storage never has one, and
  txn_engine's :class:`~txn_engine.ops.Rewrite` carries none.)

The deletion-vector merge itself is the Delete and Update handlers' (their ``rebase``
hook, :mod:`txn_engine.builder.rows`, where :func:`derive_affected_rows` lives too);
:func:`rebase` is the driver that looks the handler up. Nothing here raises for a
conflict; :func:`rebase` returns a :class:`Conflict` instead.
Nothing here does I/O either: deletion vectors are read through the ``read_dv`` callable the
caller passes (the commit loop reads them from storage), and the merged deletion files are
returned as :class:`PendingDeletionFile` values for the caller to write before its manifest.
Format errors raised by ``read_dv`` propagate.

More permissive than Lance, off by default: :attr:`ConflictOptions.derive_affected_rows`
computes the affected rows of a Delete/Update that carries none from its own deletion files
(mine minus the read version's), so two deletes of disjoint rows of one fragment both land
even when the caller did not record ``affected_rows``. See ``docs/conflicts.md``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence

import attrs

from txn_engine._proto import table_pb2
from txn_engine.builder import (
    DeletionReader,
    FragmentLookup,
    PendingDeletionFile,
    Rebased,
    RebaseTarget,
    RowClash,
    find_fragment_index,
    handler_for,
)
from txn_engine.builder._row_addresses import addresses as _addresses  # noqa: F401 (tests)
from txn_engine.builder._row_addresses import fragment_offsets
from txn_engine.builder._row_addresses import offsets_by_mask as _offsets_by_mask  # noqa: F401
from txn_engine.builder.rows import derive_affected_rows
from txn_engine.conflicts.detect import Conflict
from txn_engine.conflicts.isolation import (
    ISOLATION_LEVELS,
    SERIALIZABLE,
    SNAPSHOT,
    PylanceMatcher,
    RowMatcher,
    table_isolation,
)
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.upsert import KeyReader, PylanceKeyReader
from txn_engine.errors import InvalidOperationError
from txn_engine.transaction import Transaction

__all__ = [
    "ConflictOptions",
    "DeletionReader",
    "PendingDeletionFile",
    "Rebased",
    "derive_affected_rows",
    "find_fragment",
    "fragment_offsets",
    "rebase",
    "at_table_level",
    "options_for",
]


@attrs.frozen(kw_only=True)
class ConflictOptions:
    """Opt-in behaviour more permissive than Lance (every default matches pylance 14).

    * ``derive_affected_rows``: for a Delete/Update without ``affected_rows`` that meets a
      concurrent Delete/Update on a shared fragment, derive the rows it affected from its
      deletion files (its new deletion vector minus the read version's) and rebase like a
      transaction that carried them. Costs two deletion-file reads per shared fragment and
      only applies to Delete and row-rewriting Update (``REWRITE_COLUMNS`` updates change
      rows in place and cannot be derived). Proven by ``tests/property/test_conflict_props.py``.
    """

    derive_affected_rows: bool = False
    #: Resolve, instead of refusing, the pairs that have one correct result although pylance
    #: 14 refuses them (``docs/conflicts.md``, *Beyond Lance*): a Delete/Update and a
    #: Rewrite or Merge of the same fragments (either order; rows are mapped through the
    #: rewrite and deletion vectors carried over), and two Deletes of the same fragment
    #: (their affected rows derived when not recorded; a row deleted by both is deleted
    #: once). ``False`` answers every such pair as pylance 14 does.
    rebase_rows: bool = True
    #: ``"snapshot"`` (Lance's) or ``"serializable"``: a Delete/Update then also conflicts
    #: with a concurrent transaction that added rows its predicate matches
    #: (:mod:`txn_engine.conflicts.isolation`; ``row_matcher`` evaluates the predicate on
    #: the added rows, without one every added row conflicts).
    isolation: str = attrs.field(default="snapshot")
    row_matcher: RowMatcher | None = attrs.field(default=None, eq=False, repr=False)
    #: Reads the keys of rows a concurrent transaction added, so that an upsert refused by
    #: rule U1 lands when none of them is a key it inserts
    #: (:func:`txn_engine.conflicts.upsert.added_keys_collide`); None: U1 as it is.
    key_reader: KeyReader | None = attrs.field(default=None, eq=False, repr=False)

    @isolation.validator
    def _known(self, _attr: object, value: str) -> None:
        if value not in ISOLATION_LEVELS:
            raise InvalidOperationError(
                f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {value!r}"
            )


def at_table_level(options: ConflictOptions, config: Mapping[str, str]) -> ConflictOptions:
    """``options`` at the stronger of their own level and the one the table ``config``
    asks for (:func:`~txn_engine.conflicts.isolation.table_isolation`)."""
    if options.isolation == SERIALIZABLE or table_isolation(config) == SNAPSHOT:
        return options
    return attrs.evolve(options, isolation=SERIALIZABLE)


def options_for(
    options: ConflictOptions | None,
    isolation: str | None,
    uri: str,
    storage_options: dict[str, str] | None = None,
) -> ConflictOptions:
    """``options`` (default :class:`ConflictOptions`) at ``isolation`` (None: as they are)
    for the dataset at ``uri``, with a :class:`~txn_engine.conflicts.isolation.PylanceMatcher`
    of ``uri`` unless they carry a matcher of their own (asked only under serializable
    isolation, the writer's own or the table's: :func:`at_table_level`), and a
    :class:`~txn_engine.conflicts.upsert.PylanceKeyReader` unless they carry a key reader."""
    out = options or ConflictOptions()
    if isolation is not None:
        out = attrs.evolve(out, isolation=isolation)
    own = out.row_matcher is not None and not isinstance(out.row_matcher, PylanceMatcher)
    if not own:
        out = attrs.evolve(out, row_matcher=PylanceMatcher(uri, storage_options))
    own_keys = out.key_reader is not None and not isinstance(out.key_reader, PylanceKeyReader)
    if not own_keys:
        out = attrs.evolve(out, key_reader=PylanceKeyReader(uri, storage_options))
    return out


def find_fragment(
    fragments: Sequence[table_pb2.DataFragment], fragment_id: int
) -> table_pb2.DataFragment | None:
    """The fragment ``fragment_id`` of a manifest's fragment list (sorted by id), or None
    (the builder's binary search)."""
    pos = find_fragment_index(fragments, fragment_id)
    return None if pos < 0 else fragments[pos]


def rebase(
    txn: Transaction,
    *,
    latest_version: int,
    latest_fragments: Sequence[table_pb2.DataFragment],
    rebase_fragment_ids: frozenset[int],
    initial_fragments: FragmentLookup | None,
    read_dv: DeletionReader,
    new_id: Callable[[], int] = lambda: secrets.randbits(64),
    tolerant_fragment_ids: frozenset[int] = frozenset(),
) -> Rebased | Conflict:
    """Move ``txn`` onto ``latest_version`` (whose fragment list is ``latest_fragments``).

    ``rebase_fragment_ids`` are the fragments :func:`~txn_engine.conflicts.detect.check`
    marked (rule D1). Returns the rebased transaction with one ``.bin`` deletion file per
    merged fragment to write (none when there is nothing to merge; ids from ``new_id``), or a
    retryable ``Conflict`` when my affected rows clash with rows the latest version already
    deleted (except on ``tolerant_fragment_ids``, where only Deletes met mine: a row
    deleted twice is deleted once).
    """
    target = RebaseTarget(
        latest_version,
        latest_fragments,
        rebase_fragment_ids,
        initial_fragments,
        read_dv,
        new_id,
        tolerant_fragment_ids,
    )
    out = handler_for(txn.operation).rebase(txn, target)
    if isinstance(out, RowClash):
        return _conflict(txn, latest_version, out)
    return out


def _conflict(txn: Transaction, version: int, clash: RowClash) -> Conflict:
    return Conflict.of_transaction(
        txn,
        Outcome.RETRYABLE,
        "ROWS",
        version,
        f"This {txn.kind} transaction was preempted by a concurrent transaction at or "
        f"before version {version}: {clash.detail}. Please retry.",
        fragment_ids=frozenset(clash.fragment_ids),
        row_addresses=clash.rows,
    )
