"""A Rewrite carrying a deferred index remap (``Rewrite.frag_reuse_index``, what
``Table.compact`` commits when an index covers rewritten fragments): every index's coverage
moves to the new fragments, the ``__lance_frag_reuse`` record gets this compaction's version
appended to the one the manifest has (a compaction that landed meanwhile keeps its own)."""

from __future__ import annotations

import uuid as uuid_mod

import attrs
import pytest

from txn_engine import (
    CreateIndex,
    DataFile,
    Fragment,
    IndexDetails,
    IndexMetadata,
    LanceField,
    Overwrite,
    ReserveFragments,
    Rewrite,
    RewriteGroup,
    Transaction,
)
from txn_engine._proto import table_pb2
from txn_engine.builder import ManifestState, build_manifest, validate
from txn_engine.errors import InvalidOperationError

SCHEMA = (LanceField(0, -1, "id", "int64"), LanceField(1, -1, "v", "string"))
REUSE = "__lance_frag_reuse"
Details = table_pb2.FragmentReuseIndexDetails


def _frag(rows: int = 10, fid: int = 0) -> Fragment:
    return Fragment(
        fid, [DataFile(f"f{uuid_mod.uuid4().hex[:8]}.lance", (0, 1), (0, 1), 2, 2, 9)], rows
    )


def _apply(state: ManifestState | None, op: object) -> ManifestState:
    version = 0 if state is None else state.manifest.version
    txn = Transaction(version, op)  # type: ignore[arg-type]
    validate(state, txn)
    return build_manifest(state, txn, version=version + 1, transaction_file=txn.file_name)


def _reuse(dataset_version: int, new_ids: list[int], *, inline: bool = True) -> IndexMetadata:
    details = Details()
    if inline:
        entry = details.inline.versions.add(dataset_version=dataset_version)
        entry.groups.add(changed_row_addrs=b"addrs", new_fragments=[{"id": i} for i in new_ids])
    else:
        details.external.path = "details.binpb"
    return IndexMetadata(
        uuid=str(uuid_mod.uuid4()),
        name=REUSE,
        fields=(),
        dataset_version=dataset_version,
        fragment_bitmap=new_ids,
        index_details=IndexDetails(
            "/lance.table.FragmentReuseIndexDetails", details.SerializeToString()
        ),
        index_version=0,
    )


def _table() -> tuple[ManifestState, str]:
    s = _apply(None, Overwrite([_frag() for _ in range(4)], SCHEMA))
    idx = IndexMetadata(
        uuid=str(uuid_mod.uuid4()),
        name="id_idx",
        fields=(0,),
        dataset_version=1,
        fragment_bitmap=[0, 1, 2, 3],
        index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
    )
    s = _apply(s, CreateIndex([idx]))
    return _apply(s, ReserveFragments(2)), idx.uuid  # ids 4 and 5 reserved


def _indices(s: ManifestState) -> dict[str, IndexMetadata]:
    return {i.name: IndexMetadata.from_proto(i) for i in s.indices}


def _versions(s: ManifestState) -> list[int]:
    details = Details()
    details.ParseFromString(_indices(s)[REUSE].index_details.value)  # type: ignore[union-attr]
    return [v.dataset_version for v in details.inline.versions]


def test_the_index_keeps_its_files_and_covers_the_new_fragment() -> None:
    s, uuid = _table()
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments[1:3]]
    s = _apply(
        s, Rewrite([RewriteGroup(olds, [_frag(20, fid=4)])], frag_reuse_index=_reuse(3, [4]))
    )
    assert [f.id for f in s.manifest.fragments] == [0, 3, 4]
    idx = _indices(s)["id_idx"]
    assert idx.uuid == uuid  # same index files: readers remap through the record
    assert idx.fragment_bitmap == frozenset({0, 3, 4})
    assert _indices(s)[REUSE].fragment_bitmap == frozenset({4})
    assert _versions(s) == [3]
    assert [i.name for i in s.indices] == ["id_idx", REUSE]


def test_a_later_compaction_appends_its_version_to_the_record() -> None:
    s, _ = _table()
    first = [Fragment.from_proto(f) for f in s.manifest.fragments[0:2]]
    second = [Fragment.from_proto(f) for f in s.manifest.fragments[2:4]]
    # both planned on the same version; the second is built on the manifest the first made
    s = _apply(
        s, Rewrite([RewriteGroup(first, [_frag(20, fid=4)])], frag_reuse_index=_reuse(3, [4]))
    )
    s = _apply(
        s, Rewrite([RewriteGroup(second, [_frag(20, fid=5)])], frag_reuse_index=_reuse(3, [5]))
    )
    assert _versions(s) == [3, 3]  # the first compaction's record is kept
    assert len([i for i in s.indices if i.name == REUSE]) == 1
    assert _indices(s)["id_idx"].fragment_bitmap == frozenset({4, 5})


def test_a_record_kept_in_a_file_is_refused() -> None:
    s, _ = _table()
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments[0:2]]
    s = _apply(s, CreateIndex([_reuse(3, [], inline=False)]))
    op = Rewrite([RewriteGroup(olds, [_frag(20, fid=4)])], frag_reuse_index=_reuse(4, [4]))
    with pytest.raises(InvalidOperationError, match="file"):
        _apply(s, op)


@pytest.mark.parametrize("bad", ["bitmap", "name"])
def test_the_record_must_name_the_new_fragments(bad: str) -> None:
    s, _ = _table()
    olds = [Fragment.from_proto(f) for f in s.manifest.fragments[0:2]]
    reuse = _reuse(3, [7] if bad == "bitmap" else [4])  # 7: not a fragment it writes
    if bad == "name":
        reuse = attrs.evolve(reuse, name="other")
    op = Rewrite([RewriteGroup(olds, [_frag(20, fid=4)])], frag_reuse_index=reuse)
    with pytest.raises(InvalidOperationError, match="deferred remap"):
        _apply(s, op)
