"""Named storage faults for commit tests, and a randomly failing storage for stress runs.

The commit protocol must survive each of these (``docs/testing.md``):

===========================  ===============================================================
kind                         what happens                                        commit must
===========================  ===============================================================
``lost_response``            the manifest create lands, the caller gets          acknowledge
                             :class:`~txn_engine.errors.AmbiguousWriteError`      it once
``fail_before_write``        the manifest create fails before reaching the       land it once
                             store (ambiguous error, nothing written)
``spurious_exists``          the manifest create reports "already exists" but    land it once
                             nothing is there
``transaction_file_fails``   writing the ``_transactions/*.txn`` copy fails      acknowledge
                             (after the manifest landed; readers use the         it once
                             inline transaction)
``crash_before_manifest``    the writer dies right before its manifest create    nothing lands
                             (:class:`SimulatedCrash`)
``crash_after_manifest``     the writer dies right after its manifest landed     it is there once
``unknown_outcome``          lost response and the read-back fails too           raise
                                                                                 CommitState-
                                                                                 UnknownError
``latency``                  every call is delayed                               just slower
===========================  ===============================================================

:func:`fault_rules` turns a kind into :class:`~txn_engine.testing.faults.Fault` rules for
:class:`~txn_engine.testing.faults.FaultyStorage` (deterministic: fire on the next matching
call). :class:`ChaosStorage` injects the same kinds at random with a given rate and counts
them; the stress runner uses it.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from txn_engine.errors import AmbiguousWriteError, ObjectExistsError, StorageError
from txn_engine.loop.core import SETTLE_ATTEMPTS
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import CommitHandler
from txn_engine.testing.faults import Fault, SimulatedCrash, wrapped_handler

__all__ = [
    "FAULT_KINDS",
    "LANDING_FAULTS",
    "ChaosStorage",
    "fault_rules",
]

#: Every fault kind :func:`fault_rules` and :class:`ChaosStorage` understand.
FAULT_KINDS: tuple[str, ...] = (
    "lost_response",
    "fail_before_write",
    "spurious_exists",
    "transaction_file_fails",
    "crash_before_manifest",
    "crash_after_manifest",
    "unknown_outcome",
    "latency",
)

#: Kinds after which the commit still lands and is acknowledged.
LANDING_FAULTS: frozenset[str] = frozenset(
    {"lost_response", "fail_before_write", "spurious_exists", "transaction_file_fails", "latency"}
)

_MANIFESTS = "_versions/*"
_MANIFEST_KINDS = (
    "lost_response",
    "fail_before_write",
    "spurious_exists",
    "crash_before_manifest",
    "crash_after_manifest",
    "unknown_outcome",
)
_TRANSACTIONS = "_transactions/*"


def _exists(method: str, path: str) -> BaseException:
    return ObjectExistsError(f"injected fault: {path} reported as existing")


def _storage_error(method: str, path: str) -> BaseException:
    return StorageError(f"injected fault: {method}({path}) failed")


def fault_rules(kind: str, *, times: int = 1, delay: float = 0.001) -> list[Fault]:
    """The :class:`Fault` rules producing ``kind`` (see the module table) on the next
    ``times`` matching calls. ``delay`` is the per-call latency of ``"latency"``."""
    if kind == "lost_response":
        return [Fault("put_if_absent", _MANIFESTS, mode="after", times=times)]
    if kind == "fail_before_write":
        return [Fault("put_if_absent", _MANIFESTS, mode="before", times=times)]
    if kind == "spurious_exists":
        return [Fault("put_if_absent", _MANIFESTS, mode="before", times=times, error=_exists)]
    if kind == "transaction_file_fails":
        return [Fault("put", _TRANSACTIONS, mode="before", times=times, error=_storage_error)]
    if kind == "crash_before_manifest":
        return [Fault("put_if_absent", _MANIFESTS, mode="crash_before", times=times)]
    if kind == "crash_after_manifest":
        return [Fault("put_if_absent", _MANIFESTS, mode="crash_after", times=times)]
    if kind == "unknown_outcome":
        # once the response is lost, every read-back of that manifest fails as well (a
        # whole read, or a bounded one, which starts with size())
        read_backs = [
            Fault(m, "\0nothing", mode="before", times=None, error=_storage_error)
            for m in ("get", "size")
        ]

        def arm(_method: str, path: str) -> None:
            for rule in read_backs:
                rule.pattern = path

        return [
            Fault("put_if_absent", _MANIFESTS, mode="after", times=times, hook=arm),
            *read_backs,
        ]
    if kind == "latency":
        return [
            Fault(m, "*", mode="hook", times=None, hook=lambda _m, _p: time.sleep(delay))
            for m in ("put_if_absent", "put", "get", "get_range", "size", "list", "exists")
        ]
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")


class ChaosStorage:
    """Wrap ``inner``; with probability ``rate`` a manifest create (or, for
    ``transaction_file_fails``, a transaction-file write) suffers one of ``kinds``, each
    kind getting an equal share.
    ``latency`` seconds (uniform 0..2x) are added to every call when given or when
    ``"latency"`` is among the kinds. ``injected`` counts the faults that fired.

    ``unknown_outcome`` here loses the response of a create whose read-backs then fail
    (as many as the loop makes, until the next listing), so the loop gives up with
    CommitStateUnknownError.
    Thread-safe; seed ``rng`` for reproducible runs.
    """

    def __init__(
        self,
        inner: Storage,
        *,
        rate: float,
        kinds: Sequence[str] = ("lost_response",),
        latency: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], got {rate}")
        self.inner = inner
        self.rate = rate
        self.kinds = tuple(k for k in kinds if k != "latency")
        self.latency = latency if latency or "latency" not in kinds else 0.002
        self.rng = rng or random.Random()
        self.injected: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._failing_reads: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"ChaosStorage({self.inner!r}, rate={self.rate}, kinds={self.kinds})"

    @property
    def uri(self) -> str:
        return self.inner.uri

    def _delay(self) -> None:
        if self.latency:
            with self._lock:
                d = self.rng.uniform(0, 2 * self.latency)
            time.sleep(d)

    def _draw(self, applicable: Sequence[str]) -> str | None:
        """With probability ``rate`` pick one of the configured kinds; it fires only if it
        applies to this call (so each kind gets an equal share of the rate)."""
        with self._lock:
            if not self.kinds or self.rng.random() >= self.rate:
                return None
            kind = self.rng.choice(self.kinds)
            if kind not in applicable:
                return None
            self.injected[kind] += 1
            return kind

    @property
    def commit_handler(self) -> CommitHandler:
        """The inner storage's commit authority, its manifest creates subject to the same
        faults as ``put_if_absent``."""
        return wrapped_handler(self, self.inner, self._create)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._create(path, lambda: self.inner.put_if_absent(path, data))

    def _create(self, path: str, do: Callable[[], None]) -> None:
        self._delay()
        kind = self._draw(_MANIFEST_KINDS) if path.startswith("_versions/") else None
        if kind == "fail_before_write":
            raise AmbiguousWriteError(f"injected fault: put_if_absent({path}) outcome unknown")
        if kind == "spurious_exists":
            raise ObjectExistsError(f"injected fault: {path} reported as existing")
        if kind == "crash_before_manifest":
            raise SimulatedCrash(f"crash before put_if_absent({path})")
        do()
        if kind == "crash_after_manifest":
            raise SimulatedCrash(f"crash after put_if_absent({path})")
        if kind == "unknown_outcome":
            with self._lock:  # every read-back of the settlement fails
                self._failing_reads[path] = SETTLE_ATTEMPTS
        if kind in ("lost_response", "unknown_outcome"):
            raise AmbiguousWriteError(f"injected fault: lost response of put_if_absent({path})")

    def put(self, path: str, data: bytes) -> None:
        self._delay()
        if path.startswith("_transactions/") and self._draw(("transaction_file_fails",)):
            raise StorageError(f"injected fault: put({path}) failed")
        self.inner.put(path, data)

    def _failing_read(self, method: str, path: str) -> None:
        """Raise while ``path``'s read-back outage lasts (each whole read counts once)."""
        with self._lock:
            left = self._failing_reads.pop(path, 0)
            if left > 1:
                self._failing_reads[path] = left - 1
        if left:
            raise StorageError(f"injected fault: {method}({path}) failed")

    def get(self, path: str) -> bytes:
        self._delay()
        self._failing_read("get", path)
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._delay()
        return self.inner.get_range(path, start, end)

    def size(self, path: str) -> int:
        self._delay()
        self._failing_read("size", path)  # a bounded read starts with size()
        return self.inner.size(path)

    def list(self, prefix: str) -> Sequence[str]:
        self._delay()
        with self._lock:  # a new attempt (or a new read) starts: the outage is over
            self._failing_reads.clear()
        return self.inner.list(prefix)

    def exists(self, path: str) -> bool:
        self._delay()
        return self.inner.exists(path)

    def delete(self, path: str) -> None:
        self._delay()
        self.inner.delete(path)
