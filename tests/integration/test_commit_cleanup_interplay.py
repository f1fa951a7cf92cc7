"""pylance's ``cleanup_old_versions`` at every point of a txn_engine commit.

A writer plans against version 1; while its commit runs (before its listing, before its
manifest create, right after the create) or right after it returns, a pylance writer
commits (an Overwrite, or a Delete of another row of the same fragment), appends, and runs
``cleanup_old_versions(older_than=0)`` so that only the newest version is left (before the
manifest create, this frees the very slot the commit is about to create: the create succeeds
there and the lineage check must withdraw it). Whatever
the interleaving: no acknowledged row is lost or resurrected, an operation planned before
a cleaned-up Overwrite never lands on top of it (the lost update this guards against), the
commit that cannot be checked raises HistoryUnavailableError and writes nothing, and every
version left reads in pylance.

The Append commits from the URI (list, create, existence check of the next version); the
Delete commits with a Dataset base (create, then one listing). Right after the Delete's
create, such a cleanup removes our version itself, younger than the commit (outside the
contract: ``docs/cleanup.md``); the commit then cannot tell whether the versions above were
built on it and raises CommitStateUnknownError, and the table keeps every acknowledged row.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

from txn_engine.commit import CommitResult, commit
from txn_engine.errors import CommitStateUnknownError, HistoryUnavailableError
from txn_engine.format.naming import NamingScheme, manifest_name
from txn_engine.model import Fragment
from txn_engine.ops import Append
from txn_engine.storage import LocalStorage
from txn_engine.testing.faults import Fault, FaultyStorage
from txn_engine.transaction import Transaction
from txn_engine.writers import delete_rows

pytestmark = pytest.mark.pylance

ENGINE_ROWS = list(range(1000, 1005))
PYLANCE_APPENDED = [600, 601]
OVERWRITTEN = [500, 501, 502]


def _table(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def _create(uri: str) -> None:
    lance.write_dataset(_table(list(range(40))), uri, max_rows_per_file=10)  # version 1


def _ids(uri: str, version: int | None = None) -> list[int]:
    return sorted(lance.dataset(uri, version=version).to_table()["id"].to_pylist())


def _cleanup(uri: str) -> None:
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))


def _pylance_work(uri: str, kind: str) -> Callable[[], None]:
    def run() -> None:
        if kind == "overwrite":
            lance.write_dataset(_table(OVERWRITTEN), uri, mode="overwrite")
        else:
            lance.dataset(uri).delete("id = 1")  # same fragment as the engine's delete
        lance.write_dataset(_table(PYLANCE_APPENDED), uri, mode="append")
        _cleanup(uri)

    return run


def _engine_op(op: str, uri: str, store: FaultyStorage) -> Callable[[], CommitResult]:
    if op == "append":
        frags = tuple(
            Fragment.from_lance_json(m.to_json())
            for m in lf.write_fragments(_table(ENGINE_ROWS), uri)
        )
        txn = Transaction(1, Append(frags))  # planned against version 1
        return lambda: commit(store, txn)
    # deletes id 0 (fragment 0, offset 0), planned against version 1
    return lambda: delete_rows(store, 0, [0], read_version=1)


POINTS: dict[str, tuple[str, str] | None] = {
    "before-listing": ("list", "_versions*"),
    # the concurrent writer takes the slot, cleanup frees it again: our create succeeds
    # there and the lineage check must withdraw it
    "before-manifest-create": ("put_if_absent", "_versions/*"),
    # our manifest (version 2) landed; the lineage check looks for version 3 next
    "after-manifest-create": ("exists", f"_versions/{manifest_name(3, NamingScheme.V2)}"),
    "after-commit": None,
}
#: the Delete (a Dataset base) creates first and lists after the create: no listing
#: before it, and the check after the create is that listing
WARM_POINTS: dict[str, tuple[str, str] | None] = {
    "before-manifest-create": POINTS["before-manifest-create"],
    "after-manifest-create": ("list", "_versions*"),
    "after-commit": None,
}
CASES = [("append", p) for p in POINTS] + [("delete", p) for p in WARM_POINTS]
#: points at which the concurrent history is cleaned up before the commit could check it
BEFORE_LANDING = {"before-listing", "before-manifest-create"}


@pytest.mark.parametrize(("op", "point"), CASES)
@pytest.mark.parametrize("concurrent", ["overwrite", "delete"])
def test_pylance_cleanup_at_every_point_of_a_commit(
    tmp_path: Path, op: str, concurrent: str, point: str
) -> None:
    uri = str(tmp_path / "ds")
    _create(uri)
    store = FaultyStorage(LocalStorage(uri))
    work = _pylance_work(uri, concurrent)
    where = (POINTS if op == "append" else WARM_POINTS)[point]
    hook: Fault | None = None
    if where is not None:
        method, pattern = where
        hook = store.add(Fault(method, pattern, mode="hook", hook=lambda _m, _p: work()))
    run = _engine_op(op, uri, store)

    landed: CommitResult | None = None
    refused: HistoryUnavailableError | None = None
    unknown: CommitStateUnknownError | None = None
    try:
        landed = run()
    except HistoryUnavailableError as exc:
        refused = exc
    except CommitStateUnknownError as exc:
        unknown = exc
    if refused is not None:
        assert refused.read_version == 1
        assert "re-plan" in str(refused)
    # exactly where the cleanup removed our version after it landed (it keeps the newest)
    assert (unknown is not None) == ((op, point) == ("delete", "after-manifest-create"))
    if unknown is not None:
        assert "removed by a cleanup" in str(unknown)
    assert hook is None or hook.exhausted  # the concurrent work ran where it was put
    if point == "after-commit":
        work()

    final = _ids(uri)
    if point in BEFORE_LANDING:
        assert landed is None, f"{op} planned at version 1 landed over a cleaned-up {concurrent}"
    elif unknown is None:
        assert landed is not None  # it landed before anything concurrent happened
    # pylance's acknowledged work is never lost or undone
    assert all(i in final for i in PYLANCE_APPENDED)
    if concurrent == "overwrite":
        assert [i for i in final if i < 40] == []  # nothing of the overwritten table came back
        assert all(i in final for i in OVERWRITTEN)
    else:
        assert 1 not in final  # the concurrent delete is never resurrected
    # the engine's work is there exactly when it was acknowledged and not overwritten later
    # (an unknown outcome may go either way)
    if unknown is not None:
        pass
    elif op == "append":
        expect_ours = landed is not None and concurrent == "delete"
        assert all((i in final) == expect_ours for i in ENGINE_ROWS)
    elif concurrent == "delete":
        assert (0 not in final) == (landed is not None)
    # every version left reads in pylance (no kept version references a deleted file)
    for v in lance.dataset(uri).versions():
        lance.dataset(uri, version=v["version"]).to_table()


def test_pylance_itself_refuses_the_equivalent_commit(tmp_path: Path) -> None:
    """The oracle: pylance 14.0.2 refuses an Append planned at a cleaned-up version too."""
    uri = str(tmp_path / "ds")
    _create(uri)
    lance.write_dataset(_table([40]), uri, mode="append")  # 2: the planned read version
    frags = lf.write_fragments(_table(ENGINE_ROWS), uri)
    lance.write_dataset(_table(OVERWRITTEN), uri, mode="overwrite")  # 3
    lance.write_dataset(_table(PYLANCE_APPENDED), uri, mode="append")  # 4
    _cleanup(uri)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [4]
    with pytest.raises(OSError, match=r"not found|Not found|does not exist"):
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(frags), read_version=2)
    ours = tuple(Fragment.from_lance_json(m.to_json()) for m in frags)
    with pytest.raises(HistoryUnavailableError) as info:
        commit(uri, Transaction(2, Append(ours)))
    assert info.value.conflicting_version == 2
    assert _ids(uri) == sorted(OVERWRITTEN + PYLANCE_APPENDED)
