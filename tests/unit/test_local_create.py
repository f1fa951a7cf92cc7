"""The exclusive create of local disk (``txn_engine.storage._files.create_exclusive``).

On Linux the bytes go to an unnamed ``O_TMPFILE`` inode that is linked into place through
``/proc/self/fd`` (``linkat`` with ``AT_SYMLINK_FOLLOW``: ``EEXIST`` when the name is taken,
atomically, as ``link`` of a named staging file); where that is not available, a named
staging file is linked and removed. Either way the name appears complete or not at all,
a second create of the same name is refused, and nothing else is left in the directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from txn_engine.errors import ObjectExistsError
from txn_engine.storage import _files


def _no_staging(final: str, data: bytes, *, fsync: bool) -> str:
    raise AssertionError("a named staging file was written")


@pytest.mark.parametrize("fsync", [True, False])
def test_linux_creates_through_an_unnamed_inode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """No named staging file on Linux: the create works with ``write_staging`` broken, the
    parent directories are made, the file has the bytes and the usual permissions, a
    second create of the name is ObjectExistsError and leaves the first bytes. (Elsewhere
    there is no ``O_TMPFILE``, and the create must then take the named staging file.)"""
    tmpfile = getattr(os, "O_TMPFILE", None)
    assert (tmpfile is not None) == sys.platform.startswith("linux")
    monkeypatch.setattr(_files, "_TMPFILE", tmpfile)
    monkeypatch.setattr(_files, "write_staging", _no_staging)
    if tmpfile is None:
        with pytest.raises(AssertionError, match="named staging file"):
            _files.create_exclusive(str(tmp_path / "x.manifest"), b"x", fsync=fsync)
        return
    final = tmp_path / "t" / "_versions" / "1.manifest"
    _files.create_exclusive(str(final), b"first", fsync=fsync)
    assert final.read_bytes() == b"first"
    umask = os.umask(0)
    os.umask(umask)
    assert final.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(ObjectExistsError):
        _files.create_exclusive(str(final), b"second", fsync=fsync)
    assert final.read_bytes() == b"first"
    assert os.listdir(final.parent) == ["1.manifest"]


def test_falls_back_to_a_named_staging_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``O_TMPFILE`` is turned down (an open flag the kernel refuses stands in for a
    filesystem without it), the create uses a named staging file, with the same result,
    and stops trying ``O_TMPFILE`` in this process."""
    monkeypatch.setattr(_files, "_TMPFILE", os.O_CREAT | getattr(os, "O_DIRECTORY", 0))
    final = tmp_path / "x.manifest"
    _files.create_exclusive(str(final), b"data", fsync=True)
    assert final.read_bytes() == b"data"
    assert _files._TMPFILE is None
    with pytest.raises(ObjectExistsError):
        _files.create_exclusive(str(final), b"other", fsync=True)
    assert os.listdir(tmp_path) == ["x.manifest"]
