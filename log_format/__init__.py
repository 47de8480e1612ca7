"""txnlog.log_format: Kafka's v2 log format (the bytes) and its home on object storage (the place).

Two layers share this folder, and the import direction between them is one way (enforced by
``tests/test_layering.py``): the bytes never import the place.

**The bytes**: pure functions of their input, no root, no I/O. They can be tested, fuzzed and
benchmarked on a buffer, and kafka-dump-log agrees with them byte for byte. Three packages:

- ``codec``: checksums, varints, the five compression codecs, record batches, records,
  control markers, indexes, murmur2 partitioning, ``__consumer_offsets`` records, and
  kafka-dump-log's output (``txnlog dump``)
- ``segments``: runs of objects merged into one segment, and compaction (Kafka's cleaner)
- ``arrow``: the native-speed Arrow paths (``arrow_codec`` over the scan, decode and
  encode passes and their kernels, written for numba and compiled ahead of time into a
  module that loads without numba; ``warmup`` compiles the kernels ahead of first use)

**The place**: where the bytes live under a root URL and how they are found again.

- ``storage`` (package: ``base``, ``local``, ``s3``, ``s3_arrow``, ``dir_sync``):
  put-if-absent object storage
- ``layout``: every object name under a root; ``TopicPartition``
- ``topics``: topic metadata; ``stable``: the stable-offset snapshots (HW/LSO)
- ``manifest``: a partition's merged objects (segments and runs) below its merged end
- ``reader``: ``PartitionReader`` (offset range -> Arrow, read_committed)
- ``consumer``: a Python consumer over the reader (the producer needs the coordinator, so
  it lives in ``txnlog.coordinator``; dependencies point datasource -> coordinator ->
  log_format)

**Neither**: ``errors`` (both layers' error types), ``retry`` (the project's one
retry/backoff policy), ``planted_bugs`` (the chaos harness's switches that plant a bug on
purpose) and ``lazy_exports`` (public names that load on first use).

The names users meet are importable from here (``from txnlog.log_format import Consumer``).
They load on first use, so ``import txnlog.log_format`` costs nothing: no pyarrow, no numba
(the kernels load on their first call, see ``warmup``), no s3fs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

# Public name -> the module that defines it (relative to this package).
_EXPORTS: dict[str, str] = {
    # the bytes
    "TxnlogError": "errors",
    "LogFormatError": "errors",
    "CorruptBatchError": "errors",
    "CrcMismatchError": "errors",
    "TruncatedBatchError": "errors",
    "UnsupportedMagicError": "errors",
    "CompressionError": "errors",
    "CorruptIndexError": "errors",
    "InvalidTopicNameError": "errors",
    "Codec": "codec.compression",
    "Record": "codec.records",
    "encode_batch": "codec.records",
    "decode_batch": "codec.records",
    "read_schema": "arrow.arrow_codec",
    "scan_batches": "arrow.arrow_codec",
    "decode_to_arrow": "arrow.arrow_codec",
    "encode_arrow": "arrow.arrow_codec",
    "AbortedFilter": "arrow.arrow_codec",
    "DumpOptions": "codec.dump",
    "dump_files": "codec.dump",
    "warm_up": "arrow.warmup",
    "RetryPolicy": "retry",
    # the place
    "Storage": "storage",
    "StorageError": "storage",
    "StorageConfigError": "storage",
    "ObjectInfo": "storage",
    "TopicPartition": "layout",
    "TopicMeta": "topics",
    "UnknownTopicError": "topics",
    "create_topic": "topics",
    "read_topic": "topics",
    "list_topics": "topics",
    "StableSnapshot": "stable",
    "read_latest_stable": "stable",
    "PartitionReader": "reader",
    "Consumer": "consumer",
    "ConsumerRecord": "consumer",
}

__all__ = [
    "AbortedFilter",
    "Codec",
    "CompressionError",
    "Consumer",
    "ConsumerRecord",
    "CorruptBatchError",
    "CorruptIndexError",
    "CrcMismatchError",
    "DumpOptions",
    "InvalidTopicNameError",
    "LogFormatError",
    "ObjectInfo",
    "PartitionReader",
    "Record",
    "RetryPolicy",
    "StableSnapshot",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "TopicMeta",
    "TopicPartition",
    "TruncatedBatchError",
    "TxnlogError",
    "UnknownTopicError",
    "UnsupportedMagicError",
    "create_topic",
    "decode_batch",
    "decode_to_arrow",
    "dump_files",
    "encode_arrow",
    "encode_batch",
    "list_topics",
    "read_latest_stable",
    "read_schema",
    "read_topic",
    "scan_batches",
    "warm_up",
]


__getattr__, __dir__ = lazy_exports(
    __name__, {name: f".{module}" for name, module in _EXPORTS.items()})


if TYPE_CHECKING:  # for type checkers and IDEs only; at run time the names load lazily
    from .arrow.arrow_codec import (
        AbortedFilter,
        decode_to_arrow,
        encode_arrow,
        read_schema,
        scan_batches,
    )
    from .arrow.warmup import warm_up
    from .codec.compression import Codec
    from .codec.dump import DumpOptions, dump_files
    from .codec.records import Record, decode_batch, encode_batch
    from .consumer import Consumer, ConsumerRecord
    from .errors import (
        CompressionError,
        CorruptBatchError,
        CorruptIndexError,
        CrcMismatchError,
        InvalidTopicNameError,
        LogFormatError,
        TruncatedBatchError,
        TxnlogError,
        UnsupportedMagicError,
    )
    from .layout import TopicPartition
    from .reader import PartitionReader
    from .retry import RetryPolicy
    from .stable import StableSnapshot, read_latest_stable
    from .storage import ObjectInfo, Storage, StorageConfigError, StorageError
    from .topics import TopicMeta, UnknownTopicError, create_topic, list_topics, read_topic
