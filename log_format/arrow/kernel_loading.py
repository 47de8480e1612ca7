"""Define the codec's native kernels once; run them compiled ahead of time, else by numba.

The kernels (``_decode_kernels``, ``_encode_kernels``, ``codec.partitioner``) are written
once, as numba functions. Importing numba costs a fresh process ~0.2 s of CPU, and loading
its cached kernels more: every fresh Spark Python worker paid it on its first task. So a
kernel module imports no numba: ``@kernel`` keeps the Python function and its numba options,
and the first call binds the module's kernels to what runs them:

- the module compiled ahead of time from this same source (``aot_kernels`` finds it,
  ``aot_build`` makes it during ``warm_up()``): a plain CPython extension, imported in
  well under a millisecond, no numba;
- else numba, as before: each kernel jit-compiled on first call, from numba's on-disk cache
  when it has the entry. One log line says why (no module built for this source, numba
  version and CPU yet, or ``TXNLOG_KERNELS=jit``).

An ahead-of-time entry takes exactly the argument types numba compiled for in ``warm_up()``;
a call with other types (another dtype, a strided or unaligned array, a writable array
where the kernel writes) runs numba's kernels instead, which compile for them as they always
did. Binding replaces the names in the module's namespace, so after the first call a caller's
``K.scan(...)`` costs what the bound kernel costs.

Loading numba's cache without its whole-library set-up: before every cache load numba
refreshes its CPU target: it imports and registers the lowering of all of numba (NumPy's
linear algebra — which imports SciPy — random generators, typed containers, ...), ~0.4 s of
CPU in a fresh process. Cached code needs none of it: ``CompileResult._rebuild`` only links
the object code, and the NRT symbols it may link against are installed by
``rtsys.initialize``. Likewise numba runs its extension entry points (a scan of every
installed distribution's metadata, ~45 ms) before any call is typed; our kernels take only
NumPy arrays and integers, so a cache hit skips both; a miss compiles as numba would.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

log = logging.getLogger("txnlog.kernels")

KERNEL_MODULES = ("txnlog.log_format.arrow._decode_kernels",
                  "txnlog.log_format.arrow._encode_kernels",
                  "txnlog.log_format.codec.partitioner")

MODE_ENV = "TXNLOG_KERNELS"  # "auto" (default): ahead-of-time when built, else numba; "jit"
REGISTRY = "__txnlog_kernels__"  # a kernel module's own kernels and intrinsics, by name
_BOUND = "__txnlog_kernels_bound__"  # how the module's kernels run: "aot" or "jit"
_lock = threading.RLock()
_said: set[str] = set()


class Kernel:
    """A kernel as its module defines it: the Python function and numba's options.

    ``entry`` kernels are the ones Python code calls (they are compiled ahead of time);
    the others are only called from kernels. Calling this object binds the module first.
    """

    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any], entry: bool):
        self.py_func = py_func
        self.options = options
        self.entry = entry
        self.namespace: MutableMapping[str, Any] = py_func.__globals__
        self.name = py_func.__name__
        self.module = py_func.__module__
        self.jit: Any = None
        functools.update_wrapper(self, py_func)

    def dispatcher(self) -> Any:
        """numba's dispatcher for this kernel (imports numba)."""
        with _lock:
            if self.jit is None:
                from numba import njit

                self.jit = njit(**self.options)(self.py_func)
            return self.jit

    def __call__(self, *args: Any) -> Any:
        fn = bind(self.namespace).get(self.name)
        if fn is self or isinstance(fn, Kernel):  # not an ahead-of-time entry: numba runs it
            use_jit(self.namespace, f"{self.name} is not compiled ahead of time")
            fn = self.namespace[self.name]
        return fn(*args)


class Intrinsic:
    """A numba ``@intrinsic`` that ``factory`` makes (importing numba) when a kernel module
    is bound to numba; ahead-of-time code has it compiled in."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self.name = factory.__name__
        self.jit: Any = None
        functools.update_wrapper(self, factory)
        factory.__globals__.setdefault(REGISTRY, {})[self.name] = self

    def dispatcher(self) -> Any:
        with _lock:
            if self.jit is None:
                self.jit = self.factory()
            return self.jit

    def __call__(self, *args: Any) -> Any:
        raise TypeError(f"{self.name} is an intrinsic: call it from a kernel")


def kernel(*, entry: bool = False, **options: Any) -> Callable[[Callable[..., Any]], Kernel]:
    """``@kernel(entry=..., **njit_options)``: define a kernel without importing numba."""

    def wrap(py_func: Callable[..., Any]) -> Kernel:
        k = Kernel(py_func, options, entry)
        py_func.__globals__.setdefault(REGISTRY, {})[k.name] = k
        return k

    return wrap


def kernels_of(namespace: Mapping[str, Any]) -> dict[str, Kernel]:
    """The kernels a module defines, by name."""
    return {n: k for n, k in namespace.get(REGISTRY, {}).items() if isinstance(k, Kernel)}


def mode() -> str:
    """``jit`` when ``TXNLOG_KERNELS=jit`` asks for numba's kernels, else ``auto``."""
    return "jit" if os.environ.get(MODE_ENV, "").strip().lower() == "jit" else "auto"


