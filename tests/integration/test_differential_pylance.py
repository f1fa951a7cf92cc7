"""Differential tests against pylance 14.0.2 (the oracle).

From one starting dataset copied twice (``a`` and ``b``), the same operation is committed
by pylance on ``a`` and by ``txn_engine.commit`` on ``b``; the two resulting manifests must
agree field by field (ignoring timestamp, writer version and section offsets), the index
lists byte for byte, and pylance must read identical tables from both. Data, deletion
and index files pylance wrote are copied from ``a`` to ``b`` first, so random file names
agree.

* ``test_replay_*``: pylance's own high-level writers (delete, update, merge_insert,
  add/drop/alter columns, indices, compaction, config, restore, overwrite ...) commit on
  ``a``; the transaction they recorded is decoded by the codec and committed by txn_engine
  on ``b``. This covers every operation pylance emits, including ReserveFragments.
* ``test_api_*``: the operation is written twice by hand, as ``lance.LanceOperation.X``
  and as ``txn_engine.X``.
* ``test_alternating_writers``: a chain of 24 versions where pylance and txn_engine take
  turns, checked against a reference computation, read by pylance and by txn_engine.
* Operations pylance cannot express (ReserveFragments, UpdateBases) are committed by
  txn_engine and then read and extended by pylance. UpdateMemWalState is refused (pylance
  14 cannot read the Lance 1.0 MemWAL layout), like the other invalid operations.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance.file import LanceFileReader
from lance.fragment import FragmentMetadata, write_fragments
from pyroaring import BitMap

import txn_engine
from txn_engine import (
    Append,
    Clone,
    DataFile,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Fragment,
    LanceField,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Transaction,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
    transaction_from_proto,
    transaction_to_proto,
    writers,
)
from txn_engine._proto import table_pb2
from txn_engine.errors import InvalidOperationError
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import FLAG_DISABLE_TRANSACTION_FILE
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.naming import NamingScheme
from txn_engine.format.rowids import encode_row_id_sequence
from txn_engine.format.schema import arrow_to_lance_fields, fields_to_arrow
from txn_engine.model import BasePath, MemWal, MemWalId
from txn_engine.storage import open_storage

pytestmark = pytest.mark.filterwarnings("ignore")

#: Manifest fields that legitimately differ between two writers of the same version.
IGNORED_FIELDS = (
    "timestamp",
    "writer_version",
    "index_section",
    "transaction_section",
    "transaction_section_deprecated",
)


# ---- helpers ---------------------------------------------------------------------------------


def _table(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(range(start, start + n), pa.int64()),
            "b": pa.array([f"s{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def sync_files(a: Path, b: Path) -> None:
    """Copy to ``b`` the data / deletion / index files of ``a`` it does not have."""
    for root, _dirs, files in os.walk(a):
        rel = os.path.relpath(root, a)
        if rel.split(os.sep)[0] in ("_versions", "_transactions"):
            continue
        os.makedirs(b / rel, exist_ok=True)
        for name in files:
            dst = b / rel / name
            if not dst.exists():
                shutil.copy2(Path(root) / name, dst)


def _normalized(
    manifest: table_pb2.Manifest, *, ignore: tuple[str, ...] = ()
) -> table_pb2.Manifest:
    copy = table_pb2.Manifest()
    copy.CopyFrom(manifest)
    for name in (*IGNORED_FIELDS, *ignore):
        copy.ClearField(name)
    return copy


def assert_same_version(a: Path, b: Path, version: int, *, ignore: tuple[str, ...] = ()) -> None:
    """Manifests of ``version`` agree field by field; indices byte for byte. (A Restore
    keeps the restored version's writer version, in pylance 14 too: checked per side.)"""
    _, fa = read_manifest(open_storage(a), version)
    _, fb = read_manifest(open_storage(b), version)
    restore = fb.transaction is not None and fb.transaction.HasField("restore")
    if restore:  # each side keeps the writer version of the version it restored
        assert fb.transaction is not None
        old = fb.transaction.restore.version
        for side, mf in ((a, fa), (b, fb)):
            restored = read_manifest(open_storage(side), old)[1].manifest
            assert mf.manifest.writer_version == restored.writer_version
    assert not fa.manifest.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE  # pylance
    if fb.manifest.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE:
        # txn_engine's default: the transaction inline only (writer flag 32, no .txn file);
        # everything else must match pylance's manifest
        assert fb.manifest.transaction_file == ""
        assert fb.transaction is not None
        ignore = (*ignore, "transaction_file")
    ma = _normalized(fa.manifest, ignore=ignore)
    mb = _normalized(fb.manifest, ignore=ignore)
    mb.writer_feature_flags &= ~FLAG_DISABLE_TRANSACTION_FILE
    for field in table_pb2.Manifest.DESCRIPTOR.fields:
        va, vb = getattr(ma, field.name), getattr(mb, field.name)
        if field.is_repeated:
            va, vb = list(va), list(vb)
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                va, vb = dict(getattr(ma, field.name)), dict(getattr(mb, field.name))
        assert va == vb, f"version {version}: manifest field {field.name!r} differs"
    # unknown fields and everything else, byte for byte
    assert ma.SerializeToString(deterministic=True) == mb.SerializeToString(deterministic=True)
    ia = [i.SerializeToString(deterministic=True) for i in fa.indices]
    ib = [i.SerializeToString(deterministic=True) for i in fb.indices]
    assert ia == ib, f"version {version}: index lists differ"
    if not restore:
        assert fb.manifest.writer_version.library == "txn_engine"


def assert_same_table(a: Path, b: Path) -> None:
    ta = lance.dataset(str(a)).to_table()
    tb = lance.dataset(str(b)).to_table()
    assert ta.equals(tb)


def latest(path: Path) -> int:
    return read_manifest(open_storage(path))[0].version


def replay(a: Path, b: Path, action: Callable[[], Any]) -> list[str]:
    """Run a pylance ``action`` on ``a``; commit each transaction it recorded on ``b``
    through txn_engine; check every new version. Returns the operation kinds."""
    before = latest(a)
    action()
    after = latest(a)
    assert after > before, "the pylance action committed nothing"
    sync_files(a, b)
    kinds = []
    for version in range(before + 1, after + 1):
        pb = read_transaction(open_storage(a), version)
        txn = transaction_from_proto(pb)
        # the codec is byte-exact on what pylance wrote, except for the order of
        # UpdateMap entries (pylance writes them in hash-map order, txn_engine sorts them)
        again = transaction_to_proto(txn)
        if txn.kind == "UpdateConfig":
            assert transaction_from_proto(again) == txn
        else:
            assert again.SerializeToString(deterministic=True) == pb.SerializeToString(
                deterministic=True
            )
        ignore: tuple[str, ...] = ()
        if txn.read_version == 0:  # pylance's Overwrite/Restore without read_version
            txn = txn.with_read_version(version - 1)
            ignore = ("transaction_file",)
        # pylance's layout (the .txn copy): byte for byte, flags and file name included
        result = txn_engine.commit(b, txn, transaction_file=True)
        assert result.version == version
        assert_same_version(a, b, version, ignore=ignore)
        kinds.append(txn.kind)
    assert_same_table(a, b)
    return kinds


@attrs.frozen
class Twin:
    a: Path
    b: Path
    stable: bool = False

    def ds(self) -> lance.LanceDataset:
        return lance.dataset(str(self.a))


VARIANTS = {
    "v2-names": {"enable_v2_manifest_paths": True},
    "v1-names": {"enable_v2_manifest_paths": False},
    "stable-row-ids": {"enable_v2_manifest_paths": True, "enable_stable_row_ids": True},
}


@pytest.fixture(scope="module")
def base_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, kwargs in VARIANTS.items():
        path = tmp_path_factory.mktemp(f"base-{name}") / "ds"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lance.write_dataset(_table(0, 3000), str(path), max_rows_per_file=1000, **kwargs)
        out[name] = path
    return out


@pytest.fixture(params=sorted(VARIANTS))
def twin(request: pytest.FixtureRequest, base_datasets: dict[str, Path], tmp_path: Path) -> Twin:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(base_datasets[request.param], a)
    shutil.copytree(base_datasets[request.param], b)
    return Twin(a, b, stable="stable" in request.param)


# ---- replay of pylance's own writers -----------------------------------------------------------


def test_creation_replayed_on_an_empty_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for v2 in (True, False):
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(b, ignore_errors=True)
        lance.write_dataset(_table(0, 100), str(a), enable_v2_manifest_paths=v2)
        b.mkdir()
        sync_files(a, b)
        txn = transaction_from_proto(read_transaction(open_storage(a), 1))
        assert txn.read_version == 0
        assert txn.kind == "Overwrite"
        naming = NamingScheme.V2 if v2 else NamingScheme.V1
        txn_engine.commit(b, txn, naming=naming)
        assert_same_version(a, b, 1)
        names = [
            sorted(n for n in os.listdir(p / "_versions") if n.endswith(".manifest"))
            for p in (a, b)
        ]
        assert names[0] == names[1] == ["18446744073709551614.manifest" if v2 else "1.manifest"]
        assert_same_table(a, b)


def test_replay_row_and_column_operations(twin: Twin) -> None:
    a, b, ds = twin.a, twin.b, twin.ds
    kinds: list[str] = []
    kinds += replay(a, b, lambda: lance.write_dataset(_table(3000, 500), str(a), mode="append"))
    kinds += replay(a, b, lambda: ds().delete("a < 5"))
    kinds += replay(a, b, lambda: ds().delete("a >= 1000 and a < 2000"))  # whole fragment
    kinds += replay(a, b, lambda: ds().add_columns({"c": "a * 2"}))
    kinds += replay(a, b, lambda: ds().create_scalar_index("a", "BTREE"))
    kinds += replay(a, b, lambda: ds().update({"c": "c + 1"}, where="a < 50 or a = 3100"))
    new_rows = pa.table(
        {
            "a": pa.array([1, 2, 3005, 9999], pa.int64()),
            "b": pa.array(["m"] * 4),
            "c": pa.array([7] * 4, pa.int64()),
        }
    )
    kinds += replay(
        a,
        b,
        lambda: (
            ds()
            .merge_insert("a")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(new_rows)
        ),
    )
    partial = pa.table({"a": pa.array([6, 3200], pa.int64()), "c": pa.array([-1, -1], pa.int64())})
    kinds += replay(a, b, lambda: ds().merge_insert("a").when_matched_update_all().execute(partial))
    kinds += replay(a, b, lambda: ds().drop_columns(["b"]))
    kinds += replay(a, b, lambda: ds().alter_columns({"path": "c", "name": "cc"}))
    kinds += replay(a, b, lambda: ds().optimize.compact_files(target_rows_per_fragment=100_000))
    kinds += replay(a, b, lambda: ds().delete("true"))
    kinds += replay(
        a,
        b,
        lambda: lance.write_dataset(
            _table(0, 10).drop(["b"]).append_column("cc", pa.array(range(10), pa.int64())),
            str(a),
            mode="append",
        ),
    )
    assert {"Append", "Delete", "Merge", "CreateIndex", "Update", "Project", "Rewrite"} <= set(
        kinds
    )


def test_replay_metadata_restore_overwrite(twin: Twin) -> None:
    a, b, ds = twin.a, twin.b, twin.ds
    kinds: list[str] = []
    kinds += replay(a, b, lambda: ds().update_config({"x.y": "1", "x.z": "2"}))
    kinds += replay(a, b, lambda: ds().delete_config_keys(["x.z"]))
    kinds += replay(a, b, lambda: ds().replace_schema_metadata({"owner": "t"}))
    kinds += replay(a, b, lambda: ds().replace_field_metadata("a", {"k": "v"}))
    kinds += replay(
        a,
        b,
        lambda: lance.LanceDataset.commit(
            str(a),
            lance.LanceOperation.UpdateConfig(
                config_updates=lance.LanceOperation.UpdateMap({"k1": "v1"}, replace=True),
                table_metadata_updates=lance.LanceOperation.UpdateMap({"t": "1"}),
                schema_metadata_updates=lance.LanceOperation.UpdateMap({"owner": None}),
                field_metadata_updates={1: lance.LanceOperation.UpdateMap({"f": "x"})},
            ),
            read_version=ds().version,
        ),
    )
    kinds += replay(a, b, lambda: lance.write_dataset(_table(9000, 10), str(a), mode="append"))
    kinds += replay(
        a, b, lambda: lance.LanceDataset.commit(str(a), lance.LanceOperation.Restore(2))
    )
    kinds += replay(a, b, lambda: lance.write_dataset(_table(0, 100), str(a), mode="overwrite"))
    kinds += replay(a, b, lambda: lance.write_dataset(_table(5, 5), str(a), mode="append"))
    assert set(kinds) == {"UpdateConfig", "Append", "Restore", "Overwrite"}


def test_replay_indices_and_retention(tmp_path: Path) -> None:
    """Vector + scalar indices, delta index segments, retention after deletes, drop."""
    a, b = tmp_path / "a", tmp_path / "b"
    rng = np.random.default_rng(0)

    def vec_table(start: int, n: int) -> pa.Table:
        values = pa.array(rng.random(n * 8, dtype=np.float32))
        return _table(start, n).append_column("v", pa.FixedSizeListArray.from_arrays(values, 8))

    lance.write_dataset(vec_table(0, 1000), str(a), max_rows_per_file=500)
    shutil.copytree(a, b)

    def ds() -> lance.LanceDataset:
        return lance.dataset(str(a))

    replay(a, b, lambda: ds().create_index("v", "IVF_FLAT", num_partitions=2))
    replay(a, b, lambda: ds().create_scalar_index("a", "BTREE"))
    replay(a, b, lambda: lance.write_dataset(vec_table(1000, 500), str(a), mode="append"))
    replay(a, b, lambda: ds().optimize.optimize_indices(num_indices_to_merge=0))
    replay(a, b, lambda: lance.write_dataset(vec_table(1500, 500), str(a), mode="append"))
    replay(a, b, lambda: ds().delete("a < 1500"))  # every segment of both indices empty
    assert len(ds().describe_indices()) == 2
    replay(a, b, lambda: lance.write_dataset(vec_table(2000, 300), str(a), mode="append"))
    replay(a, b, lambda: ds().optimize.compact_files(target_rows_per_fragment=100_000))
    replay(a, b, lambda: ds().drop_index("a_idx"))
    assert lance.dataset(str(b)).describe_indices()[0].name == "v_idx"


def test_replay_stable_row_id_versions(tmp_path: Path) -> None:
    """created_at / last_updated_at follow rows through update and merge_insert."""
    a, b = tmp_path / "a", tmp_path / "b"
    lance.write_dataset(_table(0, 3000), str(a), max_rows_per_file=1000, enable_stable_row_ids=True)
    lance.write_dataset(_table(3000, 500), str(a), mode="append")
    shutil.copytree(a, b)

    def ds() -> lance.LanceDataset:
        return lance.dataset(str(a))

    replay(a, b, lambda: ds().update({"b": "'x'"}, where="a >= 3000 and a < 3010 or a = 5"))
    rows = pa.table({"a": pa.array([1, 3005, 9999], pa.int64()), "b": pa.array(["m"] * 3)})
    replay(
        a,
        b,
        lambda: (
            ds()
            .merge_insert("a")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(rows)
        ),
    )
    replay(a, b, lambda: ds().optimize.compact_files(target_rows_per_fragment=100_000))


# ---- the same operation written by hand, twice -------------------------------------------------


def _fragments_json(table: pa.Table, uri: Path, **kw: Any) -> list[Any]:
    return list(write_fragments(table, str(uri), **kw))


def _both(
    twin: Twin,
    lance_op: Any,
    txn_op: Any,
    *,
    read_version: int | None = None,
) -> int:
    a, b = twin.a, twin.b
    version = latest(a) if read_version is None else read_version
    lance.LanceDataset.commit(str(a), lance_op, read_version=version)
    sync_files(a, b)
    result = txn_engine.commit(b, Transaction(version, txn_op))
    assert result.version == latest(a)
    assert_same_version(a, b, result.version, ignore=("transaction_file",))
    assert_same_table(a, b)
    return result.version


def _lance_fields(path: Path) -> list[LanceField]:
    _, mf = read_manifest(open_storage(path))
    return [LanceField.from_proto(f) for f in mf.manifest.fields]


def test_api_append_delete_update_rewrite(twin: Twin) -> None:
    a = twin.a
    metas = _fragments_json(_table(3000, 700), a, max_rows_per_file=400)
    _both(
        twin,
        lance.LanceOperation.Append(metas),
        Append([Fragment.from_lance_json(m) for m in metas]),
    )
    ds = twin.ds()
    frag1 = ds.get_fragment(1)
    updated = frag1.delete("a < 1100")
    assert updated is not None
    _both(
        twin,
        lance.LanceOperation.Delete([updated], [2], "a < 1100 or a >= 2000 and a < 3000"),
        Delete([Fragment.from_lance_json(updated.to_json())], [2], "a < 1100 or ..."),
    )
    ds = twin.ds()
    replacement = ds.get_fragment(0).delete("a < 10")
    assert replacement is not None
    new = _fragments_json(_table(-10, 10), a)
    _both(
        twin,
        lance.LanceOperation.Update(
            removed_fragment_ids=[],
            updated_fragments=[replacement],
            new_fragments=new,
            fields_modified=[0],
        ),
        Update(
            updated_fragments=[Fragment.from_lance_json(replacement)],
            new_fragments=[Fragment.from_lance_json(m) for m in new],
            fields_modified=[0],
        ),
    )
    ds = twin.ds()
    olds = [f.metadata for f in ds.get_fragments()[:2]]
    rows = pa.concat_tables([f.to_table(with_row_id=True) for f in ds.get_fragments()[:2]])
    merged = _fragments_json(rows.drop(["_rowid"]), a)
    if twin.stable:
        # compaction keeps stable row ids: the new fragment carries the rows' ids
        seq = encode_row_id_sequence(rows["_rowid"].to_pylist())
        merged = [
            FragmentMetadata.from_json(
                json.dumps(
                    attrs.evolve(Fragment.from_lance_json(m), row_id_sequence=seq).to_lance_json()
                )
            )
            for m in merged
        ]
    _both(
        twin,
        lance.LanceOperation.Rewrite([lance.LanceOperation.RewriteGroup(olds, merged)], []),
        Rewrite(
            [
                RewriteGroup(
                    [Fragment.from_lance_json(o) for o in olds],
                    [Fragment.from_lance_json(m) for m in merged],
                )
            ]
        ),
    )


def test_api_schema_operations(twin: Twin) -> None:
    a = twin.a
    ds = twin.ds()
    new_frags = []
    schema = None
    for frag in ds.get_fragments():
        meta, schema = frag.merge_columns({"c": "a + 1"})
        new_frags.append(meta)
    assert schema is not None
    fields = _lance_fields(a)
    (c,) = arrow_to_lance_fields(
        pa.schema([pa.field("c", pa.int64())]), first_id=max(f.id for f in fields) + 1
    )
    _both(
        twin,
        lance.LanceOperation.Merge(new_frags, schema),
        Merge([Fragment.from_lance_json(m) for m in new_frags], [*fields, c]),
    )
    # Project has no pylance Python constructor keeping field ids; drop_columns and
    # alter_columns (replayed above) commit it.


def test_api_config_restore_overwrite_replacement(twin: Twin) -> None:
    a = twin.a
    UM = lance.LanceOperation.UpdateMap
    _both(
        twin,
        lance.LanceOperation.UpdateConfig(
            config_updates=UM({"k1": "v1", "k2": "v2"}),
            table_metadata_updates=UM({"t": "1"}, replace=True),
            schema_metadata_updates=UM({"s": "1"}),
            field_metadata_updates={1: UM({"f": "x"})},
        ),
        UpdateConfig(
            config_updates=UpdateMap({"k1": "v1", "k2": "v2"}),
            table_metadata_updates=UpdateMap({"t": "1"}, replace=True),
            schema_metadata_updates=UpdateMap({"s": "1"}),
            field_metadata_updates={1: UpdateMap({"f": "x"})},
        ),
    )
    _both(twin, lance.LanceOperation.Restore(1), Restore(1))
    # add a column file to fragment 0, then replace that file (DataReplacement)
    frag = twin.ds().get_fragment(0)
    col = pa.table({"b": pa.array([f"R{i}" for i in range(frag.physical_rows)])})
    fields = _lance_fields(a)
    b_id = next(f.id for f in fields if f.name == "b")
    meta = frag.metadata
    files = meta.data_files()
    assert [f.fields for f in files] == [[0, b_id]]
    # both columns live in one file: replacing [0, b] means rewriting both columns
    both_cols = pa.table({"a": frag.to_table()["a"], "b": col["b"]})
    path = "replacement.lance"
    from lance.file import LanceFileWriter

    writer = LanceFileWriter(str(a / "data" / path))
    writer.write_batch(both_cols)
    writer.close()
    size = (a / "data" / path).stat().st_size
    new_file = lance.fragment.DataFile(path, [0, b_id], [0, 1], 2, 2, size)
    _both(
        twin,
        lance.LanceOperation.DataReplacement(
            [lance.LanceOperation.DataReplacementGroup(0, new_file)]
        ),
        DataReplacement([DataReplacementGroup(0, DataFile(path, [0, b_id], [0, 1], 2, 2, size))]),
    )
    # a single column out of a two-column file: pylance 14 tombstones it in the old file
    frag = twin.ds().get_fragment(1)
    path = "replacement-b.lance"
    writer = LanceFileWriter(str(a / "data" / path))
    writer.write_batch(pa.table({"b": pa.array(["Z"] * frag.physical_rows)}))
    writer.close()
    size = (a / "data" / path).stat().st_size
    _both(
        twin,
        lance.LanceOperation.DataReplacement(
            [
                lance.LanceOperation.DataReplacementGroup(
                    1, lance.fragment.DataFile(path, [b_id], [0], 2, 2, size)
                )
            ]
        ),
        DataReplacement([DataReplacementGroup(1, DataFile(path, [b_id], [0], 2, 2, size))]),
    )
    _, mf = read_manifest(open_storage(twin.b))
    assert [list(f.fields) for f in mf.manifest.fragments[1].files] == [[0, -2], [b_id]]
    metas = _fragments_json(_table(0, 50), a)
    schema = _table(0, 1).schema
    _both(
        twin,
        lance.LanceOperation.Overwrite(schema, metas),
        Overwrite(
            [Fragment.from_lance_json(m) for m in metas],
            arrow_to_lance_fields(schema),
        ),
    )


def test_api_clone(twin: Twin, tmp_path: Path) -> None:
    ca, cb = tmp_path / "clone-a", tmp_path / "clone-b"
    lance.LanceDataset.commit(
        str(ca), lance.LanceOperation.Clone(True, None, 1, str(twin.a), None), read_version=1
    )
    txn_engine.commit(cb, Transaction(1, Clone(1, str(twin.b))))
    _, fa = read_manifest(open_storage(ca))
    _, fb = read_manifest(open_storage(cb))
    assert [p.path for p in fa.manifest.base_paths] == [str(twin.a)]
    assert [p.path for p in fb.manifest.base_paths] == [str(twin.b)]
    ma = _normalized(fa.manifest, ignore=("base_paths", "transaction_file"))
    mb = _normalized(fb.manifest, ignore=("base_paths", "transaction_file"))
    assert mb.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE  # inline only (default)
    mb.writer_feature_flags &= ~FLAG_DISABLE_TRANSACTION_FILE
    assert ma == mb
    assert lance.dataset(str(ca)).to_table().equals(lance.dataset(str(cb)).to_table())


# ---- operations pylance's Python API cannot express -------------------------------------------


def test_reserve_fragments_then_pylance_appends_after_the_reserved_range(twin: Twin) -> None:
    b = twin.b
    txn_engine.commit(b, Transaction(1, ReserveFragments(5)))
    _, mf = read_manifest(open_storage(b))
    assert mf.manifest.max_fragment_id == 2 + 5
    lance.write_dataset(_table(3000, 10), str(b), mode="append")
    ids = [f.fragment_id for f in lance.dataset(str(b)).get_fragments()]
    assert ids == [0, 1, 2, 8]
    assert lance.dataset(str(b)).count_rows() == 3010


def test_update_bases_is_read_and_extended_by_pylance(twin: Twin) -> None:
    b = twin.b
    txn_engine.commit(
        b,
        Transaction(1, UpdateBases([BasePath(0, "file:///tmp/elsewhere", name="other")])),
    )
    _, mf = read_manifest(open_storage(b))
    assert [(p.id, p.name, p.path) for p in mf.manifest.base_paths] == [
        (1, "other", "file:///tmp/elsewhere")
    ]
    assert mf.manifest.reader_feature_flags & 16
    assert lance.dataset(str(b)).count_rows() == 3000
    lance.write_dataset(_table(3000, 10), str(b), mode="append")
    ds = lance.dataset(str(b))
    assert ds.count_rows() == 3010
    _, mf = read_manifest(open_storage(b))
    assert [p.name for p in mf.manifest.base_paths] == ["other"]


# ---- invalid operations are refused before anything is written --------------------------------


def _files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda fr, tw: Delete(deleted_fragment_ids=[42]), id="unknown-fragment"),
        pytest.param(lambda fr, tw: Delete(deleted_fragment_ids=[1, 1]), id="duplicate-id"),
        pytest.param(
            lambda fr, tw: Append(
                [attrs.evolve(fr, files=[attrs.evolve(fr.files[0], fields=(0, 7))])]
            ),
            id="schema-mismatch",
        ),
        pytest.param(
            lambda fr, tw: Append(
                [attrs.evolve(fr, files=[attrs.evolve(fr.files[0], file_minor_version=0)])]
            ),
            id="data-format-mismatch",
        ),
        pytest.param(
            lambda fr, tw: Merge([fr.with_id(0)], [LanceField(0, -1, "a", "int64")]),
            id="merge-drops-fragments",
        ),
        pytest.param(lambda fr, tw: Clone(1, str(tw.a)), id="clone-onto-existing"),
        pytest.param(
            lambda fr, tw: UpdateMemWalState(added=[MemWal(MemWalId("r", 0))]),
            id="mem-wal-layout-pylance-14-cannot-read",
        ),
        pytest.param(
            lambda fr, tw: UpdateBases([BasePath(0, "a"), BasePath(0, "a")]), id="duplicate-base"
        ),
    ],
)
def test_invalid_operations_write_nothing(
    twin: Twin, make: Callable[[Fragment, Twin], Any]
) -> None:
    b = twin.b
    frag = Fragment.from_lance_json(twin.ds().get_fragment(0).metadata)
    frag = attrs.evolve(frag, id=0)
    before = _files(b)
    with pytest.raises((InvalidOperationError, txn_engine.errors.DatasetAlreadyExistsError)):
        txn_engine.commit(b, Transaction(1, make(frag, twin)))
    assert _files(b) == before


