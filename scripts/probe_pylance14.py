"""Probe which protobuf fields pylance 14.0.2 writes that a reference set of .proto files lacks.

Usage:
    .venv/bin/python scripts/probe_pylance14.py [--protos mirror|project|DIR] [--keep DIR]
                                                 [--raw] [--debug] [--only CASE ...]

What it does:
  1. Compiles a reference proto set (default ``mirror``: the upstream 1.0.0-beta.1 protos read
     from a git clone of lancedb/lance named by ``$LANCE_REPO`` (a bare clone works);
     ``project``: this repo's ``protos/``, the default without ``$LANCE_REPO``; or a
     directory) into a temporary Python module set.
  2. In a temporary directory, drives pylance (``import lance``) through every commit path its
     Python API offers (one *case* per step), labelling each new ``*.manifest`` / ``*.txn`` file
     with the case that produced it.
  3. Decodes every labelled file (manifest footer -> Manifest; the inline Transaction at the
     offset in Manifest field 23 or 21; the IndexSection; ``.txn`` files; inline row-id and
     row-version sequences) with the reference protos and walks each message.  Every field on
     the wire is recorded as (message type, field number) -> cases.  Fields the reference protos
     do not declare come from protobuf's unknown-field set and are decoded raw (nested fields
     too), so the report shows their wire type, sample values and which cases produced them.
  4. Prints: on-disk facts (footer versions, file names, hint file, feature flags, writer
     version, row-id encodings), then one table per message type.  Unknown fields are marked
     ``NEW`` with the name inferred in ``INFERRED`` below.

With ``--protos project`` the NEW rows are exactly the fields the project protos still lack, so
the script doubles as a completeness check after the protos change.  Runs in well under two
minutes on two cores.  Exit status is 0 even when NEW fields exist (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# a git clone of lancedb/lance (the upstream protos are read from its HEAD); optional
MIRROR = Path(os.environ.get("LANCE_REPO", "") or ROOT / ".no-lance-repo")
PROTO_FILES = ["file.proto", "rowids.proto", "table.proto", "transaction.proto"]

# Names inferred for fields the upstream 1.0.0-beta.1 protos lack.  Key: (message, number).
# Evidence for each is in docs/format-notes.md; the probe prints these next to NEW rows.
INFERRED: dict[tuple[str, int], str] = {
    ('lance.table.Manifest', 23): 'transaction_section (uint64 offset of inline Transaction)',
    ('lance.file.Field', 13): 'unenforced_primary_key_position (uint32)',
    ('lance.file.Field', 15): 'unenforced_clustering_key_position (uint32)',
    ('lance.table.DataFragment', 11): 'overlays (repeated DataOverlayFile)',
    ('lance.table.IndexMetadata', 10): 'files (repeated IndexFile)',
    ('lance.table.IndexMetadata#10', 1): 'IndexFile.path (string)',
    ('lance.table.IndexMetadata#10', 2): 'IndexFile.size_bytes (uint64)',
    ('lance.table.IndexMetadata', 11): 'covering_fields (repeated int32, packed)',
    ('lance.table.Transaction.Merge', 4): 'preserves_nullability (bool)',
    ('lance.table.Transaction.Project', 2): 'preserves_nullability (bool)',
    ('lance.table.Transaction.Rewrite.RewrittenIndex', 5): 'new_index_files (repeated IndexFile)',
    ('lance.table.Transaction.Rewrite.RewrittenIndex#5', 1): 'IndexFile.path (string)',
    ('lance.table.Transaction.Rewrite.RewrittenIndex#5', 2): 'IndexFile.size_bytes (uint64)',
    ('lance.table.Transaction.Update', 8): 'inserted_rows (KeyExistenceFilter)',
    ('lance.table.Transaction.Update#8', 1): 'key field ids (repeated int32, packed)',
    ('lance.table.Transaction.Update#8', 3): 'bloom filter (message)',
    ('lance.table.Transaction.Update#8#3', 1): 'bloom bitset (bytes)',
    ('lance.table.Transaction.Update#8#3', 2): 'num_bits (uint64)',
    ('lance.table.Transaction.Update#8#3', 3): 'expected items (uint64)',
    ('lance.table.Transaction.Update#8#3', 4): 'false-positive probability (double)',
    ('lance.table.Transaction.Update', 10): 'updated_fragment_offset_bitmaps (map<uint64, bytes>)',
    ('lance.table.Transaction.Update#10', 1): 'key: fragment id (uint64)',
    ('lance.table.Transaction.Update#10', 2): 'value: portable RoaringBitmap (bytes)',
    ('lance.table.Transaction', 115): 'data_overlay (Transaction.DataOverlay)',
    ('lance.table.Transaction#115', 1): 'groups (repeated DataOverlayGroup)',
    ('lance.table.Transaction#115#1', 1): 'fragment_id (uint64)',
    ('lance.table.Transaction#115#1', 2): 'overlays (repeated DataOverlayFile)',
    ('lance.table.DataFragment#11', 1): 'data_file (DataFile)',
    ('lance.table.DataFragment#11', 2): 'dense offsets (bytes, portable RoaringBitmap)',
    ('lance.table.DataFragment#11', 3): 'committed_version (uint64; stamped at commit)',
    ('lance.table.DataFragment#11', 4): 'sparse coverage (message)',
    ('lance.table.DataFragment#11#4', 1): 'per-field offsets (repeated bytes, RoaringBitmap)',
    ('lance.table.DataFragment#11#1', 1): 'DataFile.path (string)',
    ('lance.table.DataFragment#11#1', 2): 'DataFile.fields (repeated int32, packed)',
    ('lance.table.DataFragment#11#1', 3): 'DataFile.column_indices (repeated int32, packed)',
    ('lance.table.DataFragment#11#1', 4): 'DataFile.file_major_version (uint32)',
    ('lance.table.DataFragment#11#1', 5): 'DataFile.file_minor_version (uint32)',
    ('lance.table.DataFragment#11#1', 6): 'DataFile.file_size_bytes (uint64)',
    ('lance.table.Transaction#115#1#2', 1): 'data_file (DataFile)',
    ('lance.table.Transaction#115#1#2', 2): 'dense offsets (bytes, portable RoaringBitmap)',
    ('lance.table.Transaction#115#1#2', 3): 'committed_version (uint64; stamped at commit)',
    ('lance.table.Transaction#115#1#2', 4): 'sparse coverage (message)',
    ('lance.table.Transaction#115#1#2#4', 1): 'per-field offsets (repeated bytes, RoaringBitmap)',
    ('lance.table.Transaction#115#1#2#1', 1): 'DataFile.path (string)',
    ('lance.table.Transaction#115#1#2#1', 2): 'DataFile.fields (repeated int32, packed)',
    ('lance.table.Transaction#115#1#2#1', 3): 'DataFile.column_indices (repeated int32, packed)',
    ('lance.table.Transaction#115#1#2#1', 4): 'DataFile.file_major_version (uint32)',
    ('lance.table.Transaction#115#1#2#1', 5): 'DataFile.file_minor_version (uint32)',
    ('lance.table.Transaction#115#1#2#1', 6): 'DataFile.file_size_bytes (uint64)',
    ('lance.table.MemWalIndexDetails', 2): 'MemWAL system index (redesigned; opaque)',
    ('lance.table.MemWalIndexDetails', 7): 'MemWAL system index (redesigned; opaque)',
    ('lance.table.MemWalIndexDetails', 9): 'MemWAL system index (redesigned; opaque)',
    ('lance.table.MemWalIndexDetails', 12): 'MemWAL system index (redesigned; opaque)',
}

WIRE = {0: "varint", 1: "i64", 2: "len", 5: "i32"}


# --------------------------------------------------------------------------- protos


def compile_protos(choice: str, out: Path) -> dict[str, Any]:
    """Compile the chosen reference protos into ``out`` and import them."""
    src = out / "protos"
    src.mkdir(parents=True)
    if choice == "mirror":
        for name in PROTO_FILES:
            text = subprocess.run(
                ["git", "-C", str(MIRROR), "show", f"HEAD:protos/{name}"],
                check=True, capture_output=True, text=True,
            ).stdout
            (src / name).write_text(text)
    else:
        d = ROOT / "protos" if choice == "project" else Path(choice)
        for name in PROTO_FILES:
            shutil.copy(d / name, src / name)
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    gen = out / "gen"
    gen.mkdir()
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{include}",
         f"--python_out={gen}", *PROTO_FILES],
        check=True, cwd=src,
    )
    sys.path.insert(0, str(gen))
    return {n: importlib.import_module(n) for n in
            ("file_pb2", "rowids_pb2", "table_pb2", "transaction_pb2")}


# --------------------------------------------------------------------------- raw wire decoding


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def raw_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Split ``buf`` into (field number, wire type, value); raise ValueError if not protobuf."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise ValueError("field 0")
        if wt == 0:
            val, pos = read_varint(buf, pos)
        elif wt == 1:
            val = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wt == 5:
            val = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        elif wt == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated")
            val = bytes(buf[pos:pos + n])
            pos += n
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, val))
    return out


def is_text(val: bytes) -> bool:
    try:
        return val.decode().isprintable()
    except UnicodeDecodeError:
        return False


def summarize(wt: int, val: Any) -> str:
    if wt != 2:
        return str(val)
    try:
        s = val.decode()
        if s.isprintable():
            return repr(s if len(s) <= 60 else s[:57] + "...")
    except UnicodeDecodeError:
        pass
    return f"<{len(val)} bytes {val[:12].hex()}>"


# --------------------------------------------------------------------------- recording


class Report:
    def __init__(self) -> None:
        # (msg, num) -> {"name", "wt", "known", "cases": set, "samples": list}
        self.fields: dict[tuple[str, int], dict[str, Any]] = {}
        self.facts: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.errors: list[str] = []

    def add(self, msg: str, num: int, name: str, wt: str, known: bool, case: str,
            sample: str | None = None) -> None:
        e = self.fields.setdefault(
            (msg, num), {"name": name, "wt": wt, "known": known, "cases": set(), "samples": []})
        e["cases"].add(case)
        if sample is not None and len(e["samples"]) < 3 and sample not in e["samples"]:
            e["samples"].append(sample)

    def fact(self, key: str, value: Any, case: str) -> None:
        self.facts[key][str(value)].add(case)


FD_TYPE_WT = {
    1: "i64", 2: "i32", 3: "varint", 4: "varint", 5: "varint", 6: "i64", 7: "i32", 8: "varint",
    9: "len", 10: "group", 11: "len", 12: "len", 13: "varint", 14: "varint", 15: "i32",
    16: "i64", 17: "varint", 18: "varint",
}


class Walker:
    """Walks raw protobuf bytes guided by the reference descriptors.

    Every field on the wire is recorded.  A field number the descriptor lacks is NEW and its
    bytes are decoded raw (recursively).  A declared field whose bytes do not fit its declared
    type (bad UTF-8 in a string, wrong wire type, undecodable sub-message) is recorded as a
    MISMATCH: the number was reused with another type.
    """

    def __init__(self, pb: dict[str, Any], report: Report) -> None:
        self.pb = pb
        self.r = report
        from google.protobuf import unknown_fields

        self.unknown = unknown_fields.UnknownFieldSet
        self.nested_bytes = {
            ("lance.table.DataFragment", 5): pb["rowids_pb2"].RowIdSequence.DESCRIPTOR,
            ("lance.table.DataFragment", 7):
                pb["rowids_pb2"].RowDatasetVersionSequence.DESCRIPTOR,
            ("lance.table.DataFragment", 9):
                pb["rowids_pb2"].RowDatasetVersionSequence.DESCRIPTOR,
        }

    def walk_bytes(self, desc: Any, data: bytes, case: str) -> None:
        full = desc.full_name
        fields = raw_fields(data)
        if full == "google.protobuf.Any":
            url = next((v.decode() for n, _, v in fields if n == 1), "")
            self.r.fact("Any type_url", url, case)
            for n, w, v in fields:
                self.r.add(full, n, {1: "type_url", 2: "value"}.get(n, "?"), WIRE[w], True,
                           case, summarize(w, v) if n == 1 else None)
                if n == 2:
                    name = url.rsplit("/", 1)[-1]
                    try:
                        inner = desc.file.pool.FindMessageTypeByName(name)
                    except KeyError:
                        inner = None
                    if inner is not None:
                        self.walk_bytes(inner, v, case)
                    else:  # a type the reference protos do not define: opaque to a table writer
                        self.r.fact("Any payload types not in the reference protos", name, case)
            return
        for num, wt, val in fields:
            fd = desc.fields_by_number.get(num)
            if fd is None:
                self.raw(full, num, wt, val, case, 0)
                continue
            expect = FD_TYPE_WT.get(fd.type, "?")
            packed = fd.is_repeated and wt == 2 and expect in ("varint", "i32", "i64")
            ok = WIRE.get(wt) == expect or packed
            sample: str | None = None
            if ok and fd.type == fd.TYPE_STRING:
                try:
                    val.decode()
                except UnicodeDecodeError:
                    ok = False
            if ok and fd.type == fd.TYPE_MESSAGE:
                try:
                    raw_fields(val)
                except (ValueError, IndexError, struct.error):
                    ok = False
            if fd.type != fd.TYPE_MESSAGE:
                if packed:
                    sample = f"packed <{len(val)}B {val[:8].hex()}>"
                elif fd.type == fd.TYPE_BYTES:
                    sample = f"<{len(val)}B {val[:8].hex()}>"
                elif wt == 0 and fd.type in (fd.TYPE_INT32, fd.TYPE_INT64) and val >= 2**63:
                    sample = str(val - 2**64)
                else:
                    sample = summarize(wt, val)
            if not ok:
                self.r.add(full, num, f"MISMATCH: declared {fd.name} (type {fd.type})",
                           WIRE.get(wt, str(wt)), False, case, summarize(wt, val))
                self.raw(full + f"#{num}", None, wt, val, case, 0)
                continue
            self.r.add(full, num, fd.name, expect, True, case, sample)
            if fd.type == fd.TYPE_MESSAGE:
                self.walk_bytes(fd.message_type, val, case)
            nested = self.nested_bytes.get((full, num))
            if nested is not None:
                self.walk_bytes(nested, val, case)

    def raw(self, parent: str, num: int | None, wt: int, data: Any, case: str,
            depth: int) -> None:
        """Record an undeclared field (num) and decode its bytes raw as ``parent#num``."""
        if num is not None:
            self.r.add(parent, num, INFERRED.get((parent, num), "?"), WIRE.get(wt, str(wt)),
                       False, case, summarize(wt, data))
            path = f"{parent}#{num}"
        else:
            path = parent
        if wt == 2 and depth < 8 and data and not is_text(data):
            try:
                sub = raw_fields(data)
            except (ValueError, IndexError, struct.error):
                return
            if all(n < 100000 for n, _, _ in sub):
                for n, w, v in sub:
                    self.raw(path, n, w, v, case, depth + 1)


