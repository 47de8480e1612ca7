"""Compile the native codec kernels ahead of first use.

Two compiled forms of the same kernels (kernel_loading): numba's JIT, and one extension
module compiled ahead of time from them (aot_build), which a fresh process loads without
importing numba at all (~0.3 s of CPU less per fresh Spark Python worker). ``warm_up()``
runs every kernel once with the argument types the codec passes — compiling them with numba
on a cold cache — and then, unless the module for this source, numba and CPU exists, builds
it from exactly those types (~10-20 s of CPU, once per machine and kernel source; a C
compiler and the Python headers are needed, else numba's kernels stay in use and the log
says why). Every process started afterwards uses it.

numba's JIT, for a process that has no module (or ``TXNLOG_KERNELS=jit``): it compiles
each kernel on its first call and caches the machine code next to the module (``__pycache__``,
or ``NUMBA_CACHE_DIR``). On a fresh install that first call costs seconds
(~4 s to encode, ~2 s to decode on one quiet core) and every process that races to it pays
again. A program that must not spend that time inside a deadline — a benchmark, a test
harness, a process that starts a transaction and then encodes — calls ``warm_up()`` first;
afterwards every process loads the compiled code instead of compiling it.

Where the cache lands: numba keeps it in the ``__pycache__`` beside the module file *as the
process imported it*. With the strict editable install that is the link tree under
``build/__editable__.*`` (the same path in the driver, in Spark's Python workers and in the
coordinator), so one ``warm_up()`` serves them all; a wheel install caches in site-packages.
An entry is keyed by the source file's timestamp and by the argument types of the call, so
every caller must pass the types warmed here (``kernel_cache_stats`` shows hits and misses;
``tests/test_kernel_cache.py`` proves a fresh process compiles nothing).
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa

from ..codec.compression import Codec, compress, decompress_array
from ..codec.control import ControlType, encode_control_batch
from ..codec.partitioner import partitions_for_keys
from . import _decode_kernels, kernel_loading
from .arrow_decode import decode_to_arrow
from .arrow_encode import StreamEncoder, encode_arrow
from .arrow_scan import AbortedFilter, as_u8, scan_batches
from .kernel_loading import KERNEL_MODULES, kernels_of

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def warm_up(build: bool = True) -> None:
    """Run every compiled kernel once on a two-record batch, then (``build``) compile them
    ahead of time unless that is done (idempotent, cheap when both are cached)."""
    _run_every_kernel()
    if not build or kernel_loading.mode() == "jit":
        return
    from . import aot_build, aot_kernels

    module, _ = aot_kernels.load()
    if module is not None:
        return
    # No module: the calls above ran numba's kernels, which now know the argument types
    # the module must take.
    with warnings.catch_warnings():  # pycc's pending deprecation: no replacement yet
        warnings.filterwarnings("ignore", message=".*'pycc' module is pending deprecation")
        built = aot_build.build()
    if built is not None:
        aot_build.clean()
        aot_kernels.forget()


def _run_every_kernel() -> None:
    cols = pa.record_batch({
        "key": pa.array([b"k", None], pa.binary()),
        "value": pa.array([b"v", b""], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"x"}], []], pa.list_(_HEADER)),
    })
    partitions_for_keys(cols.column("key"), 3)
    # Every column mix a caller may pass (with and without keys and headers). They share one
    # encode signature because missing columns are passed as read-only arrays like present
    # ones; running them all keeps any future split of that signature warmed too.
    layouts = (cols, cols.drop_columns(["headers"]), cols.select(["value"]))
    for columns in layouts:
        for transactional in (False, True):
            enc = encode_arrow(columns, producer_id=7 if transactional else -1,
                               producer_epoch=0 if transactional else -1,
                               base_sequence=0 if transactional else -1,
                               transactional=transactional)
            data = bytes(enc.data)
            # A task's routed rows: row numbers into the batch (the same signature: the row
            # numbers are passed read-only, like the absent selection above).
            stream = StreamEncoder(transactional=transactional)
            stream.append(columns, rows=np.array([1, 0]))
            stream.finish()
            scan_batches(data)
            if transactional:  # the type of a compressed control batch's marker
                marker = encode_control_batch(ControlType.COMMIT, producer_id=7,
                                              producer_epoch=0, coordinator_epoch=0,
                                              base_offset=0, timestamp_ms=0)
                inner = as_u8(decompress_array(Codec.GZIP, compress(Codec.GZIP, marker[61:])))
                _decode_kernels.control_type_at(inner, 0, len(inner))
            for headers in (False, True):
                for aborted in (None, AbortedFilter([])):
                    decode_to_arrow(data, topic="warm-up", partition=0,
                                    include_headers=headers, aborted=aborted)


def kernels_in_use() -> dict[str, str | None]:
    """How each kernel module of this process runs its kernels: ``aot`` (the module
    compiled ahead of time), ``jit`` (numba), or None (not called yet)."""
    import importlib

    return {dotted.rpartition(".")[2]: kernel_loading.bound_as(vars(importlib.import_module(
        dotted))) for dotted in KERNEL_MODULES}


def kernel_cache_stats() -> dict[str, dict[str, int | str]]:
    """Per kernel numba compiled or loaded in this process: numba's cache hits and misses
    (a miss compiled the kernel for a signature) and where its cache lives. Empty for
    kernels that run compiled ahead of time."""
    import importlib

    out: dict[str, dict[str, int | str]] = {}
    for dotted in KERNEL_MODULES:
        module = importlib.import_module(dotted)
        name = dotted.rpartition(".")[2]
        for attr, k in kernels_of(vars(module)).items():
            value = k.jit
            if value is not None:
                stats = value.stats
                out[f"{name}.{attr}"] = {"hits": sum(stats.cache_hits.values()),
                                         "misses": sum(stats.cache_misses.values()),
                                         "cache_path": str(stats.cache_path)}
    return out
