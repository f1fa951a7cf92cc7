"""The commit loop's driver: attempts until the transaction lands, a conflict or the
budget ends it, contention handled behind :class:`~txn_engine.loop.seam.Contention`."""

from __future__ import annotations

from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.dataset import Dataset
from txn_engine.errors import InvalidOperationError, RetriesExhaustedError
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import (
    NamingScheme,
    hint_replaces_listing,
    transaction_file_name,
    transaction_path,
    write_version_hint,
)
from txn_engine.leases import Lease
from txn_engine.loop.attempt import attempt, direct_attempt
from txn_engine.loop.core import CommitResult, Core, members_of
from txn_engine.loop.seam import ContentionFactory
from txn_engine.ops import Restore
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage.base import read_concurrency
from txn_engine.storage.handler import CommitHandler, StoreCommitHandler
from txn_engine.transaction import Transaction

__all__ = ["drive", "guards"]


def drive(
    handler: CommitHandler,
    transaction: Transaction,
    *,
    contention_for: ContentionFactory,
    policy: RetryPolicy,
    options: ConflictOptions,
    base: Dataset | ManifestFile | None = None,
    timestamp_ns: int | None = None,
    assume_latest: bool = False,
    transaction_file: bool = False,
    lease: Lease | None = None,
) -> CommitResult:
    """Land ``transaction`` (an existing dataset's, already normalised) exactly once, with
    the contention handling ``contention_for`` makes; the arguments are those of
    :func:`txn_engine.commit`. The internal entry point every committer uses."""
    core = Core(
        handler=handler,
        original=transaction,
        txn=transaction,
        options=options,
        checked_up_to=transaction.read_version,
        members=frozenset(members_of(transaction)),
        guarded=guards(handler),
        transaction_file=transaction_file,
        lease=lease,
    )
    contention = contention_for(core, policy)
    direct = _take_base(core, base, assume_latest)
    budget = policy.budget()
    if not contention.start(budget, direct is not None):
        direct = None  # the carrier's next version carries this one
    landed: CommitResult | None = None
    try:
        while True:
            waited = contention.wait(budget, direct is not None)
            if isinstance(waited, CommitResult):
                return waited
            if waited:
                continue
            budget.start_attempt()
            if direct is not None:  # first attempt: create read_version + 1 straight away
                landed = direct_attempt(core, contention, budget, timestamp_ns, direct)
                direct = None
            else:
                landed = attempt(core, contention, budget, timestamp_ns)
            if landed is not None:
                if not (landed.already_committed or landed.carried or core.hintless):
                    write_version_hint(core.storage, landed.version)  # local disk only
                return landed
            contention.after_lost(budget)
            ranked = core.raced and contention.ranked()
            if core.prefetched is not None and budget.chase(ranked=ranked):
                continue  # the winner is known: retry on it at once (after its rank)
            if not budget.wait():
                if contention.may_still_land():
                    continue  # a helper may still land it: go on until that is decided
                raise _exhausted(core, budget)
    except Exception as exc:
        contention.failed(exc)
        raise
    finally:
        _withdraw_copies(core, landed)
        contention.finish(landed)


def guards(handler: CommitHandler) -> bool:
    """Whether creates run beside a guard listing: on a store that serves requests
    concurrently (object stores) whose own create-if-absent decides, so that its listing
    is the list of versions."""
    return isinstance(handler, StoreCommitHandler) and read_concurrency(handler.storage) > 1


def _take_base(
    core: Core, base: Dataset | ManifestFile | None, assume_latest: bool
) -> NamingScheme | None:
    """Keep the caller's base (the manifest at the read version); the naming scheme of a
    direct first attempt on it (create first, check after), or None to list first.

    Without concurrent requests (local disk) the check after a direct create is a listing
    taken after it, where it is a listing and not the version hint (``Core.hintless``);
    with ``assume_latest`` the existence check alone."""
    if base is None:
        return None
    txn = core.original
    mf = base.manifest_file if isinstance(base, Dataset) else base
    if mf.manifest.version != txn.read_version:
        raise InvalidOperationError(
            f"base is version {mf.manifest.version}, the transaction reads version "
            f"{txn.read_version}"
        )
    core.manifests[txn.read_version] = mf
    if not isinstance(base, Dataset) or isinstance(txn.operation, Restore):
        return None
    handler = core.handler
    core.hintless = (
        not core.guarded
        and not assume_latest
        and isinstance(handler, StoreCommitHandler)
        and not hint_replaces_listing(handler.storage)
    )
    if not (assume_latest or core.guarded or core.hintless):
        return None
    return base.naming_scheme


def _exhausted(core: Core, budget: RetryBudget) -> RetriesExhaustedError:
    """The error of a commit whose budget ran out while it kept losing the race."""
    return RetriesExhaustedError(
        f"{core.txn.kind} transaction {core.txn.uuid} lost the race for a new "
        f"version {budget.attempts} time(s) "
        f"({budget.exhausted_reason() or 'deadline'})",
        read_version=core.original.read_version,
        conflicting_version=core.checked_up_to + 1,
        operation=core.txn.kind,
        remedy="contention, not a conflict: retry later or raise RetryPolicy budgets",
    )


def _withdraw_copies(core: Core, landed: CommitResult | None) -> None:
    """Remove the ``.txn`` copies started beside creates that did not land (best effort:
    a leftover is an orphan that cleanup removes). The landed transaction's copy stays,
    and so does one at the path of a transaction an earlier call landed. A transaction
    carried by another writer's version keeps none: that version names the carrier's."""
    keep = None
    if landed is not None and not landed.carried:
        keep = transaction_path(
            transaction_file_name(landed.transaction.read_version, landed.transaction.uuid)
        )
    for path, copy in core.copies.items():
        if path != keep:
            copy.withdraw()
