"""The operation-handler registry: one :class:`~txn_engine.builder._handler.Handler` per
operation type, built once from the family modules' handler classes and read-only after.

:func:`txn_engine.builder.validate` and :func:`txn_engine.builder.build_manifest` look
handlers up with :func:`handler_for` and add only the steps common to every operation,
and so do the drivers of :mod:`txn_engine.conflicts` (detection, rebase). A new operation
type's handler is listed in :func:`_handlers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from txn_engine.builder._common import invalid
from txn_engine.builder._handler import Handler
from txn_engine.builder.compaction import ReserveFragmentsHandler, RewriteHandler
from txn_engine.builder.data import (
    AppendHandler,
    DataReplacementHandler,
    MergeHandler,
    OverwriteHandler,
    ProjectHandler,
)
from txn_engine.builder.index import CreateIndexHandler, UpdateMemWalStateHandler
from txn_engine.builder.metadata import UpdateBasesHandler, UpdateConfigHandler
from txn_engine.builder.rows import DeleteHandler, UpdateHandler
from txn_engine.builder.versions import CloneHandler, RestoreHandler
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

__all__ = ["HANDLERS", "handler_for"]


def _handlers() -> dict[type[Any], Handler[Any]]:
    """One handler instance per operation type (in the order of their family modules)."""
    classes: tuple[tuple[type[Any], type[Handler[Any]]], ...] = (
        (CreateIndex, CreateIndexHandler),
        (UpdateMemWalState, UpdateMemWalStateHandler),
        (Rewrite, RewriteHandler),
        (ReserveFragments, ReserveFragmentsHandler),
        (UpdateConfig, UpdateConfigHandler),
        (UpdateBases, UpdateBasesHandler),
        (Append, AppendHandler),
        (Overwrite, OverwriteHandler),
        (Merge, MergeHandler),
        (Project, ProjectHandler),
        (DataReplacement, DataReplacementHandler),
        (Delete, DeleteHandler),
        (Update, UpdateHandler),
        (Restore, RestoreHandler),
        (Clone, CloneHandler),
    )
    return {op_type: cls() for op_type, cls in classes}


#: Operation type -> its handler (read-only; list a new one in ``_handlers``).
HANDLERS: Mapping[type[Any], Handler[Any]] = MappingProxyType(_handlers())


def handler_for(op: object) -> Handler[Any]:
    """The handler of ``op``'s type; InvalidOperationError for a type no handler knows."""
    handler = HANDLERS.get(type(op))
    if handler is None:
        raise invalid(f"unknown operation {type(op).__name__}")
    return handler
