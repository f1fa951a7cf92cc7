"""The manifest builder, operation by operation, against the rules of lance-format.md §6
(as corrected by what pylance 14.0.2 measurably does; see the integration differential
tests). Operations pylance cannot express (ReserveFragments, UpdateMemWalState, Clone,
UpdateBases) are pinned here."""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Iterable

import attrs
import pytest
from pyroaring import BitMap

import txn_engine
from txn_engine import (
    Append,
    BasePath,
    Clone,
    CreateIndex,
    DataFile,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    DeletionFile,
    Fragment,
    IndexDetails,
    IndexMetadata,
    LanceField,
    MemWal,
    MemWalId,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    RewrittenIndex,
    Transaction,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)
from txn_engine._proto import table_pb2
from txn_engine.builder import (
    DEFAULT_DATA_FORMAT,
    MEM_WAL_INDEX,
    ManifestState,
    build_manifest,
    find_fragment_index,
    max_fragment_id,
    retain_relevant_indices,
    validate,
)
from txn_engine.errors import InvalidOperationError
from txn_engine.format.flags import (
    FLAG_BASE_PATHS,
    FLAG_DELETION_FILES,
    FLAG_STABLE_ROW_IDS,
    FLAG_TABLE_CONFIG,
)
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    decode_version_sequence,
    encode_row_id_sequence,
    encode_version_sequence,
)

TS = 1_700_000_000_000_000_001
SCHEMA = (
    LanceField(0, -1, "a", "int64"),
    LanceField(1, -1, "b", "string"),
)


def frag(rows: int = 10, fid: int = 0, fields: Iterable[int] = (0, 1), name: str = "") -> Fragment:
    fields = tuple(fields)
    path = name or f"f{uuid_mod.uuid4().hex[:8]}.lance"
    return Fragment(fid, [DataFile(path, fields, range(len(fields)), 2, 2, 100)], rows)


def create(n: int = 3, *, stable: bool = False, rows: int = 10) -> ManifestState:
    txn = Transaction(0, Overwrite([frag(rows) for _ in range(n)], SCHEMA))
    validate(None, txn)
    return build_manifest(
        None, txn, version=1, transaction_file="0-x.txn", timestamp_ns=TS, stable_row_ids=stable
    )


def apply(state: ManifestState, op: object, **kw: object) -> ManifestState:
    txn = Transaction(state.manifest.version, op)  # type: ignore[arg-type]
    validate(state, txn)
    return build_manifest(
        state,
        txn,
        version=state.manifest.version + 1,
        transaction_file=txn.file_name,
        timestamp_ns=TS,
        **kw,  # type: ignore[arg-type]
    )


def ids(state: ManifestState) -> list[int]:
    return [f.id for f in state.manifest.fragments]


def index(
    name: str,
    fields: Iterable[int],
    bitmap: Iterable[int] | None,
    version: int = 1,
    vector: bool = False,
) -> IndexMetadata:
    details = "/lance.index.pb.VectorIndexDetails" if vector else "/lance.table.BTreeIndexDetails"
    return IndexMetadata(
        uuid=str(uuid_mod.uuid4()),
        name=name,
        fields=tuple(fields),
        dataset_version=version,
        fragment_bitmap=None if bitmap is None else frozenset(bitmap),
        index_details=IndexDetails(details),
    )


def bitmaps(state: ManifestState) -> dict[str, list[int]]:
    return {
        i.name: sorted(BitMap.deserialize(i.fragment_bitmap)) if i.fragment_bitmap else []
        for i in state.indices
    }


def deleted(f: table_pb2.DataFragment, n: int, version: int = 1) -> Fragment:
    return attrs.evolve(
        Fragment.from_proto(f), deletion_file=DeletionFile(0, version, 42, num_deleted_rows=n)
    )


# ---- creation, common steps --------------------------------------------------------------------


def test_creation_assigns_ids_from_zero_and_sets_common_fields() -> None:
    s = create(3)
    m = s.manifest
    assert ids(s) == [0, 1, 2]
    assert m.max_fragment_id == 2
    assert m.version == 1
    assert m.transaction_file == "0-x.txn"
    assert (m.timestamp.seconds, m.timestamp.nanos) == divmod(TS, 10**9)
    assert (m.writer_version.library, m.writer_version.version) == (
        "txn_engine",
        txn_engine.__version__,
    )
    assert (m.data_format.file_format, m.data_format.version) == ("lance", "2.2")
    assert [f.name for f in m.fields] == ["a", "b"]
    assert m.reader_feature_flags == 0
    assert m.writer_feature_flags == 0
    assert s.indices == ()


def test_empty_dataset_has_no_high_water_mark_and_the_default_format() -> None:
    s = create(0)
    assert not s.manifest.HasField("max_fragment_id")
    assert s.manifest.data_format.version == DEFAULT_DATA_FORMAT
    s = apply(s, Append([frag()]))
    assert ids(s) == [0]


