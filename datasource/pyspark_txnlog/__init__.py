"""Spark 4 imports every top-level ``pyspark_*`` module and registers its ``DefaultSource``.

Kept cheap: the real source lives in txnlog.datasource.
"""
