"""The invariant checker: is a dataset's whole history well-formed?

:func:`verify` reads every version of a dataset (any backend) and reports each violated
invariant as a :class:`Finding`. Nothing is modified. Checked:

* the version chain has no gaps and every manifest decodes (strict reader); versions removed
  by cleanup are told from damage and reported as ``"info"`` ("cleaned-up"): a missing
  prefix below the oldest listed version, gaps txn_engine's cleanup recorded when it made
  them (:mod:`txn_engine.format.gaps`), and gaps below which every listed version is pinned
  by a tag or a branch base (``_refs/``: what pylance's cleanup leaves while the tag lives)
  are history that was cleaned up; any other gap is an error; a gap record that cannot be
  read is a warning (and explains nothing);
* every version has a decodable transaction, and no transaction uuid lands twice
  (exactly-once); manifests from before transactions existed (no ``writer_version``) only
  get a warning;
* fragment ids are unique and sorted, ``max_fragment_id`` (when recorded) is at least
  every id in use and the id high-water mark never goes down (except through Restore), and
  an id that left the table never comes back (except through Restore; a warning for an
  Overwrite by Lance releases that restarted ids at 0);
* every detached version (``_versions/d{n}.manifest``, outside the chain) decodes and says
  its own number (``deep``: its deletion files, and with ``data_files`` its data files,
  are checked too);
* every file in ``_refs/branches/`` is named as pylance names a branch's file
  (:func:`txn_engine.format.refs.branch_name_from_file`);
* feature flags agree with the content (deletion files <-> flag 1, base paths <-> 16);
* deletion files of the latest version exist, decode, count ``num_deleted_rows`` offsets
  and hold only offsets below ``physical_rows``; a deletion vector covering every row is a
  warning (such a fragment should have been removed) (``deep=True``: every version);
* with ``data_files=True``, the data files of the latest version exist (``deep``: every
  version's); a data-file path that leaves ``data/`` (``..``, absolute, empty) is a
  finding for that version and is never followed.

A :class:`Finding` is an ``"error"`` (the invariant is broken: ``ok`` is false), a
``"warning"`` (legal but suspicious, or written by an old release) or an ``"info"`` (a fact
worth knowing, such as history removed by cleanup).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.codec import transaction_from_proto
from txn_engine.contention.offers import carried_in_order
from txn_engine.errors import (
    CorruptRefError,
    InvalidStorageArgumentError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import FLAG_BASE_PATHS, FLAG_DELETION_FILES
from txn_engine.format.gaps import GAPS_DIR, GapRecords, read_gaps
from txn_engine.format.io import read_manifest_entry, read_transaction
from txn_engine.format.naming import (
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    list_versions,
    parse_detached_name,
)
from txn_engine.format.refs import BRANCHES_DIR, branch_name_from_file
from txn_engine.format.schema import major_version
from txn_engine.redact import redact_uri
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = ["Finding", "VerifyReport", "verify"]


@attrs.frozen
class Finding:
    """One violated invariant at one version (``severity`` "error", "warning" or "info")."""

    version: int
    invariant: str
    detail: str
    severity: str = "error"

    def __str__(self) -> str:
        prefix = "" if self.severity == "error" else f"{self.severity}: "
        return f"{prefix}v{self.version}: {self.invariant}: {self.detail}"


@attrs.frozen
class VerifyReport:
    """What :func:`verify` found. ``ok`` is true when there are no findings."""

    uri: str
    versions: int
    latest_version: int | None
    live_rows: int | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """True when no finding is an error (warnings allowed)."""
        return not self.errors

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def infos(self) -> tuple[Finding, ...]:
        """Informational findings (e.g. history removed by cleanup); never failures."""
        return tuple(f for f in self.findings if f.severity == "info")

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "infos": len(self.infos),
            "versions": self.versions,
            "latest_version": self.latest_version,
            "live_rows": self.live_rows,
            "findings": [attrs.asdict(f) for f in self.findings],
        }


def verify(
    uri: str | os.PathLike[str] | Storage,
    *,
    storage_options: Mapping[str, Any] | None = None,
    deep: bool = False,
    data_files: bool = False,
) -> VerifyReport:
    """Check every invariant listed in the module docstring; never raises for a bad
    dataset (problems become findings), only for an unreachable one."""
    storage = open_storage(uri, storage_options)
    findings: list[Finding] = []
    entries = list_versions(storage)
    if not entries:
        return VerifyReport(
            redact_uri(storage.uri), 0, None, None, (Finding(0, "exists", "no versions"),)
        )
    findings += _gaps(storage, [e.version for e in entries])
    findings += _branch_names(storage)
    seen_uuids: dict[str, int] = {}
    retired: set[int] = set()
    previous_ids: set[int] = set()
    previous_high: int | None = None
    live_rows: int | None = None
    for i, entry in enumerate(entries):
        v = entry.version
        try:
            mf = read_manifest_entry(storage, entry)
        except StorageError as exc:  # could not be read (permission, outage): not damage
            findings.append(Finding(v, "manifest-reads", str(exc)))
            continue
        except TxnEngineError as exc:
            findings.append(Finding(v, "manifest-decodes", str(exc)))
            continue
        m = mf.manifest
        modern = m.HasField("writer_version")
        if m.version != v:
            findings.append(Finding(v, "version-field", f"manifest says version {m.version}"))
        kind = None
        try:
            pb = read_transaction(storage, entry, mf)
            txn = transaction_from_proto(pb)
            kind = txn.kind
            # its own uuid and those it carried (a group commit's members, offers)
            for u in carried_in_order(pb):
                if u in seen_uuids:
                    findings.append(
                        Finding(
                            v,
                            "exactly-once",
                            f"transaction {u} also landed as version {seen_uuids[u]}",
                        )
                    )
                seen_uuids.setdefault(u, v)
        except TxnEngineError as exc:
            severity = "error" if modern else "warning"
            findings.append(Finding(v, "transaction-present", str(exc), severity))
        findings += _fragment_ids(v, m, kind, retired, previous_ids, previous_high)
        ids = [f.id for f in m.fragments]
        retired |= previous_ids - set(ids)
        previous_ids = set(ids)
        high = _high_water(m)
        if high is not None:
            previous_high = high if previous_high is None else max(previous_high, high)
        has_deletions = any(f.HasField("deletion_file") for f in m.fragments)
        if has_deletions != bool(m.reader_feature_flags & FLAG_DELETION_FILES) and modern:
            findings.append(Finding(v, "flags", "deletion-file flag disagrees with fragments"))
        if bool(len(m.base_paths)) != bool(m.reader_feature_flags & FLAG_BASE_PATHS):
            findings.append(Finding(v, "flags", "base-path flag disagrees with base_paths"))
        last = i == len(entries) - 1
        if deep or last:
            rows = _check_deletions(storage, v, m, findings)
            if data_files:
                _check_data_files(storage, v, m, findings)
            if last:
                live_rows = rows
    findings += _detached(storage, deep=deep, data_files=data_files)
    return VerifyReport(
        redact_uri(storage.uri), len(entries), entries[-1].version, live_rows, tuple(findings)
    )


def _detached(storage: Storage, *, deep: bool, data_files: bool) -> list[Finding]:
    """Detached versions (``_versions/d{n}.manifest``, outside the chain): each decodes,
    says its own number, and (``deep``) has sound deletion files (and data files)."""
    out: list[Finding] = []
    for name in storage.list(VERSIONS_DIR):
        v = parse_detached_name(name)
        if v is None:
            continue
        try:
            m = read_manifest_entry(storage, VersionEntry(v, name, NamingScheme.V2)).manifest
        except StorageError as exc:
            out.append(Finding(v, "manifest-reads", str(exc)))
            continue
        except TxnEngineError as exc:
            out.append(Finding(v, "manifest-decodes", str(exc)))
            continue
        if m.version != v:
            out.append(Finding(v, "version-field", f"detached manifest says version {m.version}"))
        if deep:
            _check_deletions(storage, v, m, out)
            if data_files:
                _check_data_files(storage, v, m, out)
    return out


def _pinned_versions(storage: Storage) -> set[int]:
    """Main-line versions tags and branch bases pin (unreadable refs pin nothing)."""
    pinned: set[int] = set()
    for directory, key, parent in (
        ("_refs/tags", "version", "branch"),
        ("_refs/branches", "parentVersion", "parentBranch"),
    ):
        for name in storage.list(directory):
            if not name.endswith(".json"):
                continue
            try:
                obj = jsontext.loads(storage.get(f"{directory}/{name}"))
            except (TxnEngineError, ValueError):
                continue
            if isinstance(obj, dict) and obj.get(parent) is None:
                value = obj.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    pinned.add(value)
    return pinned


def _branch_names(storage: Storage) -> list[Finding]:
    """A branch file whose name pylance could not have written: pylance cannot list this
    table's branches, and cleanup refuses to run, until it is removed or renamed."""
    out: list[Finding] = []
    for name in storage.list(BRANCHES_DIR):
        if name.endswith(".json"):
            try:
                branch_name_from_file(name)
            except CorruptRefError as exc:
                out.append(Finding(0, "refs", str(exc)))
    return out


