"""The operation handler: one :class:`Handler` subclass per operation type, and what
its steps are handed (:class:`Build`, :class:`Sources`, :class:`Whole`).

A handler holds everything txn_engine knows about one operation type: whether it may
create a dataset, its validation against the current manifest, its effect on the
manifest, and its conflict policy (the predicates of the matrix rules where it is the
transaction being committed, the fragments and config keys it touches, its rebase). The
family modules (:mod:`.data`, :mod:`.rows`, :mod:`.compaction`, :mod:`.index`,
:mod:`.metadata`, :mod:`.versions`) subclass it; :mod:`txn_engine.builder._registry` holds
one instance per operation type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Generic, TypeVar

import attrs

from txn_engine._proto import table_pb2
from txn_engine.builder._common import Ids, ManifestState
from txn_engine.builder._policy import (
    DeletionReader,
    FragmentLookup,
    Predicate,
    Rebased,
    RebaseTarget,
    RowClash,
)
from txn_engine.builder._touches import ConfigEdits, config_edits, modified_fragment_ids
from txn_engine.transaction import Transaction

__all__ = ["Build", "Handler", "Sources", "Whole"]

OpT = TypeVar("OpT")


@attrs.define
class Build:
    """The manifest being built, handed to :meth:`Handler.apply` to change in place.

    ``manifest`` starts as a copy of the current one (an empty one when creating) and
    ``indices`` as copies of its indices; a handler may replace ``indices``. ``ids`` hands
    out fragment ids to fragments that arrive without one; ``stable`` says whether the
    dataset uses stable row ids; ``version`` is the version being built.
    """

    current: ManifestState | None
    manifest: table_pb2.Manifest
    indices: list[table_pb2.IndexMetadata]
    ids: Ids
    stable: bool
    version: int


@attrs.frozen
class Sources:
    """Manifests of other versions an operation copies (Restore, Clone)."""

    restore: ManifestState | None = None
    clone: ManifestState | None = None


@attrs.frozen
class Whole:
    """A manifest taken whole from another version (Restore, Clone), before the common
    finishing steps. ``recompute_flags`` False keeps the copied writer version, tag and
    feature flags as they are."""

    manifest: table_pb2.Manifest
    indices: list[table_pb2.IndexMetadata]
    recompute_flags: bool = True


class Handler(Generic[OpT]):
    """Everything about one operation type (subclass, then list it in
    :mod:`txn_engine.builder._registry`).

    Building: ``creates`` (may apply when there is no dataset yet), ``only_creates``
    (refused when the target already holds a dataset), ``touches_fragments`` (its
    fragments are re-checked for files left with only tombstoned columns),
    ``prunes_indices`` (indices on dropped fields and emptied segments are dropped
    afterwards, :func:`~txn_engine.builder.retain_relevant_indices`), ``only_adds``
    (every fragment of the base stays as it was and :meth:`apply` returns the ids the new
    ones were given: the feature flags then follow from the base's and the new fragments,
    without a scan of the table); :meth:`validate`
    (every handler defines it, even to check nothing), and :meth:`apply` or :meth:`whole`.

    Conflicts: ``rules`` maps the code of every predicate rule in this type's row of
    :data:`txn_engine.conflicts.MATRIX` (this type being *mine*) to its predicate;
    ``follow_up_rules`` are also evaluated after the matrix's rule found nothing (Update:
    the upsert key check U1). :meth:`modified_fragment_ids` and :meth:`config_edits` say
    what the operation touches (rules O1 and K read them on both sides, from the
    operation's fields: :mod:`txn_engine.builder._touches`);
    :meth:`with_derived_rows` and :meth:`rebase` move a checked transaction onto the
    latest version. ``tests/unit/test_handlers.py`` fails
    when a type lacks any of this.

    Lineage (:mod:`txn_engine.conflicts.lineage`, whether a version committed right above
    ours carries our change): ``replaces_table`` (its version replaces the table whatever
    it was built on: Overwrite, Restore, Clone), ``edits_config`` (it may change config
    keys we changed), ``keeps_indices`` / ``keeps_fields`` (it leaves the index list / the
    schema as its base had them, so what we changed there must still be there).
    """

    creates: bool = False
    only_creates: bool = False
    touches_fragments: bool = True
    prunes_indices: bool = False
    only_adds: bool = False
    rules: Mapping[str, Predicate] = MappingProxyType({})
    follow_up_rules: tuple[str, ...] = ()
    replaces_table: bool = False
    edits_config: bool = False
    keeps_indices: bool = False
    keeps_fields: bool = False

    def validate(self, current: ManifestState | None, txn: Transaction, op: OpT) -> None:
        """Raise InvalidOperationError if ``op`` cannot apply to ``current``.

        ``current`` is None only for handlers with ``creates``; the common checks
        (dataset presence, read version) have already run. Every handler overrides it
        (a test checks), so a new operation type cannot go unvalidated by omission."""
        raise NotImplementedError

    def explicit_ids(self, op: OpT) -> Iterable[int]:
        """Fragment ids ``op`` gives explicitly to new fragments (never handed out again)."""
        return ()

    def whole(self, current: ManifestState | None, op: OpT, sources: Sources) -> Whole | None:
        """The manifest when ``op`` copies another version instead of changing the current
        one (then :meth:`apply` is not called); None otherwise."""
        return None

    def apply(self, build: Build, op: OpT) -> list[int] | None:
        """Change ``build`` by ``op``; return the ids of the fragments it wrote or restated
        (None: possibly all of them)."""
        raise NotImplementedError

    # ---- conflict policy ---------------------------------------------------------------

    def modified_fragment_ids(self, op: OpT) -> frozenset[int]:
        """Existing fragments ``op`` changes in place or removes (rule O1 compares them;
        read from its fields by :func:`~txn_engine.builder._touches.modified_fragment_ids`)."""
        return modified_fragment_ids(op)

    def config_edits(self, op: OpT) -> ConfigEdits:
        """The config keys ``op`` upserts and deletes (rules K, K2, C1, C2 compare them;
        read from its fields by :func:`~txn_engine.builder._touches.config_edits`)."""
        return config_edits(op)

    def with_derived_rows(
        self,
        txn: Transaction,
        rules: Sequence[str],
        initial_fragments: FragmentLookup,
        read_dv: DeletionReader,
    ) -> Transaction | None:
        """``txn`` carrying what it affected, derived from its own files, when the
        conflicts it met (their rule codes ``rules``) might then resolve and it carries
        none; None otherwise (``ConflictOptions.derive_affected_rows``)."""
        return None

    def rebase(self, txn: Transaction, target: RebaseTarget) -> Rebased | RowClash:
        """``txn`` moved onto ``target.version``; by default unchanged (the builder
        rebuilds it on the latest manifest)."""
        return Rebased(txn)
