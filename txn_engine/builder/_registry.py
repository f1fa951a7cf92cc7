"""The operation-handler registry: one :class:`Handler` per operation type.

A handler holds everything the builder knows about one operation: whether it may create
a dataset, its validation against the current manifest, and its effect on the manifest.
The family modules (:mod:`.data`, :mod:`.rows`, :mod:`.compaction`, :mod:`.index`,
:mod:`.metadata`, :mod:`.versions`) register theirs with :func:`register`;
:func:`txn_engine.builder.validate` and :func:`txn_engine.builder.build_manifest` look
them up with :func:`handler_for` and add only the steps common to every operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import attrs

from txn_engine._proto import table_pb2
from txn_engine.builder._common import Ids, ManifestState, invalid
from txn_engine.transaction import Transaction

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
    """What the builder does for one operation type (subclass, then :func:`register`).

    Class attributes: ``creates`` (may apply when there is no dataset yet),
    ``only_creates`` (refused when the target already holds a dataset),
    ``touches_fragments`` (its fragments are re-checked for files left with only
    tombstoned columns), ``prunes_indices`` (indices on dropped fields and emptied
    segments are dropped afterwards, :func:`~txn_engine.builder.retain_relevant_indices`).
    """

    creates: bool = False
    only_creates: bool = False
    touches_fragments: bool = True
    prunes_indices: bool = False

    def validate(self, current: ManifestState | None, txn: Transaction, op: OpT) -> None:
        """Raise InvalidOperationError if ``op`` cannot apply to ``current``.

        ``current`` is None only for handlers with ``creates``; the common checks
        (dataset presence, read version) have already run."""

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
