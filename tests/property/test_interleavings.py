"""Random interleavings of 2-3 writers, all planned at one version and committed in a
random order: whatever txn_engine lands equals pylance applying the same operations one
after another in commit order (rows and values; stable row ids where the table has them).
A writer refused with a retryable conflict is left out (its caller would re-plan).

Operations: append (new keys, so no predicate of another writer matches them), delete,
update, upsert (merge_insert), compaction, add a column; tables with and without stable
row ids, with deletion vectors. ``TXN_ENGINE_INTERLEAVINGS`` sets the example count
(default 25). The mutation tests break the address mapping and the deletion carry-over
and check that the property then finds a counterexample.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.errors import RetryableConflictError
from txn_engine.testing.interleave import Step, lance_apply, table_rows

lance = pytest.importorskip("lance")

EXAMPLES = int(os.environ.get("TXN_ENGINE_INTERLEAVINGS", "25"))


def _appended(keys: tuple[int, int]) -> Step:
    ids, values = pa.array(list(keys), pa.int64()), pa.array([1, 2], pa.int64())
    return Step("append", (pa.table({"id": ids, "v": values}),))


def _steps(writer: int, *, skew: bool = False) -> st.SearchStrategy[Step]:
    """One writer's operation (``writer`` keeps appended keys and column names apart;
    with ``skew`` an append may also add keys the other writers' predicates match)."""
    key = st.integers(0, 99)
    new = 1000 + 100 * writer
    append = st.just(_appended((new, new + 1)))
    if skew:
        append = st.tuples(key, key).map(_appended)
    return st.one_of(
        append,
        key.map(lambda k: Step("delete", (f"id = {k}",))),
        st.integers(10, 90).map(lambda k: Step("delete", (f"id < {k}",))),
        key.map(lambda k: Step("update", ({"v": "v + 1000"},), (("where", f"id = {k}"),))),
        key.map(
            lambda k: Step(
                "merge_insert",
                (
                    pa.table(
                        {
                            "id": pa.array([k, new + 50], pa.int64()),
                            "v": pa.array([-k, 7], pa.int64()),
                        }
                    ),
                    "id",
                ),
            )
        ),
        st.just(Step("compact")),
        st.just(Step("add_columns", ({f"w{writer}": "id * 2"},))),
    )


@st.composite
def scenarios(draw: st.DrawFn, skew: bool = False) -> tuple[list[Step], list[int], bool]:
    n = draw(st.integers(2, 3))
    steps = [draw(_steps(i, skew=skew)) for i in range(n)]
    order = draw(st.permutations(range(n)))
    return steps, list(order), draw(st.booleans())


def _base(uri: str, stable: bool) -> None:
    data = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array(range(100), pa.int64())})
    lance.write_dataset(data, uri, max_rows_per_file=25, enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id = 3 or id = 80 or id = 41")


def _row_ids(uri: str) -> list[tuple[int, int]]:
    tbl = lance.dataset(uri).to_table(columns=["id"], with_row_id=True)
    return sorted(zip(tbl.column("id").to_pylist(), tbl.column("_rowid").to_pylist(), strict=True))


def outcome_matches(
    steps: list[Step], order: list[int], stable: bool, isolation: str = "snapshot"
) -> bool:
    """Plan every step at one version, commit them in ``order`` at ``isolation``; True
    when the table equals pylance's serial replay of the ones that landed."""
    with tempfile.TemporaryDirectory() as tmp:
        uri, oracle = str(Path(tmp) / "t.lance"), str(Path(tmp) / "o.lance")
        _base(uri, stable)
        shutil.copytree(uri, oracle)
        table = te.open(uri, isolation=isolation)
        planned = [s.plan(table) for s in steps]
        for i in order:
            try:
                commit(table._storage, planned[i], conflict_options=table.conflict_options)
            except RetryableConflictError:
                continue
            lance_apply(oracle, steps[i])
        if table_rows(uri) != table_rows(oracle):
            return False
        return not stable or _row_ids(uri) == _row_ids(oracle)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_every_landed_interleaving_equals_serial_pylance(
    scenario: tuple[list[Step], list[int], bool],
) -> None:
    steps, order, stable = scenario
    assert outcome_matches(steps, order, stable)



@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios(skew=True))
def test_under_serializable_every_history_equals_a_serial_one(
    scenario: tuple[list[Step], list[int], bool],
) -> None:
    """Appends may add rows another writer's predicate or keys match: at serializable
    isolation what lands still equals pylance's serial replay in commit order."""
    steps, order, stable = scenario
    assert outcome_matches(steps, order, stable, "serializable")


def test_snapshot_isolation_allows_the_write_skew_serializable_refuses() -> None:
    """The same property at snapshot isolation (Lance's) fails on a delete planned before
    an append of rows its predicate matches: the appended row survives the delete."""
    skew = ([Step("delete", ("id < 50",)), _appended((5, 6))], [1, 0], False)
    assert not outcome_matches(*skew)
    assert outcome_matches(*skew, isolation="serializable")

# ---- mutations: the property must notice a broken mapping or a lost carry-over ---------

_COMPACT_THEN_DELETES = [
    ([Step("delete", ("id = 60",)), Step("compact")], [1, 0], False),
    ([Step("delete", ("id = 30",)), Step("compact")], [1, 0], True),
    ([Step("delete", ("id < 20",)), Step("compact")], [1, 0], False),
]
_DELETE_THEN_COMPACTS = [(steps, [0, 1], stable) for steps, _, stable in _COMPACT_THEN_DELETES]


def test_the_unbroken_examples_hold() -> None:
    for steps, order, stable in _COMPACT_THEN_DELETES + _DELETE_THEN_COMPACTS:
        assert outcome_matches(steps, order, stable)


def test_a_shifted_address_mapping_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyroaring import BitMap

    from txn_engine.builder import remap

    real = remap.GroupMap.move

    def shifted(self: remap.GroupMap, fragment_id: int, offsets: BitMap) -> object:
        out = real(self, fragment_id, offsets)
        if out is None:
            return None
        return {j: BitMap(o + 1 for o in offs) for j, offs in out.items()}

    monkeypatch.setattr(remap.GroupMap, "move", shifted)
    assert not all(outcome_matches(*ex) for ex in _COMPACT_THEN_DELETES)


def test_a_lost_deletion_carry_over_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from txn_engine.conflicts import resolve

    def nothing_carried(group, latest, read_dv, next_id, read_version, new_id):  # type: ignore[no-untyped-def]
        return group, [], next_id

    monkeypatch.setattr(resolve, "_carry_group", nothing_carried)
    assert not all(outcome_matches(*ex) for ex in _DELETE_THEN_COMPACTS)
