"""The builder's operation handlers: every Operation type has one, and CreateIndex's own
validation rules (pylance 14.0.2 checks none of them; measured)."""

from __future__ import annotations

import typing
import uuid as uuid_mod
from collections.abc import Iterable

import attrs
import pytest

import txn_engine
from txn_engine import (
    CreateIndex,
    DataFile,
    Delete,
    Fragment,
    IndexDetails,
    IndexMetadata,
    LanceField,
    Overwrite,
    Project,
    ReserveFragments,
    Transaction,
)
from txn_engine.builder import (
    FRAG_REUSE_INDEX,
    HANDLERS,
    Handler,
    ManifestState,
    RuleContext,
    build_manifest,
    handler_for,
    validate,
)
from txn_engine.conflicts.detect import check
from txn_engine.conflicts.matrix import MATRIX
from txn_engine.errors import InvalidOperationError
from txn_engine.ops import OPERATION_KINDS, Operation, Rewrite, RewriteGroup

TS = 1_700_000_000_000_000_001
SCHEMA = (LanceField(0, -1, "a", "int64"), LanceField(1, -1, "b", "string"))


def create(n: int) -> ManifestState:
    frags = [
        Fragment(0, [DataFile(f"f{i}.lance", (0, 1), (0, 1), 2, 2, 100)], 10) for i in range(n)
    ]
    txn = Transaction(0, Overwrite(frags, SCHEMA))
    validate(None, txn)
    return build_manifest(None, txn, version=1, transaction_file="0-x.txn", timestamp_ns=TS)


def apply(state: ManifestState, op: Operation) -> ManifestState:
    txn = Transaction(state.manifest.version, op)
    validate(state, txn)
    return build_manifest(
        state, txn, version=state.manifest.version + 1, transaction_file="t", timestamp_ns=TS
    )


def index(name: str, fields: Iterable[int], bitmap: Iterable[int]) -> IndexMetadata:
    return IndexMetadata(
        uuid=str(uuid_mod.uuid4()),
        name=name,
        fields=tuple(fields),
        dataset_version=1,
        fragment_bitmap=frozenset(bitmap),
        index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
    )


def _operation_types() -> tuple[type[object], ...]:
    return typing.get_args(Operation)


# ---- the registry ------------------------------------------------------------------------------


def test_the_operation_union_and_the_kinds_agree() -> None:
    assert sorted(t.__name__ for t in _operation_types()) == sorted(OPERATION_KINDS)


@pytest.mark.parametrize("op_type", _operation_types(), ids=lambda t: t.__name__)
def test_every_operation_type_has_a_handler(op_type: type[object]) -> None:
    """Fails for an Operation type added without registering its handler."""
    handler = HANDLERS.get(op_type)
    assert handler is not None, f"no builder handler registered for {op_type.__name__}"
    # it changes the manifest one way or the other: in place (apply) or by copying a
    # whole other version (whole)
    cls = type(handler)
    assert cls.apply is not Handler.apply or cls.whole is not Handler.whole


def _policy_gaps(op_type: type[object], handler: Handler[object]) -> list[str]:
    """What a handler lacks of its operation type's validation and conflict policy."""
    gaps = []
    cls = type(handler)
    if cls.validate is Handler.validate:
        gaps.append("no validate (define it even to check nothing beyond the common steps)")
    kind = op_type.__name__
    for other in OPERATION_KINDS:
        for pair in ((kind, other), (other, kind)):
            if pair not in MATRIX:
                gaps.append(f"no matrix rule for {pair}")
    used = {
        MATRIX[(kind, o)].code
        for o in OPERATION_KINDS
        if (kind, o) in MATRIX and MATRIX[(kind, o)].is_predicate
    }
    wanted = used | set(handler.follow_up_rules)
    if set(handler.rules) != wanted:
        gaps.append(f"rules {sorted(handler.rules)} but its matrix row needs {sorted(wanted)}")
    for code, predicate in handler.rules.items():
        if not predicate.__module__.startswith("txn_engine.builder."):
            gaps.append(f"rule {code} is implemented outside the builder's handler modules")
    if "D1" in handler.rules and cls.rebase is Handler.rebase:
        gaps.append("rule D1 marks fragments to rebase but the handler has no rebase")
    return gaps