def test_section_offsets_are_cleared_and_unknown_fields_kept() -> None:
    s = create(1)
    m = table_pb2.Manifest()
    m.CopyFrom(s.manifest)
    m.index_section = 11
    m.transaction_section = 22
    m.transaction_section_deprecated = 33
    unknown = b"\xf8\x06\x07"  # field 111, varint 7: a field of some newer Lance
    m.ParseFromString(m.SerializeToString() + unknown)
    built = apply(ManifestState(m, ()), UpdateConfig(config_updates=UpdateMap({"k": "v"})))
    out = built.manifest
    assert not out.HasField("index_section")
    assert not out.HasField("transaction_section")
    assert not out.HasField("transaction_section_deprecated")
    assert out.SerializeToString().endswith(unknown)


def test_inputs_are_not_mutated() -> None:
    s = create(2)
    before = s.manifest.SerializeToString(deterministic=True)
    apply(s, Delete(deleted_fragment_ids=[0]))
    apply(s, Overwrite([frag()], SCHEMA))
    assert s.manifest.SerializeToString(deterministic=True) == before


# ---- fragment ids ------------------------------------------------------------------------------


def test_new_ids_continue_after_the_high_water_mark_even_after_deletes() -> None:
    s = apply(create(3), Delete(deleted_fragment_ids=[2]))
    assert ids(s) == [0, 1]
    assert s.manifest.max_fragment_id == 2
    s = apply(s, Append([frag(), frag()]))
    assert ids(s) == [0, 1, 3, 4]
    assert s.manifest.max_fragment_id == 4


def test_non_zero_ids_are_kept_and_fragments_sorted() -> None:
    s = apply(create(2), ReserveFragments(3))
    assert s.manifest.max_fragment_id == 4
    s = apply(s, Append([frag(fid=4), frag(), frag(fid=3)]))
    assert ids(s) == [0, 1, 3, 4, 5]
    assert s.manifest.max_fragment_id == 5


def test_unassigned_ids_skip_ids_the_transaction_gives_explicitly() -> None:
    s = apply(create(2), Append([frag(fid=2), frag(), frag(fid=4)]))
    assert ids(s) == [0, 1, 2, 3, 4]
    s = apply(s, Append([frag(), frag(fid=5)]))
    assert ids(s) == [0, 1, 2, 3, 4, 5, 6]


def test_reserve_fragments_on_an_empty_dataset_starts_from_zero() -> None:
    s = apply(create(0), ReserveFragments(2))
    assert s.manifest.max_fragment_id == 2
    assert ids(apply(s, Append([frag()]))) == [3]


def test_overwrite_continues_after_the_high_water_mark_and_drops_indices() -> None:
    s = apply(create(3), CreateIndex([index("i", [0], [0, 1, 2])]))
    s = apply(s, Overwrite([frag(), frag()], SCHEMA, config_upsert_values={"k": "v"}))
    assert ids(s) == [3, 4]
    assert s.indices == ()
    assert dict(s.manifest.config) == {"k": "v"}
    assert s.manifest.writer_feature_flags & FLAG_TABLE_CONFIG
    s2 = apply(s, Overwrite([frag()], SCHEMA))
    assert dict(s2.manifest.config) == {"k": "v"}  # kept, upserts only add


# ---- per operation -----------------------------------------------------------------------------


def test_delete_replaces_and_removes_and_sets_the_deletion_flag() -> None:
    s = create(3)
    upd = deleted(s.manifest.fragments[1], 3)
    s = apply(s, Delete([upd], [0], "a < 3"))
    assert ids(s) == [1, 2]
    assert s.manifest.fragments[0].deletion_file.num_deleted_rows == 3
    assert s.manifest.reader_feature_flags & FLAG_DELETION_FILES
    assert s.manifest.writer_feature_flags & FLAG_DELETION_FILES


def test_append_sets_the_deletion_flag_from_its_own_fragments_on_a_clean_base() -> None:
    """An Append on a base without deletion files looks at its new fragments only (no scan
    of the table): they carry none (a new fragment with a deletion file is refused), so the
    flag stays clear; on a base with the flag set the flag stays set."""
    s = create(3)
    plain = apply(s, Append([frag()]))
    assert not plain.manifest.reader_feature_flags & FLAG_DELETION_FILES
    with_dv = attrs.evolve(frag(), deletion_file=DeletionFile(0, 1, 7, num_deleted_rows=1))
    with pytest.raises(InvalidOperationError, match="must be newly written"):
        apply(plain, Append([with_dv]))
    marked = apply(plain, Delete([deleted(plain.manifest.fragments[1], 1)], [], "a = 1"))
    assert marked.manifest.reader_feature_flags & FLAG_DELETION_FILES
    assert marked.manifest.writer_feature_flags & FLAG_DELETION_FILES
    kept = apply(marked, Append([frag()]))
    assert kept.manifest.reader_feature_flags & FLAG_DELETION_FILES