# --------------------------------------------------------------------------- files


def decode_manifest_file(path: Path, pb: dict[str, Any], walker: Walker, case: str,
                         txn_bytes: dict[str, bytes]) -> None:
    r = walker.r
    data = path.read_bytes()
    pos, major, minor, magic = struct.unpack("<QHH4s", data[-16:])
    r.fact("manifest footer (major, minor, magic)", (major, minor, magic), case)
    r.fact("manifest file name style",
           "V2 (u64::MAX - v, zero-padded 20 digits)" if len(path.stem) == 20 else
           f"other: {path.name}", case)
    (mlen,) = struct.unpack_from("<I", data, pos)
    m = pb["table_pb2"].Manifest()
    m.ParseFromString(data[pos + 4:pos + 4 + mlen])
    r.fact("manifest protobuf ends 16 bytes before EOF", pos + 4 + mlen == len(data) - 16, case)
    walker.walk_bytes(m.DESCRIPTOR, data[pos + 4:pos + 4 + mlen], case)
    r.fact("writer_version", (m.writer_version.library, m.writer_version.version), case)
    r.fact("data_format", (m.data_format.file_format, m.data_format.version), case)
    r.fact("(reader_feature_flags, writer_feature_flags)",
           (m.reader_feature_flags, m.writer_feature_flags), case)
    for f in m.fragments:
        for df in f.files:
            r.fact("DataFile (major, minor)", (df.file_major_version, df.file_minor_version), case)
        if f.HasField("deletion_file"):
            dfl = f.deletion_file
            ext = "arrow" if dfl.file_type == 0 else "bin"
            r.fact("deletion file name",
                   f"_deletions/{{frag}}-{{read_version}}-{{id}}.{ext} "
                   f"(type {dfl.file_type}, example {f.id}-{dfl.read_version}-{dfl.id}.{ext})",
                   case)
        which = f.WhichOneof("row_id_sequence")
        if which == "inline_row_ids":
            seq = pb["rowids_pb2"].RowIdSequence()
            seq.ParseFromString(f.inline_row_ids)
            kinds = [s.WhichOneof("segment") for s in seq.segments]
            r.fact("row id segment kinds", kinds, case)
        elif which:
            r.fact("row id storage", which, case)
    # transaction offsets: field 21 is known upstream; 23 is new (raw)
    uf = {u.field_number: u for u in walker.unknown(m)}
    f21 = m.transaction_section if m.HasField("transaction_section") else None
    f23 = uf[23].data if 23 in uf else None
    r.fact("Manifest field 21 / field 23 present", (f21 is not None, f23 is not None), case)
    off = f23 if f23 is not None else f21
    if off is not None:
        (tlen,) = struct.unpack_from("<I", data, off)
        tb = data[off + 4:off + 4 + tlen]
        walker.walk_bytes(pb["transaction_pb2"].Transaction.DESCRIPTOR, tb, case)
        r.fact("inline transaction offset (field 23 value)", off, case)
        same = txn_bytes.get(m.transaction_file)
        r.fact("inline transaction bytes == _transactions/<transaction_file>",
               None if same is None else same == tb, case)
    order = [("manifest", pos)]
    if off is not None:
        order.append(("transaction", off))
    if m.HasField("index_section"):
        order.append(("index_section", m.index_section))
    r.fact("section order in the manifest file", [n for n, _ in sorted(order, key=lambda x: x[1])],
           case)
    if m.HasField("index_section"):
        (ilen,) = struct.unpack_from("<I", data, m.index_section)
        walker.walk_bytes(pb["table_pb2"].IndexSection.DESCRIPTOR,
                          data[m.index_section + 4:m.index_section + 4 + ilen], case)
        r.fact("index_section present", True, case)
    r.fact("transaction_file name",
           "{read_version}-{uuid}.txn" if re.fullmatch(
               r"\d+-[0-9a-f-]{36}\.txn", m.transaction_file) else m.transaction_file, case)


