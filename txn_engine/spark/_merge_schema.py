"""``mergeSchema``: an append that brings columns the table lacks.

Where the table allows it (no stable row ids, data files of format 2 or later) the columns
and the rows land in ONE Merge, built at commit time by :func:`merge_schema_operation`: the
executors write the files as a new schema (fresh field ids) and their ids are remapped to
the table's. Otherwise :func:`_add_columns` first commits the new columns (a Merge of the
unchanged fragments with the wider schema) and the rows are appended after it. Either Merge
is re-planned on the latest version when a concurrent commit preempts it, within
:data:`MERGE_SCHEMA_RETRY`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.model import Fragment, LanceField
from txn_engine.ops import Merge
from txn_engine.redact import redact_uri
from txn_engine.retry import RetryPolicy
from txn_engine.spark._options import WriteOptions, commit_retry_policy
from txn_engine.storage.base import Storage
from txn_engine.transaction import COMMIT_MESSAGE_KEY, Transaction

if TYPE_CHECKING:
    from txn_engine.dataset import Dataset

__all__ = ["MERGE_SCHEMA_RETRY", "merge_schema_operation"]

_log = logging.getLogger("txn_engine.spark")

#: Re-planning budget of a ``mergeSchema`` append's Merge when concurrent commits preempt it
#: (every concurrent Append does; a re-plan re-reads the latest manifest, no data is
#: rewritten): 11 plans (``commit_attempts`` when larger) within 60 s, the commit loop's
#: backoff between.
MERGE_SCHEMA_RETRY = RetryPolicy(max_attempts=11, deadline=60.0)


def _merges_in_one_version(manifest: Any) -> bool:
    """Whether ``mergeSchema`` can add the columns and the rows in one Merge: not for
    tables with stable row ids (a Merge's new fragments get no row ids, so the columns are
    added first, then the rows appended) nor for legacy (v1) data files, whose field ids
    live in the files themselves."""
    from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
    from txn_engine.format.schema import major_version

    if manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS:
        return False
    major = major_version(_data_format(manifest) or "")
    return major is not None and major >= 2


def _data_format(manifest: Any) -> str | None:
    """The Lance file format version of a manifest's data files (``"2.0"``, ...)."""
    return str(manifest.data_format.version) if manifest.HasField("data_format") else None


def _field_ids_by_path(fields: Iterable[Any]) -> dict[tuple[str, ...], int]:
    """Lance field id of every field (protobuf ``Field``) by its path of names."""
    fields = list(fields)
    by_id = {f.id: f for f in fields}
    out: dict[tuple[str, ...], int] = {}
    for f in fields:
        path = [f.name]
        parent = f.parent_id
        while parent in by_id and len(path) <= len(fields):  # bounded, even for a cycle
            path.append(by_id[parent].name)
            parent = by_id[parent].parent_id
        out[tuple(reversed(path))] = f.id
    return out


def _add_columns(storage: Storage, uri: str, data: pa.Schema, options: WriteOptions) -> int:
    """``mergeSchema``: commit the data's columns the table lacks as new nullable columns
    (a Merge of the unchanged fragments with the wider schema, as pylance's
    ``add_columns(pa.field(...))`` writes it); the rows already there read them as null.
    Re-planned on the latest version when a concurrent commit conflicts (a few times).
    Returns the version that has every column of ``data``."""
    from txn_engine.commit import commit as txn_commit
    from txn_engine.dataset import Dataset
    from txn_engine.errors import RetryableConflictError
    from txn_engine.format.schema import arrow_to_fields, max_field_id

    budget = _merge_schema_retry(options).budget()
    while True:
        budget.start_attempt()
        current = Dataset.open(storage)
        have = set(current.schema.names)
        new = [field.with_nullable(True) for field in data if field.name not in have]
        if not new:
            return current.version
        manifest = current.manifest_pb
        added = arrow_to_fields(pa.schema(new), first_id=max_field_id(manifest) + 1)
        fields = tuple(LanceField.from_proto(f) for f in [*manifest.fields, *added])
        names = ", ".join(field.name for field in new)
        properties = dict(options.properties)
        properties[COMMIT_MESSAGE_KEY] = f"txn_lance mergeSchema: add columns {names}"
        txn = Transaction(
            read_version=current.version,
            operation=Merge(
                fragments=current.fragments,
                schema=fields,
                schema_metadata=dict(manifest.schema_metadata),
                preserves_nullability=True,
            ),
            properties=properties,
        )
        try:
            result = txn_commit(storage, txn, retry_policy=commit_retry_policy(options))
        except RetryableConflictError:
            if budget.wait():
                continue  # re-plan on the version that preempted this one
            raise
        _log.info("mergeSchema: %s gained columns %s in version %d", uri, names, result.version)
        return result.version


