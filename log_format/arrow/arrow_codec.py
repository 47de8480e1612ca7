"""The native-speed hot paths of txnlog.log_format, in one import point.

- ``read_schema``: Spark's Kafka source schema (Arrow, as PySpark expects it).
- ``scan_batches``: a compiled one-pass batch index of a segment's bytes.
- ``AbortedFilter``: Kafka's read_committed batch filter, stateful across objects.
- ``decode_to_arrow``: batches -> ``pa.RecordBatch`` (records in an offset range).
- ``encode_arrow``: Arrow columns -> v2 batches, byte for byte Kafka's producer output.
"""

from __future__ import annotations

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
