"""Validation of the relative paths and byte ranges every backend accepts.

All backends share these rules so that a path that works on one works on all of them:
``/``-separated, relative to the dataset root, no empty, ``.`` or ``..`` segments, no
backslashes, NUL bytes or lone surrogates.
"""

from __future__ import annotations

from txn_engine.errors import InvalidStorageArgumentError

__all__ = ["check_path", "check_prefix", "check_range", "is_os_encodable"]


def is_os_encodable(value: str) -> bool:
    """Whether ``value`` can name a file: UTF-8, where the surrogates ``\\udc80``-``\\udcff``
    stand for the bytes of a non-UTF-8 name the OS listed (``surrogateescape``); any other
    lone surrogate cannot be encoded, and the OS call would raise ``UnicodeEncodeError``."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def _check_segments(value: str, what: str) -> None:
    if "\\" in value or "\x00" in value:
        raise InvalidStorageArgumentError(
            f"storage {what} {value!r} contains a backslash or NUL byte; use '/' separators"
        )
    if not is_os_encodable(value):
        raise InvalidStorageArgumentError(
            f"storage {what} {value!r} holds a lone surrogate, which no file or object "
            "name can hold"
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
