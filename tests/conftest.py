"""Shared test configuration: Hypothesis profiles.

Select with HYPOTHESIS_PROFILE=dev|ci|nightly (default dev). CI uses `ci`, sized so the
whole suite stays well under 30 minutes on 2 cores; `nightly` digs deeper.
"""

from __future__ import annotations

import os

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
