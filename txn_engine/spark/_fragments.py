"""Fragment metadata as a Spark write passes it around, and the data files it names.

Executors return fragment metadata (the dict ``FragmentMetadata.to_json()`` returns, as
JSON text); callers of the commit hook may hand in dicts, JSON text or pylance
``FragmentMetadata`` objects. The driver commits from the dicts and needs the data files
they, and a transaction that landed, reference (to keep them and remove the others).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from txn_engine import jsontext
from txn_engine.errors import InvalidOperationError
from txn_engine.ops import Update
from txn_engine.spark import _staging
from txn_engine.transaction import Transaction

__all__ = ["FragmentLike", "fragments_summary"]

FragmentLike = Any  # dict | str | bytes | lance.fragment.FragmentMetadata


def _fragment_json(value: FragmentLike) -> dict[str, Any]:
    """A fragment as the dict ``FragmentMetadata.to_json()`` returns."""
    if hasattr(value, "to_json"):
        value = value.to_json()
    if isinstance(value, (str, bytes)):
        try:
            value = jsontext.loads(value)
        except ValueError as exc:
            raise InvalidOperationError(f"fragment metadata is not JSON: {exc}") from exc
    if not isinstance(value, Mapping):
        raise InvalidOperationError(
            f"expected fragment metadata (dict, JSON text or FragmentMetadata), "
            f"got {type(value).__name__}"
        )
    return dict(value)


def _file_names(fragment: Mapping[str, Any]) -> list[str]:
    return [str(f["path"]) for f in fragment.get("files", ())]


def fragments_summary(
    fragments: Iterable[FragmentLike],
) -> tuple[list[dict[str, Any]], set[str], int]:
    """Fragments as the dicts ``FragmentMetadata.to_json()`` returns, the data files they
    reference and their rows (what a driver commit works from)."""
    jsons = [_fragment_json(f) for f in fragments]
    referenced = {name for data in jsons for name in _file_names(data)}
    return jsons, referenced, sum(int(data.get("physical_rows") or 0) for data in jsons)


def _operation_files(txn: Transaction) -> set[str]:
    """Data file paths added by an Append/Overwrite/Update Transaction (empty for other
    kinds)."""
    op = txn.operation
    fragments = op.new_fragments if isinstance(op, Update) else getattr(op, "fragments", ())
    return {f.path for fragment in fragments for f in fragment.files}


def _landed_files(txn: Any) -> set[str]:
    """Data file paths a landed transaction (protobuf) added, Update's new fragments too."""
    if txn.WhichOneof("operation") == "update":
        return {f.path for fragment in txn.update.new_fragments for f in fragment.files}
    return _staging.transaction_data_files(txn)
