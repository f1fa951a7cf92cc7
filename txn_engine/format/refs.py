"""Tags and branches (``_refs/``), as pylance 14 writes them.

A tag is ``_refs/tags/<name>.json``::

    {"branch": null, "version": 3, "createdAt": "2026-11-22T18:22:29.184785120Z",
     "updatedAt": "...", "manifestSize": 370, "metadata": {}}

A branch is ``_refs/branches/<name>.json`` (``{"parentBranch", "identifier":
{"version_mapping": [[version, id]]}, "parentVersion", "createAt" (seconds),
"manifestSize", "metadata"}``) and its versions live under ``tree/<name>/_versions/``: the
directory ``tree/<name>`` is a dataset root of its own (its first version, written when the
branch is created, lists the parent's root among its base paths).

Names follow pylance's rule: characters alphanumeric, ``.``, ``-`` or ``_``; not empty,
not starting with ``.``, no ``..``, not ending with ``.lock``. In the file name, characters
outside ASCII are percent-encoded (UTF-8), as pylance's object-store paths do.

Creating a tag is a create-if-absent (two writers creating one tag: exactly one wins);
deleting one is a plain delete. Tagging does not create a version.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine.errors import (
    CorruptManifestError,
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
    "create_tag",
    "delete_tag",
    "list_branches",
    "list_tags",
    "read_branch",
    "read_tag",
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
    """The branch ``name``. Raises VersionNotFoundError when there is no such branch."""
    validate_ref_name(name)
    try:
        return _branch(storage, name, f"{BRANCHES_DIR}/{_file(name)}")
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(f"{storage.uri}: there is no branch {name!r}") from exc


def list_branches(storage: Storage) -> list[Branch]:
    """Every branch, sorted by name. Commit to one with ``txn_engine.open(uri, branch=name)``;
    its versions live under :attr:`Branch.path`."""
    out: list[Branch] = []
    for file_name in storage.list(BRANCHES_DIR):
        name = _name(file_name)
        if name is None:
            continue
        try:
            out.append(_branch(storage, name, f"{BRANCHES_DIR}/{file_name}"))
        except ObjectNotFoundError:
            continue
    return sorted(out, key=lambda b: b.name)
