"""The one seam between the commit loop and contention handling.

The loop (:mod:`txn_engine.loop.driver`) lands a transaction exactly once and checks it
against every version in between; how a writer behaves *towards other writers* (offering
its transaction, carrying theirs, waiting for a carrier, hosting one, the rank wait) is
behind :class:`Contention`, which the loop calls at fixed points:

* before the attempts: :meth:`~Contention.start` (once) and :meth:`~Contention.wait`
  (before each attempt: a writer deferring to a carrier polls instead of racing);
* during an attempt: :meth:`~Contention.reusable` (versions known from an earlier commit),
  :meth:`~Contention.seen` (each version's transaction as read), :meth:`~Contention.landing`
  (what to create: the transaction, or it carrying other writers' offers);
* after a lost race: :meth:`~Contention.lost` (inside the attempt, right after the create),
  :meth:`~Contention.after_lost`, :meth:`~Contention.ranked` (the rank wait before retrying
  on a known winner), :meth:`~Contention.may_still_land` (the budget is spent, an offer of
  this transaction may still land);
* after landing: :meth:`~Contention.landed`, :meth:`~Contention.offered`;
* on finish: :meth:`~Contention.failed` (an error ends the call), :meth:`~Contention.finish`.

:class:`NoContention` does nothing at each point: local disk, a store where creates are not
guarded, and callers that opt out (``RetryPolicy.offer_after=None``) get the plain loop.
:mod:`txn_engine.contention` implements the seam with offers and carriers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from txn_engine._proto import transaction_pb2
from txn_engine.builder import ManifestState
from txn_engine.format.naming import NamingScheme, VersionEntry, VersionListing
from txn_engine.loop.core import CommitResult, Core
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.transaction import Transaction

__all__ = ["Contention", "ContentionFactory", "NoContention", "no_contention"]


class Contention(Protocol):
    """What the commit loop asks of contention handling, at fixed points (module docstring).
    One instance serves one commit call; it may read and update the call's :class:`Core`."""

    @property
    def peeks(self) -> bool:
        """Whether a read of the target manifest goes beside each create (a carrier's:
        every writer it carries waits for its lost create)."""

    def start(self, budget: RetryBudget, direct: bool) -> bool:
        """Before the first attempt (``direct``: it would create on the caller's base at
        once): returns whether that direct attempt stands."""

    def wait(self, budget: RetryBudget, direct: bool) -> CommitResult | bool:
        """Before each attempt: the result when the transaction was found landed while
        waiting, True to come back here instead of attempting, False to attempt now."""

    def reusable(
        self, newer: Sequence[VersionEntry], latest: int | None
    ) -> tuple[frozenset[int], int | None, str | None]:
        """Of the versions ``newer``, those whose transaction is known already
        (``Core.transactions``: not read again), the one to read to confirm them (None:
        confirmed), and the uuid its transaction must have."""

    def seen(
        self,
        budget: RetryBudget,
        version: int,
        pb: transaction_pb2.Transaction | None,
        *,
        base: bool = False,
    ) -> None:
        """The transaction of ``version`` as just read (``base``: the caller's base)."""

    def landing(
        self, budget: RetryBudget, latest: int, current: ManifestState, scheme: NamingScheme
    ) -> Transaction:
        """What this attempt creates as ``latest + 1``: the core's transaction, or it
        carrying other writers' offers."""

    def lost(
        self,
        budget: RetryBudget,
        target: int,
        listing: VersionListing | None,
        scheme: NamingScheme,
        winner: str | None,
    ) -> None:
        """The create of ``target`` was lost; ``winner``: "listed" when the guard listing
        shows it, "read" when its manifest was read back and the retry chases it at once,
        else None (a stale base alone)."""

    def landed(self, target: int, path: str, data: bytes, pb: transaction_pb2.Transaction) -> None:
        """The create of ``target`` at ``path`` landed ``data`` (transaction ``pb``) and
        passed its checks."""

    def offered(self) -> bool:
        """Whether this call offered its transaction (found in another version: carried)."""

    def after_lost(self, budget: RetryBudget) -> None:
        """After a lost attempt, before the retry is scheduled."""

    def ranked(self) -> bool:
        """After a lost race (``Core.raced``): whether the immediate retry on the known
        winner waits its rank (``RetryPolicy.chase_ranks``)."""

    def may_still_land(self) -> bool:
        """The budget is spent: whether an offer of this transaction may still land (the
        loop then goes on until that is decided)."""

    def failed(self, exc: Exception) -> None:
        """An error ends the call: return to let it propagate, or raise another in its
        place (an offer of the transaction may still land: the outcome is unknown)."""

    def finish(self, landed: CommitResult | None) -> None:
        """The call ends (landed or not): withdraw, remember what is worth keeping."""


#: Makes the contention handling of one commit call from its core and retry policy.
ContentionFactory = Callable[[Core, RetryPolicy], Contention]


class NoContention:
    """Contention handling that does nothing: the plain commit loop."""

    peeks = False

    def __init__(self, core: Core) -> None:
        self._core = core

    def start(self, budget: RetryBudget, direct: bool) -> bool:
        """The direct attempt stands."""
        return direct

    def wait(self, budget: RetryBudget, direct: bool) -> CommitResult | bool:
        """Never waits."""
        return False

    def reusable(
        self, newer: Sequence[VersionEntry], latest: int | None
    ) -> tuple[frozenset[int], int | None, str | None]:
        """Nothing is known ahead of the reads."""
        return frozenset(), None, None

    def seen(
        self,
        budget: RetryBudget,
        version: int,
        pb: transaction_pb2.Transaction | None,
        *,
        base: bool = False,
    ) -> None:
        """Nothing to note."""

    def landing(
        self, budget: RetryBudget, latest: int, current: ManifestState, scheme: NamingScheme
    ) -> Transaction:
        """Nothing carried: the transaction itself."""
        return self._core.txn

    def lost(
        self,
        budget: RetryBudget,
        target: int,
        listing: VersionListing | None,
        scheme: NamingScheme,
        winner: str | None,
    ) -> None:
        """Nothing to note."""

    def landed(self, target: int, path: str, data: bytes, pb: transaction_pb2.Transaction) -> None:
        """Nothing to publish."""

    def offered(self) -> bool:
        """Never offered."""
        return False

    def after_lost(self, budget: RetryBudget) -> None:
        """Nothing to do."""

    def ranked(self) -> bool:
        """After a lost race the retry on a known winner waits its rank."""
        return True

    def may_still_land(self) -> bool:
        """No offer: nothing may still land."""
        return False

    def failed(self, exc: Exception) -> None:
        """The error propagates as it is."""

    def finish(self, landed: CommitResult | None) -> None:
        """Nothing to withdraw or remember."""


def no_contention(core: Core, policy: RetryPolicy) -> Contention:
    """The :data:`ContentionFactory` of the plain loop (:class:`NoContention`)."""
    return NoContention(core)
