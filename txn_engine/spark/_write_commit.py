"""Committing a Spark write on the driver: retrying while the outcome is unknown, and
reporting what the commit did.

A commit whose outcome is unknown (a storage failure at the wrong moment) is called again
(:func:`commit_until_known`): txn_engine's commit finds the transaction by its uuid among the
versions it checks, so a retry of a commit that did land reports it instead of landing
twice. :class:`SparkCommitResult` is what a driver commit returns (and logs, and writes to
the ``commit_report`` path when one is given).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from txn_engine.errors import CommitStateUnknownError, StorageError, TxnEngineError
from txn_engine.retry import RetryPolicy
from txn_engine.spark import _staging
from txn_engine.spark._fragments import _landed_files, _operation_files

if TYPE_CHECKING:
    from txn_engine.commit import CommitResult

__all__ = ["UNKNOWN_OUTCOME_RETRY", "SparkCommitResult", "commit_until_known", "report_commit"]

_log = logging.getLogger("txn_engine.spark")

#: Backoff between the driver's commit calls whose outcome was unknown (a storage failure
#: at the wrong moment; each call first looks for the transaction by its uuid): a fixed
#: 50 ms unit, slots doubling from 4, at most 2 s a sleep. Its ``max_attempts`` is replaced
#: by the ``commit_attempts`` write option.
UNKNOWN_OUTCOME_RETRY = RetryPolicy(
    max_attempts=3,
    adaptive=False,
    initial_unit=0.05,
    slot_growth="exponential",
    max_slots=None,
    max_delay=2.0,
)


@attrs.frozen
class SparkCommitResult:
    """What a driver commit did.

    ``version`` is the version the write created (also when an earlier attempt had
    already landed it: then ``already_committed`` is True), or None for an append of zero
    rows, which commits nothing. ``commit_seconds`` is the time spent in
    :func:`txn_engine.commit.commit` (conflict checks and rebase included);
    ``total_seconds`` also counts building the transaction and the clean-up of
    unreferenced files. ``attempts`` counts calls of :func:`txn_engine.commit.commit`
    (more than one when an outcome was unknown and the commit was retried);
    ``already_committed`` means the transaction was found in the history instead of being
    landed by the last call.
    """

    write_id: str
    uuid: str
    mode: str
    read_version: int
    version: int | None
    fragments: int
    rows: int
    already_committed: bool
    attempts: int
    commit_seconds: float
    total_seconds: float
    files_removed: int

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def commit_until_known(
    call: Callable[[], CommitResult],
    landed: Callable[[], _staging.Landed | None],
    *,
    commit_attempts: int,
    referenced: set[str],
    write_id: str,
    uri: str,
    read_version: int,
    operation: str,
) -> tuple[int, bool, int, float, set[str]]:
    """Run ``call`` (one commit of write ``write_id``'s transaction, an ``operation`` at
    ``read_version`` of ``uri``); call it again, up to ``commit_attempts`` calls with
    :data:`UNKNOWN_OUTCOME_RETRY`'s sleeps between, while the outcome is unknown. When every
    call's outcome stayed unknown, ``landed()`` looks for the transaction in the history.

    Returns (version, already_committed, calls, seconds in commit, files to keep:
    ``referenced`` when this call landed it, else those of the landed transaction). Raises
    the commit's own errors, and CommitStateUnknownError when the outcome is still unknown
    after every call (then do not delete the data files).
    """
    retry = attrs.evolve(UNKNOWN_OUTCOME_RETRY, max_attempts=commit_attempts)
    budget = retry.budget()  # the commit_attempts calls and the sleeps between them
    last: BaseException | None = None
    spent = 0.0
    while True:
        attempt = budget.start_attempt()
        t0 = time.perf_counter()
        try:
            result = call()
        except (CommitStateUnknownError, StorageError) as exc:
            last = exc
        except TxnEngineError:
            raise
        except OSError as exc:  # a raw backend error from a custom storage_factory
            last = exc
        else:
            spent += time.perf_counter() - t0
            keep = _operation_files(result.transaction) if result.already_committed else referenced
            return result.version, result.already_committed, attempt, spent, keep
        spent += time.perf_counter() - t0
        _log.warning(
            "commit of write %s, call %d: outcome unknown (%r); retrying (a landed "
            "transaction is found by its uuid, never committed twice)",
            write_id,
            attempt,
            last,
        )
        if not budget.wait():
            break
    calls_made = budget.attempts
    try:
        found = landed()
    except Exception:  # the history is unreadable too: the outcome stays unknown
        found = None
    if found is not None:
        return found.version, True, calls_made, spent, _landed_files(found.transaction)
    raise CommitStateUnknownError(
        f"the commit of write {write_id} to {uri} failed {calls_made} time(s) "
        f"with an unknown outcome; last error: {last!r}",
        read_version=read_version,
        operation=operation,
        remedy="call commit() again with the same fragments, or find_landed(); do not "
        "delete the data files",
    ) from last


def report_commit(result: SparkCommitResult, commit_report: str | None) -> None:
    """Log what a driver commit did and, when ``commit_report`` names a path (any fsspec
    URL), write ``result`` there as JSON (best effort: a failure is logged)."""
    _log.info(
        "txn_lance %s write %s -> version %s (read version %d): %d fragments, %d rows; "
        "txn_engine commit %.3f s in %d attempt(s), driver commit total %.3f s%s; "
        "%d unreferenced file(s) removed",
        result.mode,
        result.write_id,
        result.version,
        result.read_version,
        result.fragments,
        result.rows,
        result.commit_seconds,
        result.attempts,
        result.total_seconds,
        " (already committed)" if result.already_committed else "",
        result.files_removed,
    )
    if commit_report:
        _write_report(commit_report, result.to_json())


def _write_report(path: str, report: Mapping[str, Any]) -> None:
    import fsspec

    try:
        with fsspec.open(path, "w") as handle:
            json.dump(report, handle, sort_keys=True)
    except Exception as exc:
        _log.warning("could not write the commit report to %s: %r", path, exc)
