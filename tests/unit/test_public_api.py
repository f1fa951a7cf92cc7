"""The public surface explains itself: ``txn_engine.__all__`` is sorted, every name in it
resolves, and docs/api.md lists exactly those names; ``te.lease`` and ``te.cleanup`` are
functions that shadow no module of the package."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import txn_engine as te

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _documented() -> list[str]:
    return re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", API_PAGE.read_text(), flags=re.M)


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert te.__all__ == sorted(te.__all__)
    assert len(set(te.__all__)) == len(te.__all__)
    for name in te.__all__:
        if name != "Namespace":  # needs the namespace extra (imported on first use)
            assert getattr(te, name) is not None


def test_the_api_page_lists_exactly_the_public_names() -> None:
    documented = _documented()
    assert len(documented) == len(set(documented)), "a name is listed twice"
    assert set(documented) == set(te.__all__)


def test_lease_and_cleanup_are_functions_that_shadow_no_module() -> None:
    """``te.lease(uri)`` and ``te.cleanup(uri, ...)`` as the cleanup guide calls them; the
    modules behind them are ``txn_engine.leases`` and ``txn_engine.retention``."""
    for name in ("lease", "cleanup"):
        assert callable(getattr(te, name))
        assert importlib.util.find_spec(f"txn_engine.{name}") is None, name
    assert te.lease.__module__ == "txn_engine.leases"
    assert te.cleanup.__module__ == "txn_engine.retention"
