"""txn_engine: the transaction and conflict-resolution engine for the Lance table format.

Layers (each only imports the ones above it)::

    txn_engine.errors      one error hierarchy (drawn in its docstring)
    txn_engine._proto      generated protobuf modules (wire-compatible with Lance)
    txn_engine.storage     Storage protocol + local / memory / fsspec backends
    txn_engine.format      manifest files, naming, deletion files, row ids, flags, schema
    txn_engine.model, .ops, .transaction, .codec
                           immutable attrs types for every Lance operation + protobuf codec
    txn_engine.builder     pure manifest builder (current manifest + transaction -> next)
    txn_engine.conflicts   the conflict matrix as data, detection, rebase
    txn_engine.commit      the commit loop (retries, backoff, exactly-once)
    txn_engine.dataset     read API (Dataset.open)
    txn_engine.testing     Hypothesis strategies, reference model, fault injection
"""

from __future__ import annotations

from txn_engine import errors as errors

__version__ = "0.1.0"

__all__ = ["__version__", "errors"]
