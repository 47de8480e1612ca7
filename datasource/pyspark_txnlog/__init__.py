"""Spark 4 imports every top-level ``pyspark_*`` module and registers its ``DefaultSource``.

Kept cheap and free of side effects: Spark imports it in every lookup worker.
"""

from txnlog.datasource.source import TxnlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
