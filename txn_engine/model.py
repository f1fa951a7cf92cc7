"""Immutable value types of the Lance table format (fragments, files, indices, ...).

They mirror the protobuf messages of ``protos/table.proto`` with canonical, hashable
collections (tuples, frozensets), so operations built from them compare and hash by value.
Each type converts to and from its protobuf message with ``to_proto`` / ``from_proto``.
"""

from __future__ import annotations

import enum
import uuid as uuid_mod
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from pyroaring import BitMap

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.errors import CorruptDeletionFileError, FormatError, InvalidOperationError
from txn_engine.format.fields import LanceField, frozen_map

__all__ = [
    "BasePath",
    "DataFile",
    "DeletionFile",
    "DeletionFileType",
    "ExternalFile",
    "Fragment",
    "Index",
    "IndexDetails",
    "IndexFile",
    "IndexMetadata",
    "LanceField",
    "MemWal",
    "MemWalId",
    "MemWalState",
    "frozen_map",
    "uuid_text",
]


def uuid_text(raw: bytes) -> str:
    """The canonical text of a 16-byte uuid as manifests and transactions store it
    (``""`` for anything else: an unset uuid field)."""
    return str(uuid_mod.UUID(bytes=bytes(raw))) if len(raw) == 16 else ""


def uuid_bytes(text: str, what: str) -> bytes:
    """The 16 bytes of the uuid ``text`` names (any form :class:`uuid.UUID` reads);
    InvalidOperationError naming ``what`` when it is not a uuid (``""``, ``"x"``)."""
    try:
        return uuid_mod.UUID(text).bytes
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidOperationError(f"{what}: {str(text)[:64]!r} is not a uuid") from exc


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _files(value: Iterable[DataFile]) -> tuple[DataFile, ...]:
    return tuple(value)


@attrs.frozen
class ExternalFile:
    """A byte range ``[offset, offset + size)`` of a file relative to the dataset root."""

    path: str
    offset: int = 0
    size: int = 0

    def to_proto(self) -> table_pb2.ExternalFile:
        return table_pb2.ExternalFile(path=self.path, offset=self.offset, size=self.size)

    @classmethod
    def from_proto(cls, pb: table_pb2.ExternalFile) -> ExternalFile:
        return cls(pb.path, pb.offset, pb.size)


@attrs.frozen
class DataFile:
    """One Lance data file of a fragment. ``path`` is relative to ``data/``."""

    path: str
    fields: tuple[int, ...] = attrs.field(converter=_ints)
    column_indices: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    file_major_version: int = 2
    file_minor_version: int = 2
    file_size_bytes: int = 0
    base_id: int | None = None

    def to_proto(self) -> table_pb2.DataFile:
        pb = table_pb2.DataFile(
            path=self.path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.DataFile) -> DataFile:
        return cls(
            path=pb.path,
            fields=tuple(pb.fields),
            column_indices=tuple(pb.column_indices),
            file_major_version=pb.file_major_version,
            file_minor_version=pb.file_minor_version,
            file_size_bytes=pb.file_size_bytes,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )


class DeletionFileType(enum.IntEnum):
    """Encoding of a deletion file: Arrow IPC (``.arrow``) or roaring bitmap (``.bin``)."""

    ARROW_ARRAY = 0
    BITMAP = 1

    @property
    def suffix(self) -> str:
        return "arrow" if self is DeletionFileType.ARROW_ARRAY else "bin"


@attrs.frozen
class DeletionFile:
    """The (cumulative) deleted row offsets of a fragment, stored in
    ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``."""

    file_type: DeletionFileType = attrs.field(converter=DeletionFileType)
    read_version: int
    id: int
    num_deleted_rows: int = 0
    base_id: int | None = None

    def file_name(self, fragment_id: int) -> str:
        return f"{fragment_id}-{self.read_version}-{self.id}.{self.file_type.suffix}"

    def to_proto(self) -> table_pb2.DeletionFile:
        pb = table_pb2.DeletionFile(
            file_type=int(self.file_type),  # type: ignore[arg-type]
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.DeletionFile) -> DeletionFile:
        """CorruptDeletionFileError for a ``file_type`` that is neither ARROW nor BITMAP."""
        try:
            file_type = DeletionFileType(pb.file_type)
        except ValueError as exc:
            raise CorruptDeletionFileError(
                f"unknown deletion file type {pb.file_type} (deletion file id {pb.id})"
            ) from exc
        return cls(
            file_type=file_type,
            read_version=pb.read_version,
            id=pb.id,
            num_deleted_rows=pb.num_deleted_rows,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )


_Seq = bytes | ExternalFile | None


