"""Tags and branches (``_refs/``), as pylance 14 writes them.

A tag is ``_refs/tags/<name>.json``::

    {"branch": null, "version": 3, "createdAt": "2026-11-22T18:22:29.184785120Z",
     "updatedAt": "...", "manifestSize": 370, "metadata": {}}

A branch is ``_refs/branches/<name>.json`` (``{"parentBranch", "identifier":
{"version_mapping": [[version, id]]}, "parentVersion", "createAt" (seconds),
"manifestSize", "metadata"}``) and its versions live under ``tree/<name>/_versions/``: the
directory ``tree/<name>`` is a dataset root of its own (its first version, written when the
branch is created, lists the parent's root among its base paths).

Tag names follow pylance's rule: characters alphanumeric, ``.``, ``-`` or ``_``; not empty,
not starting with ``.``, no ``..``, not ending with ``.lock``. Branch names are ``/``-separated
segments of those characters (:func:`validate_branch_name`). A ref's file name is its name
encoded as one object-store path segment, as pylance 14 names it: every byte outside ASCII
(UTF-8) and ``/`` percent-encoded with upper-case hex (``é`` -> ``%C3%A9.json``, ``a/b`` ->
``a%2Fb.json``); a branch's directory ``tree/<name>`` is the name as it is (``tree/é``,
``tree/a/b``). :func:`branch_name_from_file` is the one decoder: a file name that is not
exactly the encoding of a valid branch name raises :class:`~txn_engine.errors.CorruptRefError`
naming the file.

Creating a tag is a create-if-absent (two writers creating one tag: exactly one wins);
deleting one is a plain delete. Tagging does not create a version.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import unicodedata
import urllib.parse
from collections.abc import Mapping
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine.errors import (
    CorruptManifestError,
    CorruptRefError,
    InvalidOperationError,
    ObjectExistsError,
    ObjectNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format.io import resolve_version
from txn_engine.storage.base import Storage

__all__ = [
    "BRANCHES_DIR",
    "TAGS_DIR",
    "Branch",
    "Tag",
    "branch_file_name",
    "branch_name_from_file",
    "create_tag",
    "delete_tag",
    "list_branches",
    "list_tags",
    "read_branch",
    "read_tag",
    "validate_branch_name",
    "validate_ref_name",
]

TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"


@attrs.frozen
class Tag:
    """A named version. ``branch`` is None for a main-line version."""

    name: str
    version: int
    branch: str | None = None
    created_at: _dt.datetime | None = None
    updated_at: _dt.datetime | None = None
    manifest_size: int | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (times as ISO 8601)."""
        return {
            "name": self.name,
            "version": self.version,
            "branch": self.branch,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
            "manifest_size": self.manifest_size,
            "metadata": dict(self.metadata),
        }


@attrs.frozen
class Branch:
    """A branch: forked from ``parent_version`` of ``parent_branch`` (None: main)."""

    name: str
    parent_version: int
    parent_branch: str | None = None
    created_at: _dt.datetime | None = None
    manifest_size: int | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> str:
        """Where the branch's own ``_versions/`` and ``_transactions/`` live."""
        return f"tree/{self.name}"