def bind(namespace: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Bind a kernel module's entries to the ahead-of-time module, or all its kernels to
    numba's dispatchers when there is none (once per module and process)."""
    with _lock:
        if namespace.get(_BOUND):
            return namespace
        if mode() == "jit":
            use_jit(namespace, f"{MODE_ENV}=jit", level=logging.INFO)
            return namespace
        from . import aot_kernels

        module, reason = aot_kernels.load()
        if module is None:
            use_jit(namespace, reason)
            return namespace
        bind_as(namespace, "aot", module=module, fallback=functools.partial(_jit_call, namespace))
        return namespace


def _jit_call(namespace: MutableMapping[str, Any], name: str, *args: Any) -> Any:
    """An ahead-of-time entry got argument types it was not compiled for: numba runs it."""
    use_jit(namespace, f"{name} called with argument types it was not compiled for "
                       "ahead of time")
    return namespace[name](*args)


def use_jit(namespace: MutableMapping[str, Any], reason: str,
            level: int = logging.WARNING) -> None:
    """Bind every kernel (and intrinsic) of a module to numba, saying why once."""
    with _lock:
        if namespace.get(_BOUND) == "jit":
            return
        module = namespace.get("__name__", "?")
        if reason not in _said:
            _said.add(reason)
            log.log(level, "txnlog codec kernels run by numba's JIT (%s): %s", module, reason)
        bind_as(namespace, "jit")


def bind_as(namespace: MutableMapping[str, Any], how: str, *, module: Any = None,
            fallback: Callable[..., Any] | None = None) -> None:
    """Bind a kernel module's kernels (``namespace``: its globals) to what runs them, the one
    place that does (``bind``, ``use_jit`` and ``rebound``):

    - ``"jit"``: every kernel and intrinsic to numba's dispatcher, imported ones too (a
      kernel numba compiles resolves its callees and intrinsics in this namespace), loaded
      from numba's cache without its whole set-up;
    - ``"aot"``: the entries to ``module`` (compiled ahead of time); a call with argument
      types it was not compiled for goes to ``fallback(name, *args)``. The other kernels stay
      as they are: only kernels call them, and the module has them compiled in.
    """
    with _lock:
        if how == "jit":
            own = namespace.get(REGISTRY, {})
            for name, value in [*own.items(), *namespace.items()]:
                if isinstance(value, Kernel | Intrinsic):  # imported ones too (an intrinsic)
                    namespace[name] = value.dispatcher()
            load_without_refresh(namespace)
        elif how == "aot":
            if module is None or fallback is None:
                raise ValueError("binding to the ahead-of-time module needs it and a fallback")
            from . import aot_kernels

            for name, k in kernels_of(namespace).items():
                if k.entry:
                    namespace[name] = aot_kernels.entry(module, f"{k.module}.{name}",
                                                        functools.partial(fallback, name))
        else:
            raise ValueError(f"kernels are bound as 'aot' or 'jit', not {how!r}")
        namespace[_BOUND] = how


@contextlib.contextmanager
def rebound(how: str, fallback: Callable[..., Any] | None = None) -> Iterator[None]:
    """Every kernel module of this process (``KERNEL_MODULES``) bound ``how`` (``bind_as``)
    for the block, and as it was after: for tests and benchmarks that run both forms of the
    same kernels in one process. ``"aot"`` needs the module built (``warm_up()``)."""
    module = None
    if how == "aot":
        from . import aot_kernels

        module, why = aot_kernels.load()
        if module is None:
            raise RuntimeError(f"no ahead-of-time module: {why}")
    saved = []
    try:
        for dotted in KERNEL_MODULES:
            namespace = vars(importlib.import_module(dotted))
            saved.append((namespace, dict(namespace)))
            bind_as(namespace, how, module=module, fallback=fallback)
        yield
    finally:
        with _lock:
            for namespace, before in saved:
                for name in namespace.keys() - before.keys():
                    del namespace[name]
                namespace.update(before)


def bound_as(namespace: Mapping[str, Any]) -> str | None:
    """``aot``, ``jit``, or None while the module's kernels were never called."""
    return namespace.get(_BOUND)


def _load_cached(cache: Any, sig: Any, target_context: Any) -> Any:
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    with cache._guard_against_spurious_io_errors():
        loaded = cache._load_overload(sig, target_context)
    if loaded is None:  # a miss: numba compiles next, with the extensions it may need
        from numba.core import entrypoints

        entrypoints.init_all()
    return loaded


def _no_entry_points() -> None:
    """A kernel's ``_compilation_chain_init_hook``: nothing before the cache is asked."""


def load_without_refresh(namespace: Mapping[str, Any]) -> None:
    """Make every cached kernel defined in ``namespace`` (a kernel module's globals) load
    from numba's cache without refreshing numba's target or running its extension entry
    points first."""
    from numba.core.dispatcher import Dispatcher

    module = namespace.get("__name__")
    for value in namespace.values():
        cache = getattr(value, "_cache", None)
        if isinstance(value, Dispatcher) and value.__module__ == module \
                and hasattr(cache, "_load_overload"):
            cache.load_overload = functools.partial(_load_cached, cache)
            if hasattr(value, "_compilation_chain_init_hook"):
                value._compilation_chain_init_hook = _no_entry_points
