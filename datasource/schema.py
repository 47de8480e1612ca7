"""Spark-side schemas, the same as Spark's Kafka connector's."""

from __future__ import annotations

READ_COLUMNS = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"

# Columns a write may carry; value is the only required one.
WRITE_COLUMNS = {"key", "value", "topic", "partition", "headers", "timestamp"}


def read_ddl(include_headers: bool = False) -> str:
    """The read schema as DDL; headers only when asked, since that column is expensive."""
    return f"{READ_COLUMNS}, {HEADERS_COLUMN}" if include_headers else READ_COLUMNS
