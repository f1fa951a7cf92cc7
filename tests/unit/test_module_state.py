"""No module of txn_engine keeps mutable state at module level, and a fresh Session starts
from nothing.

What the library remembers between calls lives on a :class:`txn_engine.session.Session`
(each module's kind of memory is a part of it), so a test or an application can start from a
clean slate; a module-level constant container is frozen (``MappingProxyType``,
``frozenset``, ``tuple``) so nothing can fill it behind the session's back.
"""

from __future__ import annotations

import ast
import collections
import importlib
import inspect
import pkgutil
import threading
import time
import uuid
from types import ModuleType
from typing import Any

import txn_engine
from txn_engine import session
from txn_engine.errors import ObjectExistsError
from txn_engine.format import naming
from txn_engine.storage import MemoryStorage, base, obstore_store
from txn_engine.storage._probe import ProvenStores, ensure_conditional_create, forget_probes

#: Packages of optional extras (import names): a module that needs one that is not
#: installed is skipped (tests/unit also runs in a venv with the core dependencies alone).
OPTIONAL = frozenset({"lance", "lance_namespace", "pyspark", "pandas", "obstore", "numpy"})

#: Values that are mutable containers (``OrderedDict`` and ``defaultdict`` are dicts).
MUTABLE = (dict, list, set, bytearray, collections.deque, threading.local)

#: Module-level names allowed to hold a mutable container (a list by convention).
ALLOWED = frozenset({"__all__"})

#: Generated code (protoc's modules keep their namespace as ``_globals``), not checked.
GENERATED = "txn_engine._proto."


def _modules() -> tuple[list[ModuleType], list[str]]:
    """Every module of txn_engine that imports, and the names of those skipped for want of
    an optional extra (with the package missing)."""
    imported, skipped = [], []
    for info in pkgutil.walk_packages(txn_engine.__path__, "txn_engine."):
        try:
            imported.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing not in OPTIONAL:
                raise
            skipped.append(f"{info.name} (needs {missing})")
    return imported, skipped


#: Statements whose blocks run at import time when they are at module level.
_BLOCKS = (ast.If, ast.Try, ast.TryStar, ast.With, ast.For, ast.While)


def _assigned(body: list[ast.stmt]) -> list[str]:
    """The names a module's top-level statements assign (inside ``if``/``try``/``with``
    blocks too, not inside functions or classes)."""
    names: list[str] = []
    for node in body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            names.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if isinstance(node, _BLOCKS):
            for field in ("body", "orelse", "finalbody"):
                names.extend(_assigned(getattr(node, field, None) or []))
            for handler in getattr(node, "handlers", None) or []:
                names.extend(_assigned(handler.body))
    return names


