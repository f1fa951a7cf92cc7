"""``replaceWhere``: an overwrite that replaces only the rows matching a Lance SQL filter.

The tasks refuse a batch with a row the predicate does not select
(:func:`check_replace_where_batch`); the driver finds the matching rows of the pinned
version (:func:`replace_where_rows`) and commits ONE Update that deletes them and adds the
new fragments (:func:`replace_where_update`).
"""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Mapping

import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.errors import InvalidOperationError
from txn_engine.model import Fragment
from txn_engine.ops import Update
from txn_engine.redact import redact_uri
from txn_engine.storage.base import Storage

__all__ = ["check_replace_where_batch", "replace_where_rows", "replace_where_update"]


def check_replace_where_batch(predicate: str, batch: pa.RecordBatch, uri: str) -> None:
    """Refuse ``batch`` (written to ``uri``) unless ``predicate`` is true for every row:
    it is evaluated by pylance on the batch (an in-memory Lance table); a row where it is
    false or null counts. Raises InvalidOperationError naming the predicate and the number
    of such rows, or saying the predicate is not a Lance filter over the data."""
    import lance

    check = f"({predicate}) IS NOT TRUE"
    try:
        scratch = lance.write_dataset(
            pa.Table.from_batches([batch]), f"memory://replace-where-{uuid_mod.uuid4().hex}"
        )
        outside = scratch.count_rows(filter=check)
    except Exception as exc:  # pylance's parse / planning errors
        raise InvalidOperationError(
            f"replaceWhere {predicate!r} is not a Lance filter over the data written to "
            f"{redact_uri(uri)}: {exc}"
        ) from exc
    if outside:
        raise InvalidOperationError(
            f"replaceWhere {predicate!r}: {outside} row(s) of the data written to "
            f"{redact_uri(uri)} do not match the predicate (it is false or null for "
            "them); every row a replaceWhere writes must match it. Filter the DataFrame "
            "with the same condition, or widen the predicate; nothing was committed"
        )


def replace_where_rows(
    uri: str, read_version: int, predicate: str, lance_storage_options: Mapping[str, str]
) -> list[int]:
    """The row addresses of the rows of ``uri`` at ``read_version`` that ``predicate``
    selects (scanned by pylance). Raises InvalidOperationError when the predicate is not a
    Lance filter over the table."""
    import lance

    dataset = lance.dataset(
        uri,
        version=read_version,
        storage_options=dict(lance_storage_options) or None,
    )
    try:
        matched = dataset.to_table(columns=[], filter=predicate, with_row_address=True)
    except Exception as exc:  # pylance's parse / planning errors
        raise InvalidOperationError(
            f"replaceWhere {predicate!r} is not a Lance filter over {uri}: {exc}"
        ) from exc
    addresses: list[int] = matched.column("_rowaddr").to_pylist()
    return addresses


def replace_where_update(
    storage: Storage,
    read_version: int,
    addresses: list[int],
    new_fragments: tuple[Fragment, ...],
) -> Update:
    """An Update at ``read_version``: the rows at ``addresses`` deleted (cumulative
    deletion vectors, written here, one per affected fragment; fragments left empty
    removed) and ``new_fragments`` added. The deleted rows travel as ``affected_rows``, so
    a concurrent delete of other rows of the same fragments rebases instead of
    conflicting."""
    from pyroaring import BitMap, BitMap64

    from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
    from txn_engine.format.io import read_manifest

    by_fragment: dict[int, BitMap] = {}
    for address in addresses:
        by_fragment.setdefault(address >> 32, BitMap()).add(address & 0xFFFFFFFF)
    _, manifest_file = read_manifest(storage, read_version)
    pbs = {pb.id: pb for pb in manifest_file.manifest.fragments}
    removed: list[int] = []
    updated: list[Fragment] = []
    for fragment_id, offsets in sorted(by_fragment.items()):
        pb = pbs[fragment_id]
        existing = (
            read_deletion_vector(storage, fragment_id, pb.deletion_file)
            if pb.HasField("deletion_file")
            else BitMap()
        )
        total = existing | offsets
        if len(total) >= pb.physical_rows:
            removed.append(fragment_id)
            continue
        deletion = write_deletion_vector(storage, fragment_id, read_version, total)
        copy = type(pb)()
        copy.CopyFrom(pb)
        copy.deletion_file.CopyFrom(deletion)
        updated.append(Fragment.from_proto(copy))
    return Update(
        removed_fragment_ids=tuple(removed),
        updated_fragments=tuple(updated),
        new_fragments=new_fragments,
        affected_rows=BitMap64(addresses),
    )
