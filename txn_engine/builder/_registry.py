"""The operation-handler registry: one :class:`Handler` per operation type.

A handler holds everything txn_engine knows about one operation type: whether it may
create a dataset, its validation against the current manifest, its effect on the
manifest, and its conflict policy (the predicates of the matrix rules where it is the
transaction being committed, the fragments and config keys it touches, its rebase). The
family modules (:mod:`.data`, :mod:`.rows`, :mod:`.compaction`, :mod:`.index`,
:mod:`.metadata`, :mod:`.versions`) register theirs with :func:`register`;
:func:`txn_engine.builder.validate` and :func:`txn_engine.builder.build_manifest` look
them up with :func:`handler_for` and add only the steps common to every operation, and
so do the drivers of :mod:`txn_engine.conflicts` (detection, rebase).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import attrs

from txn_engine._proto import table_pb2
from txn_engine.builder._common import Ids, ManifestState, invalid
from txn_engine.builder._policy import (
    DeletionReader,
    FragmentLookup,
    Predicate,
    Rebased,
    RebaseTarget,
    RowClash,
    RuleContext,
)
from txn_engine.transaction import Transaction

#: The config keys an operation edits: (upserted, deleted).
ConfigEdits = tuple[frozenset[str], frozenset[str]]

NO_CONFIG_EDITS: ConfigEdits = (frozenset(), frozenset())

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
    """Everything about one operation type (subclass, then :func:`register`).

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
    what the operation touches (rules O1 and K read them on both sides);
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
        """Existing fragments ``op`` changes in place or removes (rule O1 compares them)."""
        return frozenset()

    def config_edits(self, op: OpT) -> ConfigEdits:
        """The config keys ``op`` upserts and deletes (rules K, K2, C1, C2 compare them)."""
        return NO_CONFIG_EDITS

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


#: Operation type -> its handler. Filled by the family modules through :func:`register`.
HANDLERS: dict[type[Any], Handler[Any]] = {}

H = TypeVar("H", bound=Handler[Any])


def register(op_type: type[Any]) -> Callable[[type[H]], type[H]]:
    """Class decorator: register an instance of the decorated handler for ``op_type``."""

    def decorate(cls: type[H]) -> type[H]:
        if op_type in HANDLERS:
            raise RuntimeError(f"a handler for {op_type.__name__} is already registered")
        HANDLERS[op_type] = cls()
        return cls

    return decorate


def handler_for(op: object) -> Handler[Any]:
    """The handler of ``op``'s type; InvalidOperationError for a type no handler knows."""
    handler = HANDLERS.get(type(op))
    if handler is None:
        raise invalid(f"unknown operation {type(op).__name__}")
    return handler


# ---- rules over what both sides touch (several families use them) ----------------------------


def fragments_overlap(c: RuleContext) -> None:
    """Rule O1: retryable when the fragments the other modified overlap mine."""
    mine = handler_for(c.mine.operation).modified_fragment_ids(c.mine.operation)
    other = handler_for(c.other.operation).modified_fragment_ids(c.other.operation)
    overlap = other & mine
    if overlap:
        c.retry(f"both touched fragment(s) {sorted(overlap)}", fragment_ids=overlap)


def key_clash(a: ConfigEdits, b: ConfigEdits) -> frozenset[str]:
    """Keys upserted by one side and upserted or deleted by the other."""
    (a_up, a_del), (b_up, b_del) = a, b
    return (a_up & (b_up | b_del)) | (b_up & a_del)


def config_keys(c: RuleContext) -> None:
    """Rule K: incompatible when both sides edit one config key (an upsert against an
    upsert or a delete)."""
    mine = handler_for(c.mine.operation).config_edits(c.mine.operation)
    other = handler_for(c.other.operation).config_edits(c.other.operation)
    clash = key_clash(mine, other)
    if clash:
        c.incompatible(f"both changed config key(s) {sorted(clash)}", keys=clash)