# --------------------------------------------------------------------------- cases


class Probe:
    def __init__(self, root: Path, report: Report, only: set[str] | None) -> None:
        self.root = root
        self.r = report
        self.only = only
        self.seen: set[Path] = set()
        self.labels: dict[Path, str] = {}
        self.hints: dict[Path, str] = {}

    def snap(self, label: str) -> None:
        """Label every manifest / txn / json file that appeared since the last snap."""
        for p in self.root.rglob("*"):
            if p.is_file() and p not in self.seen:
                self.seen.add(p)
                if p.suffix in (".manifest", ".txn"):
                    self.labels[p] = label
                elif p.name == "latest_version_hint.json":
                    pass
                elif p.suffix == ".json":
                    rel = p.relative_to(self.root)
                    self.r.fact(f"json file {re.sub(r'^[^/]+/', '', str(rel))}",
                                p.read_text()[:300], label)
        for p in self.root.rglob("latest_version_hint.json"):
            text = p.read_text()
            if self.hints.get(p) != text:
                self.hints[p] = text
                self.r.fact("latest_version_hint.json (when it changed)", text, label)

    def run(self, name: str, fn: Callable[[], None]) -> None:
        if self.only and not any(name.startswith(o) for o in self.only):
            return
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # report and continue: one failing API must not hide the rest
            self.r.errors.append(f"{name}: {type(e).__name__}: {e}".splitlines()[0][:300])
            if os.environ.get("PROBE_TRACE"):
                traceback.print_exc()
        self.snap(name)
        dt = time.time() - t0
        if dt > 5:
            self.r.errors.append(f"(slow case {name}: {dt:.1f}s)")


