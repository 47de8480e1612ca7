"""``df.write.format("txnlog").option("value.format", "avro")``: a struct ``value`` (or
``key``) column encoded with a registered schema and framed in Confluent's wire format
(magic byte 0, the 4-byte schema id, for Protobuf the message indexes, the payload), so
confluent-kafka's deserializers and the txnlog source read it back.

The schema is the one the registry holds in the root's ``_schemas`` (no registry server
needed): ``<column>.schemaId``, else the latest live version of ``<column>.subject``, else
of ``<topic>-<column>`` (the ``topic`` option). It is chosen once on the driver, so every
task of a write frames with one id. ``<column>.schema`` registers a schema under the
subject first, with the schema registry's own code (the subject's compatibility level and
mode, ids and versions claimed exclusively in storage, as a registry process does).

Encoding: Avro with fastavro (strict: a row with a field the schema lacks, or without a
field that has no default, is refused); JSON Schema as the row's JSON document (null fields
left out, timestamps and dates as ISO 8601 text, binary as base64) validated with
``jsonschema`` against the schema; Protobuf through protobuf's JSON mapping
(``json_format.ParseDict``) into the message (``<column>.message``, else the schema's
first). A row that does not fit fails the task naming the row, the schema id and why.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..options import InvalidOptionError

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import Framing, WriteOptions


class ValueEncodeError(ValueError):
    """A row whose key or value does not fit the schema it is written with."""


def plan(opts: WriteOptions, endpoint: str | None = None) -> WriteOptions:
    """``opts`` with every framed column's schema id fixed (checked on the driver);
    ``<column>.schema`` is registered first, through the coordinator at ``endpoint``."""
    if not opts.framings:
        return opts
    from txnlog.coordinator.schema_registry.catalog import SchemaNotFoundError, catalog_for

    catalog = catalog_for(opts.root, opts.storage_options)
    out = []
    for f in opts.framings:
        try:
            if f.schema is not None:
                sid = register(opts, f, endpoint)
                stored = catalog.stored(sid)
            elif f.schema_id is not None:
                stored = catalog.stored(f.schema_id)
                sid = f.schema_id
            else:
                sid = catalog.latest(_subject(opts, f)).id
                stored = catalog.stored(sid)
        except SchemaNotFoundError as exc:
            raise InvalidOptionError(str(exc)) from None
        want = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}[f.format]
        if stored.schema_type != want:
            raise InvalidOptionError(f"schema {sid} is {stored.schema_type}; "
                                     f"{f.column}.format={f.format} needs a {want} schema")
        out.append(replace(f, schema_id=sid, schema=None))
    encoded = replace(opts, framings=tuple(out))
    for f in encoded.framings:
        _encoder(encoded, f)  # parse the schema (and find the message) on the driver
    return encoded


def _subject(opts: WriteOptions, f: Framing) -> str:
    if f.subject is not None:
        return f.subject
    if opts.topic is None:
        raise InvalidOptionError(f"{f.column}.format needs '{f.column}.subject' or "
                                 f"'{f.column}.schemaId' when the topic comes from a column")
    return f"{opts.topic}-{f.column}"


_registered: dict[tuple[str, str, str, str], int] = {}


def register(opts: WriteOptions, f: Framing, endpoint: str | None) -> int:
    """Register ``f.schema`` under the subject with the schema registry's own code (its
    compatibility check, mode and exclusive id and version claims, as a registry process
    does), returning the id: an existing version with the same schema answers its id."""
    from txnlog.coordinator.schema_registry.errors import RegistryError
    from txnlog.coordinator.schema_registry.registry import Registry
    from txnlog.coordinator.schema_registry.store import SchemaStore

    if endpoint is None:
        raise InvalidOptionError(f"option '{f.column}.schema' needs the coordinator")
    subject = _subject(opts, f)
    key = (opts.root, subject, f.format, f.schema or "")
    if key in _registered:  # a stream's writer is rebuilt for every micro-batch
        return _registered[key]
    kind = {"avro": {}, "protobuf": {"schemaType": "PROTOBUF"},
            "json": {"schemaType": "JSON"}}[f.format]
    store = SchemaStore(opts.root, endpoint, storage_options=opts.storage_options,
                        credentials=opts.coordinator_credentials)
    try:
        sid = _registered[key] = int(Registry(store).register(
            subject, {"schema": f.schema, **kind})["id"])
        return sid
    except RegistryError as exc:
        raise InvalidOptionError(f"option '{f.column}.schema' cannot be registered under "
                                 f"{subject!r}: {exc}") from None
    finally:
        store.close()


def encode_batches(batches: Iterator[pa.RecordBatch], opts: WriteOptions
                   ) -> Iterator[pa.RecordBatch]:
    """The tasks' batches with each framed column encoded into binary."""
    import pyarrow as pa

    encoders = [(f.column, _encoder(opts, f)) for f in opts.framings]
    row = 0
    for batch in batches:
        for column, encode in encoders:
            if column not in batch.schema.names:
                continue
            col = batch.column(column)
            values = col.to_pylist()
            if _has_map(col.type):
                values = [_plain(v, col.type) for v in values]
            out: list[bytes | None] = []
            for i, v in enumerate(values):
                if v is None:
                    out.append(None)
                    continue
                try:
                    out.append(encode(v))
                except Exception as exc:
                    raise ValueEncodeError(
                        f"the {column} of row {row + i} of this task's input does not fit "
                        f"the schema it is written with: {type(exc).__name__}: {exc}"
                    ) from None
            idx = batch.schema.get_field_index(column)
            batch = batch.set_column(idx, pa.field(column, pa.binary()),
                                     pa.array(out, pa.binary()))
        row += batch.num_rows
        yield batch


