"""txnlog.log_format: Kafka's v2 log format (the bytes) and its home on object storage (the place).

Two layers share this folder, and the import direction between them is one way (enforced by
``tests/test_layering.py``): the bytes never import the place.

**The bytes**: pure functions of their input, no root, no I/O. They can be tested, fuzzed and
benchmarked on a buffer, and kafka-dump-log agrees with them byte for byte.

- ``errors``: the error types of both layers (``TxnlogError`` and the format's errors)
- ``crc``, ``varint``, ``compression``: checksums, varints, the five codecs
- ``batch_header``, ``records``, ``control``: record batches, records, transaction markers
- ``indexes``: ``.index``, ``.timeindex``, ``.txnindex``
- ``segment_merge``: a run of objects merged into one segment with its indexes
- ``partitioner``: murmur2 partition choice
- ``consumer_offsets``: the ``__consumer_offsets`` records and partition choice
- ``arrow_codec`` (over ``arrow_scan``, ``arrow_decode``, ``arrow_encode`` and the numba
  kernels ``_decode_kernels``, ``_encode_kernels``): the native-speed Arrow paths
- ``warmup``: compile the kernels ahead of first use; ``kernel_loading``: load them from
  numba's cache without numba's whole-target set-up
- ``dump``: kafka-dump-log's output (``txnlog dump``)

**The place**: where the bytes live under a root URL and how they are found again.

- ``storage`` (package: ``base``, ``local``, ``s3``): put-if-absent object storage
- ``dir_sync``: grouped directory fsyncs for local put-if-absent
- ``layout``: every object name under a root; ``TopicPartition``
- ``topics``: topic metadata; ``stable``: the stable-offset snapshots (HW/LSO)
- ``manifest``: a partition's merged objects (segments and runs) below its merged end
- ``reader``: ``PartitionReader`` (offset range -> Arrow, read_committed)
- ``consumer``: a Python consumer over the reader (the producer needs the coordinator, so
  it lives in ``txnlog.coordinator``; dependencies point datasource -> coordinator ->
  log_format)

**Neither**: ``retry`` (the project's one retry/backoff policy) and ``planted_bugs`` (the
chaos harness's switches that plant a bug on purpose).

The names users meet are importable from here (``from txnlog.log_format import Consumer``).
They load on first use, so ``import txnlog.log_format`` costs nothing: no pyarrow, no numba
(whose kernels compile on their first call, see ``warmup``), no s3fs.
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
    "Codec": "compression",
    "Record": "records",
    "encode_batch": "records",
    "decode_batch": "records",
    "read_schema": "arrow_codec",
    "scan_batches": "arrow_codec",
    "decode_to_arrow": "arrow_codec",
    "encode_arrow": "arrow_codec",
    "AbortedFilter": "arrow_codec",
    "DumpOptions": "dump",
    "dump_files": "dump",
    "warm_up": "warmup",
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
    from .arrow_codec import (
        AbortedFilter,
        decode_to_arrow,
        encode_arrow,
        read_schema,
        scan_batches,
    )
    from .compression import Codec
    from .consumer import Consumer, ConsumerRecord
    from .dump import DumpOptions, dump_files
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
    from .records import Record, decode_batch, encode_batch
    from .retry import RetryPolicy
    from .stable import StableSnapshot, read_latest_stable
    from .storage import ObjectInfo, Storage, StorageConfigError, StorageError
    from .topics import TopicMeta, UnknownTopicError, create_topic, list_topics, read_topic
    from .warmup import warm_up
