"""Generate the historical-format fixtures: small tables written by older pylance releases.

The integration tests (``tests/integration/test_historical_fixtures.py``) check that txn_engine
reads what old Lance releases wrote exactly as pylance 14.0.2 does, or fails with a typed
error where pylance 14.0.2 cannot read it either. Nothing is checked in: this script installs
each release below from the package index into its own throwaway virtual environment and has
it write small tables.

Usage::

    python scripts/gen_historical_fixtures.py          # prints the fixture root
    python scripts/gen_historical_fixtures.py --list   # one fixture per line

Everything lives under ``$TXN_ENGINE_HISTORICAL_CACHE`` (default
``~/.cache/txn_engine/historical``): ``<release>/venv`` (the release and its pinned
dependencies), ``<release>/tables/<name>`` (the tables) and a ``.done`` marker per venv and per
table holding a hash of its recipe. A second run finds the markers and neither reinstalls nor
regenerates (well under a second); a changed recipe regenerates only what changed. A cold run
installs eight releases, three at a time (pip's own cache makes repeated installs cheaper),
then writes the tables (measured times below). Runs take a file lock, so parallel test
workers wait for one another instead of racing. Needs network access to the package index only
on a cold run.

Releases and what their tables cover (all on Python 3.11; every release's wheel is abi3; the
pins are the pyarrow / numpy of its era: 0.10.5 itself requires pyarrow < 15.0.1 and 0.15.0
numpy < 2, and an era's pyarrow keeps the old writers on the code paths they were tested on):

* 0.3.19 (pyarrow 12.0.1, numpy < 2, pandas < 2.1; the oldest release on the index): the
  oldest manifest layout (no feature flags, no index section, no ``physical_rows``),
  ``_latest.manifest``, create / append / overwrite.
* 0.5.9 (pyarrow 12.0.1, numpy < 2, pandas < 2.1): V1 manifest naming (``_versions/N.manifest``)
  with ``_latest.manifest``; manifests without ``data_format``, ``writer_version``,
  ``physical_rows`` or transaction files; legacy Arrow (``.arrow``) deletion files; an IVF_PQ
  vector index in the oldest index metadata layout; a table with no fragments; a history whose
  data file is gone (deleted by this script on purpose: the reader must name the missing file,
  as pylance 14 also fails on it).
* 0.7.5 (pyarrow 12.0.1, numpy < 2): roaring ``.bin`` deletion files next to ``.arrow`` ones,
  the first ``.txn`` transaction files, Overwrite and Restore.
* 0.8.0 on top of 0.7.5: a table 0.7.5 wrote and 0.8.0 migrated while appending; 0.8.0 writes
  ``physical_rows = 90`` for a 100-row file with 10 deletions (a manifest Lance must not trust
  when ``writer_version`` is absent).
* 0.10.5 (pyarrow 15.0.0, numpy < 2): a BTREE scalar index (the first scalar index layout),
  compaction (Rewrite transactions), ``update`` and ``add_columns`` on legacy v1 data files.
* 0.15.0 (pyarrow 16.1.0, numpy < 2): the same history in legacy v1 data files and in v2
  data files (``use_legacy_format``), with deletions on both.
* 0.20.0 (pyarrow 18.1.0, numpy < 2): BTREE and BITMAP indices in their older layout, and an
  old release's V2 manifest naming (``enable_v2_manifest_paths``).
* 0.27.1 (pyarrow 19.0.1, numpy < 2): a legacy full-text (INVERTED) index and an IVF_PQ index
  (whose ``VectorIndexDetails`` pylance 14 ignores with a warning) on 2.0 data files.

Every release on the index down to 0.3.19 installs on this Python 3.11 machine (measured:
``pip download --no-deps`` finds an abi3 manylinux wheel for 0.3.19, 0.4.21, 0.5.9, 0.6.5,
0.7.5, 0.8.0, 0.8.14, 0.10.5, 0.15.0, 0.18.2, 0.20.0, 0.27.1, 0.36.0, and 0.3.19 / 0.4.21 /
0.5.9 / 0.7.5 / 0.8.0 / 0.8.14 / 0.10.5 / 0.15.0 install and write with the pins above; none
failed). 0.4.21 (0.3.19's manifest plus an index section, no deletions yet) and the releases
after 0.27 add nothing the tables above do not cover for txn_engine and would lengthen a cold
run by an install each.

Measured on 2 shared, heavily loaded cores (load average 12-14): cold, seven releases 5 min
18 s and 0.3.19 alone 70 s more, nearly all of it the installs; warm 0.4 s.
``--drop-venvs`` removes the installed releases after the tables are written (about 400 MB
each); the tables stay cached and are regenerated only if their recipe changes.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FIXTURES", "RELEASES", "Fixture", "cache_root", "ensure_fixtures"]

CACHE_ENV = "TXN_ENGINE_HISTORICAL_CACHE"

# release -> its pinned companions (pyarrow / numpy / pandas of the release's era)
RELEASES: dict[str, tuple[str, ...]] = {
    "0.3.19": ("pyarrow==12.0.1", "numpy<2", "pandas<2.1"),
    "0.5.9": ("pyarrow==12.0.1", "numpy<2", "pandas<2.1"),
    "0.7.5": ("pyarrow==12.0.1", "numpy<2"),
    "0.8.0": ("pyarrow==13.0.0", "numpy<2"),
    "0.10.5": ("pyarrow==15.0.0", "numpy<2"),
    "0.15.0": ("pyarrow==16.1.0", "numpy<2"),
    "0.20.0": ("pyarrow==18.1.0", "numpy<2"),
    "0.27.1": ("pyarrow==19.0.1", "numpy<2"),
}

# Every step runs in its release's venv as ``python -c PRELUDE + code uri``.
_PRELUDE = """
import sys, warnings
warnings.simplefilter("ignore")
import lance, pyarrow as pa
uri = sys.argv[1]
def rows(lo, hi):
    return pa.table({"a": pa.array(range(lo, hi), pa.int64()),
                     "s": pa.array([f"s{i}" for i in range(lo, hi)], pa.string())})
