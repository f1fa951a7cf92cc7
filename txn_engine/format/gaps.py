"""Records of the main-line versions txn_engine's cleanup removed: how verify tells removed
history from damage once no tag or branch explains a gap any more.

A record is the JSON object ``_txn_engine/gaps/<uuid>.json``::

    {"removed": [[4, 5], [9, 9]]}

each pair an inclusive range of version numbers (1 to 2**63 - 1) that a cleanup removed.
:func:`record_gaps` is called by :func:`txn_engine.cleanup` after it planned and
before it deletes the first manifest, so no listing ever shows a gap the records do not
cover. It writes the ranges it removes merged with every record it could read, into new
records (at most :data:`MAX_RANGES_PER_RECORD` ranges each), then deletes the records it
merged: at every moment some record covers every range, and two cleanups running at once
each keep what the other wrote. Ranges below the oldest version the cleanup listed are
dropped: everything below it is gone for good, a missing prefix that needs no record (verify
reports it as cleaned up by itself). So the records hold at most the gaps between versions
that still exist, plus what the last cleanup removed.

A record only ever names versions a cleanup removed, never a gap it found (a version lost
before the cleanup stays unexplained). A record is trusted as it is: whoever can write one
can delete manifests too. Reading is strict and bounded: at most :data:`MAX_RECORDS` records
of at most :data:`MAX_RECORD_BYTES` bytes, strict JSON (:mod:`txn_engine.jsontext`); a
record that is not one this module writes is reported in :attr:`GapRecords.bad` and
ignored (verify turns it into a warning; cleanup neither merges nor deletes it).
"""

from __future__ import annotations

import bisect
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine.errors import LimitExceededError, ObjectNotFoundError
from txn_engine.storage.base import Storage, get_bounded

__all__ = [
    "GAPS_DIR",
    "MAX_RANGES_PER_RECORD",
    "MAX_RECORDS",
    "MAX_RECORD_BYTES",
    "GapRecords",
    "read_gaps",
    "record_gaps",
]

GAPS_DIR = "_txn_engine/gaps"
#: Ranges one record holds at most (a record written here is then well under
#: :data:`MAX_RECORD_BYTES`: 43 bytes a range at most).
MAX_RANGES_PER_RECORD = 4096
#: The largest record read (a larger one is reported and ignored).
MAX_RECORD_BYTES = 256 * 1024
#: Records read at most (the names after the first ones, in byte order, are reported).
MAX_RECORDS = 256
_MAIN_LINE_END = 1 << 63
#: Listings of the records taken at most when a record listed is gone when read (a cleanup
#: replaced it meanwhile: its merged record was written before it was deleted).
_READS = 3


@attrs.frozen
class GapRecords:
    """What the records say: ``ranges`` sorted, disjoint and not adjacent (inclusive
    version ranges a cleanup removed); ``paths`` the records read; ``bad`` the records
    ignored, each with why."""

    ranges: tuple[tuple[int, int], ...] = ()
    paths: tuple[str, ...] = ()
    bad: tuple[tuple[str, str], ...] = ()

    def covers(self, first: int, last: int) -> bool:
        """Whether every version from ``first`` to ``last`` (inclusive) was removed by a
        recorded cleanup."""
        i = bisect.bisect_right(self.ranges, (first, _MAIN_LINE_END)) - 1
        return i >= 0 and self.ranges[i][0] <= first and last <= self.ranges[i][1]


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _runs(versions: Iterable[int]) -> list[tuple[int, int]]:
    return _merged((v, v) for v in versions)


def _ranges_of(obj: Any) -> list[tuple[int, int]]:
    """The ranges of a decoded record; ValueError saying why it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("removed"), list):
        raise ValueError('not an object with a "removed" list')
    pairs = obj["removed"]
    if len(pairs) > MAX_RANGES_PER_RECORD:
        raise ValueError(f"more than {MAX_RANGES_PER_RECORD} ranges")
    out: list[tuple[int, int]] = []
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError(f"{pair!r} is not a [first, last] pair")
        lo, hi = pair
        if not all(type(v) is int for v in (lo, hi)) or not 1 <= lo <= hi < _MAIN_LINE_END:
            raise ValueError(f"{pair!r} is not a range of version numbers")
        out.append((lo, hi))
    return out


def _read_once(storage: Storage) -> GapRecords | None:
    """One listing's records; None when one listed was gone when read."""
    names = sorted(n for n in storage.list(GAPS_DIR) if n.endswith(".json"))
    bad: list[tuple[str, str]] = []
    if len(names) > MAX_RECORDS:
        bad.append((GAPS_DIR, f"more than {MAX_RECORDS} records: only the first are read"))
        names = names[:MAX_RECORDS]
    ranges: list[tuple[int, int]] = []
    paths: list[str] = []
    for name in names:
        path = f"{GAPS_DIR}/{name}"
        try:
            found = _ranges_of(jsontext.loads(get_bounded(storage, path, MAX_RECORD_BYTES)))
        except ObjectNotFoundError:
            return None
        except (LimitExceededError, ValueError) as exc:
            bad.append((path, str(exc)))
            continue
        ranges.extend(found)
        paths.append(path)
    return GapRecords(tuple(_merged(ranges)), tuple(paths), tuple(bad))


def read_gaps(storage: Storage) -> GapRecords:
    """Every record under :data:`GAPS_DIR` that can be read (see the module docstring).
    Raises only what the storage raises for listing or reading (StorageError)."""
    for _ in range(_READS - 1):
        found = _read_once(storage)
        if found is not None:
            return found
    last = _read_once(storage)
    return last if last is not None else GapRecords()


def record_gaps(storage: Storage, removed: Sequence[int], kept: Sequence[int]) -> None:
    """Record that a cleanup which listed ``removed`` and ``kept`` (main-line versions)
    removes ``removed``: call it before deleting the first manifest (a StorageError here
    must stop the cleanup). Merges the records it can read, drops what is below the oldest
    version listed, writes the result and deletes the records it merged. Writes nothing
    when that changes nothing (no version removed, nothing to drop)."""
    listed = [*removed, *kept]
    if not listed:
        return
    floor = min(listed)
    old = read_gaps(storage)
    ranges = [
        (max(lo, floor), hi) for lo, hi in _merged([*old.ranges, *_runs(removed)]) if hi >= floor
    ]
    records = -(-len(ranges) // MAX_RANGES_PER_RECORD)
    if tuple(ranges) == old.ranges and len(old.paths) == records:
        return  # already recorded as it would be written
    for start in range(0, len(ranges), MAX_RANGES_PER_RECORD):
        chunk = ranges[start : start + MAX_RANGES_PER_RECORD]
        body = json.dumps({"removed": [list(r) for r in chunk]}, separators=(",", ":"))
        storage.put_if_absent(f"{GAPS_DIR}/{uuid.uuid4()}.json", body.encode())
    for path in old.paths:
        storage.delete(path)  # gone already is fine: another cleanup merged it too
