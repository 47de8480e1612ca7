"""The import layering, enforced: bytes below place, and dependencies pointing one way.

``log_format`` holds two layers (see its package docstring). The *bytes* (batches, records,
control markers, indexes, codecs, kernels, dump) are pure functions of their input; the
*place* (storage backends, object names, topics, stable snapshots, the reader and consumer)
knows where those bytes live. The bytes never import the place: that is what lets the
codec be tested, fuzzed and benchmarked without a root, and the storage be replaced without
touching the format. Across components, ``datasource`` -> ``coordinator`` -> ``log_format``
(docs/architecture.md).

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
PLACE = ("storage", "layout", "topics", "stable", "manifest", "reader", "consumer", "dir_sync")
# What each component must not import (the one-way dependency).
FORBIDDEN = {
    "txnlog.log_format": ("txnlog.coordinator", "txnlog.datasource", "pyspark_txnlog"),
    "txnlog.coordinator": ("txnlog.datasource", "pyspark_txnlog"),
}


def module_name(path: Path) -> str:
    """The dotted name ``path`` installs as (``log_format/storage/s3.py`` ->
    ``txnlog.log_format.storage.s3``; a package's ``__init__`` is the package)."""
    rel = path.relative_to(REPO)
    parts = [COMPONENTS[rel.parts[0]], *rel.parts[1:-1]]
    if rel.stem != "__init__":
        parts.append(rel.stem)
    return ".".join(parts)


def imported(source: str, name: str, is_package: bool = False) -> set[str]:
    """Every dotted module name that ``source`` (module ``name``) may import.

    ``from a import b`` yields both ``a`` and ``a.b`` (``b`` may be a submodule); relative
    imports are resolved against the module's package.
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
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
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
    "from .storage import Storage",
    "from .storage.local import LocalStorage",
    "from . import layout",
    "from . import crc, stable",
    "import txnlog.log_format.reader",
    "from txnlog.log_format import consumer",
    "from txnlog.log_format.topics import read_topic",
    "def f():\n    from .dir_sync import fsync_dir\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .storage import Storage\n",
])
def test_checker_sees_place_imports(line: str) -> None:
    """The checker must flag every spelling of a place import (so a clean run means
    something)."""
    assert place_imports(line, "txnlog.log_format.records")


@pytest.mark.parametrize("line", [
    "from .errors import LogFormatError",
    "from . import crc, varint",
    "from .storage_format import x",  # a name that only starts like a place module
    "import os",
    "from ._decode_kernels import HEADER_SIZE",
])
def test_checker_passes_bytes_imports(line: str) -> None:
    assert not place_imports(line, "txnlog.log_format.records")


def test_checker_resolves_relative_imports_in_packages() -> None:
    assert imported("from .. import dir_sync", "txnlog.log_format.storage.local") >= {
        "txnlog.log_format.dir_sync"}
    assert "txnlog.log_format.storage.base" in imported(
        "from .base import Storage", "txnlog.log_format.storage", is_package=True)
    assert "txnlog.coordinator.client" in imported(
        "from ..coordinator.client import X", "txnlog.log_format.records")


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
    beside the encoder (issue 17)."""
    code = (
        "import pickle, sys\n"
        "from txnlog.datasource.commit_messages import TxnlogCommitMessage\n"
        "from txnlog.datasource.stream_writer import TxnlogStreamCommitMessage\n"
        "task = TxnlogCommitMessage(3, 0, 1, 0, 10, [('t', 0, 0, 10)])\n"
        "blob = pickle.dumps([TxnlogStreamCommitMessage('tid', 7, 1, 0, False, task), task])\n"
        "for m in list(sys.modules):\n"
        "    if m.startswith('txnlog'):\n"
        "        del sys.modules[m]\n"
        "msgs = pickle.loads(blob)\n"
        "import txnlog.datasource.batch_writer, txnlog.datasource.stream_writer\n"
        "heavy = [m for m in ('pyarrow', 'numba') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert msgs[0].task.member_id == 3 and msgs[1].written == [('t', 0, 0, 10)]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
