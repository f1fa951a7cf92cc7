"""Concurrent writers made deterministic: plan a :class:`~txn_engine.Table` operation at
the latest version without committing it, commit it later (after others landed), and
replay the same operations serially with pylance as the oracle.

Used by the differential tests of the resolutions beyond Lance
(``tests/integration/test_beyond_lance_pylance.py``, ``tests/property/test_interleavings.py``).
Needs the ``lance`` extra (pylance).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import attrs

from txn_engine import api
from txn_engine.dataset import Dataset
from txn_engine.transaction import Transaction

__all__ = ["Step", "lance_apply", "plan_only", "table_rows"]


class _Planned(Exception):
    """Raised by the stand-in commit loop once the plan is captured."""


def plan_only(table: api.Table, method: str, *args: Any, **kwargs: Any) -> Transaction:
    """The transaction ``table.<method>(*args, **kwargs)`` would commit, planned at the
    latest version (its data and deletion files written, nothing committed)."""
    captured: list[Transaction] = []

    def stand_in(storage: Any, planned: Callable[[Dataset], Transaction], **_: Any) -> Any:
        captured.append(planned(Dataset.open(storage)))
        raise _Planned

    with mock.patch.object(api, "replan_and_commit", stand_in), contextlib.suppress(_Planned):
        getattr(table, method)(*args, **kwargs)
    if not captured:
        raise AssertionError(f"{method} committed nothing to plan")
    return captured[0]


@attrs.frozen
class Step:
    """One writer's operation: a :class:`~txn_engine.Table` method and its arguments."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def plan(self, table: api.Table) -> Transaction:
        return plan_only(table, self.method, *self.args, **dict(self.kwargs))


def lance_apply(uri: str, step: Step) -> None:
    """Apply ``step`` to the dataset at ``uri`` with pylance alone (the serial oracle)."""
    import lance

    ds = lance.dataset(uri)
    kw = dict(step.kwargs)
    if step.method == "delete":
        ds.delete(step.args[0])
    elif step.method == "compact":
        ds.optimize.compact_files(**kw)
    elif step.method == "merge_insert":
        data, on = step.args
        ds.merge_insert(on).when_matched_update_all().when_not_matched_insert_all().execute(data)
    elif step.method == "add_columns":
        ds.add_columns(step.args[0])
    elif step.method == "append":
        lance.write_dataset(step.args[0], uri, mode="append")
    elif step.method == "update":
        ds.update(step.args[0], where=kw.get("where"))
    else:
        raise ValueError(f"no pylance oracle for {step.method}")


def table_rows(uri: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every row of the latest version, sorted by every column (for comparison)."""
    import lance

    tbl = lance.dataset(uri).to_table(columns=list(columns) if columns else None)
    rows = tbl.to_pylist()
    return sorted(rows, key=lambda r: tuple(sorted((k, repr(v)) for k, v in r.items())))
