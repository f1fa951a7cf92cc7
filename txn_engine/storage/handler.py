"""The commit handler: the authority that makes "version N exists" true.

A :class:`~txn_engine.storage.Storage` holds bytes. Whether a version of a dataset exists is
decided elsewhere, by a :class:`CommitHandler`:

* :class:`StoreCommitHandler` (the default): the blob store itself decides, with its atomic
  create-if-absent of the manifest (``put_if_absent``); the listing of ``_versions/`` is
  the list of versions.
* :class:`~txn_engine.storage.external.ExternalCommitHandler`: a key-value store with
  conditional puts decides (Lance's DynamoDB protocol, ``s3+ddb://``); the manifest is
  staged in the blob store, the version claimed in the key-value store, then the manifest
  is copied to its final name. A version claimed by a writer that stopped before the copy
  exists all the same: :meth:`CommitHandler.finish_pending` completes it.

The commit loop (:mod:`txn_engine.commit`) talks to the handler for the three things that
make or prove a version -- create it, check that it exists, complete what a crashed writer
left -- and reads everything else from ``handler.storage``. The handler is told the version
*and* the manifest path: it never parses manifest names (naming is the format layer's).

:func:`commit_handler_for` picks the handler of a storage: the one it carries as its
``commit_handler`` attribute (a storage opened from ``s3+ddb://`` does), else a
:class:`StoreCommitHandler` over it. A storage that wraps another one (a recorder, a fault
injector) forwards ``commit_handler`` to keep the wrapped store's authority.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from txn_engine.storage.base import Storage

__all__ = ["CommitHandler", "StoreCommitHandler", "commit_handler_for"]


@runtime_checkable
class CommitHandler(Protocol):
    """Creates versions of one dataset and answers whether they exist.

    Guarantees an implementation must give (the commit loop is only correct if they hold):

    1. **One winner per version.** Of any number of concurrent :meth:`commit` calls for one
       version (in any process), exactly one succeeds; the others raise
       :class:`~txn_engine.errors.ObjectExistsError`.
    2. **Committed means readable.** Once :meth:`commit` returned, or once
       :meth:`finish_pending` or :meth:`resolve` ran after it, the manifest bytes are at
       ``path`` in :attr:`storage` for every reader.
    3. **Typed outcomes.** A commit whose outcome is unknown (lost response, timeout) raises
       :class:`~txn_engine.errors.AmbiguousWriteError`; ``ObjectExistsError`` may also be the
       answer to this very call's own retried request. The caller settles both by reading
       ``path`` back (after :meth:`resolve`) and comparing bytes.
    """

    @property
    def storage(self) -> Storage:
        """The blob store that holds the manifests (and every other file of the dataset)."""
        ...

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Make ``version`` exist, with manifest ``data`` at ``path`` (relative to
        :attr:`storage`), only if no version ``version`` exists yet.

        Raises ObjectExistsError when the version is taken, AmbiguousWriteError when the
        outcome is unknown, AtomicityUnsupportedError when the authority cannot decide
        atomically, StorageError for any other failure (nothing committed).
        """
        ...

    def resolve(self, version: int, path: str) -> bool:
        """Whether ``version`` exists with its manifest readable at ``path``; a version
        committed but not yet readable (its writer stopped half way) is completed first."""
        ...

    def finish_pending(self) -> Sequence[str]:
        """Complete every version that is committed but not yet readable in
        :attr:`storage`, and return their manifest paths (usually none). Call it before
        listing ``_versions/`` so that the listing shows every committed version."""
        ...


class StoreCommitHandler:
    """The blob store decides: ``commit`` is ``storage.put_if_absent(path, data)``.

    Correct only on a storage whose create-if-absent is atomic (the
    :class:`~txn_engine.storage.Storage` contract, guarantee 1). Nothing is ever pending.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def __repr__(self) -> str:
        return f"StoreCommitHandler({self._storage!r})"

    @property
    def storage(self) -> Storage:
        """The storage that decides and holds the manifests."""
        return self._storage

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Atomic create-if-absent of the manifest (ObjectExistsError when taken)."""
        self._storage.put_if_absent(path, data)

    def resolve(self, version: int, path: str) -> bool:
        """Whether the manifest exists (one existence check)."""
        return self._storage.exists(path)

    def finish_pending(self) -> Sequence[str]:
        """Nothing is ever pending: a create is complete when it returns."""
        return ()


def commit_handler_for(storage: Storage) -> CommitHandler:
    """The commit handler of ``storage``: its ``commit_handler`` attribute when it carries
    one (``s3+ddb://``), else a :class:`StoreCommitHandler` over it."""
    carried = getattr(storage, "commit_handler", None)
    if carried is not None and isinstance(carried, CommitHandler):
        return carried
    return StoreCommitHandler(storage)
