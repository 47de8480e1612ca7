"""``txnlog dump --value-decoder txnlog.coordinator.schema_registry.dump_decoder:confluent
--decoder-option root=URL``: Confluent-framed values printed as JSON, with their schemas
read from the root's ``_schemas`` (no registry server needed).

Avro payloads are read with their writer schema (fastavro), JSON Schema payloads are the
JSON itself, Protobuf payloads are parsed with the message the framing's message indexes
name (the schema's descriptor, references and Google's well-known types in a descriptor
pool) and printed with protobuf's JSON mapping. Each line starts with the schema id:
``{"schemaId": 3, "value": {...}}``. A value that is not framed, or names an id the root
does not hold, raises: ``txnlog dump`` prints why in its place.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from .catalog import SchemaCatalog, catalog_for
from .records import AVRO, JSON


def _zigzag_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated message indexes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def message_indexes(payload: memoryview) -> tuple[list[int], int]:
    """Confluent's Protobuf framing after the id: which message of the file (a path of
    indexes into message types, nested types), and where the message bytes start."""
    count, pos = _zigzag_varint(payload, 0)
    if count == 0:
        return [0], pos
    out = []
    for _ in range(count):
        i, pos = _zigzag_varint(payload, pos)
        out.append(i)
    return out, pos


def message_name(fdp: Any, path: list[int]) -> str:
    """The full name of the message that message indexes ``path`` name in ``fdp``."""
    if not path or path[0] >= len(fdp.message_type):
        raise ValueError(f"message indexes {path} name no message of the schema")
    msg = fdp.message_type[path[0]]
    name = f"{fdp.package}.{msg.name}" if fdp.package else msg.name
    for i in path[1:]:
        if i >= len(msg.nested_type):
            raise ValueError(f"message indexes {path} name no message of the schema")
        msg = msg.nested_type[i]
        name = f"{name}.{msg.name}"
    return name


class ConfluentDecoder:
    def __init__(self, catalog: SchemaCatalog) -> None:
        self.catalog = catalog
        self._avro: dict[int, Any] = {}
        self._proto_pools: dict[int, Any] = {}

    def __call__(self, value: bytes) -> str:
        if len(value) < 5 or value[0] != 0:
            raise ValueError("not in Confluent's wire format (magic byte 0, schema id)")
        sid = int.from_bytes(value[1:5], "big")
        stored = self.catalog.stored(sid)
        if stored.schema_type == AVRO:
            decoded = self._decode_avro(sid, value)
        elif stored.schema_type == JSON:
            decoded = json.loads(value[5:])
        else:
            decoded = self._decode_protobuf(sid, memoryview(value)[5:])
        return json.dumps({"schemaId": sid, "value": decoded}, default=str,
                          separators=(",", ":"))

    def _decode_avro(self, sid: int, value: bytes) -> Any:
        import fastavro

        schema = self._avro.get(sid)
        if schema is None:
            stored = self.catalog.stored(sid)
            named: dict[str, Any] = {}
            for _n, _t, text in self.catalog.state.resolve_references(stored.references):
                fastavro.parse_schema(json.loads(text), named_schemas=named)
            schema = self._avro[sid] = fastavro.parse_schema(json.loads(stored.schema),
                                                             named_schemas=named)
        buf = io.BytesIO(value)
        buf.seek(5)
        return fastavro.schemaless_reader(buf, schema, None)

    def _decode_protobuf(self, sid: int, payload: memoryview) -> Any:
        from google.protobuf import json_format, message_factory

        pool, fdp = self.pool(sid)
        path, start = message_indexes(payload)
        name = message_name(fdp, path)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        parsed = cls.FromString(bytes(payload[start:]))
        return json.loads(json_format.MessageToJson(parsed))

    def pool(self, sid: int) -> tuple[Any, Any]:
        """A descriptor pool holding Protobuf schema ``sid`` (its references and Google's
        well-known types too), and the schema's ``FileDescriptorProto``; cached per id."""
        got = self._proto_pools.get(sid)
        if got is not None:
            return got
        from google.protobuf import descriptor_pool

        pool = descriptor_pool.DescriptorPool()
        parsed = self.catalog.parsed(sid).parsed
        added: set[str] = set()

        def add(fdp: Any) -> None:
            for dep in fdp.dependency:
                if dep in added:
                    continue
                if dep.startswith("google/protobuf/"):
                    known = descriptor_pool.Default().FindFileByName(dep)
                    pool.AddSerializedFile(known.serialized_pb)
                    added.add(dep)
            if fdp.name not in added:
                pool.Add(fdp)
                added.add(fdp.name)

        from .protobuf_schema import FDP, parse

        stored = self.catalog.stored(sid)
        for ref_name, _t, text in self.catalog.state.resolve_references(stored.references):
            ref = FDP()
            ref.CopyFrom(parse(text))  # parse's result is cached: never renamed in place
            ref.name = ref_name
            add(ref)
        add(parsed)
        self._proto_pools[sid] = (pool, parsed)
        return pool, parsed


def confluent(options: dict[str, str]) -> Callable[[bytes], str]:
    """The factory ``txnlog dump`` calls: ``root`` (required) and ``storage.*`` options."""
    root = options.get("root")
    if not root:
        raise ValueError("the confluent decoder needs --decoder-option root=URL (the root "
                         "whose _schemas topic holds the schemas)")
    storage = {k: v for k, v in options.items() if k.startswith("storage.")}
    return ConfluentDecoder(catalog_for(root, storage or None))
