"""Honour the schema Spark asks for, column for column.

Python data sources get no column pruning, and PySpark checks the first yielded Arrow batch
against ``to_arrow_schema(schema, timezone="UTC")`` exactly. A user-given ``.schema(...)``
may pick and reorder the Kafka columns; anything else (an unknown column or another type)
is refused when the reader is built, not deep inside a task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import InvalidOptionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType


def full_read_schema(include_headers: bool, value_type: DataType | None = None,
                     key_type: DataType | None = None) -> StructType:
    """The read schema as a StructType, built without a JVM (planner workers have none);
    ``value_type``/``key_type``: the decoded value's/key's type (``value.format``,
    ``key.format``) instead of binary."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", key_type or BinaryType()),
        StructField("value", value_type or BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def check_requested_schema(requested: StructType, include_headers: bool,
                           value_type: DataType | None = None,
                           key_type: DataType | None = None) -> bool:
    """Validate a requested schema; returns whether the headers column is needed."""
    full = {f.name: f.dataType for f in full_read_schema(True, value_type, key_type).fields}
    for f in requested.fields:
        if f.name not in full:
            raise InvalidOptionError(
                f"schema column {f.name!r} is not a txnlog column; the columns are "
                f"{', '.join(full)} (headers needs includeHeaders=true)")
        if f.dataType != full[f.name]:
            raise InvalidOptionError(
                f"schema column {f.name!r} must be {full[f.name].simpleString()}, not "
                f"{f.dataType.simpleString()}; cast it after loading instead")
    needs_headers = any(f.name == "headers" for f in requested.fields)
    if needs_headers and not include_headers:
        raise InvalidOptionError(
            "the schema asks for the 'headers' column: set option includeHeaders=true")
    return needs_headers


def arrow_schema(requested: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(requested, timezone="UTC")


def project(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Select and order ``batch``'s columns as ``target`` says, casting only where the
    Arrow spelling differs (e.g. a list's child field name)."""
    import pyarrow as pa

    if batch.schema.equals(target):
        return batch
    columns = []
    for field in target:
        col = batch.column(field.name)
        if not col.type.equals(field.type):
            col = col.cast(field.type)
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, schema=target)
