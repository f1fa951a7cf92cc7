"""Every module of the package imports with the declared dependencies alone.

``scripts/test.sh`` runs the unit tier in a throwaway venv holding only ``pip install .`` (no
extras) and the test runner, so a module-level import of something the core does not declare
(numpy, pandas, pylance, ...) fails here even when no other unit test touches that module.
Modules of an optional extra may only fail for want of that extra's own packages.
"""

from __future__ import annotations

import importlib
import pkgutil

import txn_engine

#: module prefix -> the top-level packages its extra brings (pyproject's optional deps)
EXTRAS = {
    "txn_engine.spark.": {"pyspark", "pandas", "lance"},
    "txn_engine.namespace._lance": {"lance_namespace"},
    "txn_engine.namespace._rest": {"lance_namespace"},
}


def test_every_module_imports_or_needs_only_its_extra() -> None:
    names = [m.name for m in pkgutil.walk_packages(txn_engine.__path__, "txn_engine.")]
    assert len(names) > 30, names  # the walk really saw the package
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            allowed = next((deps for p, deps in EXTRAS.items() if name.startswith(p)), set())
            missing = (exc.name or "").split(".")[0]
            assert missing in allowed, f"{name} imports {missing!r}, not a declared dependency"
