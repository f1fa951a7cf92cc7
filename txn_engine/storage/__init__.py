"""Storage backends. See :mod:`txn_engine.storage.base` for the contract they implement."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from txn_engine.storage.base import Storage
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.memory import MemoryStorage

__all__ = ["LocalStorage", "MemoryStorage", "Storage", "open_storage"]


def open_storage(
    uri: str | os.PathLike[str] | Storage,
    storage_options: Mapping[str, Any] | None = None,
) -> Storage:
    """Return the Storage for a dataset URI (an existing Storage is returned as is).

    A plain path or ``file://`` URI -> LocalStorage; ``memory://name`` -> the process-wide
    MemoryStorage called ``name``.
    """
    if isinstance(uri, Storage) and not isinstance(uri, (str, os.PathLike)):
        return uri
    text = os.fspath(uri)
    if "://" not in text or text.startswith("file://"):
        return LocalStorage(text)
    if text.startswith("memory://"):
        return MemoryStorage.shared(text[len("memory://") :])
    raise ValueError(f"unsupported URI scheme: {text!r}")