def _mutable_names(module: ModuleType) -> list[str]:
    """``module.name: type`` of each name the module assigns at top level whose value is a
    mutable container."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return []
    found = []
    for name in dict.fromkeys(_assigned(ast.parse(source).body)):
        value: Any = getattr(module, name, None)
        if name not in ALLOWED and isinstance(value, MUTABLE):
            found.append(f"{module.__name__}.{name}: {type(value).__name__}")
    return found


def test_no_module_keeps_a_mutable_container_at_module_level() -> None:
    modules, skipped = _modules()
    assert len(modules) > 30, [m.__name__ for m in modules]  # the walk really saw the package
    print("not imported (optional extras missing):", ", ".join(skipped) or "none")
    checked = [m for m in modules if not m.__name__.startswith(GENERATED)]
    found = [entry for module in checked for entry in _mutable_names(module)]
    assert found == [], (
        "module-level mutable containers (freeze a constant: MappingProxyType, frozenset, "
        "tuple; keep a memory on a txn_engine.session.Session part):\n" + "\n".join(found)
    )


def test_the_check_sees_what_it_must() -> None:
    """The AST walk finds names assigned in nested top-level blocks and annotated ones."""
    tree = ast.parse(
        "import os\nA = {}\nB: list[int] = []\nif os:\n    C = set()\nelse:\n    D = 1\n"
        "try:\n    E = 2\nexcept ImportError:\n    F = 3\n"
        "def g():\n    H = {}\nclass K:\n    L = []\nM, (N, O) = 1, (2, 3)\n"
    )
    assert _assigned(tree.body) == ["A", "B", "C", "D", "E", "F", "M", "N", "O"]


class _Counting:
    """A fake store's create-if-absent and delete, counting calls (enforces the
    precondition)."""

    def __init__(self) -> None:
        self.objects: set[str] = set()
        self.creates = 0
        self.deletes = 0

    def create(self, path: str, data: bytes) -> None:
        self.creates += 1
        if path in self.objects:
            raise ObjectExistsError(path)
        self.objects.add(path)

    def delete(self, path: str) -> None:
        self.deletes += 1
        self.objects.discard(path)


def test_a_fresh_session_proves_a_store_again() -> None:
    """A store the default session proved is not proven in a fresh one (which probes it
    once, as the default did); neither forgets the other's."""
    key = ("test", uuid.uuid4().hex)
    store = _Counting()

    def probe() -> None:
        ensure_conditional_create(key, "the test store", store.create, store.delete)

    with session.using(session.default()):
        probe()
        probe()
    assert (store.creates, store.deletes) == (2, 1)
    fresh = session.Session()
    assert key not in fresh.part(ProvenStores).proven
    with session.using(fresh):
        probe()
        probe()
        assert (store.creates, store.deletes) == (4, 2)
        forget_probes()
    assert key in session.default().part(ProvenStores).proven
    assert key not in fresh.part(ProvenStores).proven
    probe()  # the default session still knows it
    assert (store.creates, store.deletes) == (4, 2)


def test_a_fresh_session_has_seen_no_beacon() -> None:
    """The beacon a listing in the default session showed is unknown to a fresh session."""
    storage = MemoryStorage()
    expires_ms = int(time.time() * 1000 + naming.BEACON_SECONDS * 1000)
    storage.put(f"{naming.VERSIONS_DIR}/{naming.beacon_name(expires_ms, 'a' * 32)}", b"")
    with session.using(session.default()):
        listing = naming.scan_versions(storage)
        assert listing.beacons
        assert naming.carrier_beacon(storage.uri)
    assert session.default().part(naming.SeenBeacons).live.get(storage.uri) == expires_ms
    fresh = session.Session()
    with session.using(fresh):
        assert not naming.carrier_beacon(storage.uri)
    seen = fresh.part(naming.SeenBeacons)
    assert seen.live == {}
    assert seen.discredited == {}
    with session.using(fresh):
        naming.forget_beacon(storage.uri)  # nothing seen here: nothing to discredit
    assert naming.carrier_beacon(storage.uri)  # the default session still saw it
    naming.forget_beacon(storage.uri)
    assert not naming.carrier_beacon(storage.uri)


def test_a_fresh_session_shares_no_obstore_client() -> None:
    """obstore clients are shared within a session, not between sessions (the module
    imports obstore only when it makes a store, so this runs without it)."""

    class Client:
        made = 0

        @classmethod
        def from_url(cls, url: str, **kwargs: Any) -> Client:
            cls.made += 1
            return cls()

    url = f"s3://bucket/{uuid.uuid4().hex}"
    first = obstore_store._client(Client, url, {}, fresh=False)
    assert obstore_store._client(Client, url, {}, fresh=False) is first
    with session.using(session.Session()):
        other = obstore_store._client(Client, url, {}, fresh=False)
    assert other is not first
    assert Client.made == 2


def test_a_fresh_session_checks_a_storage_class_again() -> None:
    """The storage classes ``is_storage`` remembered in one session are checked again in a
    fresh one."""

    class Store(MemoryStorage):
        pass

    assert base.is_storage(Store())
    assert Store in session.current().part(base.StorageClasses).known
    fresh = session.Session()
    assert Store not in fresh.part(base.StorageClasses).known
    with session.using(fresh):
        assert base.is_storage(Store())
    assert Store in fresh.part(base.StorageClasses).known
