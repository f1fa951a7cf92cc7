"""Conflict resolution: the matrix as data, detection (pure values) and rebase.

* :mod:`txn_engine.conflicts.matrix`: ``MATRIX[(mine_kind, other_kind)] -> Rule``.
* :mod:`txn_engine.conflicts.detect`: ``detect(mine, other, other_version=...)`` returns
  :class:`Conflict` values; nothing there raises. It evaluates each cell's rule on my
  operation's handler (:class:`txn_engine.builder.Handler`: the predicates of one
  operation type live with its validation and its effect on the manifest).
* :mod:`txn_engine.conflicts.rebase`: moving a transaction onto the latest version (the
  handler's ``rebase``: deletion-vector merge for Delete/Update).
* :mod:`txn_engine.conflicts.planner`: ``plan_retry``, the decision over all winners.

Only the commit loop (:mod:`txn_engine.commit`) turns conflicts into exceptions. The
functions ``detect``/``check``/``rebase`` live in the submodules of the same names (not
re-exported here, so the submodules stay importable by name).
"""

from __future__ import annotations

from txn_engine.conflicts.detect import (
    Check,
    Conflict,
    missing_history_conflict,
    modified_fragment_ids,
    unreadable_conflict,
)
from txn_engine.conflicts.matrix import (
    COMPATIBLE,
    INCOMPATIBLE,
    MATRIX,
    PREDICATES,
    RETRYABLE,
    Outcome,
    Rule,
    render_markdown,
    rule_for,
)
from txn_engine.conflicts.rebase import ConflictOptions, derive_affected_rows

__all__ = [
    "COMPATIBLE",
    "Check",
    "Conflict",
    "ConflictOptions",
    "INCOMPATIBLE",
    "MATRIX",
    "PREDICATES",
    "RETRYABLE",
    "Outcome",
    "Rule",
    "derive_affected_rows",
    "missing_history_conflict",
    "modified_fragment_ids",
    "render_markdown",
    "rule_for",
    "unreadable_conflict",
]
