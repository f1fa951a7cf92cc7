"""Every Lance operation as an immutable attrs type, one module per family."""

from __future__ import annotations

from typing import TypeAlias

from txn_engine.ops.compaction import ReserveFragments, Rewrite, RewriteGroup, RewrittenIndex
from txn_engine.ops.data import (
    Append,
    DataReplacement,
    DataReplacementGroup,
    Merge,
    Overwrite,
    Project,
)
from txn_engine.ops.index import CreateIndex, UpdateMemWalState
from txn_engine.ops.metadata import UpdateBases, UpdateConfig, UpdateMap
from txn_engine.ops.rows import CompactedSsTable, Delete, Update, UpdateMode
from txn_engine.ops.versions import Clone, Restore

__all__ = [
    "OPERATION_KINDS",
    "Append",
    "Clone",
    "CompactedSsTable",
    "CreateIndex",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "Merge",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "RewrittenIndex",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMap",
    "UpdateMemWalState",
    "UpdateMode",
    "operation_kind",
]

Operation: TypeAlias = (
    Append
    | Delete
    | Overwrite
    | CreateIndex
    | Rewrite
    | Merge
    | Restore
    | ReserveFragments
    | Update
    | Project
    | UpdateConfig
    | DataReplacement
    | UpdateMemWalState
    | Clone
    | UpdateBases
)

#: Operation kind names, in transaction.proto order.
OPERATION_KINDS: tuple[str, ...] = (
    "Append",
    "Delete",
    "Overwrite",
    "CreateIndex",
    "Rewrite",
    "Merge",
    "Restore",
    "ReserveFragments",
    "Update",
    "Project",
    "UpdateConfig",
    "DataReplacement",
    "UpdateMemWalState",
    "Clone",
    "UpdateBases",
)


def operation_kind(op: Operation) -> str:
    """The Lance name of the operation's kind, e.g. ``"Append"``."""
    return type(op).__name__
