"""Detection over attrs operations: the 29 measured pylance-14 scenarios, every predicate.

``MEASURED`` is the pylance 14.0.2 conflict matrix, read from ``tests/data/pylance14_matrix.json``
(rows: mine = B, committed second; columns: other = A, committed first; Y lands, R retryable,
X incompatible, E another error raised while building the manifest -- detection itself finds
no conflict there).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pyroaring import BitMap64

from txn_engine.builder import FRAG_REUSE_INDEX
from txn_engine.conflicts.detect import (
    Conflict,
    check,
    detect,
    modified_fragment_ids,
    unreadable_conflict,
)
from txn_engine.conflicts.matrix import MATRIX, PREDICATES, Outcome
from txn_engine.errors import UnknownOperationError
from txn_engine.model import (
    BasePath,
    DataFile,
    DeletionFile,
    Fragment,
    IndexMetadata,
    LanceField,
    MemWal,
    MemWalId,
)
from txn_engine.ops import (
    OPERATION_KINDS,
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)
from txn_engine.transaction import Transaction

READ_VERSION = 1

#: The measured matrix, one source shared with tests/integration/test_matrix_pylance.py.
MEASURED: dict[str, str] = json.loads(
    (Path(__file__).parents[1] / "data" / "pylance14_matrix.json").read_text()
)["rows"]
ORDER = list(MEASURED)

SCHEMA = (
    LanceField(0, -1, "id", "int64", nullable=True),
    LanceField(1, -1, "val", "int64", nullable=True),
)


def _file(name: str, fields: tuple[int, ...] = (0, 1)) -> DataFile:
    return DataFile(f"{name}.lance", fields, tuple(range(len(fields))), 2, 2, 100)


def frag(fid: int, *, dv: int | None = None, extra: bool = False) -> Fragment:
    files = (_file(f"f{fid}"),) + ((_file(f"x{fid}", (2,)),) if extra else ())
    deletion = None if dv is None else DeletionFile(0, READ_VERSION, dv, 2)
    return Fragment(fid, files, 10, deletion)


def new_frag() -> Fragment:
    return Fragment(0, (_file(uuid.uuid4().hex),), 10)


def index(name: str, fields: tuple[int, ...], bitmap: tuple[int, ...] | None) -> IndexMetadata:
    return IndexMetadata(str(uuid.uuid4()), name, fields, READ_VERSION, bitmap)


def catalogue() -> dict[str, Operation]:
    """The 29 measured operations over a 4-fragment dataset (fields id=0, val=1)."""
    cfg = UpdateConfig
    return {
        "Append": Append([new_frag()]),
        "Delete0": Delete([frag(0, dv=11)], predicate="id < 3"),
        "Delete0b": Delete([frag(0, dv=12)], predicate="id in (7, 8)"),
        "Delete1": Delete([frag(1, dv=13)], predicate="id >= 10 and id < 13"),
        "DeleteFrag0": Delete(deleted_fragment_ids=[0], predicate="id < 10"),
        "Update0": Update(updated_fragments=[frag(0, dv=14)], new_fragments=[new_frag()]),
        "Update2": Update(updated_fragments=[frag(2, dv=15)], new_fragments=[new_frag()]),
        "Overwrite": Overwrite([new_frag()], SCHEMA),
        "CreateIndex01": CreateIndex([index("id_idx", (0,), (0, 1))]),
        "CreateIndex23": CreateIndex([index("id_idx", (0,), (2, 3))]),
        "CreateIdxVal01": CreateIndex([index("val_idx", (1,), (0, 1))]),
        "CreateIdxIdB01": CreateIndex([index("id_idx_b", (0,), (0, 1))]),
        "Rewrite01": Rewrite([RewriteGroup([frag(0), frag(1)], [new_frag()])]),
        "Rewrite23": Rewrite([RewriteGroup([frag(2), frag(3)], [new_frag()])]),
        "Merge": Merge([frag(i, extra=True) for i in range(4)], (*SCHEMA, _extra())),
        "MergeNN": Merge(
            [frag(i, extra=True) for i in range(4)], (*SCHEMA, _extra()), preserves_nullability=True
        ),
        "Project": Project(SCHEMA[:1]),
        "ProjectNN": Project(SCHEMA[:1], preserves_nullability=True),
        "Restore": Restore(READ_VERSION),
        "Cfg_k1": cfg(config_updates=UpdateMap({"k1": "v"})),
        "Cfg_k2": cfg(config_updates=UpdateMap({"k2": "v"})),
        "Cfg_k1del": cfg(config_updates=UpdateMap({"k1": None})),
        "CfgSchemaMeta": cfg(schema_metadata_updates=UpdateMap({"sm": "v"})),
        "CfgTableMeta": cfg(table_metadata_updates=UpdateMap({"tm": "v"})),
        "CfgTableMeta2": cfg(table_metadata_updates=UpdateMap({"tm2": "v"})),
        "CfgFieldMeta": cfg(field_metadata_updates={1: UpdateMap({"fm": "v"})}),
        "DataRepl0": DataReplacement([DataReplacementGroup(0, _file("r0", (1,)))]),
        "DataRepl2": DataReplacement([DataReplacementGroup(2, _file("r2", (1,)))]),
        "DataReplId0": DataReplacement([DataReplacementGroup(0, _file("ri0", (0,)))]),
    }


def _extra() -> LanceField:
    return LanceField(2, -1, "extra", "int64")


OPS = catalogue()


def txn(op: Operation, read_version: int = READ_VERSION) -> Transaction:
    return Transaction(read_version, op)


def outcome_code(conflicts: tuple[Conflict, ...]) -> str:
    if not conflicts:
        return "Y"
    return "R" if all(c.retryable for c in conflicts) else "X"


def test_catalogue_matches_the_measured_order() -> None:
    assert list(OPS) == ORDER
    assert len(ORDER) == 29
    assert all(len(row) == len(ORDER) for row in MEASURED.values())


@pytest.mark.parametrize("mine", ORDER)
def test_measured_pylance14_matrix_row(mine: str) -> None:
    """Every (mine, other) cell of the measured matrix, at the detection level."""
    got = []
    for other in ORDER:
        conflicts = detect(txn(OPS[mine]), txn(OPS[other]), other_version=2)
        got.append(outcome_code(conflicts))
    expected = MEASURED[mine].replace("E", "Y")  # E: the manifest build fails, not detection
    assert "".join(got) == expected, list(zip(ORDER, got, expected, strict=True))


def test_conflict_values_carry_context() -> None:
    (c,) = detect(txn(OPS["Delete0"]), txn(OPS["Delete0b"]), other_version=7)
    assert c.outcome is Outcome.RETRYABLE
    assert (c.rule, c.version, c.read_version, c.mine, c.other) == ("D1", 7, 1, "Delete", "Delete")
    assert c.fragment_ids == {0}
    assert "preempted" in c.reason
    assert "replan_and_commit" in c.remedy
    (x,) = detect(txn(OPS["Append"]), txn(OPS["Overwrite"]), other_version=3)
    assert x.outcome is Outcome.INCOMPATIBLE
    assert not x.retryable
    assert "incompatible" in x.reason
    assert "never land" in x.remedy
    (k,) = detect(txn(OPS["Cfg_k1"]), txn(OPS["Cfg_k1del"]), other_version=3)
    assert k.keys == {"k1"}
    (i,) = detect(txn(OPS["CreateIndex01"]), txn(OPS["CreateIndex23"]), other_version=3)
    assert i.index_names == {"id_idx"}
    (f,) = detect(txn(OPS["DataRepl0"]), txn(OPS["ProjectNN"]), other_version=3)
    assert f.field_ids == {1}
    assert f.fragment_ids == {0}


def test_every_predicate_has_an_implementation() -> None:
    from txn_engine.conflicts import detect as d

    assert set(d._PREDICATES) == set(PREDICATES)


def test_modified_fragment_ids() -> None:
    assert modified_fragment_ids(OPS["Delete0"]) == {0}
    assert modified_fragment_ids(OPS["DeleteFrag0"]) == {0}
    assert modified_fragment_ids(OPS["Rewrite23"]) == {2, 3}
    assert modified_fragment_ids(OPS["DataReplId0"]) == {0}
    assert modified_fragment_ids(OPS["Merge"]) == {0, 1, 2, 3}
    assert modified_fragment_ids(OPS["Append"]) == frozenset()


# ---- D1 with affected rows ------------------------------------------------------------------


def _addr(fid: int, *offsets: int) -> BitMap64:
    return BitMap64([fid << 32 | o for o in offsets])


def _initial(fid: int) -> Fragment | None:
    return frag(fid) if fid < 4 else None


def test_d1_with_affected_rows_rebases_instead_of_conflicting() -> None:
    mine = txn(Delete([frag(0, dv=21)], affected_rows=_addr(0, 7, 8)))
    result = check(mine, txn(OPS["Delete0"]), other_version=2, initial_fragments=_initial)
    assert result.compatible
    assert result.rebase_fragment_ids == {0}


def test_d1_with_affected_rows_but_no_lookup_is_retryable() -> None:
    mine = txn(Delete([frag(0, dv=21)], affected_rows=_addr(0, 7)))
    (c,) = detect(mine, txn(OPS["Delete0"]), other_version=2)
    assert c.retryable


def test_d1_whole_fragment_delete_discards_affected_rows() -> None:
    mine = txn(Delete(deleted_fragment_ids=[0], affected_rows=_addr(0, *range(10))))
    (c,) = detect(mine, txn(OPS["Delete0"]), other_version=2, initial_fragments=_initial)
    assert c.retryable


def test_d1_other_rewrote_files_or_removed_fragment() -> None:
    mine = txn(Update(updated_fragments=[frag(0, dv=21)], affected_rows=_addr(0, 1)))
    rewritten = Fragment(0, (_file("new-files"),), 10)
    other = txn(Update(updated_fragments=[rewritten]))
    (c,) = detect(mine, other, other_version=2, initial_fragments=_initial)
    assert c.retryable
    assert "data files" in c.reason
    (c,) = detect(mine, txn(OPS["DeleteFrag0"]), other_version=2, initial_fragments=_initial)
    assert c.retryable
    assert "removed" in c.reason


def test_d1_disjoint_fragments_and_unchanged_deletion_file() -> None:
    mine = txn(Delete([frag(0, dv=21)], affected_rows=_addr(0, 1)))
    assert check(mine, txn(OPS["Delete1"]), other_version=2).compatible
    same = txn(Delete([frag(0)]))  # other "updated" fragment 0 without changing it
    result = check(mine, same, other_version=2, initial_fragments=_initial)
    assert result.compatible
    assert result.rebase_fragment_ids == frozenset()


# ---- predicates not covered by the measured scenarios --------------------------------------


def test_i1_index_without_bitmap_is_retryable_against_rewrite() -> None:
    mine = txn(CreateIndex([index("x", (0,), None)]))
    (c,) = detect(mine, txn(OPS["Rewrite23"]), other_version=2)
    assert c.retryable
    drop_only = txn(CreateIndex(removed_indices=[index("x", (0,), (0,))]))
    assert detect(drop_only, txn(OPS["Rewrite01"]), other_version=2) == ()


def test_w1_fragment_reuse_index() -> None:
    fri = index(FRAG_REUSE_INDEX, (), (0, 1))
    ok = txn(CreateIndex([fri], [index(FRAG_REUSE_INDEX, (), (0,))]))
    assert detect(txn(OPS["Rewrite01"]), ok, other_version=2) == ()
    bad = txn(CreateIndex([fri, index("a", (0,), (5,))]))
    (c,) = detect(txn(OPS["Rewrite01"]), bad, other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
    no_bitmap = txn(CreateIndex([index("a", (0,), None)]))
    (c,) = detect(txn(OPS["Rewrite23"]), no_bitmap, other_version=2)
    assert c.retryable


def test_i1_and_w1_name_the_moved_fragments_from_either_side() -> None:
    """Index vs rewrite, both orders: the covered fragments the rewrite moved, or the index
    without a fragment bitmap, each with its own reason."""
    (w1,) = detect(txn(OPS["Rewrite01"]), txn(OPS["CreateIndex01"]), other_version=2)
    assert (w1.rule, w1.fragment_ids) == ("W1", {0, 1})
    assert "fragment(s) [0, 1] were indexed concurrently" in w1.reason
    (i1,) = detect(txn(OPS["CreateIndex01"]), txn(OPS["Rewrite01"]), other_version=2)
    assert (i1.rule, i1.fragment_ids) == ("I1", {0, 1})
    assert "the rewrite moved indexed fragment(s) [0, 1]" in i1.reason
    assert detect(txn(OPS["CreateIndex23"]), txn(OPS["Rewrite01"]), other_version=2) == ()
    no_bitmap = txn(CreateIndex([index("a", (0,), None)]))
    (c,) = detect(no_bitmap, txn(OPS["Rewrite23"]), other_version=2)
    assert (c.rule, c.retryable, c.index_names) == ("I1", True, {"a"})
    assert "a new index has no fragment bitmap" in c.reason


def test_overwrite_config_keys_k_and_k2() -> None:
    ow_k1 = txn(Overwrite([new_frag()], SCHEMA, config_upsert_values={"k1": "a"}))
    (c,) = detect(txn(OPS["Overwrite"]), ow_k1, other_version=2)
    assert c.retryable  # K2 without a key clash: retryable (pylance 14)
    (c,) = detect(ow_k1, ow_k1, other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
    assert c.keys == {"k1"}
    (c,) = detect(ow_k1, txn(OPS["Cfg_k1del"]), other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
    assert detect(ow_k1, txn(OPS["Cfg_k2"]), other_version=2) == ()
    (c,) = detect(txn(OPS["Cfg_k1"]), ow_k1, other_version=2)  # C1 via key clash
    assert c.outcome is Outcome.INCOMPATIBLE


def test_c2_details() -> None:
    both_del = txn(UpdateConfig(config_updates=UpdateMap({"k1": None})))
    assert detect(both_del, both_del, other_version=2) == ()
    f1 = txn(UpdateConfig(field_metadata_updates={1: UpdateMap({"a": "b"})}))
    f0 = txn(UpdateConfig(field_metadata_updates={0: UpdateMap({"a": "b"})}))
    assert detect(f1, f0, other_version=2) == ()
    (c,) = detect(f1, f1, other_version=2)
    assert c.field_ids == {1}
    tm_del = txn(UpdateConfig(table_metadata_updates=UpdateMap({"tm": None})))
    (c,) = detect(tm_del, txn(OPS["CfgTableMeta"]), other_version=2)
    assert c.keys == {"tm"}


def test_p1_same_fragment_different_fields_is_compatible() -> None:
    assert detect(txn(OPS["DataRepl0"]), txn(OPS["DataReplId0"]), other_version=2) == ()


def test_e2_update_that_removed_the_fragment_is_incompatible() -> None:
    upd = txn(Update(removed_fragment_ids=[0], new_fragments=[new_frag()]))
    (c,) = detect(txn(OPS["DataRepl0"]), upd, other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE


def _wal(region: str, gen: int = 1) -> MemWal:
    return MemWal(MemWalId(region, gen))


def test_mem_wal_rules() -> None:
    merging = txn(Update(updated_fragments=[frag(3, dv=1)], mem_wal_to_merge=_wal("a")))
    plain = txn(Update(updated_fragments=[frag(3, dv=1)]))
    add_a = txn(UpdateMemWalState(added=[_wal("a")]))
    add_b = txn(UpdateMemWalState(added=[_wal("b")]))
    trim = txn(UpdateMemWalState(removed=[_wal("a")]))
    (c,) = detect(merging, add_a, other_version=2)  # M1
    assert c.outcome is Outcome.INCOMPATIBLE
    assert detect(merging, add_b, other_version=2) == ()
    assert detect(add_a, merging, other_version=2) == ()  # M2
    (c,) = detect(add_a, plain, other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
    (c,) = detect(add_a, add_a, other_version=2)  # M3
    assert c.keys == {"a/1"}
    assert detect(add_a, add_b, other_version=2) == ()
    assert detect(add_a, trim, other_version=2) == ()
    two = txn(UpdateMemWalState(added=[_wal("a"), _wal("c")]))
    (c,) = detect(two, add_b, other_version=2)
    assert "more than one" in c.reason


def test_b1_update_bases() -> None:
    a = txn(UpdateBases([BasePath(1, "s3://x", "x")]))
    assert detect(a, txn(UpdateBases([BasePath(2, "s3://y", "y")])), other_version=2) == ()
    for other in (
        UpdateBases([BasePath(1, "s3://y", "y")]),
        UpdateBases([BasePath(0, "s3://y", "x")]),
        UpdateBases([BasePath(0, "s3://x", None)]),
    ):
        (c,) = detect(a, txn(other), other_version=2)
        assert c.outcome is Outcome.INCOMPATIBLE
    zero = txn(UpdateBases([BasePath(0, "s3://z")]))
    assert detect(zero, txn(UpdateBases([BasePath(0, "s3://w")])), other_version=2) == ()


def test_unmeasured_kinds_follow_the_lance_matrix() -> None:
    rsv = txn(ReserveFragments(3))
    clone = txn(Clone(1, "/src"))
    for other in OPS.values():
        kind = type(other).__name__
        expected = MATRIX[("ReserveFragments", kind)].outcome
        got = outcome_code(detect(rsv, txn(other), other_version=2))
        assert got == {Outcome.COMPATIBLE: "Y", Outcome.INCOMPATIBLE: "X"}[expected]
        assert detect(clone, txn(other), other_version=2) == ()
    for mine in OPS.values():  # committed Clone / Reserve / Bases never conflict with these
        for other in (rsv, clone, txn(UpdateBases([BasePath(0, "/b")]))):
            assert detect(txn(mine), other, other_version=2) == ()


def test_every_kind_pair_is_evaluable() -> None:
    """Detection never raises for any ordered pair of kinds (one example op per kind)."""
    examples: dict[str, Operation] = {
        "Append": OPS["Append"],
        "Delete": OPS["Delete0"],
        "Overwrite": OPS["Overwrite"],
        "CreateIndex": OPS["CreateIndex01"],
        "Rewrite": OPS["Rewrite01"],
        "Merge": OPS["Merge"],
        "Restore": OPS["Restore"],
        "ReserveFragments": ReserveFragments(1),
        "Update": OPS["Update0"],
        "Project": OPS["Project"],
        "UpdateConfig": OPS["CfgFieldMeta"],
        "DataReplacement": OPS["DataRepl0"],
        "UpdateMemWalState": UpdateMemWalState(added=[_wal("a")]),
        "Clone": Clone(1, "/src"),
        "UpdateBases": UpdateBases([BasePath(0, "/b")]),
    }
    assert set(examples) == set(OPERATION_KINDS)
    for a in OPERATION_KINDS:
        for b in OPERATION_KINDS:
            conflicts = detect(txn(examples[a]), txn(examples[b]), other_version=2)
            rule = MATRIX[(a, b)]
            if rule.outcome is not None:
                assert (
                    outcome_code(conflicts)
                    == {
                        Outcome.COMPATIBLE: "Y",
                        Outcome.RETRYABLE: "R",
                        Outcome.INCOMPATIBLE: "X",
                    }[rule.outcome]
                )
            assert all(c.rule == rule.code for c in conflicts)


def test_unreadable_conflict() -> None:
    err = UnknownOperationError("no operation")
    c = unreadable_conflict(txn(OPS["Append"]), 5, err, other_uuid="u")
    assert c.outcome is Outcome.INCOMPATIBLE
    assert (c.rule, c.version, c.other, c.other_uuid) == ("UNREADABLE", 5, None, "u")
    assert "version 5" in c.reason
    assert "UnknownOperationError" in c.reason
    assert "show 5" in c.remedy


def test_pair_without_a_rule_is_incompatible() -> None:
    """An operation kind newer than the matrix never slips through as compatible."""

    class DataOverlay(Append):  # stands in for a kind this matrix has no row for
        pass

    mine = txn(DataOverlay([new_frag()]))
    assert mine.kind == "DataOverlay"
    (c,) = detect(mine, txn(OPS["Append"]), other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
    assert c.rule == "UNKNOWN"
    (c,) = detect(txn(OPS["Append"]), mine, other_version=2)
    assert c.outcome is Outcome.INCOMPATIBLE
