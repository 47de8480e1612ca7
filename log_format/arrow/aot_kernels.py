"""Find and load the codec kernels compiled ahead of time, without importing numba.

``aot_build`` compiles the kernel modules' entries (numba's ``pycc``) into one CPython
extension module in a per-user cache directory: ``$TXNLOG_KERNEL_DIR``, else
``$XDG_CACHE_HOME/txnlog/kernels``, else ``~/.cache/txnlog/kernels``. Its name carries a key
of everything the machine code depends on: the kernel modules' source (and the build's),
numba's version, the Python ABI and the CPU it was compiled for. A module built from other
source, by another numba or for another CPU is never loaded (numba's kernels run instead,
and the log line says so); the next ``warm_up()`` builds the right one beside it.

Beside the module a JSON manifest lists each entry's argument types as numba compiled them.
An entry is called through a small check of those types as numba's dispatcher tells them
apart (dtype, dimensions, layout, writability; int64 and bool scalars): the extension's own
unboxing checks only item sizes, and numba would have compiled a new specialisation for
anything else, so anything else goes to numba's kernels too.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import platform
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

log = logging.getLogger("txnlog.kernels")
DIR_ENV = "TXNLOG_KERNEL_DIR"
PREFIX = "txnlog_kernels_"
_HERE = Path(__file__).resolve().parent
# What the module is made from: every kernel module, the build and the manifest's reader.
SOURCES = (_HERE / "_decode_kernels.py", _HERE / "_encode_kernels.py",
           _HERE.parent / "codec" / "partitioner.py", _HERE / "aot_build.py",
           Path(__file__).resolve())
_lock = threading.Lock()
_loaded: tuple[ModuleType | None, str, dict[str, Any]] | None = None


def cache_dir() -> Path:
    env = os.environ.get(DIR_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "txnlog" / "kernels"


def cpu_id() -> str:
    """The CPU the code is compiled for, read without llvmlite: its model and feature flags
    (a module compiled for this CPU may use instructions another lacks)."""
    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            seen: set[str] = set()
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "flags", "Features", "CPU part") and name not in seen:
                    seen.add(name)
                    parts.append(value.strip())
                if not line.strip() and seen:
                    break  # the first processor's block is enough
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def numba_version() -> str:
    """numba's version, without importing numba: from its ``.dist-info`` folder's name beside
    the package (~1 ms), else its metadata (~20 ms: ``importlib.metadata`` scans sys.path)."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.origin:
        return "none"
    site = Path(spec.origin).parent.parent
    infos = [p.name[len("numba-"):-len(".dist-info")] for p in site.glob("numba-*.dist-info")]
    if len(infos) == 1:
        return infos[0]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba")
    except PackageNotFoundError:
        return "none"


