"""Spark-side schemas, the same as Spark's Kafka connector's."""

from __future__ import annotations

from .options import InvalidOptionError

READ_COLUMNS = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"

# Columns a write may carry; value is the only required one.
WRITE_COLUMNS = {"key", "value", "topic", "partition", "headers", "timestamp"}


def read_ddl(include_headers: bool = False) -> str:
    """The read schema as DDL; headers only when asked, since that column is expensive."""
    return f"{READ_COLUMNS}, {HEADERS_COLUMN}" if include_headers else READ_COLUMNS


def check_write_schema(schema: object, topic_option: str | None,
                       framed: frozenset[str] = frozenset()) -> None:
    """Refuse a DataFrame a txnlog write cannot take, naming the column and the fix.

    Accepts a pyarrow schema or a Spark StructType (by field names and simple strings).
    ``framed``: the columns (key, value) encoded with a schema (``value.format``): any type.
    """
    import pyarrow as pa  # only for an Arrow schema: the sink's commit process needs none

    if isinstance(schema, pa.Schema):
        fields = {f.name: str(f.type) for f in schema}
        kinds = {
            "key": ("binary", "string", "large_binary", "large_string"),
            "value": ("binary", "string", "large_binary", "large_string"),
            "topic": ("string", "large_string"),
            "partition": ("int32", "int64", "int16", "int8"),
        }
    else:
        fields = {f.name: f.dataType.simpleString() for f in schema.fields}  # type: ignore[attr-defined]
        kinds = {
            "key": ("binary", "string"),
            "value": ("binary", "string"),
            "topic": ("string",),
            "partition": ("int", "bigint", "smallint", "tinyint"),
        }
    unknown = [n for n in fields if n not in WRITE_COLUMNS]
    if unknown:
        raise InvalidOptionError(
            f"txnlog cannot write column(s) {', '.join(map(repr, unknown))}: a write takes "
            "value (required), key, topic, partition, headers and timestamp; select() or "
            "to_json(struct(...)) the rest into value")
    if "value" not in fields:
        raise InvalidOptionError(
            "a txnlog write needs a 'value' column (string or binary), e.g. "
            "df.selectExpr('CAST(id AS STRING) AS key', 'to_json(struct(*)) AS value')")
    for name, allowed in kinds.items():
        if name in fields and name not in framed and fields[name] not in allowed:
            raise InvalidOptionError(
                f"column {name!r} is {fields[name]}; txnlog needs one of {', '.join(allowed)}")
    if "timestamp" in fields and not fields["timestamp"].startswith("timestamp"):
        raise InvalidOptionError(f"column 'timestamp' is {fields['timestamp']}; it must be a "
                                 "timestamp")
    if "headers" in fields and not fields["headers"].replace(" ", "").startswith(
            ("array<struct<key:string,value:binary>>", "list<")):
        raise InvalidOptionError(
            f"column 'headers' is {fields['headers']}; it must be "
            "array<struct<key: string, value: binary>>")
    if topic_option is None and "topic" not in fields:
        raise InvalidOptionError(
            "no topic to write to: set option('topic', name) or add a 'topic' column")
