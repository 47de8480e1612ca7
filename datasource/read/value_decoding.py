"""``key.format``/``value.format``: Confluent-framed keys and values (magic byte 0, a 4-byte
schema id, the payload) decoded into typed columns, with schemas read straight from the
root's ``_schemas`` topic (no registry server needed).

The reader schema is chosen on the driver: ``<column>.schemaId``, else the latest live
version of ``<column>.subject``, else of ``<topic>-<column>`` for a one-topic read; Spark's
column type is that schema's. Each record names its writer schema (its id) and is resolved
to the reader schema by the schema type's own rules: Avro's resolution (fastavro), so
records written before a schema evolved read with the new fields' defaults; Protobuf's wire
compatibility (the bytes parsed with the reader's message: fields matched by number,
unknown ones skipped; ``protobuf_values``); JSON Schema's open content model (the reader's
properties taken from each document, missing ones null; ``json_values``). A value that is
not framed, names an unknown id or does not fit fails the task naming its topic, partition
and offset (Spark's FAILFAST); a null stays null.

Avro to Spark: boolean, int, long, float, double, string, bytes as themselves; enum as
string; fixed as binary; record as struct; array; map (string keys); a union of null and
one type as that type, nullable; logical types timestamp-millis/-micros (timestamp), date,
decimal. Not supported (refused when the read is planned): unions of several non-null
types, recursive records, other logical types.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..options import InvalidOptionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType
    from txnlog.coordinator.schema_registry.catalog import SchemaCatalog

    from ..options import Framing, ReadOptions

_PRIMITIVE = {"boolean": "BooleanType", "int": "IntegerType", "long": "LongType",
              "float": "FloatType", "double": "DoubleType", "string": "StringType",
              "bytes": "BinaryType"}
_SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}
_A_SCHEMA = {"avro": "an Avro schema", "protobuf": "a Protobuf schema",
             "json": "a JSON Schema"}


class ValueDecodeError(ValueError):
    """A value that cannot be decoded (not framed, unknown id, bad payload)."""


@dataclass(frozen=True)
class ValueDecoding:
    """What the tasks need (pickled with the reader): where the schemas are, which column,
    its format, the reader schema's id (and Protobuf message) and the column type."""

    root: str
    storage_options: dict[str, str] = field(default_factory=dict)
    reader_id: int = 0
    value_type_json: str = ""
    column: str = "value"
    format: str = "avro"
    message: str = ""  # protobuf: the reader message's full name

    def value_type(self) -> DataType:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.value_type_json))


def plan_all(opts: ReadOptions, want: dict[str, Any] | None = None
             ) -> dict[str, ValueDecoding]:
    """The decodings a read asks for, by column (key, value)."""
    out = {}
    for f in opts.framings:
        d = plan(opts, f.column, (want or {}).get(f.column))
        if d is not None:
            out[f.column] = d
    return out


def plan(opts: ReadOptions, column: str = "value", want: DataType | None = None
         ) -> ValueDecoding | None:
    """The decoding of ``column`` a read asks for (None without ``<column>.format``),
    checked on the driver. ``want``: the column type the query was planned with (a stream
    restarted, or a read planned before a new version was registered): the newest version
    of the subject that still makes that type is used."""
    framing = opts.framing(column)
    if framing is None:
        return None
    from txnlog.coordinator.schema_registry.catalog import SchemaNotFoundError, catalog_for

    catalog = catalog_for(opts.root, opts.storage_options)
    try:
        candidates = _reader_ids(opts, framing, catalog)
        decoding = None
        for reader_id in candidates:
            decoding = _plan_one(opts, framing, catalog, reader_id)
            if want is None or decoding.value_type() == want:
                return decoding
        assert decoding is not None
        return decoding  # the caller's schema check names the difference
    except SchemaNotFoundError as exc:
        raise InvalidOptionError(str(exc)) from None


def _reader_ids(opts: ReadOptions, framing: Framing, catalog: SchemaCatalog) -> list[int]:
    """The reader schema's id, then (for a subject) the older versions' ids, newest first."""
    if framing.schema_id is not None:
        catalog.stored(framing.schema_id)
        return [framing.schema_id]
    subject = framing.subject
    if subject is None:
        topics = opts.subscription.topics if opts.subscription.kind == "subscribe" \
            else tuple({t for t, _ in opts.subscription.assign})
        if len(topics) != 1:
            raise InvalidOptionError(f"{framing.column}.format needs '{framing.column}."
                                     f"subject' or '{framing.column}.schemaId' when reading "
                                     "several topics")
        subject = f"{topics[0]}-{framing.column}"
    latest = catalog.latest(subject)
    return [latest.id] + [v.id for v in reversed(catalog.state.versions(subject))
                          if v.id != latest.id]


