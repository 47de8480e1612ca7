"""The native-speed hot paths of txnlog.log_format, in one import point.

- ``read_schema``: Spark's Kafka source schema (Arrow, as PySpark expects it).
- ``scan_batches``: a compiled one-pass batch index of a segment's bytes.
- ``AbortedFilter``: Kafka's read_committed batch filter, stateful across objects.
- ``decode_to_arrow``: batches -> ``pa.RecordBatch`` (records in an offset range).
- ``encode_arrow``: Arrow columns -> v2 batches, byte for byte Kafka's producer output.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .arrow_decode import DecodeResult, decode_to_arrow, read_schema
    from .arrow_encode import EncodedRecords, encode_arrow
    from .arrow_scan import (
        BATCH_INDEX_DTYPE,
        CONTROL_ABORT,
        CONTROL_COMMIT,
        CONTROL_EMPTY,
        CONTROL_NONE,
        CONTROL_UNKNOWN,
        AbortedFilter,
        BatchIndex,
        scan_batches,
    )

# Each name loads its own module on first use: a reading process (a Spark read task) never
# imports the encode side (its module and pyarrow.compute, ~0.06 s of CPU in a fresh
# worker), and a writing one imports the decode module only for what encoding shares.
_HOME = {"DecodeResult": "arrow_decode", "decode_to_arrow": "arrow_decode",
         "read_schema": "arrow_decode", "EncodedRecords": "arrow_encode",
         "encode_arrow": "arrow_encode"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        module = _HOME[name]
    elif name in __all__:
        module = "arrow_scan"
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __package__), name)
    globals()[name] = value
    return value


__all__ = [
    "BATCH_INDEX_DTYPE",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CONTROL_EMPTY",
    "CONTROL_NONE",
    "CONTROL_UNKNOWN",
    "AbortedFilter",
    "BatchIndex",
    "DecodeResult",
    "EncodedRecords",
    "decode_to_arrow",
    "encode_arrow",
    "read_schema",
    "scan_batches",
]