def test_append_trusts_a_clear_deletion_flag_of_its_base() -> None:
    """The documented shortcut: a base whose deletion flag is clear is taken to have no
    deletion file (Lance sets the flag exactly when one exists). A non-conforming base,
    a deletion file under a clear flag, keeps its clear flag through an Append, while any
    operation that rewrites fragments (Delete here) scans and sets it."""
    s = create(2)
    s.manifest.fragments[0].deletion_file.num_deleted_rows = 1  # flag left clear
    assert not s.manifest.reader_feature_flags & FLAG_DELETION_FILES
    appended = apply(s, Append([frag()]))
    assert not appended.manifest.reader_feature_flags & FLAG_DELETION_FILES
    upd = deleted(appended.manifest.fragments[1], 1)
    deleting = apply(appended, Delete([upd], [], "a = 1"))
    assert deleting.manifest.reader_feature_flags & FLAG_DELETION_FILES


def test_index_retention_after_delete() -> None:
    s = create(4)
    s = apply(
        s,
        CreateIndex(
            [
                index("a_idx", [0], [0, 1], version=1),
                index("a_idx", [0], [2], version=2),  # delta segment
                index("solo", [1], [3], version=1, vector=True),
                index("none", [0], None),
            ]
        ),
    )
    assert [i.name for i in s.indices] == ["a_idx", "a_idx", "solo", "none"]
    s = apply(s, Delete(deleted_fragment_ids=[2, 3]))
    # the empty delta segment goes; a lone empty index stays (vector too, pylance 14)
    assert [(i.name, i.dataset_version) for i in s.indices] == [
        ("a_idx", 1),
        ("solo", 1),
        ("none", 1),
    ]
    assert bitmaps(s)["a_idx"] == [0, 1]  # bitmaps themselves are left alone


def test_retention_keeps_the_oldest_when_every_segment_is_empty() -> None:
    frags = create(3).manifest.fragments
    segs = [
        index("x", [0], [7], version=5).to_proto(),
        index("x", [0], [8], version=3).to_proto(),
        index("x", [0], [], version=4).to_proto(),
    ]
    kept = retain_relevant_indices(segs, {0, 1}, frags)
    assert [i.dataset_version for i in kept] == [3]
    # indices on dropped fields go, system indices stay
    sys_idx = index("__lance_frag_reuse", [5], None).to_proto()
    kept = retain_relevant_indices([index("y", [1], [0]).to_proto(), sys_idx], {0}, frags)
    assert [i.name for i in kept] == ["__lance_frag_reuse"]


def test_update_prunes_bitmaps_of_indices_on_modified_fields() -> None:
    s = create(3)
    s = apply(s, CreateIndex([index("on_a", [0], [0, 1, 2]), index("on_b", [1], [0, 1, 2])]))
    upd = deleted(s.manifest.fragments[1], 2)
    s = apply(
        s,
        Update(
            removed_fragment_ids=[0],
            updated_fragments=[upd],
            new_fragments=[frag(3)],
            fields_modified=[1],
        ),
    )
    assert ids(s) == [1, 2, 3]
    assert bitmaps(s) == {"on_a": [0, 1, 2], "on_b": [0, 2]}


def test_stable_row_ids_for_appends_and_updates() -> None:
    s = create(2, stable=True, rows=5)
    m = s.manifest
    assert m.reader_feature_flags & FLAG_STABLE_ROW_IDS
    assert m.next_row_id == 10
    assert decode_row_id_sequence(m.fragments[1].inline_row_ids) == list(range(5, 10))
    assert decode_version_sequence(m.fragments[0].inline_created_at_versions) == [(5, 1)]
    s = apply(s, Append([frag(4)]))
    assert s.manifest.next_row_id == 14
    assert decode_version_sequence(s.manifest.fragments[2].inline_last_updated_at_versions) == [
        (4, 2)
    ]
    # v3: an update moves rows 5 and 11 (versions 1 and 2) and inserts one new row
    moved = attrs.evolve(frag(3), row_id_sequence=encode_row_id_sequence([11, 5]))
    upd1 = deleted(s.manifest.fragments[1], 1)
    upd2 = deleted(s.manifest.fragments[2], 1)
    s = apply(s, Update(updated_fragments=[upd1, upd2], new_fragments=[moved]))
    new = s.manifest.fragments[-1]
    assert decode_row_id_sequence(new.inline_row_ids) == [11, 5, 14]
    assert s.manifest.next_row_id == 15
    assert decode_version_sequence(new.inline_created_at_versions) == [(1, 2), (1, 1), (1, 3)]
    assert decode_version_sequence(new.inline_last_updated_at_versions) == [(3, 3)]
    # the updated fragments keep their sequences
    assert decode_row_id_sequence(s.manifest.fragments[1].inline_row_ids) == list(range(5, 10))


def test_stable_row_ids_cannot_be_switched_on_later() -> None:
    s = create(1)
    txn = Transaction(1, Append([frag()]))
    with pytest.raises(InvalidOperationError, match="stable row ids"):
        build_manifest(s, txn, version=2, transaction_file="f", stable_row_ids=True)


def test_too_many_row_ids_is_refused() -> None:
    s = create(1, stable=True, rows=2)
    bad = attrs.evolve(frag(1), row_id_sequence=encode_row_id_sequence([0, 1]))
    with pytest.raises(InvalidOperationError, match="row ids"):
        apply(s, Append([bad]))


