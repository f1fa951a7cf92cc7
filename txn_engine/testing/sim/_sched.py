"""A seeded scheduler of simulated processes over virtual time.

Each simulated process (an :class:`Actor`) runs real txn_engine code in a thread of its own,
but only one runs at a time: an actor runs until it reaches a yield point (a request to the
simulated store, a sleep), then hands the baton back; the scheduler wakes the actor whose
event is due first (ties broken by the seed) and moves virtual time to it. Code between two
yield points takes no virtual time, so a run is a function of its seed alone.

A process that crashes (:class:`SimCrash`) dies where it is: its pending request is never
made, and every later request of its unwinding code fails at once without effect, as if the
machine had stopped (its ``finally`` blocks reach nothing).
"""

from __future__ import annotations

import heapq
import random
import threading
from collections.abc import Callable

import attrs

__all__ = ["Actor", "ActorClock", "Scheduler", "SimCrash", "SimStuck"]

_NS = 1_000_000_000


class SimCrash(BaseException):
    """The simulated process died here (raised in its own thread; not an error to catch)."""


class SimStuck(RuntimeError):
    """The simulation stopped making progress (every live actor waits on nothing)."""


@attrs.define(eq=False)
class Actor:
    """One simulated process: its name, its clocks' skew, what it has been through."""

    name: str
    skew_ns: int = 0
    go: threading.Event = attrs.field(factory=threading.Event)
    thread: threading.Thread | None = None
    dead: bool = False
    finished: bool = False
    #: virtual seconds this process spent stopped (pauses injected by the world)
    paused: float = 0.0
    error: BaseException | None = None


@attrs.frozen
class ActorClock:
    """What one process's clocks read: virtual time (monotonic), skewed wall time; a sleep
    yields to the scheduler."""

    sched: Scheduler
    actor: Actor

    def wall_ns(self) -> int:
        """Virtual time plus this process's skew."""
        return self.sched.now_ns + self.actor.skew_ns

    def monotonic(self) -> float:
        """Virtual time, in seconds."""
        return self.sched.now_ns / _NS

    def sleep(self, seconds: float) -> None:
        """Let the others run for ``seconds`` of virtual time."""
        self.sched.wait(max(0, int(seconds * _NS)))


class Scheduler:
    """Runs actors one at a time in virtual time (see the module docstring)."""

    def __init__(self, rng: random.Random, *, max_steps: int = 200_000) -> None:
        self.rng = rng
        self.now_ns = 0
        self._heap: list[tuple[int, float, int, Actor]] = []
        self._seq = 0
        self._back = threading.Event()
        self._by_thread: dict[int, Actor] = {}
        self.actors: list[Actor] = []
        self.steps = 0
        self._max_steps = max_steps

    def current(self) -> Actor:
        """The actor whose thread is running (the caller's)."""
        return self._by_thread[threading.get_ident()]

    def _push(self, when_ns: int, actor: Actor) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when_ns, self.rng.random(), self._seq, actor))

    def wait(self, delay_ns: int) -> None:
        """The calling actor's yield point: it resumes ``delay_ns`` of virtual time later."""
        actor = self.current()
        if actor.dead:
            raise SimCrash(actor.name)
        self._push(self.now_ns + delay_ns, actor)
        self._back.set()
        actor.go.wait()
        actor.go.clear()
        if actor.dead:
            raise SimCrash(actor.name)

    def spawn(self, name: str, program: Callable[[Actor], None], *, skew_ns: int = 0) -> Actor:
        """A new actor that runs ``program(actor)`` from the current virtual time on."""
        actor = Actor(name, skew_ns)

        def body() -> None:
            self._by_thread[threading.get_ident()] = actor
            actor.go.wait()
            actor.go.clear()
            try:
                if not actor.dead:
                    program(actor)
            except SimCrash:
                pass
            except BaseException as exc:  # reported by the world: the engine's fault
                actor.error = exc
            finally:
                actor.finished = True
                self._back.set()

        actor.thread = threading.Thread(target=body, name=f"sim-{name}", daemon=True)
        self.actors.append(actor)
        actor.thread.start()
        self._push(self.now_ns, actor)
        return actor

    def run(self) -> None:
        """Run until no actor has anything left to do."""
        while self._heap:
            when, _, _, actor = heapq.heappop(self._heap)
            if actor.finished:
                continue
            self.steps += 1
            if self.steps > self._max_steps:
                raise SimStuck(f"more than {self._max_steps} steps")
            self.now_ns = max(self.now_ns, when)
            self._back.clear()
            actor.go.set()
            if not self._back.wait(60):
                raise SimStuck(f"{actor.name} neither yielded nor finished in 60 s")
        alive = [a.name for a in self.actors if not a.finished]
        if alive:
            raise SimStuck(f"actors blocked outside the scheduler: {alive}")

    def shutdown(self) -> None:
        """Let every actor still blocked unwind (each request now fails: it died)."""
        for actor in self.actors:
            if not actor.finished:
                actor.dead = True
                actor.go.set()
        for actor in self.actors:
            if actor.thread is not None:
                actor.thread.join(10)
