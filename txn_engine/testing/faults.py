"""A fault-injecting :class:`~txn_engine.storage.Storage` wrapper for tests.

:class:`FaultyStorage` passes every call through to an inner storage, except where a
:class:`Fault` rule matches (method name + ``fnmatch`` path pattern). A rule can

* raise **before** the call (nothing reaches the store),
* raise **after** the call (the write happened but the caller sees an error: a lost
  response; a call that fails by itself, such as a create that lost its race, does not
  use the rule up: it applies to the next matching call that succeeds),
* run a **hook** first (e.g. let another writer commit right before this one), or
* crash the caller with :class:`SimulatedCrash` (a ``BaseException``, so no ``except
  Exception`` swallows it), modelling a process that dies mid-commit.

Example: the manifest create succeeds but the response is lost, once::

    store = FaultyStorage(MemoryStorage())
    store.add(Fault("put_if_absent", "_versions/*", mode="after", times=1))
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import attrs

from txn_engine.errors import AmbiguousWriteError
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import CommitHandler, StoreCommitHandler, commit_handler_for

__all__ = ["Fault", "FaultyStorage", "SimulatedCrash", "WrappedCommitHandler"]

_T = TypeVar("_T")
FaultMode = Literal["before", "after", "crash_before", "crash_after", "hook"]


class SimulatedCrash(BaseException):
    """The process "died" at this storage call (raised by ``crash_*`` faults)."""


def _ambiguous(method: str, path: str) -> BaseException:
    return AmbiguousWriteError(f"injected fault: {method}({path}) outcome unknown")


@attrs.define
class Fault:
    """One injection rule.

    ``times`` is how many matching calls it fires on (``None`` = forever) after skipping
    the first ``skip`` matches. ``error`` builds the exception (default
    :class:`~txn_engine.errors.AmbiguousWriteError`). ``hook`` runs with ``(method, path)``
    before the call (modes ``"hook"``, ``"before"``, ``"crash_before"``) or, for the
    ``"after"`` modes, once the call took effect.
    """

    method: str
    pattern: str = "*"
    mode: FaultMode = "before"
    times: int | None = 1
    skip: int = 0
    error: Callable[[str, str], BaseException] = _ambiguous
    hook: Callable[[str, str], None] | None = None
    fired: int = 0
    seen: int = 0

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and fnmatch.fnmatchcase(path, self.pattern)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times


class WrappedCommitHandler:
    """The commit handler of a storage wrapper whose inner storage has its own authority
    (``s3+ddb://``): the wrapper's faults apply to the version create, reads go through
    the wrapper, and the inner authority still decides.

    ``create(path, do)`` is the wrapper's fault logic for a manifest create: it runs ``do``
    (the inner handler's commit) or raises instead of or after it, as a faulty
    ``put_if_absent(path, ...)`` would.
    """

    def __init__(
        self,
        wrapper: Storage,
        inner: CommitHandler,
        create: Callable[[str, Callable[[], None]], None],
    ) -> None:
        self._wrapper = wrapper
        self._inner = inner
        self._create = create

    def __repr__(self) -> str:
        return f"WrappedCommitHandler({self._wrapper!r}, {self._inner!r})"

    @property
    def storage(self) -> Storage:
        """The wrapper: reads during a commit see its faults too."""
        return self._wrapper

    def commit(self, version: int, path: str, data: bytes) -> None:
        """The inner authority's create, subject to the wrapper's faults."""
        self._create(path, lambda: self._inner.commit(version, path, data))

    def resolve(self, version: int, path: str) -> bool:
        """Delegate to the inner authority."""
        return self._inner.resolve(version, path)

    def finish_pending(self) -> Sequence[str]:
        """Delegate to the inner authority."""
        return self._inner.finish_pending()


def wrapped_handler(
    wrapper: Storage, inner: Storage, create: Callable[[str, Callable[[], None]], None]
) -> CommitHandler:
    """The commit handler a wrapper of ``inner`` carries: the store's own create-if-absent
    through the wrapper, or the inner authority with the wrapper's faults applied."""
    handler = commit_handler_for(inner)
    if isinstance(handler, StoreCommitHandler):
        return StoreCommitHandler(wrapper)
    return WrappedCommitHandler(wrapper, handler, create)


class FaultyStorage:
    """Wrap ``inner`` and apply :class:`Fault` rules (thread-safe bookkeeping).

    ``log`` records ``(method, path, outcome)`` for every call, outcome being ``"ok"``,
    ``"error"`` (the inner call failed), or the fault mode that fired.
    """

    def __init__(self, inner: Storage, faults: Sequence[Fault] = ()) -> None:
        self.inner = inner
        self.faults: list[Fault] = list(faults)
        self.log: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r}, faults={len(self.faults)})"

    def add(self, fault: Fault) -> Fault:
        """Add a rule and return it (inspect ``fired`` later)."""
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every rule."""
        with self._lock:
            self.faults.clear()

    @property
    def uri(self) -> str:
        """The wrapped storage's URI."""
        return self.inner.uri

    def _pick(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.exhausted or not fault.matches(method, path):
                    continue
                fault.seen += 1
                if fault.seen <= fault.skip:
                    continue
                fault.fired += 1
                return fault
        return None

    def _call(self, method: str, path: str, run: Callable[[], _T]) -> _T:
        fault = self._pick(method, path)
        if fault is None:
            return self._run(method, path, run, "ok")
        after = fault.mode in ("after", "crash_after")
        if fault.hook is not None and not after:
            fault.hook(method, path)
        if fault.mode == "hook":
            return self._run(method, path, run, "ok")
        if fault.mode in ("before", "crash_before"):
            self.log.append((method, path, fault.mode))
            if fault.mode == "crash_before":
                raise SimulatedCrash(f"crash before {method}({path})")
            raise fault.error(method, path)
        try:
            self._run(method, path, run, fault.mode)
        except BaseException:
            # an "after" fault models a response lost after the call took effect: a call
            # that failed by itself (a create that lost its race) leaves it for the next one
            with self._lock:
                fault.fired -= 1
                fault.seen -= 1
            raise
        if fault.hook is not None:  # an "after" rule's hook runs once the call took effect
            fault.hook(method, path)
        if fault.mode == "crash_after":
            raise SimulatedCrash(f"crash after {method}({path})")
        raise fault.error(method, path)

    def _run(self, method: str, path: str, run: Callable[[], _T], outcome: str) -> _T:
        try:
            result = run()
        except BaseException:
            self.log.append((method, path, "error"))
            raise
        self.log.append((method, path, outcome))
        return result

    @property
    def commit_handler(self) -> CommitHandler:
        """The inner storage's commit authority, its manifest creates subject to the rules
        for ``put_if_absent`` (see :class:`WrappedCommitHandler`)."""
        return wrapped_handler(
            self, self.inner, lambda path, do: self._call("put_if_absent", path, do)
        )

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Delegate (subject to faults)."""
        self._call("put_if_absent", path, lambda: self.inner.put_if_absent(path, data))

    def put(self, path: str, data: bytes) -> None:
        """Delegate (subject to faults)."""
        self._call("put", path, lambda: self.inner.put(path, data))

    def get(self, path: str) -> bytes:
        """Delegate (subject to faults)."""
        return self._call("get", path, lambda: self.inner.get(path))

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Delegate (subject to faults)."""
        return self._call("get_range", path, lambda: self.inner.get_range(path, start, end))

    def size(self, path: str) -> int:
        """Delegate (subject to faults)."""
        return self._call("size", path, lambda: self.inner.size(path))

    def list(self, prefix: str) -> Sequence[str]:
        """Delegate (subject to faults)."""
        return self._call("list", prefix, lambda: self.inner.list(prefix))

    def exists(self, path: str) -> bool:
        """Delegate (subject to faults)."""
        return self._call("exists", path, lambda: self.inner.exists(path))

    def delete(self, path: str) -> None:
        """Delegate (subject to faults)."""
        self._call("delete", path, lambda: self.inner.delete(path))