def vectors(n, dim=8, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    flat = pa.array(rng.random(n * dim).astype("float32"))
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(flat, dim)})
"""


@dataclass(frozen=True)
class Fixture:
    """One table: ``steps`` run in order, each ``(release, code)`` in that release's venv.

    It is stored under the last step's release as ``<release>/tables/<name>``.
    """

    name: str
    steps: tuple[tuple[str, str], ...]
    note: str

    @property
    def release(self) -> str:
        return self.steps[-1][0]

    @property
    def key(self) -> str:
        """The fixture's name relative to the cache root: ``<release>/<name>``."""
        return f"{self.release}/{self.name}"

    def recipe_hash(self) -> str:
        parts = [_PRELUDE, *(f"{r}|{RELEASES[r]}|{c}" for r, c in self.steps)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


FIXTURES: tuple[Fixture, ...] = (
    Fixture(
        "oldest_manifest",
        (
            (
                "0.3.19",
                """
lance.write_dataset(rows(0, 10), uri)
lance.write_dataset(rows(10, 15), uri, mode="append")
lance.write_dataset(rows(100, 103), uri, mode="overwrite")
lance.write_dataset(rows(103, 110), uri, mode="append")
""",
            ),
        ),
        "the oldest manifest on the index: no fragment ids written, no feature flags",
    ),
    Fixture(
        "arrow_deletions",
        (
            (
                "0.5.9",
                """
lance.write_dataset(rows(0, 100), uri)
lance.write_dataset(rows(100, 110), uri, mode="append")
lance.dataset(uri).delete("a < 5")
lance.dataset(uri).delete("a >= 60 and a < 90")
lance.dataset(uri).delete("a = 105")
""",
            ),
        ),
        "_latest.manifest, V1 naming, no data_format / writer_version, .arrow deletion files",
    ),
    Fixture(
        "ivf_pq_index",
        (
            (
                "0.5.9",
                """
lance.write_dataset(vectors(512), uri)
lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
""",
            ),
        ),
        "an IVF_PQ vector index in the oldest index metadata layout",
    ),
    Fixture(
        "no_fragments",
        (("0.5.9", 'lance.write_dataset(pa.table({"a": pa.array([], pa.int64())}), uri)\n'),),
        "a table with a schema and no fragments",
    ),
    Fixture(
        "missing_data_file",
        (
            (
                "0.5.9",
                """
import os
lance.write_dataset(rows(0, 20), uri)
(first,) = os.listdir(os.path.join(uri, "data"))
lance.write_dataset(rows(20, 30), uri, mode="append")
lance.dataset(uri).delete("a < 3")
os.remove(os.path.join(uri, "data", first))
""",
            ),
        ),
        "a data file removed on purpose: readers must name it, not crash",
    ),
    Fixture(
        "roaring_deletions",
        (
            (
                "0.7.5",
                """
lance.write_dataset(rows(0, 10000), uri, max_rows_per_file=6000)
lance.dataset(uri).delete("a < 5500")
lance.dataset(uri).delete("a >= 9990")
lance.write_dataset(rows(10000, 10010), uri, mode="append")
lance.dataset(uri).delete("a = 10003")
""",
            ),
        ),
        "roaring .bin and .arrow deletion files side by side, the first .txn files",
    ),
    Fixture(
        "restore",
        (
            (
                "0.7.5",
                """
lance.write_dataset(rows(0, 10), uri)
lance.write_dataset(rows(10, 20), uri, mode="append")
lance.write_dataset(rows(100, 105), uri, mode="overwrite")
lance.dataset(uri, version=2).restore()
""",
            ),
        ),
        "Overwrite then Restore transactions as 0.7.5 wrote them",
    ),
    Fixture(
        "migrated_from_v0.7.5",
        (
            (
                "0.7.5",
                """
lance.write_dataset(pa.table({"a": pa.array(range(100), pa.int64())}), uri)
lance.dataset(uri).delete("a < 10")
""",
            ),
            (
                "0.8.0",
                'lance.write_dataset(pa.table({"a": pa.array([100, 101], pa.int64())}), uri, '
                'mode="append")\n',
            ),
        ),
        "0.8.0 migrates a 0.7.5 table and writes physical_rows = live rows (90 of 100)",
    ),
    Fixture(
        "btree_compaction_update",
        (
            (
                "0.10.5",
                """
for lo in range(0, 400, 100):
    lance.write_dataset(rows(lo, lo + 100), uri, mode="append" if lo else "create")
ds = lance.dataset(uri)
ds.create_scalar_index("a", "BTREE")
lance.dataset(uri).delete("a % 7 = 0")
lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=250)
lance.dataset(uri).update({"s": "'updated'"}, where="a < 20")
lance.dataset(uri).add_columns({"b": "a * 2"})
""",
            ),
        ),
        "BTREE index, compaction (Rewrite), Update, add_columns on v1 data files",
    ),
    Fixture(
        "v1_files",
        (
            (
                "0.15.0",
                """
lance.write_dataset(rows(0, 50), uri, use_legacy_format=True)
lance.write_dataset(rows(50, 80), uri, mode="append", use_legacy_format=True)
lance.dataset(uri).delete("a < 10")
""",
            ),
        ),
        "legacy (v1) data files written by 0.15.0",
    ),
    Fixture(
        "v2_files",
        (
            (
                "0.15.0",
                """
lance.write_dataset(rows(0, 50), uri, use_legacy_format=False)
lance.write_dataset(rows(50, 80), uri, mode="append", use_legacy_format=False)
lance.dataset(uri).delete("a < 10")
""",
            ),
        ),
        "v2 data files as 0.15.0 wrote them (the first v2 layout)",
    ),
    Fixture(
        "scalar_indices",
        (
            (
                "0.20.0",
                """
t = rows(0, 300).append_column("c", pa.array([i % 5 for i in range(300)], pa.int64()))
lance.write_dataset(t, uri)
lance.dataset(uri).create_scalar_index("a", "BTREE")
lance.dataset(uri).create_scalar_index("c", "BITMAP")
lance.dataset(uri).delete("c = 3")
""",
            ),
        ),
        "BTREE and BITMAP indices in their 0.20 layout",
    ),
    Fixture(
        "v2_manifest_paths",
        (
            (
                "0.20.0",
                """
lance.write_dataset(rows(0, 20), uri, enable_v2_manifest_paths=True)
lance.write_dataset(rows(20, 25), uri, mode="append")
lance.dataset(uri).delete("a = 3")
""",
            ),
        ),
        "V2 manifest naming written by an old release",
    ),
    Fixture(
        "fts_and_vector_index",
        (
            (
                "0.27.1",
                """
t = vectors(300).append_column("text", pa.array([f"word{i % 13} common" for i in range(300)]))
lance.write_dataset(t, uri, data_storage_version="2.0")
lance.dataset(uri).create_scalar_index("text", "INVERTED")
lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
lance.dataset(uri).delete("id < 7")
""",
            ),
        ),
        "a legacy full-text (INVERTED) index and an IVF_PQ index on 2.0 data files",
    ),
)


def cache_root() -> Path:
    """Where venvs and tables live: ``$TXN_ENGINE_HISTORICAL_CACHE`` or the user cache."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "txn_engine" / "historical"


def _log(msg: str) -> None:
    print(f"[gen_historical_fixtures] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _marker_ok(marker: Path, digest: str) -> bool:
    return marker.is_file() and marker.read_text().strip() == digest


def _venv_python(root: Path, release: str) -> Path:
    return root / release / "venv" / "bin" / "python"


def _ensure_venv(root: Path, release: str) -> Path:
    pins = RELEASES[release]
    digest = hashlib.sha256(f"{release}|{pins}|{sys.version_info[:2]}".encode()).hexdigest()[:16]
    marker = root / release / "venv.done"
    python = _venv_python(root, release)
    if _marker_ok(marker, digest) and python.exists():
        return python
    venv = root / release / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    marker.unlink(missing_ok=True)
    started = time.monotonic()
    _log(f"installing pylance {release} with {' '.join(pins)} into {venv}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--only-binary=:all:", f"pylance=={release}", *pins],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pip could not install pylance {release}:\n{proc.stderr[-3000:]}")
    marker.write_text(digest)
    _log(f"pylance {release} installed in {time.monotonic() - started:.1f}s")
    return python


def _fixture_paths(root: Path, fixture: Fixture) -> tuple[Path, Path]:
    out = root / fixture.release / "tables" / fixture.name
    return out, out.with_name(fixture.name + ".done")


def _fixture_cached(root: Path, fixture: Fixture) -> bool:
    out, marker = _fixture_paths(root, fixture)
    return _marker_ok(marker, fixture.recipe_hash()) and out.is_dir()


def _ensure_fixture(root: Path, fixture: Fixture) -> Path:
    out, marker = _fixture_paths(root, fixture)
    digest = fixture.recipe_hash()
    if _fixture_cached(root, fixture):
        return out
    marker.unlink(missing_ok=True)
    tmp = out.with_name(fixture.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    for release, code in fixture.steps:
        python = _ensure_venv(root, release)
        proc = subprocess.run(
            [str(python), "-c", _PRELUDE + code, str(tmp)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"pylance {release} failed writing {fixture.key}:\n{proc.stderr[-3000:]}"
            )
    tmp.rename(out)
    marker.write_text(digest)
    _log(f"wrote {fixture.key}")
    return out


def ensure_fixtures(names: Sequence[str] | None = None) -> dict[str, Path]:
    """Make sure every fixture (or those whose ``key`` is in ``names``) exists; return
    ``{key: path}``. Cached: a second call only checks the markers."""
    root = cache_root()
    wanted = [f for f in FIXTURES if names is None or f.key in names]
    with _locked(root):
        pending = [f for f in wanted if not _fixture_cached(root, f)]
        releases = sorted({r for f in pending for r, _ in f.steps})
        # installs are mostly download and unpack: a few at a time bound a cold run
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda r: _ensure_venv(root, r), releases))
        return {f.key: _ensure_fixture(root, f) for f in wanted}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print one fixture path per line")
    parser.add_argument(
        "--drop-venvs",
        action="store_true",
        help="remove the installed releases once the tables exist (the tables stay cached)",
    )
    parser.add_argument("names", nargs="*", help="only these fixtures (<release>/<name>)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = ensure_fixtures(args.names or None)
    if args.drop_venvs:
        root = cache_root()
        with _locked(root):
            for release in RELEASES:
                shutil.rmtree(root / release / "venv", ignore_errors=True)
                (root / release / "venv.done").unlink(missing_ok=True)
    _log(f"{len(paths)} fixtures ready in {time.monotonic() - started:.2f}s")
    if args.list:
        for key, path in paths.items():
            print(f"{key}\t{path}")
    else:
        print(cache_root())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
