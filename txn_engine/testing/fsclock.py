"""Waiting for the filesystem clock, for tests of anything that compares file timestamps.

Linux stamps files with a coarse clock (one tick is about 4 ms), so two changes made within
one tick carry the same mtime/ctime. The latest-version hint of local disk
(:func:`txn_engine.format.naming.scan_versions`) trusts a hint only if ``_versions/`` has not
changed since the hint was written, judged by those timestamps; a test that writes a hint and
then changes the directory must put a tick between the two, or the change is invisible.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

__all__ = ["next_tick"]


def next_tick(directory: str | os.PathLike[str], timeout: float = 5.0) -> None:
    """Return once the filesystem clock has moved past ``directory``'s mtime, so that the
    next change there carries a later timestamp. Probes with a file created and removed in
    ``directory``'s parent. Raises TimeoutError if the clock has not moved in ``timeout``
    seconds."""
    path = Path(directory)
    seen = path.stat().st_mtime_ns
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = path.parent / f".tick-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        now = probe.stat().st_ctime_ns
        probe.unlink()
        if now > seen:
            return
        time.sleep(0.001)
    raise TimeoutError(f"the filesystem clock did not move past {path}'s mtime")