def test_create_index_removes_by_uuid_and_adds_segments() -> None:
    s = create(2)
    first = index("i", [0], [0])
    s = apply(s, CreateIndex([first]))
    delta = index("i", [0], [1], version=2)
    s = apply(s, CreateIndex([delta]))
    assert [i.uuid.uuid for i in s.indices] == [
        uuid_mod.UUID(first.uuid).bytes,
        uuid_mod.UUID(delta.uuid).bytes,
    ]
    replacement = index("i", [0], [0, 1], version=3)
    s = apply(s, CreateIndex([replacement], [first, delta]))
    assert [IndexMetadata.from_proto(i).uuid for i in s.indices] == [replacement.uuid]
    s = apply(s, CreateIndex([], [replacement]))  # drop
    assert s.indices == ()


def test_rewrite_splices_and_remaps_index_bitmaps() -> None:
    s = apply(create(4), ReserveFragments(1))
    s = apply(s, CreateIndex([index("i", [0], [0, 1, 2])]))
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments[1:3]]
    old_uuid = IndexMetadata.from_proto(s.indices[0]).uuid
    new_uuid = str(uuid_mod.uuid4())
    s = apply(
        s,
        Rewrite([RewriteGroup(olds, [frag(20, fid=4)])], [RewrittenIndex(old_uuid, new_uuid)]),
    )
    assert ids(s) == [0, 3, 4]
    assert bitmaps(s) == {"i": [0, 4]}
    assert IndexMetadata.from_proto(s.indices[0]).uuid == new_uuid


def test_rewrite_refuses_a_split_of_indexed_and_unindexed_fragments() -> None:
    s = apply(create(3), CreateIndex([index("i", [0], [0])]))
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments[:2]]
    old_uuid = IndexMetadata.from_proto(s.indices[0]).uuid
    op = Rewrite(
        [RewriteGroup(olds, [frag(20)])], [RewrittenIndex(old_uuid, str(uuid_mod.uuid4()))]
    )
    with pytest.raises(InvalidOperationError, match="split"):
        apply(s, op)


def test_rewrite_on_stable_row_ids_needs_the_rows_ids() -> None:
    s = create(2, stable=True)
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments]
    with pytest.raises(InvalidOperationError, match="row ids"):
        apply(s, Rewrite([RewriteGroup(olds, [frag(20)])]))
    carried = attrs.evolve(
        frag(20),
        row_id_sequence=encode_row_id_sequence(list(range(20))),
        created_at_version_sequence=encode_version_sequence([(20, 1)]),
        last_updated_at_version_sequence=encode_version_sequence([(20, 1)]),
    )
    s = apply(s, Rewrite([RewriteGroup(olds, [carried])]))
    assert ids(s) == [2]
    assert decode_row_id_sequence(s.manifest.fragments[0].inline_row_ids) == list(range(20))
    assert s.manifest.next_row_id == 20  # rewrites hand out no new row ids


def test_merge_keeps_given_ids_and_replaces_schema() -> None:
    s = create(2)
    new_schema = (*SCHEMA, LanceField(2, -1, "c", "int64"))
    merged = [
        attrs.evolve(
            Fragment.from_proto(f),
            files=(*Fragment.from_proto(f).files, DataFile(f"c{f.id}.lance", [2], [0])),
        )
        for f in s.manifest.fragments
    ]
    s = apply(s, Merge(merged, new_schema))
    assert ids(s) == [0, 1]  # id 0 is a real fragment here, not "unassigned"
    assert [f.name for f in s.manifest.fields] == ["a", "b", "c"]
    assert [len(f.files) for f in s.manifest.fragments] == [2, 2]


def test_merge_with_stable_row_ids_marks_changed_fragments_updated() -> None:
    s = create(2, stable=True, rows=4)
    s = apply(s, Append([frag(4)]))
    first = Fragment.from_proto(s.manifest.fragments[0])
    grown = attrs.evolve(first, files=(*first.files, DataFile("c.lance", [2], [0])))
    untouched = [Fragment.from_proto(f) for f in s.manifest.fragments[1:]]
    s = apply(s, Merge([grown, *untouched], (*SCHEMA, LanceField(2, -1, "c", "int64"))))
    versions = [
        decode_version_sequence(f.inline_last_updated_at_versions) for f in s.manifest.fragments
    ]
    assert versions == [[(4, 3)], [(4, 1)], [(4, 2)]]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda fs: fs[:1], "missing"),
        (lambda fs: [fs[0], attrs.evolve(fs[1], physical_rows=99)], "physical_rows"),
        (lambda fs: [fs[0], fs[1], fs[1]], "twice"),
    ],
)
def test_merge_validation(change: object, message: str) -> None:
    s = create(2)
    fs = [Fragment.from_proto(f) for f in s.manifest.fragments]
    op = Merge(change(fs), SCHEMA)  # type: ignore[operator]
    with pytest.raises(InvalidOperationError, match=message):
        validate(s, Transaction(1, op))