def _gaps(storage: Storage, versions: list[int]) -> list[Finding]:
    """Gaps in the version chain: cleaned-up history (info) or damage (error)."""
    out: list[Finding] = []
    if versions[0] > 1:
        first = versions[0]
        span = "version 1" if first == 2 else f"versions 1..{first - 1}"
        out.append(Finding(first, "cleaned-up", f"{span} removed (cleanup)", "info"))
    pinned: set[int] | None = None
    records: GapRecords | None = None
    for i, (prev, cur) in enumerate(itertools.pairwise(versions)):
        if cur == prev + 1:
            continue
        if records is None:
            records = read_gaps(storage)
            out += [
                Finding(0, "gap-record", f"{p}: ignored ({why})", "warning")
                for p, why in records.bad
            ]
        span = f"versions {prev + 1}..{cur - 1}" if cur > prev + 2 else f"version {prev + 1}"
        if records.covers(prev + 1, cur - 1):
            out.append(
                Finding(
                    cur, "cleaned-up", f"{span} removed (cleanup, recorded in {GAPS_DIR}/)", "info"
                )
            )
            continue
        if pinned is None:
            pinned = _pinned_versions(storage)
        if all(v in pinned for v in versions[: i + 1]):
            out.append(
                Finding(
                    cur,
                    "cleaned-up",
                    f"{span} removed (cleanup; the versions below are pinned by tags/branches)",
                    "info",
                )
            )
        else:
            out.append(
                Finding(
                    cur,
                    "no-gaps",
                    f"follows version {prev}: {span} missing, and neither a record of "
                    "txn_engine's cleanup nor tags/branches pinning every version below "
                    "explain it (pylance's cleanup_old_versions(error_if_tagged_old_versions="
                    "False) leaves such a gap once the tag is deleted; anything else lost "
                    "the versions)",
                )
            )
    return out


