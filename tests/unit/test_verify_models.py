"""The reference models and journals of txn_engine.testing: they agree with correct
histories and catch each kind of wrong one (lost deletion, resurrected rows, a rewrite
that changes rows, a landed rejected commit, an acknowledged commit that is missing)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pyarrow as pa
import pytest
from hypothesis import given, settings
from pyroaring import BitMap

from txn_engine.commit import commit
from txn_engine.format.deletion import write_deletion_vector
from txn_engine.format.io import read_manifest
from txn_engine.format.schema import arrow_to_lance_fields, fields_to_arrow
from txn_engine.model import DeletionFile, Fragment, LanceField
from txn_engine.ops import Append, Delete, Overwrite, Rewrite, RewriteGroup, UpdateConfig, UpdateMap
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.journal import (
    Journal,
    check_history,
    effect_from_json,
    effect_to_json,
    read_journals,
)
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import (
    AddRows,
    Contents,
    EditConfig,
    EffectError,
    HistoryModel,
    IntentModel,
    NoRowChange,
    RemoveRows,
    ReplaceTable,
    RestoreVersion,
    SetValues,
    SyntheticRows,
    apply_effect,
    read_contents,
)
from txn_engine.testing.schemas import arrow_schemas, lance_field_schemas
from txn_engine.transaction import Transaction

BASE = Contents.of([(1, 0), (2, 0), (3, 0)], {"k": "v"})


def test_apply_effect_semantics() -> None:
    assert apply_effect(BASE, AddRows([(4, 7)])).by_rid == {1: 0, 2: 0, 3: 0, 4: 7}
    assert apply_effect(BASE, RemoveRows([2])).by_rid == {1: 0, 3: 0}
    assert apply_effect(BASE, SetValues([(3, 9)])).by_rid == {1: 0, 2: 0, 3: 9}
    replaced = apply_effect(BASE, ReplaceTable([(8, 1)], (("o", "1"),)))
    assert replaced == Contents.of([(8, 1)], {"k": "v", "o": "1"})
    assert apply_effect(BASE, EditConfig((("k", None), ("n", "1")))).config_dict == {"n": "1"}
    assert apply_effect(BASE, NoRowChange()) is BASE
    older = Contents.of([(5, 5)])
    assert apply_effect(BASE, RestoreVersion(2), {2: older}) is older


@pytest.mark.parametrize(
    "effect",
    [AddRows([(1, 0)]), RemoveRows([9]), SetValues([(9, 1)]), RestoreVersion(3)],
)
def test_apply_effect_refuses_what_a_serial_execution_cannot_do(effect: object) -> None:
    with pytest.raises(EffectError):
        apply_effect(BASE, effect, {})  # type: ignore[arg-type]


def test_contents_difference_names_what_differs() -> None:
    actual = Contents.of([(1, 0), (1, 0), (3, 5), (4, 0)], {"k": "w"})
    diff = BASE.difference(actual)
    assert diff is not None
    parts = (
        "present twice: [1]",
        "1 rows lost (rids [2])",
        "unexpected rows (rids [4])",
        "rid 3: 0 != 5",
        "config",
    )
    for part in parts:
        assert part in diff
    assert BASE.difference(BASE) is None


def test_intent_model_folds_in_version_order() -> None:
    model = IntentModel(1, BASE)
    model.land(2, RemoveRows([1]))
    model.land(3, RestoreVersion(1))
    assert model.contents() == BASE
    with pytest.raises(EffectError):
        model.land(5, NoRowChange())


def _history(storage: MemoryStorage, rows: SyntheticRows) -> None:
    first = (rows.fragment([(0, 0), (1, 0), (2, 0)]), rows.fragment([(3, 0), (4, 0)]))
    commit(storage, Transaction(0, Overwrite(first, SCHEMA)))
    commit(storage, Transaction(1, Append((rows.fragment([(5, 0)]),))))
    frag0 = Fragment.from_proto(read_manifest(storage)[1].manifest.fragments[0])
    dv = DeletionFile.from_proto(write_deletion_vector(storage, 0, 2, BitMap([1])))
    commit(
        storage, Transaction(2, Delete(updated_fragments=(attrs.evolve(frag0, deletion_file=dv),)))
    )
    commit(storage, Transaction(3, UpdateConfig(config_updates=UpdateMap({"a": "1"}))))


def test_history_model_agrees_with_a_correct_history() -> None:
    storage, rows = MemoryStorage(), SyntheticRows()
    _history(storage, rows)
    model = HistoryModel(storage, rows)
    assert model.advance() == []
    assert model.contents() == Contents.of([(0, 0), (2, 0), (3, 0), (4, 0), (5, 0)], {"a": "1"})
    assert model.contents() == read_contents(storage, rows)


def test_history_model_finds_a_lost_deletion() -> None:
    storage, rows = MemoryStorage(), SyntheticRows()
    _history(storage, rows)
    frag0 = Fragment.from_proto(read_manifest(storage)[1].manifest.fragments[0])
    # a later Delete whose deletion vector forgot offset 1
    dv = DeletionFile.from_proto(write_deletion_vector(storage, 0, 4, BitMap([2])))
    commit(
        storage, Transaction(4, Delete(updated_fragments=(attrs.evolve(frag0, deletion_file=dv),)))
    )
    findings = HistoryModel(storage, rows).advance()
    assert any("deletion lost" in f for f in findings), findings


def test_history_model_finds_a_rewrite_that_changes_rows() -> None:
    storage, rows = MemoryStorage(), SyntheticRows()
    _history(storage, rows)
    frag1 = Fragment.from_proto(read_manifest(storage)[1].manifest.fragments[1])
    bad = rows.fragment([(3, 0)])  # row 4 vanishes
    commit(storage, Transaction(4, Rewrite((RewriteGroup((frag1,), (bad,)),))))
    findings = HistoryModel(storage, rows).advance()
    assert any("does not preserve" in f for f in findings), findings


# ---- journals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "effect",
    [
        AddRows([(1, 2)]),
        RemoveRows([3]),
        SetValues([(4, 5)]),
        ReplaceTable([(6, 7)], (("a", "b"),)),
        RestoreVersion(3),
        EditConfig((("k", None), ("j", "x"))),
        NoRowChange("compaction"),
    ],
)
def test_effects_round_trip_through_json(effect: object) -> None:
    assert effect_from_json(effect_to_json(effect)) == effect  # type: ignore[arg-type]


def _journaled_run(tmp_path: Path) -> tuple[MemoryStorage, SyntheticRows, Path]:
    storage = MemoryStorage()
    rows = SyntheticRows()
    path = tmp_path / "w0.jsonl"
    seed = rows.fragment([(0, 0), (1, 0)])
    commit(storage, Transaction(0, Overwrite((seed,), SCHEMA)))
    with Journal(path) as journal:
        new = [(10, 0), (11, 0)]
        frag = rows.fragment(new)
        txn = Transaction(1, Append((frag,)))
        journal.intent(txn.uuid, AddRows(new), {frag.files[0].path: new})
        journal.ack(txn.uuid, commit(storage, txn).version)
        txn = Transaction(2, UpdateConfig(config_updates=UpdateMap({"a": "1"})))
        journal.intent(txn.uuid, EditConfig((("a", "1"),)))
        commit(storage, txn)  # landed, never acknowledged (the writer "died")
    return storage, rows, path


def _seed_path(storage: MemoryStorage) -> str:
    return read_manifest(storage, 1)[1].manifest.fragments[0].files[0].path


def test_check_history_accepts_a_journaled_run(tmp_path: Path) -> None:
    storage, _, path = _journaled_run(tmp_path)
    summary = read_journals([path])
    summary.rows.register(_seed_path(storage), [(0, 0), (1, 0)])
    check = check_history(storage, summary, first_contents=Contents.of([(0, 0), (1, 0)]))
    assert check.ok, check.findings
    assert check.versions == 3
    assert check.landed_unacknowledged == 1
    assert check.expected == Contents.of([(0, 0), (1, 0), (10, 0), (11, 0)], {"a": "1"})


def test_check_history_finds_foreign_versions_and_false_acknowledgements(tmp_path: Path) -> None:
    storage, rows, path = _journaled_run(tmp_path)
    # another (journal-less) writer appends rid 99; one journal claims an ack that never landed
    commit(storage, Transaction(3, Append((rows.fragment([(99, 0)]),))))
    with path.open("a") as f:
        f.write('{"t":"ack","uuid":"never-landed","version":9}\n{"t":"ack",')  # torn last line
    summary = read_journals([path])
    summary.rows.register(_seed_path(storage), [(0, 0), (1, 0)])
    first = Contents.of([(0, 0), (1, 0)])
    check = check_history(storage, summary, first_contents=first, fallback_rows=rows)
    text = " ".join(check.findings)
    assert "is in no journal" in text
    assert "never-landed" in text
    # declared foreign rids are fine
    allowed = check_history(
        storage, summary, first_contents=first, fallback_rows=rows, foreign=lambda r: r >= 99
    )
    assert [f for f in allowed.findings if "never-landed" not in f] == []
    assert allowed.foreign_versions == 1


# ---- schema strategies of txn_engine.testing --------------------------------------------------


@settings(max_examples=40)
@given(schema=arrow_schemas(with_rid=True))
def test_schema_strategies_give_storable_schemas(schema: pa.Schema) -> None:
    fields = arrow_to_lance_fields(schema)
    assert fields[0].name == "rid"
    assert [f.id for f in fields] == list(range(len(fields)))
    assert fields_to_arrow([f.to_proto() for f in fields], {}) == schema


@settings(max_examples=10)
@given(fields=lance_field_schemas(max_columns=3))
def test_lance_field_schemas_commit_as_a_new_dataset(fields: tuple[LanceField, ...]) -> None:
    storage = MemoryStorage()
    commit(storage, Transaction(0, Overwrite((), fields)))
    assert len(read_manifest(storage)[1].manifest.fields) == len(fields)