# ---- alternating writers ------------------------------------------------------------------------


def read_with_txn_engine(path: Path) -> pa.Table:
    """The table as txn_engine sees it: its manifest, its deletion vectors; columns decoded
    per data file with pylance's file reader (reading Lance data files is not txn_engine's
    job)."""
    ds = txn_engine.Dataset.open(path)
    schema = fields_to_arrow(list(ds.manifest_pb.fields), {})
    by_id = {f.id: f.name for f in ds.manifest_pb.fields}
    parts = []
    for frag in ds.manifest_pb.fragments:
        columns: dict[str, pa.Array] = {}
        for df in frag.files:
            data = LanceFileReader(str(path / "data" / df.path)).read_all().to_table()
            for i, field_id in enumerate(df.fields):
                if field_id in by_id and field_id >= 0:
                    columns[by_id[field_id]] = data.column(i)
        table = pa.table({f.name: columns[f.name] for f in schema})
        if frag.HasField("deletion_file"):
            deleted = read_deletion_vector(ds.storage, frag.id, frag.deletion_file)
            keep = np.ones(frag.physical_rows, dtype=bool)
            keep[np.array(list(deleted), dtype=np.int64)] = False
            table = table.filter(pa.array(keep))
        parts.append(table.cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("a").select(sorted(table.column_names))


def test_alternating_writers(tmp_path: Path) -> None:
    """24 versions, pylance (P) and txn_engine (T) taking turns; the reference is a plain
    pyarrow table the test updates alongside."""
    uri = tmp_path / "alt"
    ref = _table(0, 300)
    lance.write_dataset(ref, str(uri), max_rows_per_file=100)  # v1 P

    def check() -> None:
        expected = _sorted(ref)
        assert _sorted(lance.dataset(str(uri)).to_table()).equals(expected)
        assert _sorted(read_with_txn_engine(uri)).equals(expected)

    def frags(table: pa.Table) -> list[Any]:
        return list(write_fragments(table, str(uri), max_rows_per_file=100))

    def p_append(start: int, n: int) -> Callable[[], None]:
        def run() -> None:
            nonlocal ref
            t = _table(start, n)
            if "c" in ref.column_names:
                t = t.append_column("c", pc.multiply(t["a"], 2))
            lance.write_dataset(t, str(uri), mode="append")
            ref = pa.concat_tables([ref, t.select(ref.column_names)])

        return run

    def t_append(start: int, n: int) -> Callable[[], None]:
        def run() -> None:
            nonlocal ref
            t = _table(start, n)
            if "c" in ref.column_names:
                t = t.append_column("c", pc.multiply(t["a"], 2))
            t = t.select(ref.column_names)
            planned_at = lance.dataset(str(uri)).version  # pinned before writing the data
            writers.append_fragments(uri, frags(t), read_version=planned_at)
            ref = pa.concat_tables([ref, t])

        return run

    def p_delete(predicate: str, mask: Callable[[pa.Table], pa.Array]) -> Callable[[], None]:
        def run() -> None:
            nonlocal ref
            lance.dataset(str(uri)).delete(predicate)
            ref = ref.filter(pc.invert(mask(ref)))

        return run

    def t_delete_where(mask: Callable[[pa.Table], pa.Array]) -> Callable[[], None]:
        """txn_engine deletes by offsets: find the offsets of matching rows per fragment."""

        def run() -> None:
            nonlocal ref
            for frag in lance.dataset(str(uri)).get_fragments():
                t = frag.to_table(with_row_address=True)
                hit = mask(t)
                offsets = [int(addr) & 0xFFFFFFFF for addr in t.filter(hit)["_rowaddr"].to_pylist()]
                if offsets:
                    writers.delete_rows(uri, frag.fragment_id, offsets)
            ref = ref.filter(pc.invert(mask(ref)))

        return run

    def p_config(key: str) -> Callable[[], None]:
        return lambda: lance.dataset(str(uri)).update_config({key: "p"})

    def t_config(key: str) -> Callable[[], None]:
        return lambda: writers.update_config(uri, {key: "t"}).version and None

    def p_add_column() -> None:
        nonlocal ref
        lance.dataset(str(uri)).add_columns({"c": "a * 2"})
        ref = ref.append_column("c", pc.multiply(ref["a"], 2))

    def t_drop_then_readd() -> None:
        nonlocal ref
        ds = txn_engine.Dataset.open(uri)
        kept = [LanceField.from_proto(f) for f in ds.manifest_pb.fields if f.name != "c"]
        txn_engine.commit(uri, Transaction(ds.version, Project(kept)))
        ref = ref.drop(["c"])

    def t_add_column() -> None:
        nonlocal ref
        lds = lance.dataset(str(uri))
        metas = []
        for frag in lds.get_fragments():
            meta, _schema = frag.merge_columns({"c": "a * 2"})
            metas.append(meta)
        ds = txn_engine.Dataset.open(uri)
        fields = [LanceField.from_proto(f) for f in ds.manifest_pb.fields]
        new_id = Fragment.from_lance_json(metas[0]).files[-1].fields[0]
        writers.add_columns(
            uri,
            metas,
            [*fields, *arrow_to_lance_fields(pa.schema([("c", pa.int64())]), first_id=new_id)],
            read_version=ds.version,
        )
        ref = ref.append_column("c", pc.multiply(ref["a"], 2))

    def p_index() -> None:
        lance.dataset(str(uri)).create_scalar_index("a", "BTREE", replace=True)

    def p_compact() -> None:
        lance.dataset(str(uri)).optimize.compact_files(target_rows_per_fragment=1000)

    def t_compact() -> None:
        """Compaction planned and executed by pylance, committed by txn_engine."""
        lds = lance.dataset(str(uri))
        olds = lds.get_fragments()[:2]
        rows = pa.concat_tables([f.to_table() for f in olds])
        news = frags(rows.select(lds.schema.names))
        ds = txn_engine.Dataset.open(uri)
        reserve = txn_engine.commit(uri, Transaction(ds.version, ReserveFragments(len(news))))
        high = txn_engine.Dataset.open(uri).manifest_pb.max_fragment_id
        new_frags = [
            Fragment.from_lance_json(m).with_id(high - len(news) + 1 + i)
            for i, m in enumerate(news)
        ]
        group = RewriteGroup([Fragment.from_lance_json(f.metadata) for f in olds], new_frags)
        txn_engine.commit(uri, Transaction(reserve.version, Rewrite([group])))

    def t_overwrite() -> None:
        nonlocal ref
        t = _table(10_000, 150).append_column("c", pc.multiply(_table(10_000, 150)["a"], 2))
        writers.overwrite(uri, frags(t), t.schema)
        ref = t

    steps = [
        ("T append", t_append(300, 120)),
        ("P append", p_append(420, 80)),
        ("T delete", t_delete_where(lambda t: pc.less(t["a"], 7))),
        (
            "P delete",
            p_delete(
                "a >= 100 AND a < 130",
                lambda t: pc.and_(pc.greater_equal(t["a"], 100), pc.less(t["a"], 130)),
            ),
        ),
        ("T config", t_config("t.one")),
        ("P config", p_config("p.one")),
        ("P add column", p_add_column),
        ("T append", t_append(500, 60)),
        ("P index", p_index),
        ("T delete", t_delete_where(lambda t: pc.equal(pc.bit_wise_and(t["a"], 15), 3))),
        ("P compact", p_compact),
        ("T append", t_append(560, 40)),
        ("T drop column", t_drop_then_readd),
        ("T add column", t_add_column),
        ("P delete", p_delete("a > 590", lambda t: pc.greater(t["a"], 590))),
        ("T compact", t_compact),
        ("P append", p_append(600, 30)),
        ("T config", t_config("t.two")),
        ("T delete", t_delete_where(lambda t: pc.less(t["a"], 20))),
        ("T overwrite", t_overwrite),
        ("P append", p_append(20_000, 10)),
        ("T delete", t_delete_where(lambda t: pc.greater(t["a"], 20_005))),
    ]
    versions = [latest(uri)]
    for name, step in steps:
        step()
        versions.append(latest(uri))
        assert versions[-1] > versions[-2], name
        check()
    assert latest(uri) >= 24
    ds = txn_engine.Dataset.open(uri)
    assert ds.config["t.one"] == "t"
    assert ds.config["p.one"] == "p"
    assert ds.config["t.two"] == "t"
    writers_seen = {
        read_manifest(open_storage(uri), v)[1].manifest.writer_version.library
        for v in range(1, latest(uri) + 1)
    }
    assert writers_seen == {"lance", "txn_engine"}


def test_writer_delete_rows_encodings_and_full_fragment(tmp_path: Path) -> None:
    uri = tmp_path / "del"
    lance.write_dataset(_table(0, 12_000), str(uri), max_rows_per_file=6000)
    r = writers.delete_rows(uri, 0, range(0, 10))
    _, mf = read_manifest(open_storage(uri))
    assert mf.manifest.fragments[0].deletion_file.file_type == 0  # .arrow below 5 000
    r = writers.delete_rows(uri, 0, range(5, 5200))  # cumulative: 5 200 rows -> .bin
    frag = read_manifest(open_storage(uri))[1].manifest.fragments[0]
    assert frag.deletion_file.file_type == 1
    assert frag.deletion_file.num_deleted_rows == 5200
    assert read_deletion_vector(open_storage(uri), 0, frag.deletion_file) == BitMap(range(5200))
    assert lance.dataset(str(uri)).count_rows() == 12_000 - 5200
    r = writers.delete_rows(uri, 1, range(6000))  # every row: the fragment goes
    assert r.transaction.operation.deleted_fragment_ids == (1,)
    assert [f.fragment_id for f in lance.dataset(str(uri)).get_fragments()] == [0]
    with pytest.raises(InvalidOperationError):
        writers.delete_rows(uri, 0, [6000])
    with pytest.raises(InvalidOperationError):
        writers.delete_rows(uri, 7, [1])


def test_writers_create_overwrite_config_restore(tmp_path: Path) -> None:
    uri = tmp_path / "w"
    uri.mkdir()
    first = _table(0, 20)
    # pylance writes the data files; txn_engine creates the dataset around them
    metas = write_fragments(first, str(uri))
    created = writers.overwrite(uri, metas, first.schema.with_metadata({"owner": "me"}))
    assert created.version == 1
    ds = lance.dataset(str(uri))
    assert ds.to_table().equals(first)
    assert ds.schema.metadata == {b"owner": b"me"}
    r = writers.update_config(
        uri,
        {"a": "1", "b": "2"},
        table_metadata={"t": "x"},
        field_metadata={0: {"unit": "m"}},
    )
    assert r.version == 2
    r = writers.update_config(uri, {"a": None})
    ds = txn_engine.Dataset.open(uri)
    assert ds.config == {"b": "2"}
    assert dict(ds.manifest_pb.table_metadata) == {"t": "x"}
    assert dict(ds.manifest_pb.fields[0].metadata) == {"unit": b"m"}
    assert lance.dataset(str(uri)).config() == {"b": "2"}
    r = writers.update_config(uri, {"only": "1"}, replace=True)
    assert txn_engine.Dataset.open(uri).config == {"only": "1"}
    second = _table(100, 5)
    r = writers.overwrite(uri, write_fragments(second, str(uri)), second.schema)
    ds = lance.dataset(str(uri))
    assert ds.to_table().equals(second)
    assert ds.config() == {"only": "1"}  # config survives an overwrite
    assert [f.fragment_id for f in ds.get_fragments()] == [1]  # after the high-water mark
    back = writers.restore(uri, 1)
    assert back.version == r.version + 1
    assert lance.dataset(str(uri)).to_table().equals(first)
    assert lance.dataset(str(uri)).config() == {}
    # and pylance keeps writing on top
    lance.write_dataset(_table(20, 5), str(uri), mode="append")
    assert lance.dataset(str(uri)).count_rows() == 25
