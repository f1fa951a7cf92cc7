"""Datasets written by old Lance releases: read like pylance 14.0.2, or fail typed.

Every dataset under ``/work/shared/fixtures/lance-historical/`` (referenced in place,
read-only) must give the same versions, row counts and schema as pylance 14.0.2 reports;
where pylance itself cannot read one, txn_engine must raise a typed
:class:`~txn_engine.errors.TxnEngineError` that says why (never crash or misread).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import lance
import pytest

from txn_engine.dataset import Dataset
from txn_engine.errors import DataFileError, TxnEngineError

pytestmark = pytest.mark.pylance

ROOT = Path(
    os.environ.get(
        "TXN_ENGINE_HISTORICAL_FIXTURES",
        Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "lance-historical",
    )
)
FIXTURES = sorted(str(p.parent.relative_to(ROOT)) for p in ROOT.glob("**/_versions") if p.is_dir())


def test_fixture_set_is_present() -> None:
    assert len(FIXTURES) >= 20, f"historical fixtures missing under {ROOT}"


def _pylance_view(path: str, what: str) -> dict[int, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        latest = lance.dataset(path)
        out = {}
        for v in latest.versions():
            ds = lance.dataset(path, version=v["version"])
            out[v["version"]] = ds.count_rows() if what == "rows" else ds.schema
        return out


def _our_view(path: str, what: str) -> dict[int, Any]:
    latest = Dataset.open(path)
    out = {}
    for info in latest.versions():
        ds = latest.checkout(info.version)
        out[info.version] = ds.count_rows() if what == "rows" else ds.schema
    return out


def _compare(name: str, what: str) -> None:
    path = str(ROOT / name)
    theirs: dict[int, Any] | None
    try:
        theirs = _pylance_view(path, what)
    except Exception:  # pylance cannot read it: we must fail typed, with a reason
        theirs = None
    if theirs is None:
        with pytest.raises(TxnEngineError) as info:
            _our_view(path, what)
        assert len(str(info.value)) > 20, "the error must say why"
        return
    ours = _our_view(path, what)
    assert sorted(ours) == sorted(theirs), f"{name}: versions"
    for version, expected in theirs.items():
        if what == "rows":
            assert ours[version] == expected, f"{name} v{version} rows"
        else:
            assert ours[version].equals(expected, check_metadata=True), f"{name} v{version}"


@pytest.mark.parametrize("name", FIXTURES)
def test_historical_versions_and_rows_match_pylance(name: str) -> None:
    _compare(name, "rows")


@pytest.mark.parametrize("name", FIXTURES)
def test_historical_schema_matches_pylance(name: str) -> None:
    _compare(name, "schema")


def test_unreadable_fixture_names_the_missing_data_file() -> None:
    path = str(ROOT / "v0.5.9" / "dataset_with_fragments")
    ds = Dataset.open(path)
    assert [v.version for v in ds.versions()] == [1, 2, 3]
    with pytest.raises(DataFileError, match=r"data file .* is missing"):
        ds.count_rows()


def test_legacy_rows_are_counted_from_data_files() -> None:
    # v0.8.0 wrote physical_rows = 90 for a 100-row file (no writer_version): Lance
    # distrusts the manifest there and so must we.
    ds = Dataset.open(str(ROOT / "v0.8.0" / "migrated_from_v0.7.5"))
    assert not ds.manifest.HasField("writer_version")
    assert ds.fragment_row_counts() == [(0, 100, 10), (1, 2, 0)]
    assert ds.count_rows() == 92