def _dv(n: int = 1) -> DeletionFile:
    return DeletionFile(0, 1, 42, num_deleted_rows=n)


def _foreign_row_ids(rows: int = 10) -> bytes:
    return encode_row_id_sequence(range(rows))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda s: Overwrite([attrs.evolve(frag(), deletion_file=_dv())], SCHEMA), "Overwrite"),
        (lambda s: Append([attrs.evolve(frag(), deletion_file=_dv())]), "Append"),
        (lambda s: Append([attrs.evolve(frag(fid=9), deletion_file=_dv())]), "Append"),
        (lambda s: Update([], [], [attrs.evolve(frag(), deletion_file=_dv())]), "Update"),
        (
            lambda s: Merge(
                [
                    *(Fragment.from_proto(f) for f in s.manifest.fragments),
                    attrs.evolve(frag(), deletion_file=_dv()),
                ],
                SCHEMA,
            ),
            "Merge",
        ),
    ],
)
def test_a_new_fragment_with_a_deletion_file_is_refused(make: object, message: str) -> None:
    """Its id is assigned at commit and a deletion file is found by its fragment's id: the
    manifest would point at a file that is not there (pylance 14 refuses it for Overwrite,
    and commits it for the others, then fails every scan)."""
    s = create(2)
    op = make(s)  # type: ignore[operator]
    with pytest.raises(InvalidOperationError, match=f"{message} fragments must be newly written"):
        validate(s, Transaction(1, op))


@pytest.mark.parametrize("kind", ["Append", "Overwrite", "Update", "Merge", "Rewrite"])
def test_row_ids_on_a_table_without_stable_row_ids_are_refused(kind: str) -> None:
    s = create(2)
    given = attrs.evolve(frag(), row_id_sequence=_foreign_row_ids())
    existing = [Fragment.from_proto(f) for f in s.manifest.fragments]
    op = {
        "Append": lambda: Append([given]),
        "Overwrite": lambda: Overwrite([given], SCHEMA),
        "Update": lambda: Update([], [], [given]),
        "Merge": lambda: Merge(
            [existing[0], attrs.evolve(existing[1], row_id_sequence=_foreign_row_ids())], SCHEMA
        ),
        "Rewrite": lambda: Rewrite([RewriteGroup([existing[0]], [given])]),
    }[kind]()
    with pytest.raises(InvalidOperationError, match="does not use stable row ids"):
        validate(s, Transaction(1, op))
    if kind == "Overwrite":  # creating a table without stable row ids: refused at the build
        txn = Transaction(0, op)
        validate(None, txn)
        with pytest.raises(InvalidOperationError, match="does not use stable row ids"):
            build_manifest(None, txn, version=1, transaction_file="x")


def test_overwrite_gives_every_fragment_a_new_id() -> None:
    """pylance 14 ignores the ids an Overwrite's fragments come with: ids continue after
    the high-water mark, so an id is never reused for other data."""
    s = apply(create(2), Overwrite([frag(fid=1), frag(fid=7)], SCHEMA))
    assert ids(s) == [2, 3]


def test_new_fragments_get_fresh_version_sequences() -> None:
    """pylance 14 ignores created-at / last-updated versions given with a newly written
    fragment: its rows are created by the version that lands it."""
    s = create(1, stable=True)
    given = attrs.evolve(
        frag(),
        created_at_version_sequence=encode_version_sequence([(10, 1)]),
        last_updated_at_version_sequence=encode_version_sequence([(10, 1)]),
    )
    s = apply(s, Append([given]))
    new = s.manifest.fragments[-1]
    assert decode_version_sequence(new.inline_created_at_versions) == [(10, 2)]
    assert decode_version_sequence(new.inline_last_updated_at_versions) == [(10, 2)]


@pytest.mark.parametrize("stable", [False, True])
def test_merge_adds_new_fragments_after_the_existing_ones(stable: bool) -> None:
    """A Merge lists every fragment of the table, then may add new ones: id 0 (assigned at
    commit, as an Append's, even where fragment 0 exists) or an id of its own; on a table
    with stable row ids they get row ids and versions like an Append's."""
    s = create(2, stable=stable)
    existing = [Fragment.from_proto(f) for f in s.manifest.fragments]
    s = apply(s, Merge([*existing, frag(5), frag(5, fid=9)], SCHEMA))
    assert ids(s) == [0, 1, 2, 9]
    assert [f.physical_rows for f in s.manifest.fragments] == [10, 10, 5, 5]
    if stable:
        row_ids = [decode_row_id_sequence(f.inline_row_ids) for f in s.manifest.fragments]
        assert sorted(i for r in row_ids for i in r) == list(range(30))
        new = s.manifest.fragments[2]
        assert decode_version_sequence(new.inline_created_at_versions) == [(5, 2)]