def _high_water(m: table_pb2.Manifest) -> int | None:
    stored = m.max_fragment_id if m.HasField("max_fragment_id") else None
    present = m.fragments[-1].id if len(m.fragments) else None
    if stored is None:
        return present
    return stored if present is None else max(stored, present)


def _fragment_ids(
    v: int,
    m: table_pb2.Manifest,
    kind: str | None,
    retired: set[int],
    previous_ids: set[int],
    previous_high: int | None,
) -> list[Finding]:
    out: list[Finding] = []
    ids = [f.id for f in m.fragments]
    if any(a >= b for a, b in itertools.pairwise(ids)):
        out.append(Finding(v, "fragment-ids", "fragment ids not unique and sorted"))
    if ids and m.HasField("max_fragment_id") and m.max_fragment_id < max(ids):
        out.append(Finding(v, "max-fragment-id", f"max_fragment_id below fragment id {max(ids)}"))
    high = _high_water(m)
    if (
        kind != "Restore"
        and previous_high is not None
        and high is not None
        and high < previous_high
        and m.HasField("max_fragment_id")
    ):
        out.append(
            Finding(
                v,
                "max-fragment-id",
                f"fragment id high-water mark went down from {previous_high} to {high}",
            )
        )
    if kind == "Restore":
        retired -= set(ids)
    else:
        back = set(ids) & retired
        if back:
            old_lance = kind == "Overwrite" and not _pylance14_or_txn_engine(m)
            out.append(
                Finding(
                    v,
                    "ids-never-reused",
                    f"fragment ids {sorted(back)[:10]} came back"
                    + (" (Overwrite by a Lance release that restarted ids)" if old_lance else ""),
                    "warning" if old_lance else "error",
                )
            )
    return out


def _pylance14_or_txn_engine(m: table_pb2.Manifest) -> bool:
    if not m.HasField("writer_version"):
        return False
    library = m.writer_version.library
    if library != "lance":
        return True
    major = major_version(m.writer_version.version)
    return major is not None and major >= 14


def _check_deletions(
    storage: Storage, v: int, m: table_pb2.Manifest, findings: list[Finding]
) -> int:
    """Check every deletion file of ``m``; return the live row count (physical_rows as
    recorded)."""
    rows = 0
    for frag in m.fragments:
        deleted = 0
        if frag.HasField("deletion_file"):
            try:
                dv = read_deletion_vector(
                    storage, frag.id, frag.deletion_file, physical_rows=frag.physical_rows or None
                )
            except TxnEngineError as exc:
                findings.append(Finding(v, "deletion-file", f"fragment {frag.id}: {exc}"))
                continue
            deleted = len(dv)  # offsets past physical_rows were refused by the reader
            physical = frag.physical_rows
            if physical and deleted >= physical:
                findings.append(
                    Finding(
                        v,
                        "deletion-file",
                        f"fragment {frag.id}: every row is deleted but the fragment was kept",
                        "warning",
                    )
                )
            recorded = frag.deletion_file.num_deleted_rows
            if recorded and recorded != deleted:
                findings.append(
                    Finding(
                        v,
                        "deletion-file",
                        f"fragment {frag.id}: num_deleted_rows {recorded} but {deleted} offsets",
                    )
                )
        rows += max(0, frag.physical_rows - deleted)
    return rows


def _check_data_files(
    storage: Storage, v: int, m: table_pb2.Manifest, findings: list[Finding]
) -> None:
    for frag in m.fragments:
        for df in frag.files:
            if df.HasField("base_id"):
                continue  # lives under another base path
            try:
                present = storage.exists(f"data/{df.path}")
            except InvalidStorageArgumentError:  # "../..", absolute, empty: never followed
                findings.append(
                    Finding(
                        v,
                        "data-files",
                        f"fragment {frag.id}: data file path {df.path!r} is not a path "
                        "inside data/ (not checked)",
                    )
                )
                continue
            except TxnEngineError as exc:  # the store failed for this one file
                findings.append(
                    Finding(v, "data-files", f"fragment {frag.id}: data/{df.path}: {exc}")
                )
                continue
            if not present:
                findings.append(
                    Finding(v, "data-files", f"fragment {frag.id}: data/{df.path} is missing")
                )
