"""Compile the codec kernels ahead of time into one CPython extension module (numba's pycc).

Why: a fresh process that calls the kernels through numba imports numba (~0.2 s of CPU) and
loads its cached code; every fresh Spark Python worker paid that on its first task. The
module built here imports in well under a millisecond and needs no numba (``aot_kernels``
loads it, ``kernel_loading`` binds the kernel modules to it).

From the same source: each entry kernel (``@kernel(entry=True)``) is exported by pycc from
its Python function, with exactly the argument types numba compiled for it in this process
(``warm_up()`` runs every call the codec makes first); the kernels it calls and the
intrinsics are compiled into it as numba would inline or link them. The kernels keep
numba's ``nogil``: the exported wrappers release the GIL as the jitted ones do.

Target: this machine's CPU, as numba's JIT compiles (the key in ``aot_kernels`` carries the
CPU, so another CPU never loads it). Written to a temporary directory, then renamed into
the cache directory (manifest last), under a lock: processes that build at once build once.
A failure (no C compiler, no Python headers, a numba without pycc) is logged and leaves
numba's kernels in use; ``<module>.failed`` records it, so later warm-ups do not retry
until the key changes (delete the file to retry).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import logging
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import aot_kernels
from .kernel_loading import KERNEL_MODULES, Kernel, kernels_of

log = logging.getLogger("txnlog.kernels")


def entries() -> list[Kernel]:
    out = []
    for dotted in KERNEL_MODULES:
        namespace = vars(importlib.import_module(dotted))
        out += [k for k in kernels_of(namespace).values() if k.entry]
    return out


def _arg_spec(t: Any) -> list[Any] | None:
    """How ``aot_kernels`` checks an argument of numba type ``t`` (None: not exportable)."""
    from numba.core import types

    if isinstance(t, types.Array):
        return ["array", str(t.dtype), t.ndim, t.layout, bool(t.mutable is False),
                bool(t.aligned)]
    if t == types.int64:
        return ["int64"]
    if t == types.boolean:
        return ["bool"]
    return None


@contextlib.contextmanager
def _flags_releasing_gil(release: bool) -> Iterator[None]:
    """pycc compiles with default flags; ours keep numba's ``nogil``."""
    from numba.pycc import compiler

    base = compiler.Flags

    class Flags(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.release_gil = release

    compiler.Flags = Flags
    try:
        yield
    finally:
        compiler.Flags = base


def build(directory: Path | None = None) -> Path | None:
    """Build the module for the current key unless it exists; its path, or None when the
    build failed (logged). Every entry must have been compiled by numba in this process
    (``warm_up()`` does it) for its argument types to be known."""
    key = aot_kernels.build_key()
    d = directory or aot_kernels.cache_dir()
    so, man = aot_kernels.paths(key, d)
    failed = man.with_suffix(".failed")
    if man.exists() and so.exists():
        return so
    if failed.exists():
        log.warning("txnlog codec kernels: not building ahead of time, an earlier build "
                    "failed (%s; delete it to retry)", failed)
        return None
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f".{aot_kernels.module_name(key)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building: wait for it
        if man.exists() and so.exists():
            return so
        try:
            return _build(key, so, man)
        except Exception:
            failed.write_text(traceback.format_exc())
            log.warning("txnlog codec kernels: the ahead-of-time build failed, numba's JIT "
                        "stays in use (details in %s)", failed, exc_info=True)
            return None


def _build(key: str, so: Path, man: Path) -> Path:
    from numba.pycc import CC

    kernels = entries()
    exports: dict[str, list[dict[str, Any]]] = {}
    name = aot_kernels.module_name(key)
    with tempfile.TemporaryDirectory(prefix="txnlog-aot-", dir=so.parent) as tmp:
        cc = CC(name)
        cc.output_dir = tmp
        cc.use_nrt = False  # the kernels allocate nothing (compiled with _nrt=False)
        cc.target_cpu = "host"
        cc.verbose = False
        for k in kernels:
            dispatcher = k.dispatcher()
            for i, sig in enumerate(dispatcher.signatures):
                args = [_arg_spec(t) for t in sig]
                if any(a is None for a in args):
                    log.info("txnlog codec kernels: %s%s stays with numba (argument types "
                             "not exported)", k.name, sig)
                    continue
                symbol = f"{k.name}_{i}"
                cc.export(symbol, dispatcher.overloads[sig].signature)(k.py_func)
                exports.setdefault(f"{k.module}.{k.name}", []).append(
                    {"symbol": symbol, "args": args})
        missing = [k.name for k in kernels if f"{k.module}.{k.name}" not in exports]
        if missing:
            raise RuntimeError(f"entries never compiled in this process: {missing} "
                               "(run warm_up() first)")
        with _flags_releasing_gil(all(k.options.get("nogil") for k in kernels)):
            cc.compile()
        built = Path(tmp) / cc.output_file
        os.replace(built, so)
        manifest = {"key": key, "numba": aot_kernels.numba_version(), "entries": exports}
        part = Path(tmp) / "manifest.json"
        part.write_text(json.dumps(manifest, indent=1))
        os.replace(part, man)  # last: a manifest means the module is complete
    log.info("txnlog codec kernels: compiled ahead of time into %s", so)
    return so


def clean(directory: Path | None = None, keep: int = 8) -> None:
    """Remove all but the newest ``keep`` modules of other keys (old source, numba, CPU)."""
    d = directory or aot_kernels.cache_dir()
    if not d.is_dir():
        return
    current = aot_kernels.module_name(aot_kernels.build_key())
    mans = sorted((p for p in d.glob(aot_kernels.PREFIX + "*.json") if p.stem != current),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in mans[keep:]:
        for p in d.glob(old.stem + "*"):
            with contextlib.suppress(OSError):
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
