"""Making the Spark integration's log lines visible in Spark's Python workers.

The driver-side commit and abort of a write (batch or streaming) run in a Python worker
that Spark starts without any logging configuration; call :func:`ensure_log_output` at
their start.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["ensure_log_output"]


def ensure_log_output() -> None:
    """Spark's Python workers configure no logging; make the commit summary visible in
    the driver's log (the worker's stderr) unless the application configured handlers."""
    logger = logging.getLogger("txn_engine.spark")
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