def validate_ref_name(name: str) -> str:
    """Return ``name`` if pylance accepts it as a tag / branch name, else raise
    InvalidOperationError saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidOperationError("a tag or branch name cannot be empty")
    if name.startswith("."):
        raise InvalidOperationError(f"ref {name!r} cannot begin with a dot")
    if ".." in name:
        raise InvalidOperationError(f"ref {name!r} cannot have two consecutive dots")
    if name.endswith(".lock"):
        raise InvalidOperationError(f"ref {name!r} cannot end with .lock")
    for ch in name:
        if not (ch.isalnum() or ch in ".-_"):
            raise InvalidOperationError(
                f"ref {name!r}: characters must be alphanumeric, '.', '-' or '_' (got {ch!r})"
            )
    return name


#: The symbols Rust's ``char::is_alphanumeric`` (pylance's branch rule) accepts: Unicode's
#: Other_Alphabetic ones, the enclosed Latin letters (``Ⓐ``, ``🄰``, ``🅐``, ``🅰``).
_ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189))
#: ASCII characters an object-store path segment percent-encodes (object_store's PathPart),
#: besides control characters; every non-ASCII byte is encoded too.
_SEGMENT_ESCAPED = frozenset(b'/\\{^}%`]">[~<#|*?')


def _branch_char(ch: str) -> bool:
    """Whether pylance takes ``ch`` in a branch name: ASCII letters, digits and ``.-_``;
    beyond ASCII, letters, numbers, the alphabetic symbols, and marks. Of marks Rust takes
    only the Other_Alphabetic ones (vowel signs such as ``ा``), which Python cannot tell
    from the others (a combining accent): names with the others pass here and pylance
    refuses them when the branch is created."""
    if ch.isascii():
        return ch.isalnum() or ch in ".-_"
    category = unicodedata.category(ch)
    if category[0] in "LN" or category in ("Mn", "Mc"):
        return True
    return category == "So" and any(lo <= ord(ch) <= hi for lo, hi in _ALPHABETIC_SYMBOLS)


def validate_branch_name(name: str) -> str:
    """Return ``name`` if pylance 14 accepts it as a branch name, else raise
    InvalidOperationError saying why: ``/``-separated segments of alphanumeric characters
    (any script), ``.``, ``-`` and ``_``; not empty, not ``main``, no leading, trailing or
    doubled ``/``, no ``..`` or backslash, no ``.`` segment, not ending with ``.lock``."""
    if not isinstance(name, str) or not name:
        raise InvalidOperationError("a branch name cannot be empty")
    if name == "main":
        raise InvalidOperationError("'main' is the main line's name, not a branch's")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidOperationError(f"branch {name!r} cannot start or end with '/'")
    if "//" in name:
        raise InvalidOperationError(f"branch {name!r} cannot contain '//'")
    if ".." in name or "\\" in name:
        raise InvalidOperationError(f"branch {name!r} cannot contain '..' or a backslash")
    if name.endswith(".lock"):
        raise InvalidOperationError(f"branch {name!r} cannot end with .lock")
    for segment in name.split("/"):
        if segment == ".":
            raise InvalidOperationError(f"branch {name!r} cannot have a '.' segment")
        for ch in segment:
            if not _branch_char(ch):
                raise InvalidOperationError(
                    f"branch {name!r}: characters must be alphanumeric, '.', '-' or '_' "
                    f"(got {ch!r})"
                )
    return name


def _segment(text: str) -> str:
    """``text`` as one object-store path segment, encoded as pylance encodes it."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        if byte < 0x20 or byte >= 0x7F or byte in _SEGMENT_ESCAPED:
            out.append(f"%{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


def branch_file_name(name: str) -> str:
    """The name of branch ``name``'s file in ``_refs/branches/``, as pylance 14 writes it
    (``é`` -> ``%C3%A9.json``, ``a/b`` -> ``a%2Fb.json``)."""
    return _segment(name) + ".json"


def branch_name_from_file(file_name: str) -> str:
    """The branch a file in ``_refs/branches/`` is for: the inverse of
    :func:`branch_file_name`. Raises CorruptRefError (naming the file) for a name pylance
    could not have written: not ``.json``, not UTF-8 once decoded, not a valid branch name
    (``..%2F..%2Fx.json``), or not that name's exact encoding (``%c3%a9.json``, ``é.json``)."""
    path = f"{BRANCHES_DIR}/{file_name}"
    if not file_name.endswith(".json"):
        raise CorruptRefError(f"{path}: not a branch file (no .json)", path=path)
    stem = file_name[: -len(".json")]
    try:
        name = urllib.parse.unquote(stem, errors="strict")
        validate_branch_name(name)
    except (UnicodeDecodeError, InvalidOperationError) as exc:
        raise CorruptRefError(
            f"{path}: not a branch file pylance writes ({exc}); remove or rename it", path=path
        ) from exc
    if branch_file_name(name) != file_name:
        raise CorruptRefError(
            f"{path}: not a branch file pylance writes (branch {name!r} is "
            f"{branch_file_name(name)}); remove or rename it",
            path=path,
        )
    return name


def _file(name: str) -> str:
    return urllib.parse.quote(name, safe="-_.") + ".json"


def _name(file_name: str) -> str | None:
    if not file_name.endswith(".json"):
        return None
    return urllib.parse.unquote(file_name[: -len(".json")])


def _time(value: Any) -> _dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            return _dt.datetime.fromtimestamp(value, tz=_dt.UTC)
        except (OverflowError, ValueError, OSError):  # beyond what a datetime holds
            return None
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    head, sep, rest = text.partition(".")
    if sep:  # nanoseconds: Python keeps microseconds
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _rfc3339(when: _dt.datetime) -> str:
    utc = when.astimezone(_dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}000Z"


def _metadata(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))


def _load(storage: Storage, path: str) -> dict[str, Any]:
    data = storage.get(path)
    try:
        out = jsontext.loads(data)
    except ValueError as exc:
        raise CorruptManifestError(f"{storage.uri}: {path} is not JSON: {exc}") from exc
    if not isinstance(out, dict):
        raise CorruptManifestError(f"{storage.uri}: {path} is not a JSON object")
    return out


