"""``value.format=avro``: Confluent-framed values (magic byte 0, a 4-byte schema id, the
Avro payload) decoded into a ``value`` struct column, with schemas read straight from the
root's ``_schemas`` topic (no registry server needed).

The reader schema is chosen on the driver: ``value.schemaId``, else the latest live version
of ``value.subject``, else of ``<topic>-value`` for a one-topic read; Spark's column type
is that schema's. Each record is read with its own writer schema (its id), resolved to the
reader schema by Avro's rules (fastavro), so records written before a schema evolved read
with the new fields' defaults. A value that is not framed, or names an unknown id, fails
the task naming its topic, partition and offset (Spark's FAILFAST); a null value is null.

Avro to Spark: boolean, int, long, float, double, string, bytes as themselves; enum as
string; fixed as binary; record as struct; array; map (string keys); a union of null and
one type as that type, nullable; logical types timestamp-millis/-micros (timestamp), date,
decimal. Not supported (refused when the read is planned): unions of several non-null
types, recursive records, other logical types.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..options import InvalidOptionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType

    from ..options import ReadOptions

_PRIMITIVE = {"boolean": "BooleanType", "int": "IntegerType", "long": "LongType",
              "float": "FloatType", "double": "DoubleType", "string": "StringType",
              "bytes": "BinaryType"}


class ValueDecodeError(ValueError):
    """A value that cannot be decoded (not framed, unknown id, bad payload)."""


@dataclass(frozen=True)
class ValueDecoding:
    """What the tasks need (pickled with the reader): where the schemas are, the reader
    schema's id and the column type it makes."""

    root: str
    storage_options: dict[str, str] = field(default_factory=dict)
    reader_id: int = 0
    value_type_json: str = ""

    def value_type(self) -> DataType:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.value_type_json))


def plan(opts: ReadOptions) -> ValueDecoding | None:
    """The decoding a read asks for (None without ``value.format``), checked on the driver."""
    if opts.value_format is None:
        return None
    from txnlog.coordinator.schema_registry.catalog import SchemaNotFoundError, catalog_for

    catalog = catalog_for(opts.root, opts.storage_options)
    try:
        if opts.value_schema_id is not None:
            reader_id = opts.value_schema_id
        else:
            subject = opts.value_subject
            if subject is None:
                topics = opts.subscription.topics if opts.subscription.kind == "subscribe" \
                    else tuple({t for t, _ in opts.subscription.assign})
                if len(topics) != 1:
                    raise InvalidOptionError("value.format needs 'value.subject' or "
                                             "'value.schemaId' when reading several topics")
                subject = f"{topics[0]}-value"
            reader_id = catalog.latest(subject).id
        parsed = catalog.parsed(reader_id)
    except SchemaNotFoundError as exc:
        raise InvalidOptionError(str(exc)) from None
    if parsed.schema_type != "AVRO":
        raise InvalidOptionError(f"schema {reader_id} is {parsed.schema_type}; "
                                 "value.format=avro needs an Avro schema")
    value_type = spark_type(parsed.parsed, parsed.context or {})
    from pyspark.sql.types import StructType

    if not isinstance(value_type, StructType):
        from pyspark.sql.types import StructField

        value_type = StructType([StructField("value", value_type)])
    return ValueDecoding(opts.root, dict(opts.storage_options), reader_id,
                         json.dumps(value_type.jsonValue()))


def spark_type(schema: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()
               ) -> DataType:
    """Spark's type for an Avro schema (fastavro-parsed; named types in ``named``)."""
    from pyspark.sql import types as T

    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return getattr(T, _PRIMITIVE[schema])()
        if schema in seen:
            raise InvalidOptionError(f"value.format=avro: the recursive type {schema} has no "
                                     "Spark column type")
        return spark_type(named[schema], named, seen)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise InvalidOptionError("value.format=avro: a union of several non-null types "
                                     f"({branches}) is not supported")
        return spark_type(branches[0], named, seen)
    kind, logical = schema["type"], schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType()
    if logical == "date":
        return T.DateType()
    if logical == "decimal":
        return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical is not None and kind in _PRIMITIVE:
        raise InvalidOptionError(f"value.format=avro: logical type {logical} is not "
                                 "supported")
    if isinstance(kind, str) and kind in _PRIMITIVE:
        return getattr(T, _PRIMITIVE[kind])()
    if isinstance(kind, (dict, list)):
        return spark_type(kind, named, seen)
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    if kind == "array":
        return T.ArrayType(spark_type(schema["items"], named, seen))
    if kind == "map":
        return T.MapType(T.StringType(), spark_type(schema["values"], named, seen))
    if kind in ("record", "error"):
        inner = seen | {schema["name"]}
        return T.StructType([T.StructField(f["name"], spark_type(f["type"], named, inner))
                             for f in schema["fields"]])
    raise InvalidOptionError(f"value.format=avro: Avro type {kind!r} is not supported")