def _plan_one(opts: ReadOptions, framing: Framing, catalog: SchemaCatalog, reader_id: int
              ) -> ValueDecoding:
    from pyspark.sql.types import StructField, StructType

    column, fmt = framing.column, framing.format
    parsed = catalog.parsed(reader_id)
    if parsed.schema_type != _SCHEMA_TYPES[fmt]:
        raise InvalidOptionError(f"schema {reader_id} is {parsed.schema_type}; "
                                 f"{column}.format={fmt} needs {_A_SCHEMA[fmt]}")
    message = ""
    if fmt == "avro":
        value_type = spark_type(parsed.parsed, parsed.context or {})
    elif fmt == "protobuf":
        from .protobuf_values import plan_message

        message, value_type = plan_message(catalog, reader_id, framing.message)
    else:
        from .json_values import spark_type as json_type

        value_type = json_type(parsed.parsed)
    if not isinstance(value_type, StructType):
        value_type = StructType([StructField(column, value_type)])
    return ValueDecoding(opts.root, dict(opts.storage_options), reader_id,
                         json.dumps(value_type.jsonValue()), column, fmt, message)


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


def _wrapped_schema(parsed: Any) -> bool:
    return not (isinstance(parsed, dict) and parsed.get("type") in ("record", "error"))


class AvroRecords:
    """Avro payloads read with their writer schema, resolved to the reader's."""

    def __init__(self, catalog: SchemaCatalog, decoding: ValueDecoding) -> None:
        self.catalog = catalog
        self.decoding = decoding
        self._writers: dict[int, Any] = {}
        self._shortcuts: dict[int, list[tuple[str, bool, Any]] | None] = {}
        self.reader = self._fastavro_schema(decoding.reader_id)
        self.wrapped = _wrapped_schema(self.catalog.parsed(decoding.reader_id).parsed)

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

    def __call__(self, sid: int, v: bytes) -> Any:
        from fastavro import schemaless_reader

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
        return {self.decoding.column: rec} if self.wrapped else rec


class ValueDecoder:
    """Decodes one framed column of the tasks' batches (one per reader and column, built
    in the task): the framing checked here, the payload by the format's records reader."""

    def __init__(self, decoding: ValueDecoding, arrow_type: pa.DataType) -> None:
        from txnlog.coordinator.schema_registry.catalog import catalog_for

        self.decoding = decoding
        self.arrow_type = arrow_type
        self.catalog = catalog_for(decoding.root, decoding.storage_options)
        self.records: Callable[[int, bytes], Any]
        if decoding.format == "avro":
            self.records = AvroRecords(self.catalog, decoding)
        elif decoding.format == "protobuf":
            from .protobuf_values import ProtobufRecords

            self.records = ProtobufRecords(self.catalog, decoding)
        else:
            from .json_values import JsonRecords

            self.records = JsonRecords(self.catalog, decoding)

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        name = self.decoding.column
        values = batch.column(name).to_pylist()
        out: list[Any] = []
        records = self.records
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            if len(v) < 5 or v[0] != 0:
                raise ValueDecodeError(self._where(batch, i, "is not in Confluent's wire "
                                                   "format (magic byte 0, schema id)"))
            sid = int.from_bytes(v[1:5], "big")
            try:
                out.append(records(sid, v))
            except Exception as exc:
                raise ValueDecodeError(self._where(batch, i, f"(schema id {sid}) cannot be "
                                                   f"decoded: {exc}")) from None
        try:
            column = self._column(out)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueDecodeError(f"the {name}s from {self._at(batch, 0)} on do not fit "
                                   f"the column type {self.arrow_type}: {exc}") from None
        idx = batch.schema.get_field_index(name)
        return batch.set_column(idx, pa.field(name, self.arrow_type), column)

    def _column(self, rows: list[Any]) -> pa.Array:
        """The struct column, built field by field (pyarrow converts a list of dicts into a
        struct ~3.5x slower than it converts each field's list)."""
        import pyarrow as pa

        t = self.arrow_type
        if not pa.types.is_struct(t):
            return pa.array(rows, type=t)
        mask = pa.array([r is None for r in rows], pa.bool_())
        children = [pa.array([None if r is None else r.get(f.name) for r in rows],
                             type=f.type) for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)

    @staticmethod
    def _at(batch: pa.RecordBatch, i: int) -> str:
        names = batch.schema.names
        return ", ".join(f"{n} {batch.column(n)[i].as_py()}" for n in ("topic", "partition",
                                                                        "offset") if n in names)

    def _where(self, batch: pa.RecordBatch, i: int, what: str) -> str:
        return f"the {self.decoding.column} at {self._at(batch, i)} {what}"
