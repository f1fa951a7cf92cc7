"""Contention handled with offers and carriers: the :class:`~txn_engine.loop.seam.
Contention` of a commit on an object store.

A writer that keeps losing the race for a version offers its Append to the other writers
(:mod:`txn_engine.contention.offers`); a retrying Append carries the offers it reads into
its own version; a carrier (:mod:`txn_engine.contention.carrier`) lands them in versions of
its own, and writers that see it (its versions, its beacon) wait for it instead of racing;
a writer that loses to txn_engine writers of other processes may host one. See
``docs/architecture.md`` (*Offers*, *A carrier*).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from txn_engine._proto import transaction_pb2
from txn_engine.builder import WRITER_LIBRARY, ManifestState, validate
from txn_engine.contention.created import POLL_LIST_EVERY, carried_here, publish_created
from txn_engine.contention.offers import (
    CARRIER_KEY,
    OFFER_WINDOW,
    OFFERS_DIR,
    Offer,
    OfferScan,
    Posting,
    can_carry,
    carrier_lately,
    carrying,
    forget_carrier,
    may_offer,
    note_ours,
    ours,
    parse_offer_name,
    recall,
    remember,
    saw_carrier,
    select_offers,
)
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitStateUnknownError,
    HistoryUnavailableError,
    IncompatibleTransactionError,
    RetryableConflictError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.io import read_version_by_name
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import (
    NamingScheme,
    VersionEntry,
    VersionListing,
    carrier_beacon,
    manifest_path,
)
from txn_engine.loop.attempt import attempt, oldest_needed
from txn_engine.loop.core import (
    UNKNOWN_REMEDY,
    CommitResult,
    Core,
    NothingToCarry,
    carried_uuids,
)
from txn_engine.loop.create import Guard
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

__all__ = [
    "HOST_MIN_ATTEMPT_SECONDS",
    "MIN_PATIENCE",
    "PATIENCE_ATTEMPTS",
    "Hosting",
    "Offering",
]


class Hosting(Protocol):
    """Where a commit starts a carrier in its session (:mod:`txn_engine.contention.carrier`)."""

    def host(
        self,
        storage: Storage,
        base: Dataset | None,
        known: Mapping[int, transaction_pb2.Transaction | None],
        offers: Mapping[str, Offer],
        scan: OfferScan | None,
    ) -> bool:
        """Start a hosted carrier for the table unless one of this session runs."""

    def hosting(self, uri: str) -> bool:
        """Whether a carrier this session hosts for table ``uri`` runs."""


#: A writer waiting for a carrier races again when no carrier version has appeared for this
#: many of its shortest attempts (no carrier runs, or it cannot carry the offer) ... A
#: shortest attempt is about one round trip, and a carrier a lost race has just started needs
#: up to about 7 for its first version (its claim, two listings of the offers, its create,
#: and a read-back and a second create when the first race's winner takes that version).
#: With 4, its waiters on a 100 ms store raced it (docs/performance.md, *Offers*).
PATIENCE_ATTEMPTS = 8


#: ... and at least this long (seconds).
MIN_PATIENCE = 0.3


#: How long a writer that waits for a carrier from its first attempt on waits for its offer
#: to be written before it races instead (seconds).
_POST_WAIT_SECONDS = 1.0


#: A waiting writer's pause between two reads that found nothing new (seconds).
_POLL_PAUSE = 0.005


def _patience(budget: RetryBudget) -> float:
    shortest = budget.shortest_attempt_seconds or 0.0
    return max(MIN_PATIENCE, PATIENCE_ATTEMPTS * shortest)


#: A lost attempt hosts a carrier only if it took at least this long (seconds): where a
#: round trip is cheaper (a store next door, the emulators without delay), racing costs
#: less than the carrier's coordination (offer, listings, a thread hop each way).
#: Measured in docs/performance.md (*Carriers hosted by the writers*).
HOST_MIN_ATTEMPT_SECONDS = 0.02


def _is_carrier(pb: transaction_pb2.Transaction | None) -> bool:
    """Whether a landed transaction is a carrier's
    (:data:`~txn_engine.contention.offers.CARRIER_KEY`)."""
    return pb is not None and CARRIER_KEY in pb.transaction_properties


#: The window of an offer that could not be looked up (the offers directory did not list).
_UNKNOWN_WINDOW = 1 << 64


def _decided_by_rules(exc: BaseException) -> bool:
    """A conflict found by the conflict rules: a helper checking the offer against the
    same versions finds it too, so the offer cannot land after it."""
    return isinstance(exc, (RetryableConflictError, IncompatibleTransactionError)) and not (
        isinstance(exc, HistoryUnavailableError)
    )


class Offering:
    """Offers and carriers for one commit call (the module's docstring)."""

    def __init__(self, core: Core, policy: RetryPolicy, hosts: Hosting) -> None:
        self.core = core
        self.policy = policy
        self._hosts = hosts
        txn = core.original
        #: an Append that can be offered, on a store with offers (whatever the policy: an
        #: earlier call may have offered it)
        self.offerable = core.guarded and may_offer(txn)
        #: a carrier's own empty transaction (never created without offers to carry)
        self.carrier = CARRIER_KEY in txn.properties_dict
        #: after how many lost races this transaction offers itself (None: never); whether
        #: its attempts carry other writers' offers
        self.offer_after: int | None = None
        self.carries_offers = False
        #: a create of this call was lost in a race (or two creates were lost): offers are
        #: made and read from then on (a stale first attempt alone does not count)
        self.contended = False
        #: a create of this call was lost, in a race or from a stale base (another writer
        #: is active either way): offers are read and carried from then on, and the next
        #: commit of this process on the table recalls them
        self.lost_one = False
        #: polls made while deferring to a carrier (every few of them is a listing)
        self.polls = 0
        #: listings of the offers started by this call
        self.scans = 0
        #: the offers read so far, the names of those that can never land
        self.offers: dict[str, Offer] = {}
        self.dead_offers: set[str] = set()
        self.scan: OfferScan | None = None
        self.posting: Posting | None = None
        #: the windows of earlier calls' offers of it, once listed; keep this call's offer
        #: (the outcome is unknown: a call made again reads it)
        self.earlier_windows: list[int] | None = None
        self.keep_offer = False
        #: a recent commit of this process on this table saw contention: carry offers from
        #: the first attempt on (:func:`~txn_engine.contention.offers.recall`)
        self.recalled = False
        #: the recalled transactions' uuids by version, until one of them is confirmed by a
        #: fresh read (``recall_ok``); a mismatch (a table re-created at the URI) drops them
        self.recalled_versions: dict[int, str] = {}
        self.recall_ok = False
        #: when a carrier's version was last read by this call (its base, or a version it
        #: lost a race to; ``RetryPolicy.clock``): while recent, a writer that may wait for
        #: the carrier (``RetryPolicy.wait_for_carrier``) waits on
        self.carrier_seen_at: float | None = None
        #: the base is a Dataset just opened (a direct first attempt): an offer may be
        #: posted from its version before any listing
        self.fresh_base = False
        #: when a writer told of a carrier (``wait_for_carrier=True``) began to wait for it
        self.wait_started: float | None = None
        #: a commit that must list first and may wait for a carrier it has not seen yet
        #: reads the listing before its first create (it may show one)
        self.look_first = False
        #: this call has waited for a carrier (the wait was not an attempt)
        self.waited = False
        if policy.offer_after is not None and can_carry(txn):
            self._recall(policy.offer_after)
        #: a lost race starts a carrier in this process when none is seen
        self.hosts = self.offer_after is not None and not self.carrier and self._may_host(policy)
        if self.hosts or self.carrier:
            note_ours(txn.uuid)  # a version of it is not another process's

    @property
    def peeks(self) -> bool:
        """A carrier reads the target beside each create (every writer it carries waits)."""
        return self.carrier

    def _recall(self, offer_after: int) -> None:
        """Carry offers; offer this transaction after ``offer_after`` lost races; start
        from what a recent contended commit of this process on the table knew."""
        self.carries_offers = True
        if may_offer(self.core.original):
            self.offer_after = offer_after
        recent = recall(self.core.storage.uri)
        if recent is None:
            return
        self.recalled = True
        self.core.transactions.update(recent.transactions)
        self.recalled_versions = {
            v: pb.uuid for v, pb in recent.transactions.items() if pb is not None
        }
        self.offers.update(recent.offers)
        self.dead_offers |= recent.dead
        self.scan = recent.scan

    # ---- before the attempts ------------------------------------------------------------

    def start(self, budget: RetryBudget, direct: bool) -> bool:
        """Note a carrier's base or a carrier seen lately, make an early offer, and decide
        whether the direct first attempt stands (not while deferring to a carrier)."""
        core, policy = self.core, self.policy
        base = core.manifests.get(core.original.read_version)
        if base is not None and _is_carrier(base.transaction):
            self._saw_carrier(policy)  # a carrier is at work (or was lately)
        if self.carrier_seen_at is None and carrier_lately(core.storage.uri):
            self.carrier_seen_at = policy.clock()  # this process read a carrier's version lately
        if policy.offer_early:
            self._offer(budget, early=True)
        self.fresh_base = direct
        if direct and self._defers(budget):
            direct = False
        self.look_first = (
            not direct
            and policy.wait_for_carrier is None
            and self.offer_after is not None
            and self.carrier_seen_at is None
        )
        return direct

    def wait(self, budget: RetryBudget, direct: bool) -> CommitResult | bool:
        """Poll instead of racing while deferring to a carrier; read the listing first
        when it may show a carrier not seen yet."""
        if not direct and self._defers(budget):
            found = self._poll(budget)
            if found is not None:
                return found
            self.waited = True
            return True
        if self.look_first:
            self.look_first = False
            found = attempt(self.core, self, budget, None, create=False)  # no extra request
            if found is not None:
                return attrs.evolve(found, attempts=0)
            if carrier_lately(self.core.storage.uri):
                self._saw_carrier(self.policy)  # its listing showed the carrier's beacon
            self.core.prefetched = self.core.listing  # the next attempt starts from it
            return True
        if self.waited:  # the wait for a carrier was not an attempt: it sets no schedule
            budget.restart_first_attempt()
        return False

    # ---- during an attempt --------------------------------------------------------------

    def reusable(
        self, newer: Sequence[VersionEntry], latest: int | None
    ) -> tuple[frozenset[int], int | None, str | None]:
        """The versions recalled from a commit just before (not read again), and the
        newest of them to read unless one was confirmed already."""
        known = self.core.transactions
        reuse = frozenset(
            e.version
            for e in newer
            if e.version != latest
            and e.version in self.recalled_versions
            and known.get(e.version) is not None
        )
        if not reuse:
            return reuse, None, None
        probe = None if self.recall_ok else max(reuse)
        return reuse, probe, None if probe is None else self.recalled_versions[probe]

    def seen(
        self,
        budget: RetryBudget,
        version: int,
        pb: transaction_pb2.Transaction | None,
        *,
        base: bool = False,
    ) -> None:
        """A version's transaction as read: it confirms (or, differing, drops) what was
        recalled; a carrier's version is a sighting of the carrier."""
        if base:
            if self.carries_offers:
                self._fresh_transaction(version, pb)
            return
        self._fresh_transaction(version, pb)
        if _is_carrier(pb):
            self._saw_carrier(budget.policy)  # a carrier is at work

    def landing(
        self, budget: RetryBudget, latest: int, current: ManifestState, scheme: NamingScheme
    ) -> Transaction:
        """The transaction carrying the offers chosen for ``latest + 1``; a carrier with
        none to carry raises NothingToCarry (it never creates an empty version)."""
        carried = self._offers_to_carry(budget, latest, current, scheme)
        if self.carrier and not carried:
            raise NothingToCarry(latest)
        return carrying(self.core.txn, carried) if carried else self.core.txn

    # ---- after a lost race --------------------------------------------------------------

    def lost(
        self,
        budget: RetryBudget,
        target: int,
        listing: VersionListing | None,
        scheme: NamingScheme,
        winner: str | None,
    ) -> None:
        """A lost create: contended when it was a race (a second loss, or a winner that
        landed after the guard listing was served); read the offers meanwhile."""
        latest_listed = None if listing is None else listing.latest
        self.contended = (
            self.contended
            or budget.attempts > 1
            or (listing is not None and (latest_listed is None or latest_listed.version < target))
        )
        self.lost_one = True
        if self.carries_offers and self.scan is None and (self.contended or not self.scans):
            self._start_scan(target, scheme)  # read the offers while the retry is prepared
        if winner == "read":
            self.contended = True

    def after_lost(self, budget: RetryBudget) -> None:
        """Offer the transaction once it has lost enough races; host a carrier when the
        race is lost to txn_engine writers of other processes and none is seen."""
        self._offer(budget)
        if not self.hosts:
            return
        uri = self.core.storage.uri
        if self._hosts.hosting(uri) or (
            not carrier_lately(uri)
            and budget.attempt_seconds() >= HOST_MIN_ATTEMPT_SECONDS
            and (self._foreign_winner() or self._foreign_offer())
        ):
            # one starts here, and this commit (its offer posted) waits for it
            if self._hosts.host(
                self.core.storage,
                self._known_latest(),
                self._known_transactions(),
                self.offers,
                self.scan,
            ):
                self.scan = None  # the carrier's now: this commit waits, reads no offers
            self.carrier_seen_at = budget.policy.clock()

    def ranked(self) -> bool:
        """The retry on a known winner waits its rank, unless this call holds other
        writers' offers (its create lands theirs too, so it goes first)."""
        self._take_scan()  # a listing of the offers that has finished counts already
        own = self.core.original.uuid
        return not any(o.transaction.uuid != own for o in self.offers.values())

    def may_still_land(self) -> bool:
        """An offer of this transaction is open in a version not checked yet."""
        return self._open_window() is not None

    # ---- after landing, on finish -------------------------------------------------------

    def landed(self, target: int, path: str, data: bytes, pb: transaction_pb2.Transaction) -> None:
        """Keep the landed transaction (the next commit may check offers against it); a
        carrier publishes its version to the writers of this process (found unread)."""
        if self.carries_offers:
            self.core.transactions[target] = pb
        if self.carrier:
            publish_created(self.core.storage, path, data)

    def offered(self) -> bool:
        """Whether this call posted an offer (a version carrying it carried it)."""
        return self.posting is not None

    def failed(self, exc: Exception) -> None:
        """An error after this transaction was offered: while an offer of it may still land
        (its window not checked), the outcome is unknown (CommitStateUnknownError)."""
        if not self.offerable or _decided_by_rules(exc):
            return
        try:
            window = self._open_window()
        except StorageError:
            window = _UNKNOWN_WINDOW  # the offers could not be listed: assume one is open
        if window is None:
            return
        self.keep_offer = True  # the call made again reads its window from it
        if isinstance(exc, CommitStateUnknownError):
            return
        txn = self.core.txn
        until = "" if window == _UNKNOWN_WINDOW else f" up to {window}"
        raise CommitStateUnknownError(
            f"{txn.kind} transaction {txn.uuid} was offered to the other writers "
            f"and may still land in a version{until} ({type(exc).__name__}: {exc})",
            read_version=self.core.original.read_version,
            operation=txn.kind,
            remedy=UNKNOWN_REMEDY,
        ) from exc

    def finish(self, landed: CommitResult | None) -> None:
        """Withdraw this call's offer (unless its outcome is unknown); remember what a
        contended commit read for the next commit of this process on the table."""
        if self.posting is not None and not self.keep_offer:
            self.posting.withdraw()
        if self.carries_offers and (
            self.lost_one or self.recalled or self.carrier_seen_at is not None
        ):  # a commit that waited for a carrier read the versions the next one reads
            self._take_scan()
            core = self.core
            remember(core.storage.uri, core.transactions, self.offers, self.dead_offers, self.scan)

    # ---- the steps ----------------------------------------------------------------------

    def _offer(self, budget: RetryBudget, *, early: bool = False, carrier: bool = False) -> None:
        """After a lost race: offer the transaction to the other writers once it has lost
        ``RetryPolicy.offer_after`` races (:mod:`txn_engine.contention.offers`). ``early``,
        before the first attempt (``RetryPolicy.offer_early``): only right after a contended
        commit of this session on the table (recalled), and not from a read version older
        than what that commit saw (the window would be spent). ``carrier``: before the first
        attempt, because a carrier is at work (:mod:`txn_engine.contention.carrier`). It is
        offered as checked up to the version built on, valid for
        :data:`~txn_engine.contention.offers.OFFER_WINDOW` versions."""
        if self.offer_after is None or self.posting is not None:
            return
        if early:
            newest_recalled = max(self.recalled_versions, default=0)
            if not self.recalled or self.core.original.read_version < newest_recalled:
                return
        elif not carrier and (not self.contended or budget.attempts < self.offer_after):
            return
        checked = self.core.checked_up_to
        base = self._transaction_of(checked)
        if base is None:
            return  # the transaction of the version checked up to is not known: no offer
        self.posting = Posting(
            self.core.storage,
            self.core.txn.with_read_version(checked),
            checked + OFFER_WINDOW,
            base.uuid,
        )

    def _defers(self, budget: RetryBudget) -> bool:
        """Whether the next attempt waits for the table's carrier (``RetryPolicy.
        wait_for_carrier``, :mod:`txn_engine.contention.carrier`) instead of racing it: this
        call's offer is written and may still land in the next version, and a carrier was
        seen (its version or its beacon: :meth:`_saw_carrier`, or by this session lately) or,
        told of one, the wait began, within the patience. A commit without a fresh Dataset
        base reads the versions before it offers (its offer then starts from the latest
        version). The offer is posted here (and its write waited for) once the transaction
        of the version it is checked up to is known (until then the wait is a read of the
        versions), and posted again from the latest version checked once its window is
        spent."""
        told = budget.policy.wait_for_carrier
        if told is False or self.offer_after is None:
            return False
        now = budget.policy.clock()
        if told and self.wait_started is None:
            self.wait_started = now  # told: the wait counts as a sighting
        sightings = [t for t in (self.carrier_seen_at, self.wait_started) if t is not None]
        if not sightings:
            return False  # no carrier seen: race as without one
        if now - max(sightings) >= _patience(budget):
            if self.carrier_seen_at is not None:
                forget_carrier(
                    self.core.storage.uri
                )  # waited in vain: the next commits race at once
            return False  # no carrier at work: race as without one
        posting = self.posting
        if posting is not None and posting.valid_through <= self.core.checked_up_to:
            # its window is spent (a stale read version, or versions that could not carry it):
            # every version up to it has been checked, so a new offer from here on is safe
            posting.withdraw()
            self.posting = None
        if self.posting is None and not self.fresh_base and not self.core.listing:
            return True  # a stale or cold base: read the versions first, offer from the latest
        if self.posting is None:
            self._offer(budget, carrier=True)
            if self.posting is None:  # the base's transaction is not known yet: read it first
                checked = self.core.checked_up_to
                return (
                    checked not in self.core.manifests
                    and self.core.transactions.get(checked) is None
                )
        posting = self.posting
        posting.wait_written(_POST_WAIT_SECONDS)  # an early offer's write may be in flight too
        return posting.written and posting.valid_through > self.core.checked_up_to

    def _foreign_offer(self) -> bool:
        """Whether this commit has read an offer another process posted (writers of several
        processes contend: a carrier would carry theirs too), in a scan that has finished or
        carried by a version it read. Writers of one process, or one writer racing writers that
        make no offers (pylance), host none: a carrier would only make their commits wait."""
        self._take_scan()  # never waits: a scan still running is looked at after the next loss
        own = self.core.original.uuid
        if any(
            o.transaction.uuid != own and not ours(o.transaction.uuid) for o in self.offers.values()
        ):
            return True
        return any(
            u != own and u != pb.uuid and not ours(u)
            for pb in self.core.transactions.values()
            if pb is not None
            for u in carried_uuids(pb)
        )

    def _latest_at_hand(self) -> tuple[VersionEntry, ManifestFile] | None:
        """The latest version this lost attempt listed, with its manifest when it is at hand
        (read back from the create it lost, or read for the checks; never read here)."""
        listing = self.core.prefetched or self.core.listing
        latest = listing.latest if listing else None
        if latest is None or not (
            latest.version in self.core.manifests or latest.version in self.core.raw
        ):
            return None
        try:
            return latest, self.core.manifest(latest.version)
        except TxnEngineError:  # an unreadable winner: nothing at hand
            return None

    def _foreign_winner(self) -> bool:
        """Whether the version this commit just lost to (its manifest at hand) was written by a
        txn_engine writer of another process: a writer that makes offers, which a carrier would
        carry too (pylance's versions say "lance")."""
        at_hand = self._latest_at_hand()
        if at_hand is None:
            return False
        mf = at_hand[1]
        return (
            mf.manifest.writer_version.library == WRITER_LIBRARY
            and mf.transaction is not None
            and not ours(mf.transaction.uuid)
        )

    def _transaction_of(self, version: int) -> transaction_pb2.Transaction | None:
        """The transaction of ``version`` as this commit knows it: read since the read version,
        or in a manifest it holds (its base: a stale base is held only there); None if neither."""
        pb = self.core.transactions.get(version)
        if pb is None and version in self.core.manifests:
            pb = self.core.manifests[version].transaction
        return pb

    def _known_transactions(self) -> dict[int, transaction_pb2.Transaction | None]:
        """The transactions of the versions this commit has read, its base's among them: the
        offers of the writers it raced are checked up to that version, and a carrier it hosts
        would otherwise read it again before its first create."""
        known = dict(self.core.transactions)
        for version in self.core.manifests:
            pb = self._transaction_of(version)
            if pb is not None:
                known[version] = pb
        return known

    def _known_latest(self) -> Dataset | None:
        """The latest version as this lost attempt read it, when its manifest is at hand: a
        carrier hosted now starts from it without a read (else it reads the latest itself)."""
        at_hand = self._latest_at_hand()
        return None if at_hand is None else Dataset(self.core.storage, *at_hand)

    def _may_host(self, policy: RetryPolicy) -> bool:
        """Whether this commit may start a carrier in its process (``RetryPolicy.host_carrier``):
        by default on a store over the network, for a writer that may wait for one."""
        if policy.host_carrier is False or policy.wait_for_carrier is False:
            return False
        return policy.host_carrier is True or not self.core.storage.uri.startswith("memory://")

    def _saw_carrier(self, policy: RetryPolicy) -> None:
        """This call read a carrier's version or beacon: the next commits of this process on
        the table may wait for the carrier for a while (``RetryPolicy.wait_for_carrier``), and
        so may this one, unless it has already raced without knowing of it. Such a commit has
        offered itself and races on (whoever wins may carry it): switching it to waiting
        midway made the slowest commits slower (docs/performance.md, *A carrier*)."""
        saw_carrier(self.core.storage.uri)
        if self.carrier_seen_at is None and not policy.wait_for_carrier and self.contended:
            return
        self.carrier_seen_at = policy.clock()

    def _poll(self, budget: RetryBudget) -> CommitResult | None:
        """While deferring to a carrier: read the new versions for this transaction (the
        checks of an attempt, without a create); the result once it is found. Waits a little
        when nothing new appeared (the listing itself is the round trip on an object store)."""
        before = self.core.checked_up_to
        uri = self.core.storage.uri
        found = (
            None if self._probed_nothing() else attempt(self.core, self, budget, None, create=False)
        )
        if found is not None:  # no create was made for it here: the attempts are the earlier ones
            return attrs.evolve(found, attempts=budget.attempts)
        if budget.policy.wait_for_carrier is None and not (
            carrier_beacon(uri) or self._hosts.hosting(uri)
        ):
            # untold, it waits only while the listings show a live beacon: none (the carrier
            # stopped and took it down, or its versions outlived it) means race now rather
            # than wait out the patience
            forget_carrier(uri)
            self.carrier_seen_at = None
            return None
        if self.core.checked_up_to == before:
            budget.policy.sleep(_POLL_PAUSE)  # the listing paces the polls on an object store
        return None

    def _probed_nothing(self) -> bool:
        """A poll that reads the next version by its name: True when it is not there yet
        (nothing new), False when the attempt's checks should run on it (read, or created by
        a carrier of this process: no read, and added to the last listing), or on a listing.
        Every :data:`~txn_engine.contention.created.POLL_LIST_EVERY` polls a listing runs beside the
        read (it keeps the beacons in view) and is used when the read found nothing. Only
        where the listing is the list of versions (``self.core.guarded``), its scheme known."""
        self.polls += 1
        listing = self.core.listing
        if not self.core.guarded or listing is None or listing.scheme is None:
            return False
        version = self.core.checked_up_to + 1
        path = manifest_path(version, listing.scheme)
        data = carried_here(self.core.storage, path)
        if data is None:
            lister = None
            if self.polls % POLL_LIST_EVERY == 0:
                lister = Guard(self.core.storage, since=oldest_needed(self.core))
            try:
                data = read_version_by_name(self.core.storage, version, listing.scheme)
            except StorageError:
                if lister is None:
                    return False  # a listing decides
            if data is None:
                listed = None if lister is None else lister.result()
                if listed is None:
                    return True  # nothing new (or no listing either: the next poll reads again)
                self.core.prefetched = listed
                return False
        self.core.raw[version] = data
        self.core.prefetched = listing.with_version(version)
        return False

    def _open_window(self) -> int | None:
        """The last version an offer of this transaction may still land in, when a version up to
        it has not been checked for this transaction's uuid (this call's offer, or one an
        earlier call with an unknown outcome left in the offers directory); None when no offer
        is open. A version known only to exist (a create lost to it) is not checked: it may be
        the carrier. Raises StorageError when the directory cannot be listed."""
        if not self.offerable:
            return None
        windows = [self.posting.valid_through] if self.posting is not None else []
        if self.earlier_windows is None:
            names = self.core.storage.list(OFFERS_DIR)
            self.earlier_windows = [
                parsed[0]
                for parsed in map(parse_offer_name, names)
                if parsed is not None and parsed[1] == self.core.original.uuid
            ]
        windows.extend(self.earlier_windows)
        window = max(windows, default=0)
        return window if window > self.core.checked_up_to else None

    def _take_scan(self) -> None:
        """Add the offers of a finished scan (an unfinished one is left running)."""
        scan = self.scan
        if scan is None:
            return
        found = scan.take()
        if found is None:
            return
        for version, pb in scan.transactions().items():
            if self.core.transactions.get(version) is None:
                self.core.transactions[version] = pb
        for offer in found:
            if offer.name not in self.dead_offers:
                self.offers.setdefault(offer.name, offer)
        self.scan = None

    def _fresh_transaction(self, version: int, pb: transaction_pb2.Transaction | None) -> None:
        """Record the transaction of ``version`` as just read; it confirms (or, differing,
        drops) what was recalled from an earlier commit of this process."""
        recalled = self.recalled_versions.get(version)
        if recalled is not None and not self.recall_ok:
            if pb is not None and pb.uuid == recalled:
                self.recall_ok = True
            else:
                self._forget_recalled()
        self.core.transactions[version] = pb

    def _forget_recalled(self) -> None:
        """Drop what was recalled (it was not confirmed to be this table's history)."""
        for version in self.recalled_versions:
            self.core.transactions.pop(version, None)
        self.recalled_versions = {}
        self.offers.clear()
        self.dead_offers.clear()

    def _start_scan(self, latest: int, scheme: NamingScheme) -> None:
        """List and read the offers not known yet that may still land after ``latest``, and
        the transactions of the versions up to ``latest`` they were checked against that this
        call has not read (an offer posted before this call began names an older version).
        A winner's manifest read back from a lost create is not read again: the next attempt
        and a carrier hosted now take its transaction from those bytes."""
        self.scans += 1
        self.scan = OfferScan(
            self.core.storage,
            after=latest,
            known=(*self.offers, *self.dead_offers),
            scheme=scheme,
            have=(
                *(v for v, pb in self.core.transactions.items() if pb is not None),
                *self.core.raw,
            ),
        )

    def _offers_to_carry(
        self, budget: RetryBudget, latest: int, current: ManifestState, scheme: NamingScheme
    ) -> list[Transaction]:
        """The other writers' offers this attempt carries into ``latest + 1`` (a retrying
        Append only; :func:`txn_engine.contention.offers.select_offers`). The listing of offers
        runs in the background beside the attempts; one that has not finished is picked up
        later."""
        if not self.carries_offers or not (self.lost_one or self.recalled):
            return []
        if self.recalled_versions and not self.recall_ok:
            self._forget_recalled()  # nothing read yet confirms it: do not rely on it
        self._take_scan()
        if self.scan is None and (self.contended or self.recalled or not self.scans):
            self._start_scan(latest, scheme)  # a stale base alone is worth one listing
        if not self.offers:
            return []
        chosen, dead = select_offers(
            self.offers.values(),
            own=self.core.members | {self.core.original.uuid},
            latest=latest,
            transactions=self.core.transactions,
            validate=lambda txn: validate(current, txn),
            options=self.core.options,
        )
        for name in dead:
            self.offers.pop(name, None)
            self.dead_offers.add(name)
        return chosen
