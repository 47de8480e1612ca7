"""``<column>.format=protobuf``: Confluent-framed Protobuf payloads into a struct column.

Confluent's framing puts the message indexes after the schema id (a zigzag-varint count and
that many indexes into the file's messages and their nested types; ``[0]``, the first
message, shortened to one 0 byte). The reader message (``<column>.message``, else the
reader schema's first message) gives the Spark type. Each payload is parsed with the
*reader's* message class: Protobuf's own schema evolution (fields matched by number,
unknown fields skipped, missing ones their default), which is what the registry's
Protobuf compatibility rules keep safe; the writer's id is checked to be a Protobuf schema
whose framing names a message of the reader's name.

Protobuf to Spark (as Spark's ``from_protobuf``): int32, sint32, sfixed32 as int; uint32,
fixed32, int64, sint64, sfixed64 as long; uint64 and fixed64 as decimal(20,0); float,
double, bool, string, bytes as themselves; enum as its value's name (the number as text
when the writer knew a value the reader does not); message as struct; repeated as array;
map as map; ``google.protobuf.Timestamp`` as timestamp; the wrapper types
(``StringValue``...) as their nullable value; ``Struct``, ``Value``, ``ListValue`` and
``Any`` as JSON text. A field with presence (a message, ``optional``, a oneof member,
proto2) that is not set is null; a proto3 scalar without presence reads as its value
(Protobuf cannot tell an unset one from its default). Recursive messages are refused when
the read is planned.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..options import InvalidOptionError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType
    from txnlog.coordinator.schema_registry.catalog import SchemaCatalog

_INT = ("TYPE_INT32", "TYPE_SINT32", "TYPE_SFIXED32")
_LONG = ("TYPE_UINT32", "TYPE_FIXED32", "TYPE_INT64", "TYPE_SINT64", "TYPE_SFIXED64")
_ULONG = ("TYPE_UINT64", "TYPE_FIXED64")
_SIMPLE = {"TYPE_FLOAT": "FloatType", "TYPE_DOUBLE": "DoubleType", "TYPE_BOOL": "BooleanType",
           "TYPE_STRING": "StringType", "TYPE_BYTES": "BinaryType"}
_WRAPPERS = {f"google.protobuf.{n}" for n in (
    "DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value",
    "BoolValue", "StringValue", "BytesValue")}
_AS_JSON = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue",
            "google.protobuf.Any"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _type_name(f: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    names = {v: k for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}
    return names[f.type]


def _repeated(f: Any) -> bool:
    repeated = getattr(f, "is_repeated", None)  # protobuf >= 6; ``label`` before
    if repeated is None:
        from google.protobuf.descriptor import FieldDescriptor

        return f.label == FieldDescriptor.LABEL_REPEATED
    return bool(repeated)


def _is_map(f: Any) -> bool:
    return (f.message_type is not None and _repeated(f)
            and f.message_type.GetOptions().map_entry)


def reader_message(catalog: SchemaCatalog, reader_id: int, message: str | None) -> Any:
    """The reader's message descriptor: ``message`` (a full name) or the file's first."""
    from txnlog.coordinator.schema_registry.dump_decoder import message_name

    pool, fdp = pools(catalog).pool(reader_id)
    if not fdp.message_type:
        raise InvalidOptionError(f"schema {reader_id} defines no message")
    name = message or message_name(fdp, [0])
    try:
        return pool.FindMessageTypeByName(name)
    except KeyError:
        raise InvalidOptionError(f"schema {reader_id} has no message {name!r}") from None


_decoders: dict[int, Any] = {}


def pools(catalog: SchemaCatalog) -> Any:
    """The dump decoder's pools of descriptors, one per catalog (cached per schema id)."""
    from txnlog.coordinator.schema_registry.dump_decoder import ConfluentDecoder

    got = _decoders.get(id(catalog))
    if got is None or got.catalog is not catalog:
        got = _decoders[id(catalog)] = ConfluentDecoder(catalog)
    return got


def plan_message(catalog: SchemaCatalog, reader_id: int, message: str | None
                 ) -> tuple[str, DataType]:
    desc = reader_message(catalog, reader_id, message)
    return desc.full_name, spark_type(desc)


def spark_type(desc: Any, seen: frozenset[str] = frozenset()) -> DataType:
    """Spark's struct for a message descriptor."""
    from pyspark.sql import types as T

    if desc.full_name in seen:
        raise InvalidOptionError(f"format=protobuf: the recursive message {desc.full_name} "
                                 "has no Spark column type")
    inner = seen | {desc.full_name}
    return T.StructType([T.StructField(f.name, _field_type(f, inner)) for f in desc.fields])


def _field_type(f: Any, seen: frozenset[str]) -> DataType:
    from pyspark.sql import types as T

    if _is_map(f):
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return T.MapType(_single_type(k, seen), _single_type(v, seen))
    single = _single_type(f, seen)
    return T.ArrayType(single) if _repeated(f) else single