def cases(P: Probe) -> Iterator[tuple[str, Callable[[], None]]]:
    import lance
    import pyarrow as pa
    import pyarrow.compute as pc
    from lance import LanceOperation as Op
    from lance.fragment import DataFile, write_fragments

    R = P.root

    def tbl(n: int, start: int = 0) -> pa.Table:
        return pa.table({"a": pa.array(range(start, start + n), pa.int64()),
                         "b": pa.array([f"s{i}" for i in range(start, start + n)])})

    u = str(R / "basic")

    def create() -> None:
        lance.write_dataset(tbl(10), u)
    yield "create", create
    yield "append", lambda: lance.write_dataset(tbl(10, 10), u, mode="append")
    yield "delete_rows", lambda: lance.dataset(u).delete("a = 3")
    yield "delete_whole_fragment", lambda: lance.dataset(u).delete("a >= 10")
    yield "append2", lambda: lance.write_dataset(tbl(10000, 100), u, mode="append")
    # many deletions in one fragment -> BITMAP deletion file
    yield "delete_many", lambda: lance.dataset(u).delete("a >= 100 AND a % 10 != 0")
    yield "update_rows", lambda: lance.dataset(u).update({"b": "'x'"}, where="a < 5")
    yield "merge_insert_upsert", lambda: (
        lance.dataset(u).merge_insert("a").when_matched_update_all()
        .when_not_matched_insert_all().execute(tbl(5, 8)))
    yield "merge_insert_insert_only", lambda: (
        lance.dataset(u).merge_insert("a").when_not_matched_insert_all()
        .execute(tbl(3, 9000)))
    yield "add_columns_sql", lambda: lance.dataset(u).add_columns({"c": "a * 2"})
    yield "add_columns_null", lambda: lance.dataset(u).add_columns(
        pa.schema([pa.field("n", pa.int32())]))
    yield "drop_columns", lambda: lance.dataset(u).drop_columns(["c"])
    yield "alter_rename", lambda: lance.dataset(u).alter_columns({"path": "n", "name": "n2"})
    yield "alter_nullable_false", lambda: lance.dataset(u).alter_columns(
        {"path": "a", "nullable": False})
    yield "alter_type", lambda: lance.dataset(u).alter_columns(
        {"path": "n2", "data_type": pa.int64()})
    yield "create_btree_index", lambda: lance.dataset(u).create_scalar_index("a", "BTREE")
    yield "create_bitmap_index", lambda: lance.dataset(u).create_scalar_index("b", "BITMAP")
    yield "append_after_index", lambda: lance.write_dataset(tbl(5, 20000), u, mode="append")
    yield "optimize_indices", lambda: lance.dataset(u).optimize.optimize_indices()
    yield "compact_files", lambda: lance.dataset(u).optimize.compact_files(
        target_rows_per_fragment=100000)
    yield "delete_for_deferred", lambda: lance.dataset(u).delete("a = 20001")
    yield "compact_deferred_remap", lambda: lance.dataset(u).optimize.compact_files(
        target_rows_per_fragment=100000, materialize_deletions_threshold=0.0,
        defer_index_remap=True)
    yield "drop_index", lambda: lance.dataset(u).drop_index("b_idx")
    yield "update_config", lambda: lance.dataset(u).update_config({"k1": "v1", "k2": "v2"})
    yield "delete_config_keys", lambda: lance.dataset(u).delete_config_keys(["k2"])
    yield "update_table_metadata", lambda: lance.dataset(u).update_metadata({"tm": "1"})
    yield "update_table_metadata_replace", lambda: lance.dataset(u).update_metadata(
        {"tm2": "2"}, replace=True)
    yield "update_schema_metadata", lambda: lance.dataset(u).update_schema_metadata(
        {"sm": "1"})
    yield "update_field_metadata", lambda: lance.dataset(u).update_field_metadata(
        {"a": {"fm": "1"}})

    def op_update_config_all() -> None:
        ds = lance.dataset(u)
        op = Op.UpdateConfig(
            config_updates=Op.UpdateMap({"k3": "v3", "k1": None}),
            table_metadata_updates=Op.UpdateMap({"t": "x"}, replace=True),
            schema_metadata_updates=Op.UpdateMap({"s": "y"}),
            field_metadata_updates={0: Op.UpdateMap({"f": "z"})})
        lance.LanceDataset.commit(u, op, read_version=ds.version)
    yield "op_update_config_all", op_update_config_all

    def commit_props() -> None:
        lance.write_dataset(tbl(2, 50000).append_column(
            "n2", pa.array([None, None], pa.int64())).select(["a", "b", "n2"]), u, mode="append",
            transaction_properties={"prop": "val"}, commit_message="msg")
    yield "append_with_properties", commit_props

    def tags() -> None:
        ds = lance.dataset(u)
        ds.tags.create("t1", 1)
        ds.tags.update("t1", 2)
    yield "tags", tags
    yield "restore", lambda: lance.dataset(u, version=2).restore()
    yield "overwrite", lambda: lance.write_dataset(tbl(4), u, mode="overwrite")

    # ---- low-level LanceOperation commits on a fresh dataset
    m = str(R / "ops")

    def ops_create() -> None:
        lance.write_dataset(tbl(6), m, max_rows_per_file=3)
    yield "ops_create", ops_create

    def op_merge(pres: bool, col: str) -> Callable[[], None]:
        def f() -> None:
            ds = lance.dataset(m)
            frags, schema = [], None
            for frag in ds.get_fragments():
                nf, schema = frag.merge_columns(
                    lambda b: pa.record_batch([pc.multiply(b["a"], 2)], [col]), columns=["a"])
                frags.append(nf)
            lance.LanceDataset.commit(m, Op.Merge(frags, schema, preserves_nullability=pres),
                                      read_version=ds.version)
        return f
    yield "op_merge_pn_false", op_merge(False, "m1")
    yield "op_merge_pn_true", op_merge(True, "m2")

    def op_project(pres: bool, drop: str) -> Callable[[], None]:
        def f() -> None:
            ds = lance.dataset(m)
            from lance.schema import LanceSchema
            keep = [x for x in ds.schema.names if x != drop]
            schema = LanceSchema.from_pyarrow(ds.schema)  # field ids by name order
            ls = ds.lance_schema
            proj = getattr(ls, "project", None)
            new = proj(keep) if proj else schema
            lance.LanceDataset.commit(m, Op.Project(new, preserves_nullability=pres),
                                      read_version=ds.version)
        return f
    yield "op_project_pn_false", op_project(False, "m1")
    yield "op_project_pn_true", op_project(True, "m2")

    def op_data_replacement() -> None:
        ds = lance.dataset(m)
        lance.dataset(m).add_columns({"r": "a + 100"})
        ds = lance.dataset(m)
        frag = ds.get_fragments()[0]
        rows = frag.count_rows()
        from lance.file import LanceFileWriter
        name = f"{uuid.uuid4().hex}.lance"
        w = LanceFileWriter(str(Path(m) / "data" / name),
                            pa.schema([pa.field("r", pa.int64())]))
        w.write_batch(pa.table({"r": pa.array(range(rows), pa.int64())}))
        w.close()
        df = DataFile.create(ds, name)
        lance.LanceDataset.commit(
            m, Op.DataReplacement([Op.DataReplacementGroup(frag.fragment_id, df)]),
            read_version=ds.version)
    yield "op_data_replacement", op_data_replacement

    def op_update_offsets() -> None:
        ds = lance.dataset(m)
        import pyroaring
        frag = ds.get_fragments()[1]
        bm = pyroaring.BitMap([0, 1]).serialize()
        op = Op.Update(updated_fragments=[frag.metadata], fields_modified=[0],
                       update_mode="rewrite_columns",
                       updated_fragment_offsets={frag.fragment_id: bm})
        lance.LanceDataset.commit(m, op, read_version=ds.version)
    yield "op_update_offsets", op_update_offsets

    def op_rewrite_manual() -> None:
        ds = lance.dataset(m)
        frags = ds.get_fragments()
        tbl2 = frags[1].to_table()
        newf = write_fragments(tbl2, m, schema=ds.schema)
        grp = Op.RewriteGroup([frags[1].metadata], newf)
        lance.LanceDataset.commit(m, Op.Rewrite([grp], []), read_version=ds.version)
    yield "op_rewrite_manual", op_rewrite_manual

    def op_create_index_manual() -> None:
        ds = lance.dataset(m)
        ds.create_scalar_index("a", "BTREE", name="a_idx")
        ds = lance.dataset(m)
        idx = ds.describe_indices()
        _ = idx
    yield "ops_btree_index", op_create_index_manual

    def op_create_index_reuse() -> None:
        ds = lance.dataset(m)
        t = ds.read_transaction(ds.version)
        new = t.operation.new_indices
        lance.LanceDataset.commit(m, Op.CreateIndex(new, []), read_version=ds.version)
    yield "op_create_index_from_txn", op_create_index_reuse

    def op_create_index_covering() -> None:
        ds = lance.dataset(m)
        old = ds.read_transaction(ds.version).operation.new_indices[0]
        import dataclasses
        new = dataclasses.replace(old, uuid=str(uuid.uuid4()), fields=[0, 1],
                                  covering_fields=[1])
        lance.LanceDataset.commit(m, Op.CreateIndex([new], [old]), read_version=ds.version)
    yield "op_create_index_covering", op_create_index_covering

    def op_rewrite_with_index() -> None:
        ds = lance.dataset(m)
        ds.optimize.compact_files(target_rows_per_fragment=100000)
    yield "compact_with_btree_index", op_rewrite_with_index

    def batch_commit() -> None:
        ds = lance.dataset(m)
        txs = []
        for i in range(2):
            frs = write_fragments(tbl(2, 100 + i).append_column(
                "r", pa.array([1, 2], pa.int64())), m, schema=None)
            txs.append(lance.Transaction(ds.version, Op.Append(frs)))
        _ = txs
    yield "commit_batch", batch_commit

    # ---- data overlays (reader flag 64: pylance 14 cannot open the result, so one commit)
    o = str(R / "overlay")
    yield "overlay_create", lambda: lance.write_dataset(tbl(6), o, max_rows_per_file=3)

    def op_data_overlay() -> None:
        ds = lance.dataset(o)
        from lance.file import LanceFileWriter

        def wfile(t: pa.Table) -> DataFile:
            name = f"{uuid.uuid4().hex}.lance"
            w = LanceFileWriter(str(Path(o) / "data" / name), t.schema)
            w.write_batch(t)
            w.close()
            return DataFile.create(ds, name)
        dense = wfile(pa.table({"a": pa.array([777, 778], pa.int64())}))
        sparse = wfile(pa.table({"a": pa.array([5], pa.int64()), "b": pa.array(["z"])}))
        dense0 = wfile(pa.table({"b": pa.array(["q"])}))
        groups = [
            Op.DataOverlayGroup(1, [Op.DataOverlayFile(dense, [0, 2]),
                                    Op.DataOverlayFile(sparse, [[1], [2]])]),
            Op.DataOverlayGroup(0, [Op.DataOverlayFile(dense0, [1])]),
        ]
        lance.LanceDataset.commit(o, Op.DataOverlay(groups), read_version=ds.version)
    yield "op_data_overlay", op_data_overlay

    # ---- field id allocation after dropping the highest field
    fa = str(R / "fieldalloc")
    yield "fa_create", lambda: lance.write_dataset(
        pa.table({"x": [1], "y": [2], "z": [3]}), fa)
    yield "fa_drop_highest", lambda: lance.dataset(fa).drop_columns(["z"])
    yield "fa_add_after_drop", lambda: lance.dataset(fa).add_columns({"w": "x + 1"})

    # ---- mem wal / compacted sstables
    mw = str(R / "memwal")

    def memwal() -> None:
        from lance.mem_wal import CompactedSsTable
        lance.write_dataset(tbl(4), mw)
        ds = lance.dataset(mw)
        try:
            ds.initialize_mem_wal(unsharded=True)
        except Exception as e:  # keep going: the marker alone may still be recorded
            P.r.errors.append(f"memwal init: {type(e).__name__}: {str(e)[:200]}")
        P.snap("memwal_init")
        ds = lance.dataset(mw)
        (ds.merge_insert("a")
         .mark_sstables_as_compacted([CompactedSsTable(str(uuid.uuid4()), 3)])
         .when_matched_update_all().when_not_matched_insert_all().execute(tbl(2, 3)))
    yield "memwal_compacted_sstables", memwal

    # ---- vector index (small)
    v = str(R / "vec")

    def vec() -> None:
        import numpy as np
        rng = np.random.default_rng(0)
        arr = pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(256 * 8, dtype=np.float32)), 8)
        lance.write_dataset(pa.table({"v": arr, "id": pa.array(range(256))}), v)
        lance.dataset(v).create_index("v", "IVF_FLAT", num_partitions=2)
    yield "vector_index", vec

    # ---- stable row ids
    s = str(R / "stable")
    yield "stable_create", lambda: lance.write_dataset(tbl(10), s, enable_stable_row_ids=True)
    yield "stable_append", lambda: lance.write_dataset(tbl(5, 10), s, mode="append")
    yield "stable_delete", lambda: lance.dataset(s).delete("a = 2 OR a = 12")
    yield "stable_update", lambda: lance.dataset(s).update({"b": "'u'"}, where="a = 4")
    yield "stable_merge_insert", lambda: (
        lance.dataset(s).merge_insert("a").when_matched_update_all()
        .when_not_matched_insert_all().execute(tbl(3, 13)))
    yield "stable_compact", lambda: lance.dataset(s).optimize.compact_files(
        target_rows_per_fragment=100000)
    yield "stable_add_columns", lambda: lance.dataset(s).add_columns({"c": "a + 1"})

    # ---- V1 naming
    w1 = str(R / "v1names")
    yield "v1_create", lambda: lance.write_dataset(tbl(3), w1, enable_v2_manifest_paths=False)
    yield "v1_append", lambda: lance.write_dataset(tbl(3), w1, mode="append")

    # ---- older data storage versions
    yield "storage_2_0", lambda: lance.write_dataset(tbl(3), str(R / "st20"),
                                                     data_storage_version="2.0")
    yield "storage_2_1", lambda: lance.write_dataset(tbl(3), str(R / "st21"),
                                                     data_storage_version="2.1")

    # ---- primary key field metadata
    def pk() -> None:
        sch = pa.schema([pa.field("id", pa.int64(), nullable=False,
                                  metadata={"lance-schema:unenforced-primary-key": "true"}),
                         pa.field("x", pa.int64())])
        lance.write_dataset(pa.table({"id": [1, 2], "x": [3, 4]}, schema=sch), str(R / "pk"))
    yield "primary_key", pk

    def pk_positions() -> None:
        sch = pa.schema([
            pa.field("k1", pa.int64(), nullable=False, metadata={
                "lance-schema:unenforced-primary-key": "true",
                "lance-schema:unenforced-primary-key:position": "2"}),
            pa.field("k2", pa.int64(), nullable=False, metadata={
                "lance-schema:unenforced-primary-key": "true",
                "lance-schema:unenforced-primary-key:position": "1",
                "lance-schema:unenforced-clustering-key:position": "1"}),
            pa.field("c", pa.int64(), metadata={
                "lance-schema:unenforced-clustering-key:position": "2"})])
        lance.write_dataset(pa.table({"k1": [1, 2], "k2": [3, 4], "c": [5, 6]}, schema=sch),
                            str(R / "pkpos"))
    yield "primary_key_positions", pk_positions
    yield "pk_merge_insert", lambda: (
        lance.dataset(str(R / "pk")).merge_insert("id").when_matched_update_all()
        .when_not_matched_insert_all().execute(pa.table(
            {"id": pa.array([2, 9], pa.int64()), "x": pa.array([7, 8], pa.int64())},
            schema=lance.dataset(str(R / "pk")).schema)))
    yield "pkpos_merge_insert", lambda: (
        lance.dataset(str(R / "pkpos")).merge_insert(["k1", "k2"]).when_matched_update_all()
        .when_not_matched_insert_all().execute(pa.table(
            {"k1": pa.array([1, 9], pa.int64()), "k2": pa.array([3, 9], pa.int64()),
             "c": pa.array([0, 0], pa.int64())},
            schema=lance.dataset(str(R / "pkpos")).schema)))
    yield "pk_merge_insert_default_on", lambda: (
        lance.dataset(str(R / "pk")).merge_insert([]).when_not_matched_insert_all()
        .execute(pa.table(
            {"id": pa.array([20], pa.int64()), "x": pa.array([8], pa.int64())},
            schema=lance.dataset(str(R / "pk")).schema)))

    # ---- clones, branches, bases
    src = str(R / "src")
    yield "clone_src", lambda: lance.write_dataset(tbl(3), src)
    yield "shallow_clone", lambda: lance.dataset(src).shallow_clone(str(R / "shallow"), 1)
    yield "append_to_shallow", lambda: lance.write_dataset(tbl(3, 3), str(R / "shallow"),
                                                           mode="append")
    yield "deep_clone", lambda: lance.dataset(src).deep_clone(str(R / "deep"), 1)
    branch: dict[str, Any] = {}

    def create_branch() -> None:
        branch["ds"] = lance.dataset(src).create_branch("br1", 1)
    yield "create_branch", create_branch
    yield "append_on_branch", lambda: lance.write_dataset(tbl(2, 50), branch["ds"],
                                                          mode="append")

    def add_bases() -> None:
        from lance import DatasetBasePath
        (R / "extbase").mkdir(exist_ok=True)
        lance.dataset(src).add_bases([DatasetBasePath(str(R / "extbase"), name="ext")])
    yield "add_bases", add_bases
    yield "write_to_base", lambda: lance.write_dataset(
        tbl(2, 70), src, mode="append", target_bases=["ext"])

    def initial_bases() -> None:
        from lance import DatasetBasePath
        (R / "ib").mkdir(exist_ok=True)
        lance.write_dataset(tbl(2), str(R / "withbases"), initial_bases=[
            DatasetBasePath(str(R / "ib"), name="ib", is_dataset_root=False)],
            target_bases=["ib"])
    yield "initial_bases", initial_bases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--protos", default="mirror" if MIRROR.exists() else "project")
    ap.add_argument("--keep", help="keep datasets in this directory (must not exist)")
    ap.add_argument("--raw", action="store_true", help="also print protoc --decode_raw of "
                    "every txn file")
    ap.add_argument("--debug", action="store_true",
                    help="also print pylance's Debug view of each case's transaction")
    ap.add_argument("--only", nargs="*", help="run only cases with these name prefixes "
                    "(note: later cases depend on earlier ones in the same group)")
    args = ap.parse_args()

    t0 = time.time()
    work = Path(tempfile.mkdtemp(prefix="probe_pylance14_"))
    try:
        pb = compile_protos(args.protos, work / "pb")
        import lance

        root = Path(args.keep) if args.keep else work / "data"
        root.mkdir(parents=True)
        report = Report()
        probe = Probe(root, report, set(args.only) if args.only else None)
        for name, fn in cases(probe):
            probe.run(name, fn)
        walker = Walker(pb, report)
        txn_bytes: dict[str, bytes] = {}
        for p, case in probe.labels.items():
            if p.suffix == ".txn":
                b = p.read_bytes()
                txn_bytes[p.name] = b
                tdesc = pb["transaction_pb2"].Transaction.DESCRIPTOR
                walker.walk_bytes(tdesc, b, case)
                ops = [n for n, _, _ in raw_fields(b) if n >= 100]
                report.fact("transaction operation field",
                            [f"{n} {tdesc.fields_by_number[n].name}"
                             if n in tdesc.fields_by_number else f"{n} NEW" for n in ops], case)
                if args.raw:
                    out = subprocess.run([sys.executable, "-m", "grpc_tools.protoc",
                                          "--decode_raw"], input=b, capture_output=True)
                    print(f"=== {case}: {p.relative_to(root)}\n{out.stdout.decode()}")
        for p, case in probe.labels.items():
            if p.suffix == ".manifest":
                try:
                    decode_manifest_file(p, pb, walker, case, txn_bytes)
                except Exception as e:
                    report.errors.append(f"decode {p}: {type(e).__name__}: {e}")
        if args.debug:
            from lance.debug import list_transactions
            for d in sorted(root.iterdir()):
                if (d / "_versions").exists():
                    for t in list_transactions(lance.dataset(str(d)))[:60]:
                        print(f"--- {d.name}\n{t}")
        print_report(report, args.protos, lance.__version__, time.time() - t0)
    finally:  # --keep datasets live outside `work`; the compiled protos never need keeping
        shutil.rmtree(work, ignore_errors=True)
    return 0


