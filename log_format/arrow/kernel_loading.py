"""Load the codec's cached numba kernels without numba's whole-library set-up.

numba's on-disk cache (``cache=True``) saves the machine code; loading it back should cost
milliseconds. But before every cache load numba refreshes its CPU target: it imports and
registers the lowering of all of numba (NumPy's linear algebra — which imports SciPy — random
generators, typed containers, ...), ~0.4 s of CPU in every fresh process, more than loading
all our kernels. A fresh Spark Python worker pays that on its first task, a restarted stream
on its first micro-batch. Cached code needs none of it: ``CompileResult._rebuild`` only
links the object code and makes the entry point, and the NRT symbols it may link against
are installed by ``rtsys.initialize``. So our kernels' caches load after that alone. A miss
(new source, new argument types) still compiles as usual, and numba's compiler refreshes the
target in full first, as it does for any other jitted function in the process.

Likewise numba runs its extension entry points (``numba_extensions``: a scan of every
installed distribution's metadata through ``importlib.metadata``, ~45 ms of CPU in a fresh
Spark worker) before any call is typed, to learn third-party types. Our kernels take only
NumPy arrays and integers, and their cached code links against nothing an extension adds,
so a kernel's first call skips that too; a cache miss runs the entry points before it
compiles, as numba would have.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any


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
    from the cache without refreshing numba's target or running its extension entry
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
