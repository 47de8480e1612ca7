"""txnlog: a Kafka-compatible transactional log on object storage, read and written by Spark.

The names a Python user meets, importable from the package itself::

    from txnlog import TransactionalProducer, Consumer, TopicPartition, coordinator_for_root
    from txnlog import AdminClient   # Kafka's AdminClient: topics, groups, transactions

Spark users need no import at all: ``spark.read.format("txnlog")`` finds the data source
(module ``pyspark_txnlog``). The three components stay importable on their own —
``txnlog.log_format`` (the bytes and their place), ``txnlog.coordinator`` (the transaction
coordinator and its client), ``txnlog.datasource`` (the PySpark data source) — and their
dependencies point one way: datasource -> coordinator -> log_format.

Why this file lives in ``datasource/public_api/``: the repository's top level is fixed by the
design card (``log_format/``, ``coordinator/``, ``datasource/``, ...), and the package that
re-exports all three belongs at the top of the dependency chain, beside the data source;
pyproject.toml maps it to ``txnlog``. Names load on first use (PEP 562), so ``import
txnlog.log_format`` — which runs this file first — stays as cheap as before: no pyarrow, no
numba, no s3fs, no HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from txnlog.log_format.lazy_exports import lazy_exports

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # producing: the coordinator decides, storage holds the bytes
    "TransactionalProducer": "txnlog.coordinator.client.producer",
    "IdempotentProducer": "txnlog.coordinator.client.producer",
    "RecordMetadata": "txnlog.coordinator.client.producer",
    "CoordinatorClient": "txnlog.coordinator.client.coordinator_client",
    "coordinator_for_root": "txnlog.coordinator.client.embedded",
    # administration: Kafka's AdminClient names (the txnlog CLI's admin commands use it)
    "AdminClient": "txnlog.coordinator.client.admin_client",
    "UnsupportedOperationError": "txnlog.coordinator.client.admin_client",
    # consuming: storage only
    "Consumer": "txnlog.log_format.consumer",
    "ConsumerRecord": "txnlog.log_format.consumer",
    "TopicPartition": "txnlog.log_format.layout",
    "PartitionReader": "txnlog.log_format.reader",
    # topics and the root
    "TopicMeta": "txnlog.log_format.topics",
    "create_topic": "txnlog.log_format.topics",
    "list_topics": "txnlog.log_format.topics",
    "Storage": "txnlog.log_format.storage",
    # streaming helpers
    "clear_abandoned_first_batch": "txnlog.datasource.read.stream_checkpoint",
    # Spark's Kafka lag metrics (min/max/avgOffsetsBehindLatest) from a query's progress
    "TxnlogLagListener": "txnlog.datasource.read.lag_metrics",
    "source_lag": "txnlog.datasource.read.lag_metrics",
    # errors: one base class; Kafka's error names for what the coordinator refuses
    "TxnlogError": "txnlog.log_format.errors",
    "LogFormatError": "txnlog.log_format.errors",
    "CorruptBatchError": "txnlog.log_format.errors",
    "InvalidTopicNameError": "txnlog.log_format.errors",
    "StorageError": "txnlog.log_format.storage",
    "UnknownTopicError": "txnlog.log_format.topics",
    "CoordinatorError": "txnlog.coordinator.errors",
    "CoordinatorUnavailableError": "txnlog.coordinator.client.coordinator_client",
    "ProducerFencedError": "txnlog.coordinator.errors",
    "InvalidTxnStateError": "txnlog.coordinator.errors",
    "ConcurrentTransactionsError": "txnlog.coordinator.errors",
}

__all__ = [
    "AdminClient",
    "ConcurrentTransactionsError",
    "Consumer",
    "ConsumerRecord",
    "CoordinatorClient",
    "CoordinatorError",
    "CoordinatorUnavailableError",
    "CorruptBatchError",
    "IdempotentProducer",
    "InvalidTopicNameError",
    "InvalidTxnStateError",
    "LogFormatError",
    "PartitionReader",
    "ProducerFencedError",
    "RecordMetadata",
    "Storage",
    "StorageError",
    "TopicMeta",
    "TopicPartition",
    "TransactionalProducer",
    "TxnlogError",
    "TxnlogLagListener",
    "UnknownTopicError",
    "UnsupportedOperationError",
    "clear_abandoned_first_batch",
    "coordinator_for_root",
    "create_topic",
    "list_topics",
    "source_lag",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and IDEs only; at run time the names load lazily
    from txnlog.coordinator.client.admin_client import AdminClient, UnsupportedOperationError
    from txnlog.coordinator.client.coordinator_client import (
        CoordinatorClient,
        CoordinatorUnavailableError,
    )
    from txnlog.coordinator.client.embedded import coordinator_for_root
    from txnlog.coordinator.client.producer import (
        IdempotentProducer,
        RecordMetadata,
        TransactionalProducer,
    )
    from txnlog.coordinator.errors import (
        ConcurrentTransactionsError,
        CoordinatorError,
        InvalidTxnStateError,
        ProducerFencedError,
    )
    from txnlog.datasource.read.lag_metrics import TxnlogLagListener, source_lag
    from txnlog.datasource.read.stream_checkpoint import clear_abandoned_first_batch
    from txnlog.log_format.consumer import Consumer, ConsumerRecord
    from txnlog.log_format.errors import (
        CorruptBatchError,
        InvalidTopicNameError,
        LogFormatError,
        TxnlogError,
    )
    from txnlog.log_format.layout import TopicPartition
    from txnlog.log_format.reader import PartitionReader
    from txnlog.log_format.storage import Storage, StorageError
    from txnlog.log_format.topics import TopicMeta, UnknownTopicError, create_topic, list_topics
