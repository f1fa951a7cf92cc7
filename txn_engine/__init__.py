"""txn_engine: the transaction and conflict-resolution engine for the Lance table format.

Layers, bottom to top (a module imports only from its own layer or those below it;
``tests/unit/test_layers.py`` enforces this map, ``docs/architecture.md`` explains it)::

    0  errors, retry, clock, session, jsontext, redact, _proto, _version
                           foundations: one error tree, retry policy, the clock seam,
                           the session (what the library remembers between calls)
    1  storage, storetime  Storage protocol and backends; store-stamped time
    2  format              manifest files, naming, deletion files, refs, schema, flags
    3  model, ops, transaction, codec, interop, schema_check
                           immutable attrs values for every Lance operation, the protobuf
                           codec, pylance objects converted in one place
    4  builder, dataset, leases, changes
                           pure manifest builder, the read API, leases, the change feed
    5  conflicts           the conflict matrix as data, detection, planner, rebase, isolation
    6  loop, contention, commit, committer, retention, verify
                           the commit loop, contention behind its seam (offers, carriers),
                           commit, group commit, cleanup, history checks
    7  api, plans, writers, testing, spark, namespace
                           what users call: te.open(uri) and its writer calls (planned by
                           plans), fragment writers, test tooling, the Spark source,
                           namespaces
    8  apps                the command line and the stress run

The public names are listed in ``docs/api.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from txn_engine import errors as errors
from txn_engine import interop as interop
from txn_engine import session as session
from txn_engine import writers as writers
from txn_engine._version import __version__ as __version__
from txn_engine.api import Table as Table
from txn_engine.api import open as open
from txn_engine.codec import transaction_from_proto as transaction_from_proto
from txn_engine.codec import transaction_to_proto as transaction_to_proto
from txn_engine.commit import CommitResult as CommitResult
from txn_engine.commit import commit as commit
from txn_engine.commit import find_transaction as find_transaction
from txn_engine.commit import replan_and_commit as replan_and_commit
from txn_engine.committer import Committer as Committer
from txn_engine.conflicts.rebase import ConflictOptions as ConflictOptions
from txn_engine.contention.carrier import Carrier as Carrier
from txn_engine.dataset import Dataset as Dataset
from txn_engine.errors import SchemaMismatchError as SchemaMismatchError
from txn_engine.format.naming import NamingScheme as NamingScheme
from txn_engine.leases import Lease as Lease
from txn_engine.leases import lease as lease
from txn_engine.model import BasePath as BasePath
from txn_engine.model import DataFile as DataFile
from txn_engine.model import DeletionFile as DeletionFile
from txn_engine.model import DeletionFileType as DeletionFileType
from txn_engine.model import ExternalFile as ExternalFile
from txn_engine.model import Fragment as Fragment
from txn_engine.model import Index as Index
from txn_engine.model import IndexDetails as IndexDetails
from txn_engine.model import IndexFile as IndexFile
from txn_engine.model import IndexMetadata as IndexMetadata
from txn_engine.model import LanceField as LanceField
from txn_engine.model import MemWal as MemWal
from txn_engine.model import MemWalId as MemWalId
from txn_engine.model import MemWalState as MemWalState
from txn_engine.ops import Append as Append
from txn_engine.ops import Clone as Clone
from txn_engine.ops import CreateIndex as CreateIndex
from txn_engine.ops import DataReplacement as DataReplacement
from txn_engine.ops import DataReplacementGroup as DataReplacementGroup
from txn_engine.ops import Delete as Delete
from txn_engine.ops import Merge as Merge
from txn_engine.ops import Operation as Operation
from txn_engine.ops import Overwrite as Overwrite
from txn_engine.ops import Project as Project
from txn_engine.ops import ReserveFragments as ReserveFragments
from txn_engine.ops import Restore as Restore
from txn_engine.ops import Rewrite as Rewrite
from txn_engine.ops import RewriteGroup as RewriteGroup
from txn_engine.ops import RewrittenIndex as RewrittenIndex
from txn_engine.ops import Update as Update
from txn_engine.ops import UpdateBases as UpdateBases
from txn_engine.ops import UpdateConfig as UpdateConfig
from txn_engine.ops import UpdateMap as UpdateMap
from txn_engine.ops import UpdateMemWalState as UpdateMemWalState
from txn_engine.ops import UpdateMode as UpdateMode
from txn_engine.ops import operation_kind as operation_kind
from txn_engine.retention import cleanup as cleanup
from txn_engine.retention import plan_cleanup as plan_cleanup
from txn_engine.retry import RetryPolicy as RetryPolicy
from txn_engine.session import Session as Session
from txn_engine.storage import open_storage as open_storage
from txn_engine.transaction import Transaction as Transaction

if TYPE_CHECKING:
    from txn_engine.namespace import Namespace as Namespace

# UpdateMemWalState stays importable (decoding, conflict rules) but is not public:
# validate refuses it, pylance 14 uses another MemWAL layout (txn_engine.builder.index).
__all__ = [
    "Append",
    "BasePath",
    "Carrier",
    "Clone",
    "CommitResult",
    "Committer",
    "ConflictOptions",
    "CreateIndex",
    "DataFile",
    "DataReplacement",
    "DataReplacementGroup",
    "Dataset",
    "Delete",
    "DeletionFile",
    "DeletionFileType",
    "ExternalFile",
    "Fragment",
    "Index",
    "IndexDetails",
    "IndexFile",
    "IndexMetadata",
    "LanceField",
    "Lease",
    "MemWal",
    "MemWalId",
    "MemWalState",
    "Merge",
    "Namespace",
    "NamingScheme",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "RetryPolicy",
    "Rewrite",
    "RewriteGroup",
    "RewrittenIndex",
    "SchemaMismatchError",
    "Session",
    "Table",
    "Transaction",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMap",
    "UpdateMode",
    "__version__",
    "cleanup",
    "commit",
    "errors",
    "find_transaction",
    "interop",
    "lease",
    "open",
    "open_storage",
    "operation_kind",
    "plan_cleanup",
    "replan_and_commit",
    "session",
    "transaction_from_proto",
    "transaction_to_proto",
    "writers",
]


def __getattr__(name: str) -> Any:
    """``txn_engine.Namespace``, imported on first use (it needs lance-namespace: the
    ``namespace`` extra)."""
    if name == "Namespace":
        from txn_engine import namespace

        return namespace.Namespace
    raise AttributeError(f"module 'txn_engine' has no attribute {name!r}")
