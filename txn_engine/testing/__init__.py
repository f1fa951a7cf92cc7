"""Test machinery shipped with txn_engine, for testing txn_engine and your own writers.

See ``docs/testing.md``. Submodules:

* :mod:`~txn_engine.testing.model`: reference model of table contents (rows with
  identities), folded from writer intents (:class:`IntentModel`) or from the landed
  transactions (:class:`HistoryModel`); :func:`read_contents` of any version;
* :mod:`~txn_engine.testing.faults` / :mod:`~txn_engine.testing.fault_storage`: a
  fault-injecting storage wrapper (:class:`FaultyStorage`), the named faults the commit
  protocol must survive (:func:`fault_rules`, :data:`FAULT_KINDS`) and a randomly failing
  storage (:class:`ChaosStorage`);
* :mod:`~txn_engine.testing.journal`: durable writer intents for multi-process runs and
  :func:`check_history` against them;
* :mod:`~txn_engine.testing.planning`: the planning steps (row deletes and updates with
  their deletion vectors, compaction) the machine's :class:`Planner` and the stress writers
  share, each returning an operation and its intended effect;
* :mod:`~txn_engine.testing.machine` *(needs hypothesis)*: :class:`WritersMachine`, a
  ``RuleBasedStateMachine`` of N interleaved writers, and its :class:`Planner`;
* :mod:`~txn_engine.testing.strategies`, :mod:`~txn_engine.testing.schemas` *(need
  hypothesis)*: strategies for every value type, operation, transaction and schema;
* :mod:`~txn_engine.testing.fsclock`: :func:`~txn_engine.testing.fsclock.next_tick`, a wait
  for the filesystem clock, for tests of the local-disk latest-version hint (it trusts
  directory timestamps).

The invariant checker itself is :func:`txn_engine.verify.verify`.

Names from the hypothesis-based modules are imported on first use, so this package can be
imported without hypothesis installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from txn_engine.testing.fault_storage import FAULT_KINDS, LANDING_FAULTS, ChaosStorage, fault_rules
from txn_engine.testing.faults import Fault, FaultyStorage, SimulatedCrash
from txn_engine.testing.journal import (
    ChainedRows,
    HistoryCheck,
    Journal,
    JournalSummary,
    check_history,
    read_journals,
)
from txn_engine.testing.model import (
    AddRows,
    Contents,
    EditConfig,
    Effect,
    EffectError,
    HistoryModel,
    IntentModel,
    LanceFileRows,
    NoRowChange,
    RemoveRows,
    ReplaceTable,
    RestoreVersion,
    Row,
    RowSource,
    SetValues,
    SyntheticRows,
    apply_effect,
    read_contents,
)

__all__ = [
    "FAULT_KINDS",
    "LANDING_FAULTS",
    "AddRows",
    "ChainedRows",
    "ChaosStorage",
    "Contents",
    "EditConfig",
    "Effect",
    "EffectError",
    "Fault",
    "FaultyStorage",
    "HistoryCheck",
    "HistoryModel",
    "IntentModel",
    "Journal",
    "JournalSummary",
    "LanceFileRows",
    "NoRowChange",
    "Planner",
    "RemoveRows",
    "ReplaceTable",
    "RestoreVersion",
    "Row",
    "RowSource",
    "SetValues",
    "SimulatedCrash",
    "SyntheticRows",
    "WritersMachine",
    "apply_effect",
    "check_history",
    "fault_rules",
    "find_failure",
    "read_contents",
    "read_journals",
]

_LAZY: Mapping[str, str] = MappingProxyType(
    {
        "WritersMachine": "txn_engine.testing.machine",
        "Planner": "txn_engine.testing.machine",
        "find_failure": "txn_engine.testing.machine",
    }
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
