"""Shared test configuration: Hypothesis profiles.

Select with HYPOTHESIS_PROFILE=dev|ci|nightly (default dev). CI uses `ci`, sized so the
whole suite stays well under 30 minutes on 2 cores; `nightly` digs deeper.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_db = DirectoryBasedExampleDatabase(
    os.path.join(os.path.dirname(__file__), "..", ".hypothesis", "examples")
)
_common = {"database": _db, "suppress_health_check": [HealthCheck.too_slow]}

settings.register_profile("dev", max_examples=50, deadline=None, **_common)
settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=False, print_blob=True, **_common
)
settings.register_profile("nightly", max_examples=2000, deadline=None, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="module")
def hint_on_every_table() -> Iterator[None]:
    """The latest-version hint used and written on every local table, small ones included
    (by default a ``_versions/`` directory of one 4 KiB block is listed instead, which is
    faster there): for the tests of the hint path itself (``pytestmark``)."""
    from txn_engine.format import naming

    old = naming._HINT_MIN_DIR_BYTES
    naming._HINT_MIN_DIR_BYTES = 0
    try:
        yield
    finally:
        naming._HINT_MIN_DIR_BYTES = old