@pytest.mark.parametrize("op_type", _operation_types(), ids=lambda t: t.__name__)
def test_every_operation_type_has_validation_and_conflict_policy(op_type: type[object]) -> None:
    """Fails for an Operation type without its own validate, without matrix rules against
    every kind (both ways), or whose handler does not implement exactly the predicates of
    its matrix row (plus its follow-up rules)."""
    assert _policy_gaps(op_type, HANDLERS[op_type]) == []


def test_the_policy_check_notices_what_is_missing() -> None:
    """The completeness check above can fail: a handler without validate, without a rule
    of its row, or a kind without matrix rules is reported."""

    class Bare(Handler[Rewrite]):
        def apply(self, build: object, op: Rewrite) -> list[int] | None:  # type: ignore[override]
            return None

    gaps = _policy_gaps(Rewrite, Bare())
    assert any("no validate" in g for g in gaps)
    assert any("needs ['O1', 'W1', 'W2']" in g for g in gaps)

    class Vacuum:
        pass

    assert any("no matrix rule for ('Vacuum', 'Append')" in g for g in _policy_gaps(Vacuum, Bare()))


def test_detection_evaluates_the_rule_of_my_operation_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Conflict detection looks the cell's predicate up on the handler of my operation
    (nowhere else): replacing the handler's rule changes the outcome."""
    seen: list[tuple[str, str]] = []

    def recording(c: RuleContext) -> None:
        seen.append((c.mine.kind, c.other.kind))
        c.retry("recorded")

    handler = HANDLERS[Rewrite]
    frag = Fragment(5, [DataFile("r.lance", (0, 1), (0, 1), 2, 2, 100)], 10)
    mine = Transaction(1, Rewrite([RewriteGroup([frag], [])]))
    other = Transaction(1, Rewrite([RewriteGroup([attrs.evolve(frag, id=6)], [])]))
    assert check(mine, other, other_version=2).compatible  # W2: disjoint old fragments
    monkeypatch.setattr(handler, "rules", {**handler.rules, "W2": recording})
    result = check(mine, other, other_version=2)
    assert seen == [("Rewrite", "Rewrite")]
    assert [c.rule for c in result.conflicts] == ["W2"]


def test_lineage_facts_of_each_operation_type() -> None:
    """What the lineage check (a version right above ours must carry our change) reads
    from each handler: which types replace the table, edit config keys, and leave the
    index list or the schema as their base had them."""

    def having(attr: str) -> set[str]:
        return {t.__name__ for t, h in HANDLERS.items() if getattr(h, attr)}

    assert having("replaces_table") == {"Overwrite", "Restore", "Clone"}
    assert having("edits_config") == {"UpdateConfig"}
    assert having("keeps_indices") == {"Append", "UpdateConfig", "ReserveFragments", "UpdateBases"}
    assert having("keeps_fields") == having("keeps_indices") | {"CreateIndex", "Delete"}
    # only_adds lets the builder skip the deletion-file scan of every fragment
    assert having("only_adds") == {"Append"}


def test_the_registry_holds_nothing_but_operation_types() -> None:
    assert set(HANDLERS) == set(_operation_types())


def test_an_unknown_operation_type_is_refused() -> None:
    @attrs.frozen
    class Vacuum:
        pass

    with pytest.raises(InvalidOperationError, match="unknown operation Vacuum"):
        handler_for(Vacuum())
    txn = Transaction(1, ReserveFragments(0))
    object.__setattr__(txn, "operation", Vacuum())  # Transaction refuses it; force it in
    with pytest.raises(InvalidOperationError, match="unknown operation Vacuum"):
        validate(create(1), txn)
    with pytest.raises(InvalidOperationError, match="unknown operation Vacuum"):
        build_manifest(create(1), txn, version=2, transaction_file="t", timestamp_ns=TS)


def test_only_overwrite_and_clone_create_a_dataset() -> None:
    creators = {t.__name__ for t, h in HANDLERS.items() if h.creates}
    assert creators == {"Overwrite", "Clone"}
    assert {t.__name__ for t, h in HANDLERS.items() if h.only_creates} == {"Clone"}


# ---- CreateIndex validation --------------------------------------------------------------------


def _check(state: ManifestState, op: CreateIndex) -> None:
    validate(state, Transaction(state.manifest.version, op))


def test_create_index_over_fragments_that_exist_is_accepted() -> None:
    s = create(3)
    after = apply(s, CreateIndex([index("i", [0], [0, 1, 2])]))
    assert [i.name for i in after.indices] == ["i"]