def _merge_schema_retry(options: WriteOptions) -> RetryPolicy:
    """``mergeSchema``'s re-planning budget: :data:`MERGE_SCHEMA_RETRY`, with at least
    ``commit_attempts`` plans."""
    attempts = max(MERGE_SCHEMA_RETRY.max_attempts, options.commit_attempts)
    return attrs.evolve(MERGE_SCHEMA_RETRY, max_attempts=attempts)


def _check_fits(snapshot: Dataset, schema: pa.Schema, *, uri: str, read_version: int) -> None:
    """Raise RetryableConflictError when the table at ``snapshot`` no longer fits files
    written with ``schema`` at ``read_version``: a column of the data now has another type,
    or the table has a non-nullable column the data lacks."""
    from txn_engine.errors import RetryableConflictError

    for field in snapshot.schema:
        index = schema.get_field_index(field.name)
        same = index >= 0 and schema.field(index).type.equals(field.type)
        if (index >= 0 and not same) or (index < 0 and not field.nullable):
            raise RetryableConflictError(
                f"mergeSchema append to {redact_uri(uri)}: column {field.name!r} of "
                f"the table at version {snapshot.version} is {field.type}"
                f"{'' if field.nullable else ' not null'}; the data files were written "
                f"for version {read_version}'s schema",
                read_version=read_version,
                conflicting_version=snapshot.version,
                operation="Merge",
                remedy="run the write again; it plans against the new schema",
            )


def merge_schema_operation(
    snapshot: Dataset,
    jsons: Sequence[Mapping[str, Any]],
    *,
    schema: pa.Schema,
    uri: str,
    read_version: int,
) -> Merge:
    """``mergeSchema`` in one version: a Merge at ``snapshot`` listing every fragment
    of the table unchanged plus the new ones (``jsons``, written with ``schema`` at
    ``read_version``), under the table's schema widened by the columns the data adds
    (nullable, ids above every id in use, dropped columns' ids included). The existing
    fragments have no data file for the new columns, so their rows read them as null
    (pylance 14 reads such a fragment that way).

    The executors wrote the files as a new schema (fresh ids, pre-order from 0); their
    ``fields`` are remapped to the table's ids here, by column path. Raises
    RetryableConflictError when the table at ``snapshot`` no longer fits the files (a
    concurrent commit changed the type of one of the columns, added a non-nullable
    column the data lacks): run the job again, it plans against the new schema."""
    from txn_engine.builder import max_fragment_id
    from txn_engine.format.schema import arrow_to_fields, max_field_id

    manifest = snapshot.manifest_pb
    table = snapshot.schema
    _check_fits(snapshot, schema, uri=uri, read_version=read_version)
    new = pa.schema([field for field in schema if field.name not in table.names])
    added = arrow_to_fields(
        new,
        first_id=max_field_id(manifest) + 1,
        data_storage_version=_data_format(manifest) or "2.2",
    )
    fields = [*manifest.fields, *added]
    wanted = _field_ids_by_path(fields)
    mapping = {
        fresh: wanted[path] for path, fresh in _field_ids_by_path(arrow_to_fields(schema)).items()
    }
    high = max_fragment_id(manifest)
    next_id = 0 if high is None else high + 1
    appended = []
    for offset, data in enumerate(jsons):
        data = dict(data)
        data["id"] = next_id + offset
        data["files"] = [
            {**f, "fields": [mapping.get(i, i) for i in f.get("fields", ())]}
            for f in data.get("files", ())
        ]
        appended.append(Fragment.from_lance_json(data))
    return Merge(
        fragments=(*snapshot.fragments, *appended),
        schema=tuple(LanceField.from_proto(f) for f in [*manifest.fields, *added]),
        schema_metadata=dict(manifest.schema_metadata),
        preserves_nullability=True,
    )
