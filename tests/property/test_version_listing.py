"""scan_versions (regex over one joined listing, entries made lazily) answers exactly
what parsing every name with parse_manifest_name answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txn_engine.errors import MixedNamingSchemeError
from txn_engine.format.naming import (
    U64_MAX,
    NamingScheme,
    VersionEntry,
    manifest_name,
    parse_manifest_name,
    scan_versions,
)
from txn_engine.storage import MemoryStorage

_versions = st.integers(min_value=0, max_value=(1 << 63) - 1) | st.integers(0, 40)
_main_line = st.builds(manifest_name, _versions, st.sampled_from(list(NamingScheme)))
_junk = st.one_of(
    st.sampled_from(
        [
            "latest_version_hint.json",
            "05.manifest",
            "007.manifest",
            "\u0665.manifest",
            ".manifest",
            "abc.manifest",
            f"{U64_MAX + 1:020d}.manifest",
            "99999999999999999999.manifest",
            "d9223372036854775813.manifest",
            "5.manifest#1",
            "3.txn",
        ]
    ),
    st.builds(lambda n: f"{n}.manifest-1f2e", _versions),
    st.builds(lambda n: f"{n}.manifest.0123456789abcdef0123456789abcdef.tmp", _versions),
    st.text(alphabet="0123456789.manifestd-", max_size=32),
)
_names = st.lists(st.one_of(_main_line, _junk), max_size=30, unique=True).filter(
    lambda ns: all(n not in ("", ".", "..") and "/" not in n for n in ns)
)


def _reference(names: list[str]) -> list[VersionEntry] | None:
    parsed = [(p, n) for n in names if (p := parse_manifest_name(n)) is not None]
    if len({scheme for (_, scheme), _ in parsed}) > 1:
        return None
    return sorted(
        (VersionEntry(version, name, scheme) for (version, scheme), name in parsed),
        key=lambda e: e.version,
    )


@given(names=_names, probe=_versions)
def test_scan_versions_agrees_with_parsing_every_name(names: list[str], probe: int) -> None:
    storage = MemoryStorage()
    for name in names:
        storage.put(f"_versions/{name}", b"x")
    expected = _reference(names)
    if expected is None:
        with pytest.raises(MixedNamingSchemeError):
            scan_versions(storage)
        return
    listing = scan_versions(storage)
    assert list(listing) == expected
    assert len(listing) == len(expected)
    assert listing.latest == (expected[-1] if expected else None)
    assert listing.scheme == (expected[0].scheme if expected else None)
    for v in {probe, *(e.version for e in expected), *(e.version - 1 for e in expected)}:
        assert listing.after(v) == [e for e in expected if e.version > v]
        assert listing.get(v) == next((e for e in expected if e.version == v), None)


@given(
    versions=st.lists(st.integers(0, 10**6), min_size=1, max_size=20, unique=True),
    extra=st.integers(0, 10**6),
    scheme=st.sampled_from(list(NamingScheme)),
)
def test_with_version_is_the_listing_of_the_store_with_that_version(
    versions: list[int], extra: int, scheme: NamingScheme
) -> None:
    """``with_version(v)`` equals what listing the store with version v added would give
    (the commit loop uses it for a winner it has just read back)."""
    store = MemoryStorage()
    for v in versions:
        store.put(f"_versions/{manifest_name(v, scheme)}", b"")
    before = scan_versions(store)
    store.put(f"_versions/{manifest_name(extra, scheme)}", b"")
    after = scan_versions(store)
    assert list(before.with_version(extra)) == list(after)
    assert list(after.with_version(extra)) == list(after)


@given(names=_names, since=_versions)
def test_a_partial_listing_holds_every_version_the_commit_loop_asks_for(
    names: list[str], since: int
) -> None:
    """On a store that lists in byte order (memory, S3, GCS, Azure), ``scan_versions(s,
    since=n)`` stops at the first V2 name of a version <= n: it has the same latest, every
    version >= n, the newest version at or below n, and nothing that a full listing lacks; with
    a V1 name before its stopping point it is the full listing (mixed names refused)."""
    store = MemoryStorage()
    for name in names:
        store.put(f"_versions/{name}", b"")
    try:
        full = list(scan_versions(store))
    except MixedNamingSchemeError:
        full = None
    try:
        partial = list(scan_versions(store, since=since))
    except MixedNamingSchemeError:
        assert full is None  # refused only when the full listing refuses too
        return
    if full is None:  # mixed, but the V1 names sort after the stopping point (as Lance)
        assert all(e.scheme is NamingScheme.V2 for e in partial)
        return
    assert set(partial) <= set(full)
    assert [e for e in full if e.version >= since] == [e for e in partial if e.version >= since]
    # where it stopped: the newest version at or below n (the newest below n when n is
    # not there; n itself when it is, and nothing older is needed then)
    at_or_below = [e for e in full if e.version <= since]
    if at_or_below and full[-1].scheme is NamingScheme.V2:
        assert at_or_below[-1] in partial
    assert (partial[-1] if partial else None) == (full[-1] if full else None)