def test_merge_classifies_its_fragments_as_pylance_does() -> None:
    s = create(2, stable=True)
    existing = [Fragment.from_proto(f) for f in s.manifest.fragments]
    for op, message in [
        (Merge([frag(5), *existing], SCHEMA), "after a new fragment"),
        (
            Merge([existing[0], attrs.evolve(existing[1], row_id_sequence=None)], SCHEMA),
            "dropped the stable row ids of existing fragment 1",
        ),
        (Merge([*existing, frag(5, fid=9), frag(5, fid=9)], SCHEMA), "listed twice"),
        (
            Merge([existing[0], attrs.evolve(existing[1], deletion_file=_dv())], SCHEMA),
            "not the one it has",
        ),
    ]:
        with pytest.raises(InvalidOperationError, match=message):
            validate(s, Transaction(1, op))


def test_merge_keeps_or_drops_a_fragment_deletion_file() -> None:
    """A restated fragment keeps its deletion file, or drops it (pylance 14 commits both);
    another deletion file is refused above."""
    s = create(2)
    s = apply(s, Delete([deleted(s.manifest.fragments[0], 2)], [], "a < 2"))
    existing = [Fragment.from_proto(f) for f in s.manifest.fragments]
    kept = apply(s, Merge(existing, SCHEMA))
    assert kept.manifest.fragments[0].deletion_file == s.manifest.fragments[0].deletion_file
    dropped = apply(s, Merge([attrs.evolve(existing[0], deletion_file=None), existing[1]], SCHEMA))
    assert not dropped.manifest.fragments[0].HasField("deletion_file")


def test_project_drops_files_without_remaining_fields_and_their_indices() -> None:
    s = create(1)
    first = Fragment.from_proto(s.manifest.fragments[0])
    new_schema = (*SCHEMA, LanceField(2, -1, "c", "int64"))
    s = apply(
        s,
        Merge(
            [attrs.evolve(first, files=(*first.files, DataFile("c.lance", [2], [0])))], new_schema
        ),
    )
    s = apply(s, CreateIndex([index("c_idx", [2], [0]), index("a_idx", [0], [0])]))
    s = apply(s, Project(SCHEMA[:1]))  # keep only "a"
    assert [f.name for f in s.manifest.fields] == ["a"]
    assert [list(df.fields) for df in s.manifest.fragments[0].files] == [[0, 1]]
    assert [i.name for i in s.indices] == ["a_idx"]
    with pytest.raises(InvalidOperationError, match="unknown field ids"):
        validate(s, Transaction(s.manifest.version, Project(SCHEMA)))


def test_update_config_maps() -> None:
    s = apply(create(1), UpdateConfig(config_updates=UpdateMap({"k1": "a", "k2": "b"})))
    s = apply(
        s,
        UpdateConfig(
            config_updates=UpdateMap({"k1": None, "k3": "c"}),
            table_metadata_updates=UpdateMap({"t": "1"}),
            schema_metadata_updates=UpdateMap({"s": "x"}, replace=True),
            field_metadata_updates={1: UpdateMap({"f": "y"})},
        ),
    )
    m = s.manifest
    assert dict(m.config) == {"k2": "b", "k3": "c"}
    assert dict(m.table_metadata) == {"t": "1"}
    assert dict(m.schema_metadata) == {"s": b"x"}
    assert dict(m.fields[1].metadata) == {"f": b"y"}
    s = apply(s, UpdateConfig(config_updates=UpdateMap({"only": "1"}, replace=True)))
    assert dict(s.manifest.config) == {"only": "1"}
    s = apply(s, UpdateConfig(config_updates=UpdateMap({"only": None})))
    assert dict(s.manifest.config) == {}
    assert not s.manifest.writer_feature_flags & FLAG_TABLE_CONFIG
    with pytest.raises(InvalidOperationError, match="field with id 9"):
        apply(s, UpdateConfig(field_metadata_updates={9: UpdateMap({"x": "y"})}))


def test_data_replacement_rules() -> None:
    s = create(2)
    same = DataFile("new0.lance", [0, 1], [0, 1], 2, 2, 7)
    s2 = apply(s, DataReplacement([DataReplacementGroup(0, same)]))
    f0 = s2.manifest.fragments[0].files
    assert [(d.path, d.file_size_bytes) for d in f0] == [("new0.lance", 7)]
    only_b = DataFile("b.lance", [1], [0], 2, 2, 5)
    s3 = apply(s2, DataReplacement([DataReplacementGroup(1, only_b)]))
    assert [list(d.fields) for d in s3.manifest.fragments[1].files] == [[0, -2], [1]]
    only_a = DataFile("a.lance", [0], [0], 2, 2, 5)
    s4 = apply(s3, DataReplacement([DataReplacementGroup(1, only_a)]))
    # the first file is all tombstones now: dropped
    assert [list(d.fields) for d in s4.manifest.fragments[1].files] == [[1], [0]]
    with pytest.raises(InvalidOperationError, match="same fields"):
        validate(
            s,
            Transaction(
                1,
                DataReplacement([DataReplacementGroup(0, only_a), DataReplacementGroup(1, only_b)]),
            ),
        )