class ValueDecoder:
    """Decodes the value column of the tasks' batches (one per reader, built in the task)."""

    def __init__(self, decoding: ValueDecoding, arrow_type: pa.DataType) -> None:
        from txnlog.coordinator.schema_registry.catalog import catalog_for

        self.decoding = decoding
        self.arrow_type = arrow_type
        self.catalog = catalog_for(decoding.root, decoding.storage_options)
        self._writers: dict[int, Any] = {}
        self._shortcuts: dict[int, list[tuple[str, bool, Any]] | None] = {}
        self.reader = self._fastavro_schema(decoding.reader_id)
        self._wrapped = not self._is_record(decoding.reader_id)

    def _is_record(self, schema_id: int) -> bool:
        parsed = self.catalog.parsed(schema_id).parsed
        return isinstance(parsed, dict) and parsed.get("type") in ("record", "error")

    def _fastavro_schema(self, schema_id: int) -> Any:
        """The schema as fastavro's reader takes it (named types of references inside)."""
        got = self._writers.get(schema_id)
        if got is None:
            import fastavro

            stored = self.catalog.stored(schema_id)
            if stored.schema_type != "AVRO":
                raise ValueDecodeError(f"schema {schema_id} is {stored.schema_type}, not Avro")
            named: dict[str, Any] = {}
            for _name, _type, text in self.catalog.state.resolve_references(stored.references):
                fastavro.parse_schema(json.loads(text), named_schemas=named)
            got = fastavro.parse_schema(json.loads(stored.schema), named_schemas=named)
            self._writers[schema_id] = got
        return got

    def _shortcut(self, schema_id: int) -> list[tuple[str, bool, Any]] | None:
        """For a writer record whose fields the reader has with the same types, or lacks
        (skipped), the reader's fields as (name, from the writer?, default): Avro's
        resolution is then a projection with defaults, and the record is read with the
        writer schema alone (fastavro's resolving reader is ~3x slower). None when any
        field needs more (a promotion, an enum, a nested change, a non-scalar default)."""
        if schema_id in self._shortcuts:
            return self._shortcuts[schema_id]
        plan_: list[tuple[str, bool, Any]] | None = []
        writer, reader = self._fastavro_schema(schema_id), self.reader
        if not (isinstance(writer, dict) and isinstance(reader, dict)
                and writer.get("type") == reader.get("type") == "record"
                and writer["name"].rsplit(".", 1)[-1] == reader["name"].rsplit(".", 1)[-1]):
            plan_ = None
        else:
            wf = {f["name"]: f for f in writer["fields"]}
            for f in reader["fields"]:
                w = wf.get(f["name"])
                if w is not None and w["type"] == f["type"] and not f.get("aliases"):
                    plan_.append((f["name"], True, None))
                elif w is None and "default" in f and not f.get("aliases") and (
                        f["default"] is None or isinstance(f["default"], bool | int | float)
                        or f["default"] in ([], {})
                        or (isinstance(f["default"], str) and f["type"] == "string")):
                    plan_.append((f["name"], False, f["default"]))
                else:
                    plan_ = None
                    break
        self._shortcuts[schema_id] = plan_
        return plan_

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa
        from fastavro import schemaless_reader

        values = batch.column("value").to_pylist()
        out: list[Any] = []
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            if len(v) < 5 or v[0] != 0:
                raise ValueDecodeError(self._where(batch, i, "is not in Confluent's wire "
                                                   "format (magic byte 0, schema id)"))
            sid = int.from_bytes(v[1:5], "big")
            try:
                writer = self._fastavro_schema(sid)
                buf = io.BytesIO(v)
                buf.seek(5)
                if sid == self.decoding.reader_id:
                    rec = schemaless_reader(buf, writer, None)
                elif (shortcut := self._shortcut(sid)) is not None:
                    raw = schemaless_reader(buf, writer, None)
                    rec = {name: raw[name] if from_writer else default
                           for name, from_writer, default in shortcut}
                else:
                    rec = schemaless_reader(buf, writer, self.reader)
            except Exception as exc:
                raise ValueDecodeError(self._where(batch, i, f"(schema id {sid}) cannot be "
                                                   f"decoded: {exc}")) from None
            out.append({"value": rec} if self._wrapped else rec)
        column = self._column(out)
        idx = batch.schema.get_field_index("value")
        return batch.set_column(idx, pa.field("value", self.arrow_type), column)

    def _column(self, rows: list[Any]) -> pa.Array:
        """The struct column, built field by field (pyarrow converts a list of dicts into a
        struct ~3.5x slower than it converts each field's list)."""
        import pyarrow as pa

        t = self.arrow_type
        if not pa.types.is_struct(t):
            return pa.array(rows, type=t)
        mask = pa.array([r is None for r in rows], pa.bool_())
        children = [pa.array([None if r is None else r[f.name] for r in rows], type=f.type)
                    for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)

    @staticmethod
    def _where(batch: pa.RecordBatch, i: int, what: str) -> str:
        names = batch.schema.names
        at = ", ".join(f"{n} {batch.column(n)[i].as_py()}" for n in ("topic", "partition",
                                                                       "offset") if n in names)
        return f"the value at {at} {what}"