def _single_type(f: Any, seen: frozenset[str]) -> DataType:
    from pyspark.sql import types as T

    kind = _type_name(f)
    if kind in _INT:
        return T.IntegerType()
    if kind in _LONG:
        return T.LongType()
    if kind in _ULONG:
        return T.DecimalType(20, 0)
    if kind in _SIMPLE:
        return getattr(T, _SIMPLE[kind])()
    if kind == "TYPE_ENUM":
        return T.StringType()
    if kind == "TYPE_GROUP":
        raise InvalidOptionError("format=protobuf: proto2 groups are not supported")
    name = f.message_type.full_name
    if name == "google.protobuf.Timestamp":
        return T.TimestampType()
    if name in _WRAPPERS:
        return _single_type(f.message_type.fields_by_name["value"], seen)
    if name in _AS_JSON:
        return T.StringType()
    return spark_type(f.message_type, seen)


# ------------------------------------------------------------------ messages into Python


def converter(desc: Any) -> Callable[[Any], dict[str, Any]]:
    """A function turning a parsed message of ``desc`` into the dict its struct column
    takes (built once per message type; no JSON round trip)."""
    fields = []
    for f in desc.fields:
        presence = f.has_presence and not _repeated(f)
        if _is_map(f):
            kconv = _single_converter(f.message_type.fields_by_name["key"])
            vconv = _single_converter(f.message_type.fields_by_name["value"])
            fields.append((f.name, False, _map_conv(kconv, vconv)))
        elif _repeated(f):
            fields.append((f.name, False, _list_conv(_single_converter(f))))
        else:
            fields.append((f.name, presence, _single_converter(f)))

    def convert(m: Any) -> dict[str, Any]:
        out = {}
        for name, presence, conv in fields:
            if presence and not m.HasField(name):
                out[name] = None
            elif conv is None:
                out[name] = getattr(m, name)
            else:
                out[name] = conv(getattr(m, name))
        return out

    return convert


def _map_conv(kconv: Callable | None, vconv: Callable | None) -> Callable:
    def conv(m: Any) -> list[tuple[Any, Any]]:
        return [(k if kconv is None else kconv(k), v if vconv is None else vconv(v))
                for k, v in m.items()]
    return conv


def _list_conv(one: Callable | None) -> Callable:
    if one is None:
        return list
    return lambda xs: [one(x) for x in xs]


def _single_converter(f: Any) -> Callable | None:
    """None: the Python value is the column's already."""
    kind = _type_name(f)
    if kind in _ULONG:
        return Decimal
    if kind == "TYPE_ENUM":
        by_number = {v.number: v.name for v in f.enum_type.values}
        return lambda n: by_number.get(n, str(n))
    if kind != "TYPE_MESSAGE":
        return None
    name = f.message_type.full_name
    if name == "google.protobuf.Timestamp":
        return lambda t: _EPOCH + dt.timedelta(seconds=t.seconds, microseconds=t.nanos // 1000)
    if name in _WRAPPERS:
        inner = _single_converter(f.message_type.fields_by_name["value"])
        return (lambda w: w.value) if inner is None else (lambda w: inner(w.value))
    if name in _AS_JSON:
        from google.protobuf import json_format

        return lambda m: json_format.MessageToJson(m, indent=None)
    return converter(f.message_type)


class ProtobufRecords:
    """Protobuf payloads parsed with the reader's message (see the module docstring)."""

    def __init__(self, catalog: SchemaCatalog, decoding: Any) -> None:
        """``decoding``: the column's ``value_decoding.ValueDecoding`` (not imported: that
        module imports this one)."""
        from google.protobuf import message_factory

        self.catalog = catalog
        self.decoding = decoding
        desc = reader_message(catalog, decoding.reader_id, decoding.message or None)
        self.name = desc.full_name
        self.cls = message_factory.GetMessageClass(desc)
        self.convert = converter(desc)
        self._checked: set[tuple[int, tuple[int, ...]]] = set()  # (id, message indexes)

    def _start(self, sid: int, v: bytes) -> int:
        """Where the message bytes start; the writer's schema and message checked once per
        id and message indexes."""
        from txnlog.coordinator.schema_registry.dump_decoder import message_indexes, message_name

        if v[5:6] == b"\x00":  # the common framing: [0] as one 0 byte
            path, start = (0,), 1
        else:
            indexes, start = message_indexes(memoryview(v)[5:])
            path = tuple(indexes)
        if (sid, path) not in self._checked:
            stored = self.catalog.stored(sid)
            if stored.schema_type != "PROTOBUF":
                raise ValueError(f"schema {sid} is {stored.schema_type}, not Protobuf")
            _pool, fdp = pools(self.catalog).pool(sid)
            written = message_name(fdp, list(path))
            if written != self.name:
                raise ValueError(f"it was written as message {written}, the read's message "
                                 f"is {self.name} (option {self.decoding.column}.message)")
            self._checked.add((sid, path))
        return 5 + start

    def __call__(self, sid: int, v: bytes) -> Any:
        msg = self.cls.FromString(v[self._start(sid, v):])
        return self.convert(msg)
