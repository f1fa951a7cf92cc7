"""Version-level operations: Restore and Clone."""

from __future__ import annotations

import attrs

__all__ = ["Clone", "Restore"]


@attrs.frozen
class Restore:
    """Make ``version`` the content of the next version (later versions stay readable)."""

    version: int


@attrs.frozen
class Clone:
    """Create a dataset (or branch) as a shallow clone of ``ref_path`` at ``ref_version``."""

    ref_version: int
    ref_path: str
    is_shallow: bool = True
    ref_name: str | None = None
    branch_name: str | None = None