def test_restore_copies_the_old_version_but_keeps_high_water_marks() -> None:
    v1 = create(2, stable=True)
    v2 = apply(v1, Append([frag()]))
    v3 = apply(v2, UpdateConfig(config_updates=UpdateMap({"k": "v"})))
    txn = Transaction(3, Restore(1))
    validate(v3, txn)
    v4 = build_manifest(
        v3, txn, version=4, transaction_file=txn.file_name, timestamp_ns=TS, restore_source=v1
    )
    m = v4.manifest
    assert m.version == 4
    assert m.transaction_file == txn.file_name
    assert ids(v4) == [0, 1]
    assert dict(m.config) == {}
    assert m.max_fragment_id == 2  # not 1: ids of abandoned versions are not reused
    assert m.next_row_id == v3.manifest.next_row_id
    assert m.writer_version == v1.manifest.writer_version
    with pytest.raises(InvalidOperationError):
        build_manifest(v3, txn, version=4, transaction_file="f")  # no restore_source
    with pytest.raises(InvalidOperationError, match="does not exist"):
        validate(v3, Transaction(3, Restore(9)))


def test_clone_points_every_file_at_the_source() -> None:
    src = apply(create(2), Delete([deleted(create(2).manifest.fragments[0], 1)], []))
    src = apply(src, CreateIndex([index("i", [0], [0, 1])]))
    txn = Transaction(3, Clone(3, "/data/source", ref_name="main", branch_name="b1"))
    validate(None, txn)
    out = build_manifest(
        None, txn, version=3, transaction_file="f", timestamp_ns=TS, clone_source=src
    )
    m = out.manifest
    assert m.version == 3
    assert [(b.id, b.name, b.path, b.is_dataset_root) for b in m.base_paths] == [
        (0, "main", "/data/source", True)
    ]
    assert all(df.base_id == 0 for f in m.fragments for df in f.files)
    assert m.fragments[0].deletion_file.base_id == 0
    assert [i.base_id for i in out.indices] == [0]
    assert m.branch == "b1"
    assert m.reader_feature_flags & FLAG_BASE_PATHS
    assert ids(out) == ids(src)
    assert m.max_fragment_id == src.manifest.max_fragment_id
    with pytest.raises(InvalidOperationError, match="Clone"):
        validate(src, txn)


def test_update_bases_assigns_ids_and_refuses_clashes() -> None:
    s = apply(create(1), UpdateBases([BasePath(0, "s3://x", name="x")]))
    assert [(b.id, b.name) for b in s.manifest.base_paths] == [(1, "x")]
    s = apply(s, UpdateBases([BasePath(7, "s3://y", name="y"), BasePath(0, "s3://z")]))
    assert [b.id for b in s.manifest.base_paths] == [1, 7, 8]
    assert s.manifest.reader_feature_flags & FLAG_BASE_PATHS
    for bad, message in [
        (BasePath(0, "s3://other", name="x"), "named"),
        (BasePath(0, "s3://y"), "path"),
        (BasePath(7, "s3://new"), "id 7"),
    ]:
        with pytest.raises(InvalidOperationError, match=message):
            validate(s, Transaction(s.manifest.version, UpdateBases([bad])))


def test_update_mem_wal_state_rules_and_refusal() -> None:
    s = create(1)
    wal_a = MemWal(MemWalId("a", 1), "mt", "wal")
    wal_b = MemWal(MemWalId("b", 1))
    # refused on the commit path: pylance 14 cannot read the Lance 1.0 MemWAL layout
    with pytest.raises(InvalidOperationError, match="MemWAL"):
        validate(s, Transaction(1, UpdateMemWalState(added=[wal_a])))
    # the builder itself follows the digest's rules
    txn = Transaction(1, UpdateMemWalState(added=[wal_a, wal_b]))
    s2 = build_manifest(s, txn, version=2, transaction_file="f", timestamp_ns=TS)
    (idx,) = s2.indices
    assert idx.name == MEM_WAL_INDEX
    assert list(idx.fields) == []
    assert not idx.fragment_bitmap
    details = table_pb2.MemWalIndexDetails()
    details.ParseFromString(idx.index_details.value)
    assert [(w.id.region, w.last_updated_dataset_version) for w in details.mem_wal_list] == [
        ("a", 2),
        ("b", 2),
    ]
    txn = Transaction(2, UpdateMemWalState(updated=[attrs.evolve(wal_a, state=3)], removed=[wal_b]))
    s3 = build_manifest(s2, txn, version=3, transaction_file="f", timestamp_ns=TS)
    details.ParseFromString(s3.indices[0].index_details.value)
    assert [
        (w.id.region, w.state, w.last_updated_dataset_version) for w in details.mem_wal_list
    ] == [("a", 3, 3)]
    assert s3.indices[0].uuid.uuid != s2.indices[0].uuid.uuid
    with pytest.raises(InvalidOperationError, match="no MemWAL index"):
        build_manifest(
            s, Transaction(1, UpdateMemWalState(updated=[wal_a])), version=2, transaction_file="f"
        )