_encoders: dict[tuple[str, int, str, str], Callable[[Any], bytes]] = {}


def _encoder(opts: WriteOptions, f: Framing) -> Callable[[Any], bytes]:
    assert f.schema_id is not None
    key = (opts.root, f.schema_id, f.format, f.message or "")
    got = _encoders.get(key)
    if got is None:
        from txnlog.coordinator.schema_registry.catalog import catalog_for

        catalog = catalog_for(opts.root, opts.storage_options)
        header = b"\x00" + f.schema_id.to_bytes(4, "big")
        make = {"avro": _avro, "json": _json, "protobuf": _protobuf}[f.format]
        got = _encoders[key] = make(catalog, f.schema_id, header, f.message)
    return got


def _has_map(t: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    return False


def _plain(v: Any, t: pa.DataType) -> Any:
    """A row value as JSON-like Python: Arrow's maps (lists of pairs) as dicts."""
    import pyarrow as pa

    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _plain(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _plain(v[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_plain(x, t.value_type) for x in v]
    return v


def _avro(catalog: Any, sid: int, header: bytes, _message: str | None
          ) -> Callable[[Any], bytes]:
    import fastavro

    stored = catalog.stored(sid)
    named: dict[str, Any] = {}
    for _n, _t, text in catalog.state.resolve_references(stored.references):
        fastavro.parse_schema(json.loads(text), named_schemas=named)
    schema = fastavro.parse_schema(json.loads(stored.schema), named_schemas=named)
    is_record = isinstance(schema, dict) and schema.get("type") in ("record", "error")

    def encode(v: Any) -> bytes:
        if not is_record and isinstance(v, dict) and len(v) == 1:
            v = next(iter(v.values()))  # a one-field struct around a non-record value
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, schema, v, strict_allow_default=True)
        return buf.getvalue()
    return encode


def _json_ready(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_ready(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_json_ready(x) for x in v]
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _json(catalog: Any, sid: int, header: bytes, _message: str | None
          ) -> Callable[[Any], bytes]:
    import jsonschema

    parsed = catalog.parsed(sid)
    schema = parsed.parsed
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema)
    wrapped = not (isinstance(schema, dict) and (schema.get("type") == "object"
                                                  or "properties" in schema))

    def encode(v: Any) -> bytes:
        doc = _json_ready(v)
        if wrapped and isinstance(doc, dict) and len(doc) <= 1:
            doc = next(iter(doc.values()), None)
        error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the document"
            raise ValueError(f"{where}: {error.message}")
        return header + json.dumps(doc, separators=(",", ":")).encode()
    return encode


def _message_path(fdp: Any, name: str) -> list[int]:
    """The message indexes of message ``name`` in ``fdp`` (Confluent's framing)."""
    prefix = f"{fdp.package}." if fdp.package else ""

    def walk(messages: Any, base: str, path: list[int]) -> list[int] | None:
        for i, m in enumerate(messages):
            full = f"{base}{m.name}"
            if full == name:
                return [*path, i]
            found = walk(m.nested_type, f"{full}.", [*path, i])
            if found is not None:
                return found
        return None

    found = walk(fdp.message_type, prefix, [])
    if found is None:
        raise InvalidOptionError(f"the schema has no message {name!r}")
    return found


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _protobuf(catalog: Any, sid: int, header: bytes, message: str | None
              ) -> Callable[[Any], bytes]:
    from google.protobuf import json_format, message_factory

    from ..read.protobuf_values import pools

    pool, fdp = pools(catalog).pool(sid)
    if not fdp.message_type:
        raise InvalidOptionError(f"schema {sid} defines no message")
    from txnlog.coordinator.schema_registry.dump_decoder import message_name

    name = message or message_name(fdp, [0])
    path = _message_path(fdp, name)
    indexes = b"\x00" if path == [0] else _zigzag(len(path)) + b"".join(map(_zigzag, path))
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    prefix = header + indexes

    def encode(v: Any) -> bytes:
        msg = json_format.ParseDict(_json_ready(v), cls())
        return prefix + msg.SerializeToString()
    return encode
