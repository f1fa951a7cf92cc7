"""The invariant checker: is a dataset's whole history well-formed?

:func:`verify` reads every version of a dataset (any backend) and reports each violated
invariant as a :class:`Finding`. Nothing is modified. Checked:

* the version chain has no gaps and every manifest decodes (strict reader);
* every version has a decodable transaction, and no transaction uuid lands twice
  (exactly-once);
* fragment ids are unique and sorted, ``max_fragment_id`` is at least every id in use, and
  an id that left the table never comes back (except through Restore);
* feature flags agree with the content (deletion files <-> flag 1, base paths <-> 16);
* deletion files of the latest version exist, decode, count ``num_deleted_rows`` offsets
  and hold only offsets below ``physical_rows`` (``deep=True`` checks every version).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

import attrs

from txn_engine.codec import transaction_from_proto
from txn_engine.errors import TxnEngineError
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import FLAG_BASE_PATHS, FLAG_DELETION_FILES
from txn_engine.format.io import read_manifest_entry, read_transaction
from txn_engine.format.naming import list_versions
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = ["Finding", "VerifyReport", "verify"]


@attrs.frozen
class Finding:
    """One violated invariant at one version."""

    version: int
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"v{self.version}: {self.invariant}: {self.detail}"


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
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "ok": self.ok,
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
) -> VerifyReport:
    """Check every invariant listed in the module docstring; never raises for a bad
    dataset (problems become findings), only for an unreachable one."""
    storage = open_storage(uri, storage_options)
    findings: list[Finding] = []
    entries = list_versions(storage)
    if not entries:
        return VerifyReport(storage.uri, 0, None, None, (Finding(0, "exists", "no versions"),))
    for prev, cur in itertools.pairwise(entries):
        if cur.version != prev.version + 1:
            findings.append(Finding(cur.version, "no-gaps", f"follows version {prev.version}"))
    seen_uuids: dict[str, int] = {}
    retired: set[int] = set()
    previous_ids: set[int] = set()
    live_rows: int | None = None
    for i, entry in enumerate(entries):
        v = entry.version
        try:
            mf = read_manifest_entry(storage, entry)
        except TxnEngineError as exc:
            findings.append(Finding(v, "manifest-decodes", str(exc)))
            continue
        m = mf.manifest
        if m.version != v:
            findings.append(Finding(v, "version-field", f"manifest says version {m.version}"))
        kind = None
        try:
            pb = read_transaction(storage, entry, mf)
            txn = transaction_from_proto(pb)
            kind = txn.kind
            if txn.uuid in seen_uuids:
                findings.append(
                    Finding(
                        v,
                        "exactly-once",
                        f"transaction {txn.uuid} also landed as version {seen_uuids[txn.uuid]}",
                    )
                )
            seen_uuids.setdefault(txn.uuid, v)
        except TxnEngineError as exc:
            findings.append(Finding(v, "transaction-present", str(exc)))
        ids = [f.id for f in m.fragments]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            findings.append(Finding(v, "fragment-ids", "fragment ids not unique and sorted"))
        id_set = set(ids)
        if ids and (not m.HasField("max_fragment_id") or m.max_fragment_id < ids[-1]):
            findings.append(
                Finding(v, "max-fragment-id", f"max_fragment_id below fragment id {ids[-1]}")
            )
        if kind == "Restore":
            retired -= id_set
        else:
            back = id_set & retired
            if back:
                findings.append(
                    Finding(v, "ids-never-reused", f"fragment ids {sorted(back)} came back")
                )
        retired |= previous_ids - id_set
        previous_ids = id_set
        has_deletions = any(f.HasField("deletion_file") for f in m.fragments)
        if has_deletions != bool(m.reader_feature_flags & FLAG_DELETION_FILES):
            findings.append(Finding(v, "flags", "deletion-file flag disagrees with fragments"))
        if bool(len(m.base_paths)) != bool(m.reader_feature_flags & FLAG_BASE_PATHS):
            findings.append(Finding(v, "flags", "base-path flag disagrees with base_paths"))
        last = i == len(entries) - 1
        if deep or last:
            rows = 0
            for frag in m.fragments:
                deleted = 0
                if frag.HasField("deletion_file"):
                    try:
                        dv = read_deletion_vector(storage, frag.id, frag.deletion_file)
                    except TxnEngineError as exc:
                        findings.append(Finding(v, "deletion-file", f"fragment {frag.id}: {exc}"))
                        continue
                    deleted = len(dv)
                    if len(dv) and dv.max() >= frag.physical_rows:
                        findings.append(
                            Finding(
                                v,
                                "deletion-file",
                                f"fragment {frag.id}: offset "
                                f"{dv.max()} >= physical_rows {frag.physical_rows}",
                            )
                        )
                    recorded = frag.deletion_file.num_deleted_rows
                    if recorded and recorded != deleted:
                        findings.append(
                            Finding(
                                v,
                                "deletion-file",
                                f"fragment {frag.id}: "
                                f"num_deleted_rows {recorded} but {deleted} offsets",
                            )
                        )
                rows += frag.physical_rows - deleted
            if last:
                live_rows = rows
    return VerifyReport(storage.uri, len(entries), entries[-1].version, live_rows, tuple(findings))
