"""When the latest-version hint is used on local disk: only where ``_versions/`` is larger
than one 4 KiB directory block. A smaller one is listed (about 15 us, less than reading
and checking the hint) and txn_engine writes no hint there; a larger one is read from the
hint, and the hint is kept up to date by every commit."""

from __future__ import annotations

import os
from pathlib import Path

from txn_engine.commit import commit
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import (
    TXN_HINT_PATH,
    VERSIONS_DIR,
    NamingScheme,
    manifest_name,
    scan_versions,
)
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import LocalStorage, RecordingStorage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag() -> Fragment:
    return Fragment(0, (DataFile("a.lance", (0,), (0,), 2, 2, 100),), 10)


def table(root: Path, versions: int) -> LocalStorage:
    """A table of ``versions`` versions: two real commits, the rest the second manifest
    renumbered under the next V2 names (what a long history looks like to a listing)."""
    st = LocalStorage(str(root))
    commit(st, Transaction(0, Overwrite([frag()], SCHEMA)))
    commit(st, Transaction(1, Append([frag()])))
    second = decode_manifest_file(
        (root / VERSIONS_DIR / manifest_name(2, NamingScheme.V2)).read_bytes()
    )
    for v in range(3, versions + 1):
        second.manifest.version = v
        data = encode_manifest_file(second.manifest, second.indices, second.transaction)
        (root / VERSIONS_DIR / manifest_name(v, NamingScheme.V2)).write_bytes(data)
    return st


def test_a_small_versions_directory_is_listed_and_gets_no_hint(tmp_path: Path) -> None:
    st = table(tmp_path, 5)
    assert st.directory_bytes(VERSIONS_DIR) <= 4096
    commit(st, Transaction(5, Append([frag()])))
    assert not st.exists(TXN_HINT_PATH)
    rec = RecordingStorage(st)
    assert scan_versions(rec, since=5).latest.version == 6
    assert rec.counts["list"] == 1


def test_a_large_versions_directory_is_read_from_the_hint(tmp_path: Path) -> None:
    st = table(tmp_path, 300)
    assert st.directory_bytes(VERSIONS_DIR) > 4096
    commit(st, Transaction(300, Append([frag()])))
    assert st.get(TXN_HINT_PATH) == b'{"version":301}'
    rec = RecordingStorage(st)
    listing = scan_versions(rec, since=299)
    assert [e.version for e in listing.after(298)] == [299, 300, 301]
    # no listing, unless the create's system call stamped the manifest and the directory a
    # clock tick apart (then the hint is not trusted: a listing answers)
    stamped = os.stat(st.full_path(VERSIONS_DIR)).st_mtime_ns
    created = os.stat(st.full_path(f"{VERSIONS_DIR}/{manifest_name(301, NamingScheme.V2)}"))
    assert rec.counts.get("list", 0) == (0 if stamped <= created.st_ctime_ns else 1)
    assert scan_versions(st, since=299).after(298) == scan_versions(st).after(298)
