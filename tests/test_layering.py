"""The import layering, enforced: bytes below place, dependencies pointing one way, no cycles.

``log_format`` holds two layers (see its package docstring). The *bytes* (batches, records,
control markers, indexes, codecs, kernels, dump) are pure functions of their input; the
*place* (storage backends, object names, topics, stable snapshots, the reader and consumer)
knows where those bytes live. The bytes never import the place: that is what lets the
codec be tested, fuzzed and benchmarked without a root, and the storage be replaced without
touching the format. Across components, ``datasource`` -> ``coordinator`` -> ``log_format``
(docs/architecture.md).

Inside ``coordinator`` the clients (``client``, and the ``gateway``, which talks to the
coordinator over its API like any client) never import the server's packages
(``transaction``, ``state``, ``maintenance``, ``group``, ``server``), and no modules of the
three components import each other in a cycle, type hints included.

Imports are read with ``ast``, not by importing, so a violation is found even inside a
function body or an ``if TYPE_CHECKING:`` block. A module of ``log_format`` that is not
listed in PLACE counts as bytes, so a new module is held to the stricter rule until someone
decides it belongs to the place.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Top-level folders -> the dotted packages they install as (pyproject.toml's package-dir).
COMPONENTS = {"log_format": "txnlog.log_format", "coordinator": "txnlog.coordinator",
              "datasource": "txnlog.datasource"}
LOG_FORMAT = "txnlog.log_format"
# The place layer of log_format: modules (or packages) that know where bytes are stored.
PLACE = ("storage", "layout", "topics", "stable", "manifest", "reader", "consumer")
# The coordinator's packages that make up the server process; clients never import them.
SERVER_PACKAGES = tuple(f"txnlog.coordinator.{p}"
                        for p in ("transaction", "state", "maintenance", "group", "server"))
# What each component must not import (the one-way dependency).
FORBIDDEN = {
    "txnlog.log_format": ("txnlog.coordinator", "txnlog.datasource", "pyspark_txnlog"),
    "txnlog.coordinator": ("txnlog.datasource", "pyspark_txnlog"),
    # the coordinator's clients only: never its server's packages
    "txnlog.datasource": SERVER_PACKAGES,
}


def module_name(path: Path) -> str:
    """The dotted name ``path`` installs as (``log_format/storage/s3.py`` ->
    ``txnlog.log_format.storage.s3``; a package's ``__init__`` is the package)."""
    rel = path.relative_to(REPO)
    parts = [COMPONENTS[rel.parts[0]], *rel.parts[1:-1]]
    if rel.stem != "__init__":
        parts.append(rel.stem)
    return ".".join(parts)


def imported(source: str, name: str, is_package: bool = False,
             modules: set[str] | None = None) -> set[str]:
    """Every dotted module name that ``source`` (module ``name``) may import.

    ``from a import b`` yields both ``a`` and ``a.b`` (``b`` may be a submodule); given the
    set of real ``modules``, it yields ``a.b`` alone when that is a module (importing a
    submodule runs its package's ``__init__`` too, but that is the package's own import,
    not this module's). Relative imports are resolved against the module's package.
    """
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = {f"{base}.{alias.name}" for alias in node.names}
            if modules is None:
                out.add(base)
                out.update(subs)
            else:
                found = subs & modules
                out.update(found)
                if len(found) < len(subs):
                    out.add(base)
    return out


def _under(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def place_imports(source: str, name: str, is_package: bool = False) -> list[str]:
    """The place-layer modules that ``source`` imports."""
    return sorted(t for t in imported(source, name, is_package)
                  if any(_under(t, f"{LOG_FORMAT}.{p}") for p in PLACE))


def is_place(name: str) -> bool:
    return any(_under(name, f"{LOG_FORMAT}.{p}") for p in PLACE)


def _sources(component: str) -> list[Path]:
    return sorted(p for p in (REPO / component).rglob("*.py") if "__pycache__" not in p.parts)


def _bytes_modules() -> list[Path]:
    return [p for p in _sources("log_format")
            if module_name(p) != LOG_FORMAT and not is_place(module_name(p))]


# ----------------------------------------------------------------------- the checker itself


@pytest.mark.parametrize("line", [
    "from ..storage import Storage",
    "from ..storage.local import LocalStorage",
    "from .. import layout",
    "from .. import retry, stable",
    "import txnlog.log_format.reader",
    "from txnlog.log_format import consumer",
    "from txnlog.log_format.topics import read_topic",
    "def f():\n    from ..storage.dir_sync import fsync_dir\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..storage import Storage\n",
])
def test_checker_sees_place_imports(line: str) -> None:
    """The checker must flag every spelling of a place import (so a clean run means
    something)."""
    assert place_imports(line, "txnlog.log_format.codec.records")


@pytest.mark.parametrize("line", [
    "from ..errors import LogFormatError",
    "from . import crc, varint",
    "from ..storage_format import x",  # a name that only starts like a place module
    "import os",
    "from ..arrow._decode_kernels import HEADER_SIZE",
])
def test_checker_passes_bytes_imports(line: str) -> None:
    assert not place_imports(line, "txnlog.log_format.codec.records")


def test_checker_resolves_relative_imports_in_packages() -> None:
    assert imported("from . import dir_sync", "txnlog.log_format.storage.local") >= {
        "txnlog.log_format.storage.dir_sync"}
    assert "txnlog.log_format.storage.base" in imported(
        "from .base import Storage", "txnlog.log_format.storage", is_package=True)
    assert "txnlog.coordinator.client" in imported(
        "from ...coordinator.client import X", "txnlog.log_format.codec.records")


# ----------------------------------------------------------------------------- the tree


def test_place_modules_exist() -> None:
    """PLACE names real modules (a rename must update this test, not silently skip it)."""
    names = {module_name(p) for p in _sources("log_format")}
    for place in PLACE:
        assert f"{LOG_FORMAT}.{place}" in names, place
    assert len(_bytes_modules()) >= 15


@pytest.mark.parametrize("path", _bytes_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_bytes_modules_do_not_import_the_place(path: Path) -> None:
    name = module_name(path)
    found = place_imports(path.read_text(), name, path.name == "__init__.py")
    assert not found, (
        f"{path.relative_to(REPO)} is a bytes module of log_format but imports {found}: "
        "the format must not know where it is stored (move the code to the place layer, "
        "or pass the bytes in)")


def test_package_init_imports_no_place_eagerly() -> None:
    """``log_format/__init__`` may name place modules only lazily (in ``__getattr__``), so
    ``import txnlog.log_format`` stays cheap and layer-free."""
    path = REPO / "log_format" / "__init__.py"
    tree = ast.parse(path.read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    found = place_imports(ast.unparse(ast.Module(top, [])), LOG_FORMAT, is_package=True)
    assert not found, f"log_format/__init__.py imports {found} at module level"


@pytest.mark.parametrize("component", sorted(FORBIDDEN))
def test_dependencies_point_one_way(component: str) -> None:
    folder = next(k for k, v in COMPONENTS.items() if v == component)
    bad = []
    for path in _sources(folder):
        targets = imported(path.read_text(), module_name(path), path.name == "__init__.py")
        bad += [f"{path.relative_to(REPO)} imports {t}" for t in sorted(targets)
                if any(_under(t, f) for f in FORBIDDEN[component])]
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------- cycles and the server's side

# The packages that talk to a coordinator only through its API.
CLIENT_PACKAGES = ("txnlog.coordinator.client", "txnlog.coordinator.gateway",
                   "txnlog.coordinator.schema_registry")
MAX_MODULES_PER_PACKAGE = 15
MAX_MODULE_BYTES = 36 * 1024  # Kafka's largest coordinator files are ~35 kB


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports (``sources``: name -> (source,
    is_package)); only imports between the given modules count."""
    names = set(sources)
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        graph[name] = {t for t in imported(source, name, is_package, names)
                       if t in names and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative): every set of modules that import each other, directly or around."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def server_imports(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """``client imports server`` lines for every client module that imports a module of the
    server's packages."""
    bad = []
    for name, (source, is_package) in sorted(sources.items()):
        if not any(_under(name, c) for c in CLIENT_PACKAGES):
            continue
        targets = imported(source, name, is_package, set(sources))
        bad += [f"{name} imports {t}" for t in sorted(targets)
                if any(_under(t, s) for s in SERVER_PACKAGES)]
    return bad


def _tree() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py")
            for c in COMPONENTS for p in _sources(c)}


def test_the_cycle_checker_finds_a_planted_cycle() -> None:
    """A cycle through a type hint, two packages apart, is found (so a clean tree means
    something), and a chain without one is not."""
    planted = {
        "txnlog.coordinator.state.a": ("from ..transaction import b\n", False),
        "txnlog.coordinator.transaction.b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from ..state.c import C\n", False),
        "txnlog.coordinator.state.c": ("from . import a\n", False),
        "txnlog.coordinator.state": ("", True),
        "txnlog.coordinator.transaction": ("", True),
    }
    assert cycles(import_graph(planted)) == [[
        "txnlog.coordinator.state.a", "txnlog.coordinator.state.c",
        "txnlog.coordinator.transaction.b"]]
    planted["txnlog.coordinator.state.c"] = ("import os\n", False)
    assert cycles(import_graph(planted)) == []


def test_the_client_checker_finds_a_planted_server_import() -> None:
    planted = {
        "txnlog.coordinator.client.producer": (
            "def f():\n    from ..state.coordinator_state import CoordinatorState\n", False),
        "txnlog.coordinator.gateway.txn": ("from ..server import faults\n", False),
        "txnlog.coordinator.client.embedded": ("from ..errors import CoordinatorError\n",
                                               False),
        "txnlog.coordinator.server.process": ("from ..client import CoordinatorClient\n",
                                              False),
    }
    assert server_imports(planted) == [
        "txnlog.coordinator.client.producer imports "
        "txnlog.coordinator.state.coordinator_state",
        "txnlog.coordinator.gateway.txn imports txnlog.coordinator.server"]


def test_no_import_cycles() -> None:
    """No modules import each other in a cycle, type hints and function-level imports
    included: each package can be read, tested and replaced from the bottom up."""
    found = cycles(import_graph(_tree()))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_clients_never_import_the_server() -> None:
    """The clients and the gateway reach the coordinator through its API only, so they run
    in processes (Spark tasks, Kafka clients' gateway) that never load the server."""
    bad = server_imports(_tree())
    assert not bad, "\n".join(bad)


def test_packages_and_modules_stay_small() -> None:
    """Every package holds at most ~15 modules and every module stays within Kafka's
    coordinator files' scale, so a role stays visible."""
    too_many, too_big = [], []
    for component in COMPONENTS:
        for folder in [REPO / component, *(p for p in (REPO / component).rglob("*")
                                            if p.is_dir() and "__pycache__" not in p.parts)]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > MAX_MODULES_PER_PACKAGE:
                too_many.append(f"{folder.relative_to(REPO)}: {len(modules)} modules")
        too_big += [f"{p.relative_to(REPO)}: {p.stat().st_size} bytes"
                    for p in _sources(component) if p.stat().st_size > MAX_MODULE_BYTES]
    assert not too_many and not too_big, too_many + too_big


def test_every_package_lists_its_modules() -> None:
    """Each package's docstring names every module in it, so a newcomer finds a role from
    the package's ``__init__`` alone."""
    missing = []
    for component in COMPONENTS:
        for init in (REPO / component).rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            for module in init.parent.glob("*.py"):
                if module.name != "__init__.py" and module.stem not in doc:
                    missing.append(f"{init.relative_to(REPO)} does not name {module.stem}")
    assert not missing, "\n".join(missing)


# ------------------------------------------------------------------- the package's surface


def test_importing_log_format_is_cheap() -> None:
    """``import txnlog.log_format`` loads none of the heavy dependencies: its public names
    load on first use (a Spark driver or a CLI that needs one name pays for that name)."""
    code = ("import sys, txnlog.log_format\n"
            "heavy = [m for m in ('pyarrow', 'numba', 'numpy', 's3fs') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_public_names_resolve() -> None:
    import txnlog.log_format as lf

    assert sorted(lf.__all__) == sorted(lf._EXPORTS)
    for name in lf.__all__:
        value = getattr(lf, name)
        assert value is getattr(importlib.import_module(f"{LOG_FORMAT}.{lf._EXPORTS[name]}"),
                                name)
    # a public name never shadows a submodule (``from txnlog.log_format import dump``)
    modules = {p.stem for p in (REPO / "log_format").iterdir()}
    assert not set(lf.__all__) & modules
    with pytest.raises(AttributeError):
        lf.no_such_name  # noqa: B018


def test_a_commit_planner_imports_no_codec() -> None:
    """Spark unpickles the tasks' commit messages in a driver-side planner before calling
    the sink's ``commit``; a fresh planner (every restarted application has them) must not
    import pyarrow or numba for that: ~0.5 s of CPU each when the messages' classes lived
    beside the encoder."""
    code = (
        "import pickle, sys\n"
        "from txnlog.datasource.write.commit_messages import TxnlogCommitMessage\n"
        "from txnlog.datasource.write.stream_writer import TxnlogStreamCommitMessage\n"
        "task = TxnlogCommitMessage(3, 0, 1, 0, 10, [('t', 0, 0, 10)])\n"
        "blob = pickle.dumps([TxnlogStreamCommitMessage('tid', 7, 1, 0, False, task), task])\n"
        "for m in list(sys.modules):\n"
        "    if m.startswith('txnlog'):\n"
        "        del sys.modules[m]\n"
        "msgs = pickle.loads(blob)\n"
        "import txnlog.datasource.write.batch_writer, txnlog.datasource.write.stream_writer\n"
        "heavy = [m for m in ('pyarrow', 'numba') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert msgs[0].task.member_id == 3 and msgs[1].written == [('t', 0, 0, 10)]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