def _tag(name: str, data: Mapping[str, Any]) -> Tag:
    return Tag(
        name=name,
        version=int(data["version"]),
        branch=data.get("branch"),
        created_at=_time(data.get("createdAt")),
        updated_at=_time(data.get("updatedAt")),
        manifest_size=None if data.get("manifestSize") is None else int(data["manifestSize"]),
        metadata=_metadata(data.get("metadata")),
    )


def read_tag(storage: Storage, name: str) -> Tag:
    """The tag ``name``. Raises VersionNotFoundError when there is no such tag."""
    validate_ref_name(name)
    path = f"{TAGS_DIR}/{_file(name)}"
    try:
        data = _load(storage, path)
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(f"{storage.uri}: there is no tag {name!r}") from exc
    try:
        return _tag(name, data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptManifestError(f"{storage.uri}: tag file {path} is malformed: {exc}") from exc


def list_tags(storage: Storage) -> list[Tag]:
    """Every tag, sorted by name (a malformed tag file raises CorruptManifestError)."""
    out: list[Tag] = []
    for file_name in storage.list(TAGS_DIR):
        name = _name(file_name)
        if name is None:
            continue
        try:
            out.append(read_tag(storage, name))
        except (VersionNotFoundError, InvalidOperationError):
            continue  # deleted while listing, or not a name pylance would have written
    return sorted(out, key=lambda t: t.name)


def create_tag(
    storage: Storage,
    name: str,
    version: int,
    *,
    metadata: Mapping[str, str] | None = None,
    now: _dt.datetime | None = None,
) -> Tag:
    """Tag main-line ``version`` as ``name`` (pylance 14 reads it). Raises
    VersionNotFoundError if the version does not exist, InvalidOperationError if the name
    is invalid or the tag exists already."""
    validate_ref_name(name)
    entry = resolve_version(storage, version)
    when = now or _dt.datetime.now(_dt.UTC)
    body = {
        "branch": None,
        "version": int(version),
        "createdAt": _rfc3339(when),
        "updatedAt": _rfc3339(when),
        "manifestSize": storage.size(entry.path),
        "metadata": dict(metadata or {}),
    }
    path = f"{TAGS_DIR}/{_file(name)}"
    try:
        storage.put_if_absent(path, json.dumps(body, indent=2).encode())
    except ObjectExistsError as exc:
        raise InvalidOperationError(f"{storage.uri}: tag {name!r} already exists") from exc
    return _tag(name, body)


def delete_tag(storage: Storage, name: str) -> None:
    """Delete tag ``name`` (the version stays). VersionNotFoundError if there is none."""
    validate_ref_name(name)
    path = f"{TAGS_DIR}/{_file(name)}"
    if not storage.exists(path):
        raise VersionNotFoundError(f"{storage.uri}: there is no tag {name!r}")
    storage.delete(path)


def _branch(storage: Storage, name: str, path: str) -> Branch:
    data = _load(storage, path)
    try:
        return Branch(
            name=name,
            parent_version=int(data["parentVersion"]),
            parent_branch=data.get("parentBranch"),
            created_at=_time(data.get("createAt")),
            manifest_size=None if data.get("manifestSize") is None else int(data["manifestSize"]),
            metadata=_metadata(data.get("metadata")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptManifestError(
            f"{storage.uri}: branch file {path} is malformed: {exc}"
        ) from exc


def read_branch(storage: Storage, name: str) -> Branch:
    """The branch ``name``. Raises VersionNotFoundError when there is no such branch,
    InvalidOperationError when ``name`` is no branch name pylance accepts."""
    validate_branch_name(name)
    try:
        return _branch(storage, name, f"{BRANCHES_DIR}/{branch_file_name(name)}")
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(f"{storage.uri}: there is no branch {name!r}") from exc


def list_branches(storage: Storage) -> list[Branch]:
    """Every branch, sorted by name. Commit to one with ``txn_engine.open(uri, branch=name)``;
    its versions live under :attr:`Branch.path`. A file there whose name pylance could not
    have written raises CorruptRefError (pylance's own listing fails on it too)."""
    out: list[Branch] = []
    for file_name in storage.list(BRANCHES_DIR):
        if not file_name.endswith(".json"):
            continue
        name = branch_name_from_file(file_name)
        try:
            out.append(_branch(storage, name, f"{BRANCHES_DIR}/{file_name}"))
        except ObjectNotFoundError:
            continue
    return sorted(out, key=lambda b: b.name)