def test_create_index_over_a_fragment_id_never_written_is_refused() -> None:
    s = create(3)  # fragments 0, 1, 2
    with pytest.raises(InvalidOperationError, match=r"covers fragments \[7\] that never existed"):
        _check(s, CreateIndex([index("i", [0], [0, 7])]))


def test_create_index_over_reserved_or_deleted_fragments_is_accepted() -> None:
    """Ids up to the high-water mark existed (or are reserved): a writer that read them
    may name them; only ids beyond it are refused."""
    s = apply(create(3), Delete(deleted_fragment_ids=[2]))
    _check(s, CreateIndex([index("i", [0], [0, 1, 2])]))  # 2 existed
    with pytest.raises(InvalidOperationError, match="never existed"):
        _check(s, CreateIndex([index("i", [0], [3])]))
    s = apply(s, ReserveFragments(2))  # ids 3 and 4 reserved
    _check(s, CreateIndex([index("i", [0], [3, 4])]))


def test_create_index_on_a_dataset_without_fragments_refuses_any_bitmap() -> None:
    s = create(0)
    _check(s, CreateIndex([index("i", [0], [])]))
    with pytest.raises(InvalidOperationError, match=r"covers fragments \[0\]"):
        _check(s, CreateIndex([index("i", [0], [0])]))


def test_create_index_on_a_field_never_in_the_schema_is_refused() -> None:
    s = create(3)  # fields 0 and 1
    with pytest.raises(InvalidOperationError, match=r"on field ids \[9\]"):
        _check(s, CreateIndex([index("i", [9], [0])]))


def test_create_index_on_a_negative_field_id_is_refused() -> None:
    with pytest.raises(InvalidOperationError, match=r"on field ids \[-1\]"):
        _check(create(3), CreateIndex([index("i", [-1], [0])]))


def test_create_index_on_a_field_dropped_concurrently_is_accepted_and_pruned_later() -> None:
    """A Project that landed after the writer read dropped the field: the index is
    committed (pylance 14 does too) and goes with the next operation that prunes indices."""
    s = apply(create(3), Project([SCHEMA[0]]))
    assert [f.id for f in s.manifest.fields] == [0]
    s = apply(s, CreateIndex([index("on_b", [1], [0])]))
    assert [i.name for i in s.indices] == ["on_b"]
    s = apply(s, Delete(deleted_fragment_ids=[0]))
    assert s.indices == ()


def test_create_index_of_a_system_index_skips_the_field_check() -> None:
    fri = index(FRAG_REUSE_INDEX, [], [0])
    _check(create(3), CreateIndex([fri]))
    _check(create(3), CreateIndex([attrs.evolve(fri, fields=(99,))]))


def test_create_index_giving_one_uuid_to_two_new_indices_is_refused() -> None:
    a = index("i", [0], [0])
    b = attrs.evolve(index("j", [1], [1]), uuid=a.uuid.upper())
    with pytest.raises(InvalidOperationError, match=f"uuid {uuid_mod.UUID(a.uuid)} is given"):
        _check(create(3), CreateIndex([a, b]))


def test_create_index_re_adding_an_existing_uuid_replaces_it() -> None:
    first = index("i", [0], [0])
    s = apply(create(3), CreateIndex([first]))
    s = apply(s, CreateIndex([attrs.evolve(first, fragment_bitmap=frozenset({0, 1}))]))
    assert len(s.indices) == 1


def test_create_index_removing_an_absent_uuid_is_accepted() -> None:
    """A concurrent CreateIndex may have removed it already."""
    gone = index("i", [0], [0])
    s = apply(create(3), CreateIndex([index("j", [1], [0])], [gone]))
    assert [i.name for i in s.indices] == ["j"]


def test_create_index_field_rules_cover_every_new_index() -> None:
    ok = index("i", [0], [0])
    bad = IndexMetadata(str(uuid_mod.uuid4()), "j", (5,), 1, frozenset({0}))
    with pytest.raises(InvalidOperationError, match="'j'"):
        _check(create(3), CreateIndex([ok, bad]))


# ---- UpdateMemWalState -------------------------------------------------------------------------


def test_update_mem_wal_state_is_not_part_of_the_public_api() -> None:
    """validate always refuses it (pylance 14's MemWAL layout differs), so it is not
    offered: absent from txn_engine.__all__ (the type stays in txn_engine.ops)."""
    assert "UpdateMemWalState" not in txn_engine.__all__
    assert "UpdateMemWalState" in txn_engine.ops.__all__
