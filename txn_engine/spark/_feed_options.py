"""The options of ``readStream.format("txn_lance")`` and of change-feed reads.

Spark lower-cases option names; the documented spellings are Delta's
(``startingVersion``, ``maxRowsPerTrigger``, ``readChangeFeed``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from txn_engine.errors import InvalidOperationError
from txn_engine.leases import MAX_LEASE_TTL
from txn_engine.spark._options import (
    _READ_MAP_OPTIONS,
    DEFAULT_MAX_ROWS_PER_FILE,
    _bool,
    _int,
    _masked,
    _split_options,
)

__all__ = ["FeedOptions", "is_feed_read", "parse_feed_options"]

#: Options that make a read a change-feed or streaming read (lower-cased, as Spark
#: hands them over).
_FEED_SCALARS: frozenset[str] = frozenset(
    {
        "path",
        "readchangefeed",
        "startingversion",
        "startingtimestamp",
        "startingtag",
        "endingversion",
        "endingtimestamp",
        "maxrowspertrigger",
        "maxversionspertrigger",
        "skipchangecommits",
        "branch",
        "columns",
        "rows_per_partition",
        "batch_size",
        "lease_ttl",
    }
)
_FEED_ONLY: frozenset[str] = _FEED_SCALARS - {
    "path",
    "columns",
    "rows_per_partition",
    "batch_size",
    "lease_ttl",
}


def is_feed_read(options: Mapping[str, str]) -> bool:
    """True when ``options`` ask for a change feed or name a streaming-read option."""
    return any(str(k).lower() in _FEED_ONLY for k in options)


@attrs.frozen
class FeedOptions:
    """Everything a streaming read or a change-feed read can be configured with.

    ``starting_version`` (a number, or ``"latest"``: only versions committed after the
    query starts), ``starting_timestamp`` (the first version committed at or after it)
    and ``starting_tag`` pick where a stream starts (at most one; none: the table as of
    the latest version when the query first starts, then every later version) or where a
    batch change feed starts (default: version 1). ``ending_version`` /
    ``ending_timestamp`` end a batch change feed (default: the latest version).
    ``max_rows_per_trigger`` / ``max_versions_per_trigger`` bound a micro-batch (whole
    versions, at least one). ``skip_change_commits``: a stream skips versions that
    delete or rewrite rows instead of failing. ``branch``: read that branch.
    """

    read_change_feed: bool = False
    starting_version: int | str | None = None
    starting_timestamp: str | None = None
    starting_tag: str | None = None
    ending_version: int | None = None
    ending_timestamp: str | None = None
    max_rows_per_trigger: int | None = None
    max_versions_per_trigger: int | None = None
    skip_change_commits: bool = False
    branch: str | None = None
    columns: tuple[str, ...] | None = None
    rows_per_partition: int = DEFAULT_MAX_ROWS_PER_FILE
    batch_size: int | None = None
    lease_ttl: int = 600
    storage_options: Mapping[str, Any] = attrs.field(factory=dict, repr=_masked)
    lance_storage_options: Mapping[str, str] = attrs.field(factory=dict, repr=_masked)

    @property
    def txn_storage_options(self) -> dict[str, Any] | None:
        """Options for txn_engine's manifest reads (either set when only one is given)."""
        return dict(self.storage_options or self.lance_storage_options) or None

    @property
    def pylance_storage_options(self) -> dict[str, str] | None:
        """Options for pylance's data reads (either set when only one is given)."""
        chosen = self.lance_storage_options or self.storage_options
        return {str(k): str(v) for k, v in chosen.items()} or None


def _starting(lowered: Mapping[str, str], kwargs: dict[str, Any]) -> None:
    chosen = [
        n
        for n in ("startingversion", "startingtimestamp", "startingtag")
        if lowered.get(n, "") != ""
    ]
    if len(chosen) > 1:
        raise InvalidOperationError(
            f"give at most one of startingVersion, startingTimestamp and startingTag; got {chosen}"
        )
    text = lowered.get("startingversion", "")
    if text.strip().lower() == "latest":
        kwargs["starting_version"] = "latest"
    elif text != "":
        kwargs["starting_version"] = _int("startingVersion", text, minimum=1)
    if lowered.get("startingtimestamp", "") != "":
        kwargs["starting_timestamp"] = lowered["startingtimestamp"]
    if lowered.get("startingtag", "") != "":
        kwargs["starting_tag"] = lowered["startingtag"]
    if lowered.get("endingversion", "") != "" and lowered.get("endingtimestamp", "") != "":
        raise InvalidOperationError("give at most one of endingVersion and endingTimestamp")
    if lowered.get("endingversion", "") != "":
        kwargs["ending_version"] = _int("endingVersion", lowered["endingversion"], minimum=1)
    if lowered.get("endingtimestamp", "") != "":
        kwargs["ending_timestamp"] = lowered["endingtimestamp"]


def parse_feed_options(options: Mapping[str, str]) -> FeedOptions:
    """Turn a Spark option map into :class:`FeedOptions`; unknown options (and the batch
    read's ``version`` / ``timestamp`` / ``tag``, which a stream or a feed does not take)
    are refused with InvalidOperationError naming them."""
    lowered, maps = _split_options(options, _READ_MAP_OPTIONS, _FEED_SCALARS, what="feed option")
    kwargs: dict[str, Any] = {
        "storage_options": maps["storage_options"],
        "lance_storage_options": {k: str(v) for k, v in maps["lance_storage_options"].items()},
    }
    if "readchangefeed" in lowered:
        kwargs["read_change_feed"] = _bool("readChangeFeed", lowered["readchangefeed"])
    if "skipchangecommits" in lowered:
        kwargs["skip_change_commits"] = _bool("skipChangeCommits", lowered["skipchangecommits"])
    _starting(lowered, kwargs)
    for name, key in (
        ("maxRowsPerTrigger", "max_rows_per_trigger"),
        ("maxVersionsPerTrigger", "max_versions_per_trigger"),
        ("rows_per_partition", "rows_per_partition"),
        ("batch_size", "batch_size"),
    ):
        if lowered.get(name.lower(), "") != "":
            kwargs[key] = _int(name, lowered[name.lower()], minimum=1)
    if lowered.get("branch", "") != "":
        kwargs["branch"] = lowered["branch"]
    if "columns" in lowered:
        names = tuple(c.strip() for c in lowered["columns"].split(",") if c.strip())
        if not names:
            raise InvalidOperationError("option 'columns' must name at least one column")
        kwargs["columns"] = names
    if "lease_ttl" in lowered:
        ttl = _int("lease_ttl", lowered["lease_ttl"], minimum=1)
        if ttl > MAX_LEASE_TTL:
            raise InvalidOperationError(f"option 'lease_ttl' must be at most {MAX_LEASE_TTL:.0f}")
        kwargs["lease_ttl"] = ttl
    return FeedOptions(**kwargs)