def build_key(sources: tuple[Path, ...] = SOURCES) -> str:
    h = hashlib.sha256()
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for part in (numba_version(), sys.implementation.cache_tag,
                 sysconfig.get_config_var("EXT_SUFFIX") or "", cpu_id()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def module_name(key: str) -> str:
    return PREFIX + key


def paths(key: str, directory: Path | None = None) -> tuple[Path, Path]:
    """(extension module, manifest) for a key."""
    d = directory or cache_dir()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return d / (module_name(key) + suffix), d / (module_name(key) + ".json")


def load() -> tuple[ModuleType | None, str]:
    """The ahead-of-time module for this source, numba, Python and CPU (once per process),
    or None and why not."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded[0], _loaded[1]


def manifest() -> dict[str, Any]:
    load()
    assert _loaded is not None
    return _loaded[2]


def forget() -> None:
    """Look again on the next ``load()`` (after a build in this process; tests)."""
    global _loaded
    with _lock:
        _loaded = None


def _load() -> tuple[ModuleType | None, str, dict[str, Any]]:
    try:
        key = build_key()
    except OSError as exc:
        return None, f"cannot read the kernel source: {exc}", {}
    so, man = paths(key)
    if not man.exists() or not so.exists():
        d = so.parent
        others = sorted(p.name for p in d.glob(PREFIX + "*.json")) if d.is_dir() else []
        why = (f"the {len(others)} ahead-of-time module(s) in {d} were built from other "
               "kernel source, numba, Python or CPU (stale)" if others
               else f"no ahead-of-time module in {d}")
        return None, why + "; warm_up() builds it", {}
    try:
        spec = json.loads(man.read_text())
        loader = importlib.machinery.ExtensionFileLoader(module_name(key), str(so))
        mspec = importlib.util.spec_from_file_location(module_name(key), so, loader=loader)
        assert mspec is not None
        module = importlib.util.module_from_spec(mspec)
        loader.exec_module(module)
    except Exception as exc:  # a damaged file: numba's kernels still work
        return None, f"cannot load {so}: {exc!r}", {}
    return module, f"loaded {so}", spec


def entry(module: ModuleType, qualname: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The ahead-of-time entry of kernel ``qualname`` (``module.function``) behind a check of
    its argument types; ``fallback`` (numba's kernel) takes any other call. Without an
    entry, the fallback."""
    overloads = manifest().get("entries", {}).get(qualname, [])
    fns = [(getattr(module, o["symbol"], None), o["args"]) for o in overloads]
    fns = [(fn, args) for fn, args in fns if fn is not None]
    if not fns:
        return fallback
    return _checked(qualname.rpartition(".")[2], fns, fallback)


def _arg_check(i: int, spec: list[Any], consts: dict[str, Any]) -> str:
    """A Python expression true when argument ``a{i}`` has the type ``spec`` describes."""
    a = f"a{i}"
    if spec[0] == "array":
        _, dtype, ndim, layout, readonly, _aligned = spec  # numba's typeof ignores alignment
        consts[f"D{i}"] = np.dtype(dtype)
        cond = [f"isinstance({a}, ndarray)", f"({a}.dtype is D{i} or {a}.dtype == D{i})",
                f"{a}.ndim == {ndim}"]
        # numba's layout: C if C-contiguous, else F if F-contiguous, else A
        cond.append({"C": f"(f{i} := {a}.flags).c_contiguous",
                     "F": f"not (f{i} := {a}.flags).c_contiguous and f{i}.f_contiguous"}.get(
            layout, f"not (f{i} := {a}.flags).c_contiguous and not f{i}.f_contiguous"))
        if not readonly:
            cond.append(f"f{i}.writeable")
        return " and ".join(cond)
    if spec[0] == "int64":
        return (f"((type({a}) is int and -9223372036854775808 <= {a} <= 9223372036854775807)"
                f" or type({a}) is int64)")
    if spec[0] == "bool":
        return f"(type({a}) is bool or type({a}) is bool_)"
    raise ValueError(f"unsupported argument spec {spec!r}")


def _checked(name: str, fns: list[tuple[Callable[..., Any], list[Any]]],
             fallback: Callable[..., Any]) -> Callable[..., Any]:
    """Generated code: one chain of checks per overload (a loop over checkers costs ~3x)."""
    consts: dict[str, Any] = {"ndarray": np.ndarray, "int64": np.int64, "bool_": np.bool_}
    nargs = len(fns[0][1])
    params = ", ".join(f"a{i}" for i in range(nargs))
    lines = [f"def {name}({params}):"]
    for j, (fn, args) in enumerate(fns):
        if len(args) != nargs:
            continue
        consts[f"aot{j}"] = fn
        cond = " and ".join(_arg_check(i, s, consts) for i, s in enumerate(args)) or "True"
        lines.append(f"    if {cond}:\n        return aot{j}({params})")
    lines.append(f"    return fallback({params})")
    exec(compile("\n".join(lines), f"<txnlog aot entry {name}>", "exec"), consts)
    fn = consts[name]
    fn.__doc__ = f"{name}: compiled ahead of time, numba's kernel for other argument types"

    def other_types(*args: Any) -> Any:
        """The call numba runs: say which argument did not match (once: it rebinds)."""
        specs = fns[0][1]
        for i, (arg, spec) in enumerate(zip(args, specs, strict=False)):
            one: dict[str, Any] = dict(consts)
            exec(compile(f"def ok(a{i}):\n    return bool({_arg_check(i, spec, one)})",
                         "<check>", "exec"), one)
            if not one["ok"](arg):
                got = (f"{arg.dtype}[{arg.ndim}] {arg.flags}" if isinstance(arg, np.ndarray)
                       else type(arg).__name__)
                log.info("txnlog codec kernels: %s argument %d is %s, compiled for %s",
                         name, i, " ".join(got.split()), spec)
                break
        return fallback(*args)

    consts["fallback"] = other_types
    return fn
