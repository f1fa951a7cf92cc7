"""Version naming (V1 / V2 / detached) and version listing."""

from __future__ import annotations

import pytest

from txn_engine.errors import MixedNamingSchemeError
from txn_engine.format.naming import (
    U64_MAX,
    NamingScheme,
    VersionEntry,
    detached_manifest_name,
    list_versions,
    list_versions_after,
    manifest_name,
    parse_manifest_name,
    scan_versions,
    transaction_file_name,
)
from txn_engine.storage import MemoryStorage


def test_v1_and_v2_names() -> None:
    assert manifest_name(1, NamingScheme.V1) == "1.manifest"
    assert manifest_name(1, NamingScheme.V2) == "18446744073709551614.manifest"
    assert manifest_name(0, NamingScheme.V2) == "18446744073709551615.manifest"
    assert detached_manifest_name(2**63 + 5) == f"d{2**63 + 5}.manifest"
    assert transaction_file_name(4, "u-u") == "4-u-u.txn"


def test_parse_round_trips() -> None:
    for version in (0, 1, 9, 10, 123456, 2**62):
        for scheme in NamingScheme:
            assert parse_manifest_name(manifest_name(version, scheme)) == (version, scheme)


@pytest.mark.parametrize(
    "name",
    [
        "5.manifest-0f1e2d3c",
        "5.manifest#1",
        "18446744073709551614.manifest-abc",
        "d9223372036854775813.manifest",
        "latest_version_hint.json",
        "_latest.manifest",
        "abc.manifest",
        ".manifest",
        "99999999999999999999.manifest",  # 20 digits but > u64::MAX
        "5.txn",
        "05.manifest",  # V1 with a leading zero: no Lance writes one
        "\u0665.manifest",  # a non-ASCII digit
        "1" * 21 + ".manifest",  # no u64: pylance 14 skips it
        "1" * 5000 + ".manifest",  # int() of it raised ValueError (Python's digit limit)
    ],
)
def test_staging_detached_and_junk_are_ignored(name: str) -> None:
    assert parse_manifest_name(name) is None


def test_main_line_version_range_is_enforced() -> None:
    with pytest.raises(ValueError, match="main-line"):
        manifest_name(2**63, NamingScheme.V2)
    assert U64_MAX == 2**64 - 1


def _store(*names: str) -> MemoryStorage:
    storage = MemoryStorage()
    for name in names:
        storage.put(f"_versions/{name}", b"x")
    return storage


def test_list_versions_sorted_and_ignores_junk() -> None:
    storage = _store(
        "10.manifest", "2.manifest", "1.manifest", "3.manifest-tmp", "latest_version_hint.json"
    )
    assert [e.version for e in list_versions(storage)] == [1, 2, 10]
    assert list_versions(storage)[0] == VersionEntry(1, "1.manifest", NamingScheme.V1)
    assert [e.version for e in list_versions_after(storage, 1)] == [2, 10]
    assert list_versions(storage)[-1].path == "_versions/10.manifest"


def test_list_versions_v2() -> None:
    storage = _store(*(manifest_name(v, NamingScheme.V2) for v in (3, 1, 2)))
    storage.put("_versions/d9223372036854775813.manifest", b"x")
    entries = list_versions(storage)
    assert [e.version for e in entries] == [1, 2, 3]
    assert {e.scheme for e in entries} == {NamingScheme.V2}


def test_mixed_naming_schemes_are_refused() -> None:
    storage = _store("1.manifest", manifest_name(2, NamingScheme.V2))
    with pytest.raises(MixedNamingSchemeError, match="both V1 and V2"):
        list_versions(storage)


def test_empty_listing() -> None:
    assert list_versions(MemoryStorage()) == []


def test_scan_versions_answers_without_listing_again() -> None:
    names = [manifest_name(v, NamingScheme.V2) for v in (7, 3, 5, 4)]
    listing = scan_versions(_store(*names, "d9223372036854775813.manifest", "x.manifest"))
    assert listing.scheme is NamingScheme.V2
    assert len(listing) == 4
    assert listing.latest == VersionEntry(7, manifest_name(7, NamingScheme.V2), NamingScheme.V2)
    assert [e.version for e in listing.after(3)] == [4, 5, 7]
    assert [e.version for e in listing.after(0)] == [3, 4, 5, 7]
    assert listing.after(7) == []
    assert listing.get(5) == VersionEntry(5, manifest_name(5, NamingScheme.V2), NamingScheme.V2)
    assert listing.get(6) is None
    assert listing.get(1) is None
    assert [e.version for e in listing] == [3, 4, 5, 7]
    v1 = scan_versions(_store("10.manifest", "9.manifest", "0.manifest"))
    assert v1.scheme is NamingScheme.V1
    assert [e.name for e in v1] == ["0.manifest", "9.manifest", "10.manifest"]
    assert [e.version for e in v1.after(0)] == [9, 10]
    assert v1.get(10) == VersionEntry(10, "10.manifest", NamingScheme.V1)
    empty = scan_versions(MemoryStorage())
    assert not empty
    assert empty.latest is None
    assert empty.scheme is None
    assert empty.after(0) == []


@pytest.mark.parametrize("digits", [21, 25, 5000])
def test_v1_names_past_a_u64_are_not_versions(digits: int) -> None:
    """pylance 14.0.2 lists versions [1, 2] beside a 25-digit V1 name; txn_engine took it
    for the latest version (21+ digits) or raised ValueError (past 4,300 digits)."""
    storage = _store("1.manifest", "2.manifest", "1" * digits + ".manifest")
    assert [e.version for e in list_versions(storage)] == [1, 2]
    assert [e.version for e in scan_versions(storage, since=1)] == [1, 2]
