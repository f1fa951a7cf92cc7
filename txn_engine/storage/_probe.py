"""The once-per-session check that an object store really refuses a second create.

A store (or a proxy, gateway or S3-compatible server in front of it) that ignores
``If-None-Match`` / generation preconditions lets two writers both "win" the same version:
acknowledged commits vanish silently. Client classes cannot tell; only the server can. So
before the first create-if-absent on a (store, bucket/container, dataset prefix), the
backend creates one probe object twice under :data:`PROBE_DIR` -- the second create must
fail with ObjectExistsError -- and deletes it. A store that accepts the second create gets
:class:`~txn_engine.errors.AtomicityUnsupportedError` on every create-if-absent, with the way
out in the message.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Hashable
from typing import Final

from txn_engine import session
from txn_engine.errors import AtomicityUnsupportedError, ObjectExistsError, StorageError

__all__ = ["PROBE_DIR", "ensure_conditional_create", "forget_probes"]

PROBE_DIR: Final = "_txn_engine/probe"


class ProvenStores:
    """What a session knows of the stores it probed (its part of a
    :class:`~txn_engine.session.Session`): the keys whose probe passed, and one lock per
    key so that concurrent first creates on one store probe it once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proven: set[Hashable] = set()
        self.key_locks: dict[Hashable, threading.Lock] = {}


HINT: Final = (
    "Commit through the external manifest store instead (s3+ddb://bucket/path?ddbTableName=T, "
    "see docs/backends.md), or, only if you know the store honours conditional writes, "
    "opt out with the storage option txn_engine_unsafe_no_atomicity_check='true' "
    "(or open_storage(..., unsafe=True))"
)


def forget_probes() -> None:
    """Forget every store the current session proved (tests; a store whose configuration
    changed)."""
    stores = session.current().part(ProvenStores)
    with stores.lock:
        stores.proven.clear()


def ensure_conditional_create(
    key: Hashable,
    where: str,
    create: Callable[[str, bytes], None],
    delete: Callable[[str], None],
) -> None:
    """Prove once per session per ``key`` that ``create`` (a create-if-absent on the store,
    taking a dataset-relative path) refuses an existing object.

    ``where`` names the store in messages (no secrets). Raises AtomicityUnsupportedError if
    the second create succeeded, StorageError (never ObjectExistsError or
    AmbiguousWriteError, which the commit loop would misread) if the probe itself failed.
    """
    stores = session.current().part(ProvenStores)
    if key in stores.proven:
        return
    with stores.lock:
        lock = stores.key_locks.setdefault(key, threading.Lock())
    with lock:
        if key in stores.proven:
            return
        path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
        enforced = False
        try:
            try:
                create(path, b"txn_engine atomicity probe 1")
            except ObjectExistsError:
                # A unique name can only exist if a lost response was retried by the client
                # and the retry hit the precondition: the store enforces it.
                enforced = True
            if not enforced:
                try:
                    create(path, b"txn_engine atomicity probe 2")
                except ObjectExistsError:
                    enforced = True
        except StorageError as exc:
            raise StorageError(
                f"the atomicity probe of {where} failed ({type(exc).__name__}: {exc})"
            ) from exc
        finally:
            with contextlib.suppress(StorageError):
                delete(path)
        if not enforced:
            raise AtomicityUnsupportedError(
                f"{where} accepted a second create of {path}: it ignores conditional writes "
                "(If-None-Match / generation preconditions), so concurrent commits would "
                f"silently overwrite each other. {HINT}"
            )
        with stores.lock:
            stores.proven.add(key)