# ---- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (Delete(deleted_fragment_ids=[9]), "does not exist"),
        (Delete(deleted_fragment_ids=[1, 1]), "listed twice"),
        (Update(removed_fragment_ids=[1], updated_fragments=[frag(fid=1)]), "both updated"),
        (Append([frag(fields=(0, 5))]), "schema mismatch"),
        (Append([attrs.evolve(frag(), files=[DataFile("x", [0], [0], 2, 1)])]), "data-format"),
        (Append([Fragment(0, [], 3)]), "no data files"),
        (Append([frag(fid=1)]), "already in use"),
        (Append([frag(fid=7), frag(fid=7)]), "duplicate fragment id"),
        (Append([attrs.evolve(frag(), files=[DataFile("x", [0, 1], [0], 2, 2)])]), "column"),
        (Overwrite([frag()], SCHEMA, initial_bases=[BasePath(1, "p")]), "initial_bases"),
        (
            Overwrite(
                [frag(), attrs.evolve(frag(), files=[DataFile("x", [0], [0], 2, 1)])], SCHEMA
            ),
            "different Lance file versions",
        ),
        (Overwrite([], (LanceField(0, -1, "a", "x"), LanceField(0, -1, "b", "x"))), "duplicate"),
        (Overwrite([], (LanceField(1, 0, "a", "x"),)), "parent"),
        (Rewrite([RewriteGroup([], [frag()])]), "no old fragments"),
        (ReserveFragments(-1), ">= 0"),
    ],
)
def test_validation_errors(op: object, message: str) -> None:
    s = create(3)
    with pytest.raises(InvalidOperationError, match=message):
        validate(s, Transaction(1, op))  # type: ignore[arg-type]


def test_validation_of_dataset_existence_and_read_version() -> None:
    with pytest.raises(InvalidOperationError, match="existing dataset"):
        validate(None, Transaction(0, Append([frag()])))
    s = create(1)
    with pytest.raises(InvalidOperationError, match="newer than the latest"):
        validate(s, Transaction(5, Append([frag()])))


def test_updated_fragment_must_keep_its_row_count() -> None:
    s = create(2)
    changed = attrs.evolve(Fragment.from_proto(s.manifest.fragments[0]), physical_rows=3)
    with pytest.raises(InvalidOperationError, match="physical_rows"):
        validate(s, Transaction(1, Delete([changed], [])))


def test_appending_a_concurrently_dropped_column_is_accepted() -> None:
    s = create(1)
    s = apply(s, Project(SCHEMA[:1]))  # drops "b" (id 1), its ids stay in the data files
    validate(s, Transaction(s.manifest.version, Append([frag(fields=(0, 1))])))


# ---- lookups -------------------------------------------------------------------------------------


def test_binary_search_and_high_water_mark() -> None:
    s = apply(create(5), Delete(deleted_fragment_ids=[1, 3]))
    frags = s.manifest.fragments
    assert [find_fragment_index(frags, i) for i in range(6)] == [0, -1, 1, -1, 2, -1]
    assert max_fragment_id(s.manifest) == 4
    m = table_pb2.Manifest()
    assert max_fragment_id(m) is None
    m.fragments.add(id=9)
    assert max_fragment_id(m) == 9
    m.max_fragment_id = 12
    assert max_fragment_id(m) == 12


def test_rewrite_with_reserved_ids_below_newer_fragments_keeps_the_list_sorted() -> None:
    s = apply(create(4), ReserveFragments(2))  # reserves 4 and 5
    s = apply(s, Append([frag()]))  # gets 6
    fs = [Fragment.from_proto(f) for f in s.manifest.fragments]
    s = apply(
        s,
        Rewrite(
            [
                RewriteGroup(fs[0:2], [frag(20, fid=4)]),
                RewriteGroup(fs[2:4], [frag(20, fid=5)]),
            ]
        ),
    )
    assert ids(s) == [4, 5, 6]
    with pytest.raises(InvalidOperationError, match="rewritten index"):
        validate(
            s,
            Transaction(
                s.manifest.version,
                Rewrite(
                    [RewriteGroup(fs[4:5], [frag(fid=0)])],
                    [RewrittenIndex(str(uuid_mod.uuid4()), str(uuid_mod.uuid4()))],
                ),
            ),
        )


def test_merge_schema_metadata_replaces_the_tables_unless_none() -> None:
    """As pylance's Merge: the schema's metadata becomes the table's (an empty one clears
    it); a Merge of Lance fields without any (None) keeps the table's."""
    s = apply(create(1), Overwrite([frag()], SCHEMA, schema_metadata={"owner": b"me"}))
    existing = [Fragment.from_proto(f) for f in s.manifest.fragments]
    assert dict(apply(s, Merge(existing, SCHEMA)).manifest.schema_metadata) == {"owner": b"me"}
    replaced = apply(s, Merge(existing, SCHEMA, schema_metadata={"n": b"2"}))
    assert dict(replaced.manifest.schema_metadata) == {"n": b"2"}
    assert (
        dict(apply(s, Merge(existing, SCHEMA, schema_metadata={})).manifest.schema_metadata) == {}
    )
