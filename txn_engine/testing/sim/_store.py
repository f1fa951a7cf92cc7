"""The simulated object store: create-if-absent, lost responses, latency, and listed
modification times that are coarse, skewed and lagging, all drawn from the seed.

Every request is a yield point of the calling actor (:mod:`._sched`): it takes a latency of
virtual time, during which other actors run, and is applied at the end of it. Before it the
process may stall (a pause: GC, a stopped VM) or die; the request may fail before it reaches
the store, or reach it and lose its answer (the write is applied, the caller sees an
ambiguous error), or the process may die right after it was applied.

The modification time the store lists for an object is its stamp in the *store's* clock
(virtual time plus the store's skew), taken when the request arrived (up to the latency
before it was applied: S3's ``LastModified`` is the start of the request), jittered by up
to ``jitter`` between the store's servers, and truncated to ``granularity`` (S3 and Azure
list whole seconds). The listing is a function of the objects there now.
"""

from __future__ import annotations

import builtins
import random
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import attrs

from txn_engine.errors import (
    AmbiguousWriteError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.storage.listing import ObjectInfo
from txn_engine.testing.sim._sched import Scheduler, SimCrash

__all__ = ["Faults", "SimStore"]

_NS = 1_000_000_000
_T = TypeVar("_T")


@attrs.frozen
class Faults:
    """How often and how badly things go wrong (probabilities per request)."""

    latency_ms: tuple[float, float] = (1.0, 40.0)
    pause: float = 0.02
    pause_s: tuple[float, float] = (0.5, 12.0)
    crash: float = 0.0005
    fail_before: float = 0.01
    lost: float = 0.01
    granularity_ns: int = _NS
    jitter_ns: int = 300_000_000
    store_skew_ns: int = 0


@attrs.define
class _Object:
    data: bytes
    stamp_ns: int


class SimStore:
    """A dataset-rooted store over a dict, every request a yield point (module docstring)."""

    read_concurrency = 1

    def __init__(self, uri: str, sched: Scheduler, rng: random.Random, faults: Faults) -> None:
        self._uri = uri
        self._sched = sched
        self._rng = rng
        self.faults = faults
        self.objects: dict[str, _Object] = {}
        #: every applied write: (virtual ns, actor, method, path)
        self.log: list[tuple[int, str, str, str]] = []
        #: requests made (a run's digest is the sequence of them with their outcomes)
        self.requests = 0
        self._arrived = 0

    @property
    def uri(self) -> str:
        return self._uri

    # -- the request machinery
    def _request(self, method: str, path: str, apply: Callable[[], _T], write: bool) -> _T:
        sched, rng, f = self._sched, self._rng, self.faults
        actor = sched.current()
        if actor.dead:
            raise SimCrash(actor.name)
        self.requests += 1
        latency = int(rng.uniform(*f.latency_ms) * 1e6)
        pause = 0
        if rng.random() < f.pause:
            seconds = rng.uniform(*f.pause_s)
            actor.paused += seconds
            pause = int(seconds * _NS)
        sched.wait(pause + latency)
        if rng.random() < f.crash:
            actor.dead = True
            raise SimCrash(actor.name)
        if rng.random() < f.fail_before:
            raise StorageError(f"{method} {path}: connection reset (simulated)")
        self._arrived = sched.now_ns - int(rng.uniform(0, latency))
        result = apply()
        if write:
            self.log.append((sched.now_ns, actor.name, method, path))
        if rng.random() < f.lost:
            if write:
                raise AmbiguousWriteError(f"{method} {path}: the answer was lost (simulated)")
            raise StorageError(f"{method} {path}: the answer was lost (simulated)")
        return result

    def _stamp(self) -> int:
        f = self.faults
        jitter = int(self._rng.uniform(-f.jitter_ns, f.jitter_ns))
        return self._arrived + f.store_skew_ns + jitter

    def _listed_mtime(self, obj: _Object) -> int:
        g = self.faults.granularity_ns
        return (obj.stamp_ns // g) * g

    # -- the Storage protocol
    def put_if_absent(self, path: str, data: bytes) -> None:
        def apply() -> None:
            if path in self.objects:
                raise ObjectExistsError(f"object already exists: {path}")
            self.objects[path] = _Object(bytes(data), self._stamp())

        self._request("put_if_absent", path, apply, write=True)

    def put(self, path: str, data: bytes) -> None:
        def apply() -> None:
            self.objects[path] = _Object(bytes(data), self._stamp())

        self._request("put", path, apply, write=True)

    def _read(self, path: str) -> bytes:
        obj = self.objects.get(path)
        if obj is None:
            raise ObjectNotFoundError(f"no object at {path}")
        return obj.data

    def get(self, path: str) -> bytes:
        return self._request("get", path, lambda: self._read(path), write=False)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._request("get_range", path, lambda: self._read(path)[start:end], write=False)

    def size(self, path: str) -> int:
        return self._request("size", path, lambda: len(self._read(path)), write=False)

    def exists(self, path: str) -> bool:
        return self._request("exists", path, lambda: path in self.objects, write=False)

    def delete(self, path: str) -> None:
        self._request("delete", path, lambda: self.objects.pop(path, None) and None, write=True)

    def _names(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        return sorted(
            {
                p[len(head) :]
                for p in self.objects
                if p.startswith(head) and "/" not in p[len(head) :]
            }
        )

    def list(self, prefix: str) -> Sequence[str]:
        return self._request("list", prefix, lambda: self._names(prefix), write=False)

    def list_ordered(self, prefix: str) -> Iterator[str]:
        return iter(self._request("list", prefix, lambda: self._names(prefix), write=False))

    def list_objects(self, prefix: str) -> builtins.list[ObjectInfo]:
        head = prefix.rstrip("/") + "/"

        def apply() -> builtins.list[ObjectInfo]:
            return [
                ObjectInfo(p, len(o.data), self._listed_mtime(o))
                for p, o in sorted(self.objects.items())
                if p.startswith(head)
            ]

        return self._request("list", prefix, apply, write=False)

    # -- for the checks (no yield, no faults)
    def peek(self, path: str) -> bytes | None:
        obj = self.objects.get(path)
        return None if obj is None else obj.data