def case_list(cases_: set[str], limit: int = 6) -> str:
    c = sorted(cases_)
    return ", ".join(c[:limit]) + (f", +{len(c) - limit} more" if len(c) > limit else "")


def print_report(r: Report, protos: str, version: str, elapsed: float) -> None:
    print(f"# pylance {version} probe; reference protos: {protos}; {elapsed:.1f}s\n")
    print("## On-disk facts")
    for key in sorted(r.facts):
        print(f"- {key}:")
        for val, cs in sorted(r.facts[key].items()):
            print(f"    {val}   [{case_list(cs, 4)}]")
    print("\n## Fields per message type (NEW = not declared in the reference protos)")
    by_msg: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (msg, num), e in r.fields.items():
        by_msg[msg].append((num, e))
    for msg in sorted(by_msg):
        print(f"\n### {msg}")
        for num, e in sorted(by_msg[msg], key=lambda x: x[0]):
            tag = "    " if e["known"] else "NEW "
            samples = "; ".join(e["samples"])
            print(f"  {tag}{num:>4} {e['wt']:<6} {e['name']:<34} e.g. {samples[:70]}")
            print(f"              cases: {case_list(e['cases'])}")
    new = sorted(k for k, e in r.fields.items() if not e["known"])
    print(f"\n## NEW fields ({len(new)})")
    for msg, num in new:
        e = r.fields[(msg, num)]
        print(f"  {msg} #{num} ({e['wt']}) -> {e['name']}   [{case_list(e['cases'], 99)}]")
    if r.errors:
        print("\n## Cases that failed or were slow")
        for err in r.errors:
            print(f"  {err}")


if __name__ == "__main__":
    sys.exit(main())
