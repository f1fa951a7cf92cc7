"""Manifest and transaction file names, and listing the versions of a dataset.

* V1: ``_versions/{version}.manifest``.
* V2: ``_versions/{u64::MAX - version:020d}.manifest`` (newest sorts first); pylance 14's
  default for new datasets.
* Detached: ``_versions/d{version}.manifest`` (never part of the main line).

Anything else in ``_versions/`` (staging files, ``latest_version_hint.json``) is not a
version. A dataset keeps the scheme of its existing manifests; both schemes at once is an
error.

**The latest-version hint (local disk).** pylance 14 writes ``_versions/latest_version_hint.json``
(exactly ``{"version":N}``) after each commit on local disk (not on S3); txn_engine writes the
same bytes to ``_txn_engine/latest_version_hint.json`` (:func:`write_version_hint`).
:func:`scan_versions` with ``since`` starts from them instead of listing the whole directory
(local disk lists unordered: 121 ms at 100,000 versions). A hint is only where to start
looking: see :func:`_scan_from_hint` for what the answer is checked against.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import attrs

from txn_engine import session
from txn_engine.errors import MixedNamingSchemeError, TxnEngineError
from txn_engine.storage.base import Storage, get_bounded
from txn_engine.storage.local import LocalStorage

__all__ = [
    "BEACON_PREFIX",
    "VERSIONS_DIR",
    "TRANSACTIONS_DIR",
    "U64_MAX",
    "TXN_HINT_PATH",
    "VERSION_HINT_PATH",
    "NamingScheme",
    "VersionEntry",
    "VersionListing",
    "BEACON_SECONDS",
    "beacon_dead",
    "beacon_expiry",
    "beacon_name",
    "carrier_beacon",
    "live_beacons",
    "detached_manifest_name",
    "parse_detached_name",
    "detect_scheme",
    "forget_beacon",
    "list_versions",
    "list_versions_after",
    "manifest_name",
    "manifest_path",
    "parse_manifest_name",
    "parse_version_hint",
    "scan_versions",
    "transaction_file_name",
    "transaction_path",
    "version_hint_bytes",
    "write_version_hint",
]

VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
U64_MAX = (1 << 64) - 1
_SUFFIX = ".manifest"
_V2_NAME_LEN = 20 + len(_SUFFIX)
VERSION_HINT_PATH = f"{VERSIONS_DIR}/latest_version_hint.json"
#: The version hint txn_engine writes (pylance's format, outside ``_versions/``).
TXN_HINT_PATH = "_txn_engine/latest_version_hint.json"
_HINT_PATHS = (TXN_HINT_PATH, VERSION_HINT_PATH)
#: main-line versions are below 2**63 (the top bit marks a detached version)
_MAIN_LINE_END = 1 << 63


class NamingScheme(enum.Enum):
    """How version numbers map to manifest file names."""

    V1 = "v1"
    V2 = "v2"


@attrs.frozen
class VersionEntry:
    """One main-line version found in ``_versions/``."""

    version: int
    name: str
    scheme: NamingScheme

    @property
    def path(self) -> str:
        """Path of the manifest relative to the dataset root."""
        return f"{VERSIONS_DIR}/{self.name}"


def manifest_name(version: int, scheme: NamingScheme) -> str:
    """File name (without directory) of main-line ``version`` in ``scheme``."""
    if version < 0 or version >= (1 << 63):
        raise ValueError(f"version {version} is outside the main-line range")
    if scheme is NamingScheme.V1:
        return f"{version}{_SUFFIX}"
    return f"{U64_MAX - version:020d}{_SUFFIX}"


def manifest_path(version: int, scheme: NamingScheme) -> str:
    """Path of main-line ``version`` relative to the dataset root."""
    return f"{VERSIONS_DIR}/{manifest_name(version, scheme)}"


def detached_manifest_name(version: int) -> str:
    """File name of a detached version (its number has the top bit set)."""
    return f"d{version}{_SUFFIX}"


def parse_detached_name(name: str) -> int | None:
    """The number of the detached version ``name`` names (``d{number}.manifest``, the
    number with its top bit set, as pylance 14 writes it), else None."""
    if not (name.startswith("d") and name.endswith(_SUFFIX)):
        return None
    stem = name[1 : -len(_SUFFIX)]
    if not (stem.isascii() and stem.isdigit()) or len(stem) > 20 or stem != str(int(stem)):
        return None
    number = int(stem)
    return number if _MAIN_LINE_END <= number <= U64_MAX else None


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """Return ``(version, scheme)`` for a main-line manifest name, else ``None``.

    Staging files (``5.manifest-<uuid>``, ``5.manifest#1``), detached versions, V1 names
    with leading zeros and junk are ``None``.
    """
    if not name.endswith(_SUFFIX) or name.startswith("d"):
        return None
    stem = name[: -len(_SUFFIX)]
    if not stem.isdigit() or not stem.isascii() or len(stem) > 20:
        return None  # more than 20 digits is no u64 (Lance skips the name too)
    number = int(stem)
    if len(name) != _V2_NAME_LEN and stem != str(number):
        return None  # a V1 name with leading zeros: no Lance writes one
    if len(name) == _V2_NAME_LEN:
        if number > U64_MAX:
            return None
        return U64_MAX - number, NamingScheme.V2
    return number, NamingScheme.V1


def detect_scheme(names: Sequence[str]) -> NamingScheme | None:
    """The scheme of the manifests among ``names`` (None if there are none).

    Raises MixedNamingSchemeError if both are present.
    """
    seen: set[NamingScheme] = set()
    for name in names:
        parsed = parse_manifest_name(name)
        if parsed is not None:
            seen.add(parsed[1])
    if len(seen) > 1:
        raise MixedNamingSchemeError(
            "_versions/ holds both V1 and V2 manifest names; finish the V1->V2 migration first"
        )
    return next(iter(seen), None)


# One listing's names joined by NUL (no file or object name holds one) and matched at C
# speed: no Python object per name on the hot path of a dataset with many versions.
# ---- a carrier's beacon ------------------------------------------------------------------

#: A carrier (``txn_engine.contention.carrier``) keeps
#: ``_versions/.txn-engine-carrier-{expiry ms:020d}-{token}`` while it runs: not a manifest
#: (Lance, like txn_engine, takes only ``*.manifest`` names there, beside its own
#: ``latest_version_hint.json``), and first in a listing in byte order ('.' sorts before
#: digits), so every listing of the versions shows it.
BEACON_PREFIX = ".txn-engine-carrier-"
#: How long a carrier's beacon says it runs (seconds); a new one every third of it.
BEACON_SECONDS = 10.0
#: How far ahead a beacon's claimed expiry may lie and still be believed (ms).
_BELIEVED_AHEAD_MS = 3 * BEACON_SECONDS * 1000
_BEACON = r"\.txn-engine-carrier-([0-9]{20})-([0-9a-f]{32})"
_BEACON_NAME = re.compile(_BEACON, re.ASCII)
#: beacon names in a listing joined by NULs (as :func:`scan_versions` joins it)
_BEACONS = re.compile(rf"(?<=\x00){_BEACON}(?=\x00)", re.ASCII)


class SeenBeacons:
    """What a session's listings showed of carriers' beacons (its part of a
    :class:`~txn_engine.session.Session`), per table URI."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: per table, the expiry (Unix ms) of the live beacon its last listing showed
        self.live: dict[str, int] = {}
        #: per table, the newest beacon expiry a vain wait has discredited (a crashed
        #: carrier's beacon stays listed until it expires; a running carrier's next beacon
        #: expires later)
        self.discredited: dict[str, int] = {}


def _seen() -> SeenBeacons:
    """The beacons the current session saw."""
    return session.current().part(SeenBeacons)


def beacon_name(expires_ms: int, token: str) -> str:
    """The name (in ``_versions/``) of a carrier's beacon live until ``expires_ms`` (Unix
    time, ms); ``token`` is 32 lowercase hex digits."""
    return f"{BEACON_PREFIX}{expires_ms:020d}-{token}"


def beacon_expiry(name: str) -> int | None:
    """The expiry (Unix ms) of a beacon's name; None for any other name."""
    found = _BEACON_NAME.fullmatch(name)
    return int(found.group(1)) if found else None


def _believed(expires_ms: int, now_ms: float, floor: int) -> bool:
    """A beacon's claimed expiry is believed while it lies ahead, but no further ahead than
    a running carrier ever writes it (now + BEACON_SECONDS by its clock; three times that
    for clock skew): a forged one, or a crashed carrier's whose clock ran fast, is not."""
    return max(now_ms, floor) < expires_ms <= now_ms + _BELIEVED_AHEAD_MS


def beacon_dead(name: str, mtime_ns: int | None, wall_ns: int, store_ns: int | None) -> bool:
    """Whether cleanup may remove the beacon ``name``: its name says it expired (by the
    cleaner's clock), or the store shows it unchanged for longer than a running carrier
    ever leaves one (it writes a new one every third of :data:`BEACON_SECONDS`), whatever
    expiry its name claims. Any other name: False."""
    expires_ms = beacon_expiry(name)
    if expires_ms is None:
        return False
    if expires_ms * 1_000_000 <= wall_ns:
        return True
    stale_ns = int(3 * BEACON_SECONDS * 1_000_000_000)
    return store_ns is not None and mtime_ns is not None and mtime_ns + stale_ns < store_ns


def live_beacons(uri: str, names: Iterable[str]) -> list[tuple[int, str]]:
    """The ``(expiry ms, token)`` of the beacons among ``names`` that are live: believed
    (:func:`_believed`), and not discredited in the current session by a vain wait
    (:func:`forget_beacon`)."""
    now_ms = time.time() * 1000
    seen = _seen()
    with seen.lock:
        floor = seen.discredited.get(uri, 0)
    found = (_BEACON_NAME.fullmatch(name) for name in names)
    return [
        (int(m.group(1)), m.group(2))
        for m in found
        if m is not None and _believed(int(m.group(1)), now_ms, floor)
    ]


def _note_beacons(uri: str, text: str) -> tuple[str, ...]:
    """Remember, for the current session, whether a listing of ``uri``'s versions (names
    joined by NULs) showed a live carrier's beacon; returns the beacons' names."""
    found = list(_BEACONS.finditer(text)) if BEACON_PREFIX in text else []
    now_ms = time.time() * 1000
    seen = _seen()
    with seen.lock:
        floor = seen.discredited.get(uri, 0)
        live = max(
            (e for e in (int(m.group(1)) for m in found) if _believed(e, now_ms, floor)), default=0
        )
        if live:
            seen.live[uri] = live
        else:
            seen.live.pop(uri, None)
    return tuple(m.group(0) for m in found)


def carrier_beacon(uri: str) -> bool:
    """Whether the last listing of ``uri``'s versions in the current session showed a
    carrier's beacon that is still live."""
    seen = _seen()
    with seen.lock:
        expires = seen.live.get(uri)
    return expires is not None and expires > time.time() * 1000


def forget_beacon(uri: str) -> None:
    """A wait for ``uri``'s carrier was vain: drop its beacon, and do not believe it (nor an
    older one) again when a listing shows it (a carrier that crashed leaves its beacon until
    it expires; a running one replaces it with a later one within a few seconds)."""
    seen = _seen()
    with seen.lock:
        expires = seen.live.pop(uri, None)
        if expires is not None:
            seen.discredited[uri] = max(expires, seen.discredited.get(uri, 0))


_V2_STEMS = re.compile(r"\x00([0-9]{20})\.manifest(?=\x00)", re.ASCII)
#: V1 names: a u64 in decimal without leading zeros, at most 19 digits (20 make a V2 name; a
#: longer one is no u64, and Lance skips it)
_V1_STEMS = re.compile(r"\x00(0|[1-9][0-9]{0,18})\.manifest(?=\x00)", re.ASCII)
_U64_MAX_STEM = f"{U64_MAX:020d}"


class VersionListing:
    """The main-line versions of one listing of ``_versions/``, ascending.

    Built by :func:`scan_versions` without a Python object per manifest name: the names
    stay strings until a caller asks for an entry (:attr:`latest`, :meth:`after`,
    :meth:`get`), so the cost of a commit does not grow with the length of the history
    beyond the listing itself. Iterating gives every :class:`VersionEntry`, ascending.
    """

    __slots__ = ("_numbers", "_scheme", "_stems", "beacons")

    def __init__(
        self,
        scheme: NamingScheme | None,
        stems: list[str] | None = None,
        numbers: list[int] | None = None,
        beacons: tuple[str, ...] = (),
    ) -> None:
        #: the carrier beacons listed (:func:`beacon_name`; not versions)
        self.beacons = beacons
        self._scheme = scheme
        # V2: 20-digit stems sorted ascending as text == versions descending.
        self._stems = stems or []
        # V1: version numbers ascending.
        self._numbers = numbers or []

    @property
    def scheme(self) -> NamingScheme | None:
        """The dataset's naming scheme (None when there are no manifests)."""
        return self._scheme

    def __len__(self) -> int:
        return len(self._stems) if self._scheme is NamingScheme.V2 else len(self._numbers)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _entry_at(self, i: int) -> VersionEntry:
        """The i-th entry in ascending version order."""
        if self._scheme is NamingScheme.V2:
            stem = self._stems[len(self._stems) - 1 - i]
            return VersionEntry(U64_MAX - int(stem), stem + _SUFFIX, NamingScheme.V2)
        number = self._numbers[i]
        return VersionEntry(number, f"{number}{_SUFFIX}", NamingScheme.V1)

    @property
    def latest(self) -> VersionEntry | None:
        """The newest version (None for an empty listing)."""
        return self._entry_at(len(self) - 1) if self else None

    def _count_at_most(self, version: int) -> int:
        """How many listed versions are <= ``version``."""
        if self._scheme is NamingScheme.V2:
            if version < 0:
                return 0
            if version >= U64_MAX:
                return len(self._stems)
            # versions > v  <=>  stems < stem(v)
            newer = bisect.bisect_left(self._stems, f"{U64_MAX - version:020d}")
            return len(self._stems) - newer
        return bisect.bisect_right(self._numbers, version)

    def after(self, version: int) -> list[VersionEntry]:
        """The entries newer than ``version``, ascending."""
        return [self._entry_at(i) for i in range(self._count_at_most(version), len(self))]

    def get(self, version: int) -> VersionEntry | None:
        """The entry of ``version``, or None if it is not listed."""
        i = self._count_at_most(version) - 1
        if i < 0:
            return None
        entry = self._entry_at(i)
        return entry if entry.version == version else None

    def with_version(self, version: int) -> VersionListing:
        """This listing plus ``version`` (known to exist, say just read back), same scheme."""
        if self.get(version) is not None:
            return self
        if self._scheme is NamingScheme.V2:
            stems = list(self._stems)
            bisect.insort(stems, f"{U64_MAX - version:020d}")
            return VersionListing(self._scheme, stems=stems, beacons=self.beacons)
        numbers = list(self._numbers)
        bisect.insort(numbers, version)
        return VersionListing(self._scheme, numbers=numbers, beacons=self.beacons)

    def __iter__(self) -> Iterator[VersionEntry]:
        return (self._entry_at(i) for i in range(len(self)))

    def __repr__(self) -> str:
        latest = self.latest
        return (
            f"VersionListing({len(self)} versions, scheme={self._scheme}, "
            f"latest={None if latest is None else latest.version})"
        )


_V2_NAME = re.compile(r"([0-9]{20})\.manifest", re.ASCII)
_V1_NAME = re.compile(r"(?:0|[1-9][0-9]{0,18})\.manifest", re.ASCII)


def _newest_names(ordered: Iterator[str], since: int) -> list[str] | None:
    """The names of an ordered listing of ``_versions/`` up to the first V2 manifest of a
    version <= ``since`` (V2 names sort newest first); None when a V1 name shows up (V1 or
    mixed names: the caller lists everything)."""
    floor = f"{U64_MAX - min(max(since, 0), U64_MAX):020d}"
    taken: list[str] = []
    try:
        for name in ordered:
            if _V1_NAME.fullmatch(name):
                return None
            taken.append(name)
            found = _V2_NAME.fullmatch(name)
            if found is not None and _U64_MAX_STEM >= found.group(1) >= floor:
                break
    finally:
        close = getattr(ordered, "close", None)
        if callable(close):
            close()  # no further pages
    return taken


# ---- the latest-version hint (local disk) --------------------------------------------------

#: A hint file larger than this is not a hint (pylance's is at most 33 bytes).
_HINT_MAX_BYTES = 64
#: ``{"version":N}`` as pylance 14 writes it; blanks around the tokens are tolerated, any
#: other key, a sign, leading zeros, a fraction or an exponent make it garbage.
_HINT = re.compile(rb'\s*\{\s*"version"\s*:\s*(0|[1-9][0-9]{0,18})\s*\}\s*', re.ASCII)
#: Below the latest, the hint path stats each version it must return; with more than this
#: many of them one listing is cheaper.
_HINT_MAX_STATS = 256
#: A ``_versions/`` directory no larger than this (one 4 KiB ext4 block: about 85 names) is
#: listed: that costs about 15 us, less than reading and checking the hint (about 45 us),
#: and txn_engine does not write the hint there either (about 40 us a commit).
_HINT_MIN_DIR_BYTES = 4096


def version_hint_bytes(version: int) -> bytes:
    """The bytes of ``latest_version_hint.json`` for ``version``, as pylance 14 writes them."""
    return b'{"version":%d}' % version


def parse_version_hint(data: bytes) -> int | None:
    """The version a hint file names, or None when it is not a hint (empty, garbage, a
    negative number, a version outside the main line)."""
    found = _HINT.fullmatch(data)
    if found is None:
        return None
    version = int(found.group(1))
    return version if version < _MAIN_LINE_END else None


def _local_disk(storage: Storage) -> LocalStorage | None:
    """The :class:`LocalStorage` that ``storage`` is, or wraps through pass-through wrappers
    (``inner`` with the same uri: a recorder, a fault injector); None for any store that
    lists in byte order or is not on local disk."""
    if callable(getattr(storage, "list_ordered", None)):
        return None
    current: object = storage
    for _ in range(8):
        if isinstance(current, LocalStorage):
            return current
        inner = getattr(current, "inner", None)
        if inner is None or getattr(inner, "uri", None) != storage.uri:
            return None
        current = inner
    return None


def write_version_hint(storage: Storage, version: int) -> None:
    """After a commit of ``version`` on local disk, write txn_engine's version hint
    (:data:`TXN_HINT_PATH`, pylance's bytes ``{"version":N}``) through a staging file renamed
    into place (:meth:`LocalStorage.put_unsynced`: readers never see a prefix), never
    fsynced, best effort (an error is swallowed: a missing or stale hint only costs a
    listing). Outside ``_versions/``, so that writing it changes nothing a reader checks
    the hint against (:func:`_scan_from_hint`). Nothing is written on other stores, nor
    where ``_versions/`` is small enough to list in less time than the hint takes to check
    (``_HINT_MIN_DIR_BYTES``)."""
    local = _local_disk(storage)
    if local is None or local.directory_bytes(VERSIONS_DIR) <= _HINT_MIN_DIR_BYTES:
        return
    with contextlib.suppress(Exception):
        local.put_unsynced(TXN_HINT_PATH, version_hint_bytes(version))


def _read_hint(storage: Storage, path: str) -> int | None:
    try:
        return parse_version_hint(get_bounded(storage, path, _HINT_MAX_BYTES))
    except TxnEngineError:  # missing, too large, not a regular file, unreadable
        return None


def _probe_latest(exists: Callable[[int], bool], start: int) -> int:
    """The last version of the unbroken run from ``start`` (which exists) up: gallop
    start+1, +2, +4, ... until one is missing, then binary search the last gap."""
    low, step = start, 1  # low exists
    while exists(low + step):
        low += step
        step *= 2
    high = low + step  # missing
    while high - low > 1:
        middle = (low + high) // 2
        if exists(middle):
            low = middle
        else:
            high = middle
    return low


def _scan_from_hint(storage: Storage, since: int) -> VersionListing | None:
    """The listing :func:`scan_versions` needs for ``since``, found from a version hint
    without listing ``_versions/``; None when no hint can be used (the caller lists).

    1. Local disk only (:func:`_local_disk`), and only where ``_versions/`` is larger than
       one 4 KiB directory block (a smaller one lists faster than the hint is checked).
       The hints are txn_engine's (:data:`TXN_HINT_PATH`) and pylance's
       (:data:`VERSION_HINT_PATH`), each read (at most 64 bytes) and parsed strictly.
    2. Start at the highest one whose V2 manifest exists (or at ``since`` if that is newer
       and exists); none: None.
    3. Probe forward with ``exists`` (:func:`_probe_latest`): O(log gap) probes. Versions
       are created contiguously (each as the latest plus one), so the first missing version
       above the start ends the line...
    4. ... unless a cleanup removed versions above the start, or a version was created in a
       slot a cleanup freed. So the answer stands only if nothing in ``_versions/`` was
       created, removed or renamed after the latest found was created (the directory's
       mtime is not later than that manifest's ctime: :meth:`LocalStorage.unchanged_since`):
       it was the latest then, so nothing is above it. A hint never vouches for anything
       itself: a stale or forged one is only a place to start probing, and a hint written
       late (a writer delayed between its create and its hint) changes nothing it is
       checked against, since it is not in ``_versions/``. pylance writes its own hint into
       ``_versions/`` after its manifest, so a table pylance committed last is listed.
    5. Every version in ``[since, latest]`` is stat'ed (each probe counts), so the listing
       shows exactly which of them exist, as a full listing would: the commit loop's
       missing-history check relies on it. More than 256 of them to stat: None.
    """
    local = _local_disk(storage)
    if local is None or local.directory_bytes(VERSIONS_DIR) <= _HINT_MIN_DIR_BYTES:
        return None
    known: dict[int, bool] = {}

    def exists(version: int) -> bool:
        if version >= _MAIN_LINE_END:
            return False
        found = known.get(version)
        if found is None:
            found = known[version] = storage.exists(manifest_path(version, NamingScheme.V2))
        return found

    hints = [h for h in (_read_hint(storage, p) for p in _HINT_PATHS) if h is not None]
    starts = [h for h in sorted(set(hints), reverse=True) if exists(h)][:1]
    if not starts:  # a V1 dataset, or hints naming removed versions: they prove nothing
        return None
    start = since if starts[0] < since < _MAIN_LINE_END and exists(since) else starts[0]
    latest = _probe_latest(exists, start)
    first = max(since, 0)
    if latest - first >= _HINT_MAX_STATS:
        return None
    if not local.unchanged_since(VERSIONS_DIR, (manifest_path(latest, NamingScheme.V2),)):
        return None
    versions = [v for v in range(latest, first - 1, -1) if exists(v)] or [latest]
    return VersionListing(NamingScheme.V2, stems=[f"{U64_MAX - v:020d}" for v in versions])


def hint_replaces_listing(storage: Storage) -> bool:
    """Whether :func:`scan_versions` with ``since`` may read the latest-version hint of
    ``storage`` instead of listing ``_versions/``: local disk, once ``_versions/`` is past
    its first directory block. Such a listing rests on versions having been created as the
    latest, so it cannot vouch for a version just created in a slot a cleanup freed."""
    local = _local_disk(storage)
    return local is not None and local.directory_bytes(VERSIONS_DIR) > _HINT_MIN_DIR_BYTES


def scan_versions(
    storage: Storage, since: int | None = None, *, hint: bool = True
) -> VersionListing:
    """List ``_versions/`` once. Raises MixedNamingSchemeError on mixed schemes.

    ``since``: the caller needs every version >= ``since`` (and the latest) only. On a
    store that lists in byte order (``list_ordered``: S3, GCS, Azure, memory) V2 names
    come newest first, so the listing stops at the first version <= ``since``: one
    request for the commit loop however long the history (S3 pages hold 1,000 names),
    where a full listing costs one request per 1,000 versions. The latest is then the
    first V2 name listed, as Lance has it; a V1 name met on the way makes it list
    everything. ``since=U64_MAX``: the latest only. On local disk (no ordered listing)
    ``latest_version_hint.json``, when it is there and checks out, replaces the listing
    (:func:`_scan_from_hint`): a few ``exists`` calls however long the history.
    ``since=None`` always lists everything; ``hint=False`` always lists (a listing that
    must show a version created in a freed slot and everything above it).
    """
    names: Sequence[str] | None = None
    if since is not None:
        hinted = _scan_from_hint(storage, since) if hint else None
        if hinted is not None:
            return hinted
        lister = getattr(storage, "list_ordered", None)
        ordered = lister(VERSIONS_DIR) if callable(lister) else None
        if ordered is not None:
            names = _newest_names(ordered, since)
    if names is None:
        names = storage.list(VERSIONS_DIR)
    text = "\x00" + "\x00".join(names) + "\x00"
    beacons = _note_beacons(storage.uri, text)
    found = _V2_STEMS.findall(text)
    found.sort()
    # 20-digit names above u64::MAX are not versions
    v2 = found[: bisect.bisect_right(found, _U64_MAX_STEM)]
    # V1 names are looked for only if some other name ends in .manifest (fast path: V2)
    v1 = _V1_STEMS.findall(text) if text.count(".manifest\x00") > len(found) else []
    if v1 and v2:
        raise MixedNamingSchemeError(
            f"{storage.uri}: _versions/ holds both V1 and V2 manifest names; "
            "finish the V1->V2 migration first"
        )
    if v2:
        return VersionListing(NamingScheme.V2, stems=v2, beacons=beacons)
    if v1:
        return VersionListing(NamingScheme.V1, numbers=sorted(map(int, v1)), beacons=beacons)
    return VersionListing(None, beacons=beacons)


def list_versions(storage: Storage) -> list[VersionEntry]:
    """All main-line versions, ascending. Raises MixedNamingSchemeError on mixed schemes."""
    return list(scan_versions(storage))


def list_versions_after(storage: Storage, version: int) -> list[VersionEntry]:
    """Main-line versions newer than ``version``, ascending (one listing)."""
    return scan_versions(storage).after(version)


def transaction_file_name(read_version: int, uuid: str) -> str:
    """``{read_version}-{uuid}.txn`` (the name recorded in Manifest.transaction_file)."""
    return f"{read_version}-{uuid}.txn"


def transaction_path(file_name: str) -> str:
    """Path of a transaction file relative to the dataset root."""
    return f"{TRANSACTIONS_DIR}/{file_name}"
