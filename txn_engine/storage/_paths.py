"""Validation of the relative paths and byte ranges every backend accepts.

All backends share these rules so that a path that works on one works on all of them:
``/``-separated, relative to the dataset root, no empty, ``.`` or ``..`` segments, no
backslashes or NUL bytes.
"""

from __future__ import annotations

from txn_engine.errors import InvalidStorageArgumentError

__all__ = ["check_path", "check_prefix", "check_range"]


def _check_segments(value: str, what: str) -> None:
    if "\\" in value or "\x00" in value:
        raise InvalidStorageArgumentError(
            f"storage {what} {value!r} contains a backslash or NUL byte; use '/' separators"
        )
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidStorageArgumentError(
                f"storage {what} {value!r} must be relative to the dataset root, without "
                "empty, '.' or '..' segments (e.g. '_versions/1.manifest')"
            )


def check_path(path: str) -> str:
    """Return ``path`` unchanged if it is a valid object path, else raise
    :class:`~txn_engine.errors.InvalidStorageArgumentError`."""
    _check_segments(path, "path")
    return path


def check_prefix(prefix: str) -> str:
    """Return the directory ``prefix`` normalised (no trailing ``/``; ``""`` is the root)."""
    stripped = prefix.rstrip("/")
    if stripped:
        _check_segments(stripped, "prefix")
    return stripped


def check_range(start: int, end: int) -> None:
    """Reject negative offsets and ``end < start`` (callers clamp ``end`` to the size)."""
    if start < 0 or end < start:
        raise InvalidStorageArgumentError(
            f"invalid byte range [{start}, {end}): need 0 <= start <= end"
        )