def _seq_to_proto(pb: table_pb2.DataFragment, inline: str, external: str, value: _Seq) -> None:
    if isinstance(value, bytes):
        setattr(pb, inline, value)
    elif isinstance(value, ExternalFile):
        getattr(pb, external).CopyFrom(value.to_proto())


def _seq_from_proto(pb: table_pb2.DataFragment, oneof: str) -> _Seq:
    which = pb.WhichOneof(oneof)  # type: ignore[call-overload]
    if which is None:
        return None
    value = getattr(pb, which)
    if isinstance(value, bytes):
        return value
    return ExternalFile.from_proto(value)


@attrs.frozen
class Fragment:
    """A set of rows stored column-wise in ``files``.

    ``id`` 0 in a transaction's new fragments means "assign at commit". ``physical_rows``
    counts deleted rows too. The three sequences (stable row ids, last-updated and
    created-at versions) are serialized protobuf bytes or an ExternalFile.
    """

    id: int
    files: tuple[DataFile, ...] = attrs.field(converter=_files)
    physical_rows: int
    deletion_file: DeletionFile | None = None
    row_id_sequence: _Seq = None
    last_updated_at_version_sequence: _Seq = None
    created_at_version_sequence: _Seq = None

    @property
    def num_deleted_rows(self) -> int:
        return self.deletion_file.num_deleted_rows if self.deletion_file else 0

    @property
    def num_rows(self) -> int:
        """Live rows: physical rows minus deleted rows."""
        return self.physical_rows - self.num_deleted_rows

    def with_id(self, fragment_id: int) -> Fragment:
        return attrs.evolve(self, id=fragment_id)

    def to_proto(self) -> table_pb2.DataFragment:
        pb = table_pb2.DataFragment(
            id=self.id,
            files=[f.to_proto() for f in self.files],
            physical_rows=self.physical_rows,
        )
        if self.deletion_file is not None:
            pb.deletion_file.CopyFrom(self.deletion_file.to_proto())
        _seq_to_proto(pb, "inline_row_ids", "external_row_ids", self.row_id_sequence)
        _seq_to_proto(
            pb,
            "inline_last_updated_at_versions",
            "external_last_updated_at_versions",
            self.last_updated_at_version_sequence,
        )
        _seq_to_proto(
            pb,
            "inline_created_at_versions",
            "external_created_at_versions",
            self.created_at_version_sequence,
        )
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.DataFragment) -> Fragment:
        return cls(
            id=pb.id,
            files=tuple(DataFile.from_proto(f) for f in pb.files),
            physical_rows=pb.physical_rows,
            deletion_file=DeletionFile.from_proto(pb.deletion_file)
            if pb.HasField("deletion_file")
            else None,
            row_id_sequence=_seq_from_proto(pb, "row_id_sequence"),
            last_updated_at_version_sequence=_seq_from_proto(
                pb, "last_updated_at_version_sequence"
            ),
            created_at_version_sequence=_seq_from_proto(pb, "created_at_version_sequence"),
        )

    @classmethod
    def from_lance_json(cls, value: str | bytes | Mapping[str, Any] | Any) -> Fragment:
        """Build from what pylance's ``FragmentMetadata.to_json()`` returns (a dict), its
        JSON text, or a ``FragmentMetadata`` object itself.

        Stable-row-id and version metadata (``row_id_meta``, ``created_at_version_meta``,
        ``last_updated_at_version_meta``) are kept. Raises InvalidOperationError on
        malformed input, and for fragments with data overlays (a pylance 14 feature this
        library does not write).
        """
        if hasattr(value, "to_json") and not isinstance(value, (str, bytes, Mapping)):
            value = value.to_json()
        try:
            data: Any = jsontext.loads(value) if isinstance(value, (str, bytes)) else value
            if not isinstance(data, Mapping):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            if data.get("overlays"):
                raise InvalidOperationError(
                    "fragment has data overlays (pylance 14 DataOverlay); txn_engine does not "
                    "support overlays"
                )
            files = tuple(
                DataFile(
                    path=str(f["path"]),
                    fields=f.get("fields") or (),
                    column_indices=f.get("column_indices") or (),
                    file_major_version=int(f.get("file_major_version") or 0),
                    file_minor_version=int(f.get("file_minor_version") or 0),
                    file_size_bytes=int(f.get("file_size_bytes") or 0),
                    base_id=_opt_int(f.get("base_id")),
                )
                for f in data["files"]
            )
            deletion = data.get("deletion_file")
            deletion_file = None
            if deletion:
                ftype = str(deletion.get("file_type", "array")).lower()
                if ftype not in ("array", "bitmap", "0", "1", "arrow_array"):
                    raise ValueError(f"unknown deletion file type {ftype!r}")
                deletion_file = DeletionFile(
                    file_type=DeletionFileType.BITMAP
                    if ftype in ("bitmap", "1")
                    else DeletionFileType.ARROW_ARRAY,
                    read_version=int(deletion["read_version"]),
                    id=int(deletion["id"]),
                    num_deleted_rows=int(deletion.get("num_deleted_rows") or 0),
                    base_id=_opt_int(deletion.get("base_id")),
                )
            physical_rows = data.get("physical_rows")
            if physical_rows is None:
                raise ValueError("physical_rows is missing (required)")
            return cls(
                id=int(data.get("id") or 0),
                files=files,
                physical_rows=int(physical_rows),
                deletion_file=deletion_file,
                row_id_sequence=_meta_from_json(data.get("row_id_meta")),
                last_updated_at_version_sequence=_meta_from_json(
                    data.get("last_updated_at_version_meta")
                ),
                created_at_version_sequence=_meta_from_json(data.get("created_at_version_meta")),
            )
        except InvalidOperationError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidOperationError(f"not a Lance fragment description: {exc!r}") from exc

    def to_lance_json(self) -> dict[str, Any]:
        """The dict form of ``FragmentMetadata.to_json()``; pylance's
        ``FragmentMetadata.from_json(json.dumps(...))`` accepts it."""
        return {
            "id": self.id,
            "files": [
                {
                    "path": f.path,
                    "fields": list(f.fields),
                    "column_indices": list(f.column_indices),
                    "file_major_version": f.file_major_version,
                    "file_minor_version": f.file_minor_version,
                    "file_size_bytes": f.file_size_bytes,
                    "base_id": f.base_id,
                }
                for f in self.files
            ],
            "overlays": [],
            "physical_rows": self.physical_rows,
            "deletion_file": None
            if self.deletion_file is None
            else {
                "read_version": self.deletion_file.read_version,
                "id": self.deletion_file.id,
                "file_type": "bitmap"
                if self.deletion_file.file_type is DeletionFileType.BITMAP
                else "array",
                "num_deleted_rows": self.deletion_file.num_deleted_rows,
                "base_id": self.deletion_file.base_id,
            },
            # pylance 14 spells the row-id variant "Inline"/"External" and the version
            # variants "inline"/"external"
            "row_id_meta": _meta_to_json(self.row_id_sequence, "Inline", "External"),
            "created_at_version_meta": _meta_to_json(
                self.created_at_version_sequence, "inline", "external"
            ),
            "last_updated_at_version_meta": _meta_to_json(
                self.last_updated_at_version_sequence, "inline", "external"
            ),
        }


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _meta_from_json(value: Any) -> _Seq:
    """``{"Inline": [bytes]}`` / ``{"External": {path, offset, size}}`` (any case)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(f"bad sequence metadata {value!r}")
    ((kind, body),) = value.items()
    kind = str(kind).lower()
    if kind == "inline":
        return bytes(body)
    if kind == "external":
        return ExternalFile(
            str(body["path"]), int(body.get("offset") or 0), int(body.get("size") or 0)
        )
    raise ValueError(f"bad sequence metadata kind {kind!r}")


def _meta_to_json(value: _Seq, inline: str, external: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return {inline: list(value)}
    return {external: {"path": value.path, "offset": value.offset, "size": value.size}}


@attrs.frozen
class BasePath:
    """An extra storage root; ``id`` 0 in UpdateBases means "assign at commit"."""

    id: int
    path: str
    name: str | None = None
    is_dataset_root: bool = False

    def to_proto(self) -> table_pb2.BasePath:
        pb = table_pb2.BasePath(id=self.id, is_dataset_root=self.is_dataset_root, path=self.path)
        if self.name is not None:
            pb.name = self.name
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.BasePath) -> BasePath:
        return cls(
            id=pb.id,
            path=pb.path,
            name=pb.name if pb.HasField("name") else None,
            is_dataset_root=pb.is_dataset_root,
        )


@attrs.frozen
class IndexDetails:
    """A ``google.protobuf.Any``: type url (e.g. ``/lance.table.BTreeIndexDetails``) + bytes."""

    type_url: str
    value: bytes = b""


@attrs.frozen
class IndexFile:
    """One file of an index, relative to ``_indices/{uuid}/`` (pylance 14)."""

    path: str
    size_bytes: int = 0


def _index_files(value: Iterable[IndexFile]) -> tuple[IndexFile, ...]:
    return tuple(value)


def decode_fragment_bitmap(data: bytes, index_name: str) -> BitMap:
    """An index's ``fragment_bitmap`` (Roaring bytes) as read from a manifest or a
    transaction; FormatError when the bytes are not a valid bitmap (pyroaring's own
    ValueError does not escape)."""
    try:
        return BitMap.deserialize(data)
    except (ValueError, OverflowError, MemoryError) as exc:
        raise FormatError(
            f"index {index_name!r}: fragment_bitmap is not a valid Roaring bitmap "
            f"({len(data)} bytes: {exc})"
        ) from exc


def _bitmap(value: Iterable[int] | None) -> frozenset[int] | None:
    return None if value is None else frozenset(int(v) for v in value)


@attrs.frozen
class IndexMetadata:
    """One index (segment). ``fragment_bitmap`` None means unknown coverage."""

    uuid: str
    name: str
    fields: tuple[int, ...] = attrs.field(converter=_ints)
    dataset_version: int
    fragment_bitmap: frozenset[int] | None = attrs.field(default=None, converter=_bitmap)
    index_details: IndexDetails | None = None
    index_version: int | None = None
    created_at: int | None = None
    base_id: int | None = None
    files: tuple[IndexFile, ...] = attrs.field(default=(), converter=_index_files)
    covering_fields: tuple[int, ...] = attrs.field(default=(), converter=_ints)

    @property
    def is_vector(self) -> bool:
        return bool(
            self.index_details and self.index_details.type_url.endswith("VectorIndexDetails")
        )

    def to_proto(self) -> table_pb2.IndexMetadata:
        pb = table_pb2.IndexMetadata(
            name=self.name, fields=self.fields, dataset_version=self.dataset_version
        )
        pb.uuid.uuid = uuid_bytes(self.uuid, f"index {self.name!r}")
        if self.fragment_bitmap is not None:
            pb.fragment_bitmap = BitMap(sorted(self.fragment_bitmap)).serialize()
        if self.index_details is not None:
            pb.index_details.type_url = self.index_details.type_url
            pb.index_details.value = self.index_details.value
        if self.index_version is not None:
            pb.index_version = self.index_version
        if self.created_at is not None:
            pb.created_at = self.created_at
        if self.base_id is not None:
            pb.base_id = self.base_id
        for f in self.files:
            pb.files.add(path=f.path, size_bytes=f.size_bytes)
        pb.covering_fields.extend(self.covering_fields)
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.IndexMetadata) -> IndexMetadata:
        return cls(
            uuid=uuid_text(pb.uuid.uuid),
            name=pb.name,
            fields=tuple(pb.fields),
            dataset_version=pb.dataset_version,
            fragment_bitmap=(
                decode_fragment_bitmap(pb.fragment_bitmap, pb.name) if pb.fragment_bitmap else None
            ),
            index_details=IndexDetails(pb.index_details.type_url, pb.index_details.value)
            if pb.HasField("index_details")
            else None,
            index_version=pb.index_version if pb.HasField("index_version") else None,
            created_at=pb.created_at if pb.HasField("created_at") else None,
            base_id=pb.base_id if pb.HasField("base_id") else None,
            files=tuple(IndexFile(f.path, f.size_bytes) for f in pb.files),
            covering_fields=tuple(pb.covering_fields),
        )


Index = IndexMetadata


class MemWalState(enum.IntEnum):
    OPEN = 0
    SEALED = 1
    FLUSHED = 2
    MERGED = 3


@attrs.frozen
class MemWalId:
    region: str
    generation: int


@attrs.frozen
class MemWal:
    """One MemWAL entry of the ``__lance_mem_wal`` system index."""

    id: MemWalId
    mem_table_location: str = ""
    wal_location: str = ""
    wal_entries: bytes = b""
    state: MemWalState = attrs.field(default=MemWalState.OPEN, converter=MemWalState)
    owner_id: str = ""
    last_updated_dataset_version: int = 0

    def to_proto(self) -> table_pb2.MemWalIndexDetails.MemWal:
        pb = table_pb2.MemWalIndexDetails.MemWal(
            mem_table_location=self.mem_table_location,
            wal_location=self.wal_location,
            wal_entries=self.wal_entries,
            state=int(self.state),  # type: ignore[arg-type]
            owner_id=self.owner_id,
            last_updated_dataset_version=self.last_updated_dataset_version,
        )
        pb.id.region = self.id.region
        pb.id.generation = self.id.generation
        return pb

    @classmethod
    def from_proto(cls, pb: table_pb2.MemWalIndexDetails.MemWal) -> MemWal:
        return cls(
            id=MemWalId(pb.id.region, pb.id.generation),
            mem_table_location=pb.mem_table_location,
            wal_location=pb.wal_location,
            wal_entries=pb.wal_entries,
            state=MemWalState(pb.state),
            owner_id=pb.owner_id,
            last_updated_dataset_version=pb.last_updated_dataset_version,
        )
