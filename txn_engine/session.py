"""What the library remembers between calls, on one object you can replace.

A :class:`Session` holds every memory the library keeps from one call to the next: which
object stores were proven to refuse a second create, the shared object-store clients, the
carriers and offers seen on each table, the transactions a contended commit read (the next
commit on the same table starts from them), the carriers this process hosts. Nothing of it
is needed for correctness; all of it saves requests.

Every call uses the *current* session: the one made active with :func:`using` (a context
manager, per thread and per task, as :mod:`contextvars` keeps it), else the process's
default one. ``txn_engine.open(uri, session=...)``, ``Committer(..., session=...)``,
``Carrier(..., session=...)`` and ``txn_engine.commit(..., session=...)`` make theirs active
for every call they make, the threads they start included.

A test or an application that wants to start from a clean slate makes a fresh one::

    import txn_engine as te

    with te.session.using(te.Session()):
        ...  # nothing remembered from earlier calls

Each module keeps its own kind of memory as a class (instantiated with no arguments) and
takes it with :meth:`Session.part`; the session makes it on first use.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["Session", "bind", "current", "default", "using", "wrap"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class Session:
    """One set of the library's memories (see the module's docstring).

    Thread-safe. Make a fresh one to start from nothing; pass it to the calls that take
    ``session=`` or make it current with :func:`using`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[type[Any], Any] = {}  # each value an instance of its key

    def part(self, kind: type[_T]) -> _T:
        """The memory of type ``kind`` of this session (made with ``kind()`` on first use)."""
        with self._lock:
            found = self._parts.get(kind)
            if found is None:
                found = self._parts[kind] = kind()
            return found

    def __repr__(self) -> str:
        with self._lock:
            kinds = sorted(k.__name__ for k in self._parts)
        return f"Session({', '.join(kinds)})"


_DEFAULT = Session()
_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "txn_engine_session", default=None
)


def default() -> Session:
    """The process's default session (used wherever no other one is current)."""
    return _DEFAULT


def current() -> Session:
    """The session in force for this thread or task: the one :func:`using` made current,
    else the default one."""
    found = _CURRENT.get()
    return _DEFAULT if found is None else found


@contextlib.contextmanager
def using(session: Session | None) -> Iterator[Session]:
    """Make ``session`` current inside the ``with`` block (``None``: keep the current one)."""
    if session is None:
        yield current()
        return
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)


def bind(session: Session, fn: Callable[..., _R]) -> Callable[..., _R]:
    """``fn`` run in ``session`` whenever it is called (by a thread, a pool, a callback)."""

    def run(*args: Any, **kwargs: Any) -> _R:
        with using(session):
            return fn(*args, **kwargs)

    return run


def wrap(fn: Callable[..., _R]) -> Callable[..., _R]:
    """``fn`` bound to the session current now, for a thread or pool to run later (a new
    thread starts with no session of its own: it would use the default one)."""
    return bind(current(), fn)
