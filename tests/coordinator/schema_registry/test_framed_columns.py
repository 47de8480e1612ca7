"""The Spark source's Protobuf and JSON Schema decoders and framed keys, without Spark:
values framed by confluent-kafka's own ``ProtobufSerializer`` and ``JSONSerializer``
(schemas registered through the registry process), produced through ``txnlog gateway``,
read back from the root into typed Arrow columns, with a schema evolved between writes;
keys decoded beside values; values that do not fit failing with their offset. Spark itself
reads these columns in tests/spark/test_framed_values.py."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool, message_factory
from pyspark.sql.types import StructType
from registry_proc import Served
from txnlog.coordinator.schema_registry.protobuf_schema import parse as parse_proto
from txnlog.datasource.options import InvalidOptionError, parse_read_options
from txnlog.datasource.read.projection import arrow_schema, full_read_schema
from txnlog.datasource.read.value_decoding import ValueDecodeError, ValueDecoder, plan_all
from txnlog.log_format.consumer import Consumer

PING_V1 = """syntax = "proto3";
package txnlogcols;
message Ping { int32 n = 1; string who = 2; }
"""
PING_V2 = """syntax = "proto3";
package txnlogcols;
message Ping {
  int32 n = 1;
  string name = 2;  // renamed: Protobuf matches fields by number
  repeated string tags = 3;
  map<string, int64> attrs = 4;
  enum Kind { A = 0; B = 1; }
  Kind kind = 5;
  message Inner { optional double x = 1; }
  Inner inner = 6;
  uint64 big = 7;
}
"""


def message_class(text: str, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(parse_proto(text.strip()))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


@pytest.fixture(scope="module")
def sr(served: Served) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": served.registry.url})


def produce(served: Served, topic: str, records: list[tuple[bytes | None, bytes | None]]
            ) -> None:
    """Through the gateway, with librdkafka (what a Kafka application does)."""
    served.coord.client().create_topic(topic, 1, exist_ok=True)
    p = Producer({"bootstrap.servers": served.gateway.bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    for k, v in records:
        p.produce(topic, key=k, value=v,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0
    assert errors == []


def read_columns(served: Served, topic: str, **options: str) -> dict[str, list[Any]]:
    """The decoded key/value columns of ``topic``, as the source's tasks build them."""
    opts = parse_read_options({"path": served.root, "subscribe": topic, **options})
    decodings = plan_all(opts)
    types = {c: d.value_type() for c, d in decodings.items()}
    target = arrow_schema(full_read_schema(False, types.get("value"), types.get("key")))
    decoders = [ValueDecoder(d, target.field(c).type) for c, d in decodings.items()]
    with Consumer(served.root, topic) as consumer:
        batches = consumer.read_table().to_batches()
    out: dict[str, list[Any]] = {c: [] for c in decodings}
    for b in batches:
        for d in decoders:
            b = d.decode(b)
        for c in decodings:
            out[c] += b.column(c).to_pylist()
    out["types"] = [types[c].simpleString() for c in decodings]  # type: ignore[list-item]
    return out


def test_protobuf_values_from_confluents_serializer_with_evolution(
        served: Served, sr: SchemaRegistryClient) -> None:
    topic = "cols-proto"
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = message_class(PING_V1, "txnlogcols.Ping"), message_class(PING_V2, "txnlogcols.Ping")
    ser1 = ProtobufSerializer(v1, sr, {"use.deprecated.format": False})
    ser2 = ProtobufSerializer(v2, sr, {"use.deprecated.format": False})
    old = [ser1(v1(n=i, who=f"w{i}"), ctx) for i in range(2)]
    new = [ser2(v2(n=9, name="x", tags=["a", "b"], attrs={"k": 2**40}, kind=1,
                   inner=v2.Inner(x=0.5), big=2**64 - 1), ctx),
           ser2(v2(n=0, inner=v2.Inner()), ctx)]
    produce(served, topic, [(None, v) for v in [*old, *new]] + [(b"k", None)])
    got = read_columns(served, topic, **{"value.format": "protobuf"})
    assert got["types"] == ["struct<n:int,name:string,tags:array<string>,attrs:map<string,"
                            "bigint>,kind:string,inner:struct<x:double>,big:decimal(20,0)>"]
    # old records: the renamed field by number, the new fields their defaults
    assert got["value"][:2] == [
        {"n": i, "name": f"w{i}", "tags": [], "attrs": [], "kind": "A", "inner": None,
         "big": Decimal(0)} for i in range(2)]
    assert got["value"][2] == {"n": 9, "name": "x", "tags": ["a", "b"], "attrs": [("k", 2**40)],
                               "kind": "B", "inner": {"x": 0.5}, "big": Decimal(2**64 - 1)}
    # a set message with an unset optional field: the struct is there, its field null
    assert got["value"][3]["inner"] == {"x": None}
    assert got["value"][4] is None
    # pinned to the first version: the new fields are not columns, the rename is not seen
    first = sr.get_versions(f"{topic}-value")[0]
    pinned = read_columns(served, topic, **{
        "value.format": "protobuf",
        "value.schemaId": str(sr.get_version(f"{topic}-value", first).schema_id)})
    assert pinned["types"] == ["struct<n:int,who:string>"]
    assert [v and v["who"] for v in pinned["value"]] == ["w0", "w1", "x", "", None]
    # a stream started before v2 keeps its column type: the newest version making it
    opts = parse_read_options({"path": served.root, "subscribe": topic,
                               "value.format": "protobuf"}, streaming=True)
    latest = plan_all(opts)["value"]
    kept = plan_all(opts, {"value": StructType.fromJson(json.loads(
        '{"type":"struct","fields":[{"name":"n","type":"integer","nullable":true,'
        '"metadata":{}},{"name":"who","type":"string","nullable":true,"metadata":{}}]}'))})
    assert kept["value"].reader_id == sr.get_version(f"{topic}-value", first).schema_id
    assert latest.reader_id == sr.get_latest_version(f"{topic}-value").schema_id


def test_protobuf_message_options_and_a_nested_message(served: Served,
                                                       sr: SchemaRegistryClient) -> None:
    topic = "cols-proto-nested"
    ping = message_class(PING_V2, "txnlogcols.Ping")
    inner = ping.Inner
    ctx = SerializationContext(topic, MessageField.VALUE)
    value = ProtobufSerializer(inner, sr, {"use.deprecated.format": False})(inner(x=2.0), ctx)
    # message indexes [0, 1] as zigzag varints: Ping's second nested message (the first is
    # the map entry type protoc makes for attrs)
    assert value[5:8] == b"\x04\x00\x02"
    produce(served, topic, [(None, value)])
    with pytest.raises(ValueDecodeError, match=r"written as message txnlogcols\.Ping\.Inner, "
                                               r"the read's message is txnlogcols\.Ping "):
        read_columns(served, topic, **{"value.format": "protobuf"})
    got = read_columns(served, topic, **{"value.format": "protobuf",
                                         "value.message": "txnlogcols.Ping.Inner"})
    assert got["value"] == [{"x": 2.0}]
    with pytest.raises(InvalidOptionError, match=r"has no message 'txnlogcols\.Nope'"):
        read_columns(served, topic, **{"value.format": "protobuf",
                                       "value.message": "txnlogcols.Nope"})


ORDER_V1 = {"type": "object", "title": "Order", "properties": {
    "id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id"],
    "additionalProperties": False}  # closed: a later version may add properties (BACKWARD)
ORDER_V2 = {"type": "object", "title": "Order", "properties": {
    "id": {"type": "integer"}, "item": {"type": "string"},
    "qty": {"type": ["number", "null"]},
    "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    "meta": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "any": {}},
    "required": ["id"], "definitions": {"Line": {"type": "object", "properties": {
        "sku": {"type": "string"}, "n": {"type": "integer"}}}}}


def test_json_values_and_avro_keys_with_evolution(served: Served,
                                                  sr: SchemaRegistryClient) -> None:
    topic = "cols-json"
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    key = AvroSerializer(sr, json.dumps({"type": "record", "name": "K", "fields": [
        {"name": "region", "type": "string"}, {"name": "n", "type": "long"}]}))
    ser1, ser2 = JSONSerializer(json.dumps(ORDER_V1), sr), JSONSerializer(json.dumps(ORDER_V2), sr)
    records = [(key({"region": "eu", "n": 1}, kctx), ser1({"id": 1, "item": "a"}, vctx)),
               (key({"region": "us", "n": 2}, kctx),
                ser2({"id": 2, "qty": 1.5, "lines": [{"sku": "s", "n": 3}],
                      "meta": {"gift": True}, "any": {"x": [1]}, "extra": 1}, vctx)),
               (None, ser2({"id": 3, "qty": 2, "any": "text"}, vctx))]
    produce(served, topic, records)
    got = read_columns(served, topic, **{"value.format": "json", "key.format": "avro"})
    assert got["types"] == [
        "struct<region:string,n:bigint>",
        "struct<id:bigint,item:string,qty:double,lines:array<struct<sku:string,n:bigint>>,"
        "meta:map<string,boolean>,any:string>"]
    assert got["key"] == [{"region": "eu", "n": 1}, {"region": "us", "n": 2}, None]
    assert got["value"] == [
        {"id": 1, "item": "a", "qty": None, "lines": None, "meta": None, "any": None},
        {"id": 2, "item": None, "qty": 1.5, "lines": [{"sku": "s", "n": 3}],
         "meta": [("gift", True)], "any": '{"x":[1]}'},
        {"id": 3, "item": None, "qty": 2.0, "lines": None, "meta": None, "any": "text"}]


def test_a_json_value_that_does_not_fit_fails_with_its_offset(
        served: Served, sr: SchemaRegistryClient) -> None:
    topic = "cols-json-bad"
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = JSONSerializer(json.dumps(ORDER_V1), sr)
    good = ser({"id": 1}, ctx)
    # framed with the same id, but the document breaks the schema (not validated here)
    bad = good[:5] + b'{"id": "one"}'
    produce(served, topic, [(None, good), (None, bad)])
    with pytest.raises(ValueDecodeError, match=r"offset 1 \(schema id \d+\) cannot be decoded: "
                                               r'id is "one", not an integer'):
        read_columns(served, topic, **{"value.format": "json"})
    with pytest.raises(InvalidOptionError, match="needs an Avro schema"):
        read_columns(served, topic, **{"value.format": "avro"})
    # a value framed with an Avro schema's id cannot be read as JSON
    other = "cols-json-bad-avro"
    avro_value = AvroSerializer(sr, '"string"')("s", SerializationContext(
        other, MessageField.VALUE))
    produce(served, other, [(None, avro_value)])
    with pytest.raises(ValueDecodeError, match=r"offset 0 .* is AVRO, not JSON"):
        read_columns(served, other, **{"value.format": "json",
                                       "value.subject": "cols-json-bad-value"})


WELL_KNOWN = """syntax = "proto3";
package txnlogwk;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message Stamp {
  google.protobuf.Timestamp at = 1;
  google.protobuf.StringValue label = 2;
  google.protobuf.Int64Value count = 3;
  google.protobuf.Struct extra = 4;
  oneof pick { string text = 5; int32 number = 6; }
}
"""


def test_protobuf_well_known_types_and_oneofs(served: Served) -> None:
    """Timestamp as timestamp, wrappers as their nullable value, Struct as JSON text, an
    unset oneof member null; the schema registered as .proto text importing Google's
    well-known types, the payload framed by hand ([0] as one 0 byte)."""
    import datetime as dt

    import httpx
    from google.protobuf import struct_pb2, timestamp_pb2, wrappers_pb2
    from txnlog import IdempotentProducer

    http = httpx.Client(base_url=served.registry.url, timeout=60)
    sid = http.post("/subjects/cols-wk-value/versions", json={
        "schema": WELL_KNOWN, "schemaType": "PROTOBUF"}).json()["id"]
    pool = descriptor_pool.DescriptorPool()
    for m in (timestamp_pb2, wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
    pool.Add(parse_proto(WELL_KNOWN.strip()))
    stamp = message_factory.GetMessageClass(pool.FindMessageTypeByName("txnlogwk.Stamp"))
    full = stamp(label={"value": "l"}, count={"value": 7}, text="t")
    full.at.FromSeconds(1_700_000_000)
    full.extra.update({"k": [1, "x"]})
    head = b"\x00" + sid.to_bytes(4, "big") + b"\x00"
    served.coord.client().create_topic("cols-wk", 1)
    with IdempotentProducer(served.root, coordinator=served.coord.endpoint) as p:
        p.send("cols-wk", head + full.SerializeToString())
        p.send("cols-wk", head + stamp(number=3).SerializeToString())
        p.flush()
    got = read_columns(served, "cols-wk", **{"value.format": "protobuf"})
    assert got["types"] == ["struct<at:timestamp,label:string,count:bigint,extra:string,"
                            "text:string,number:int>"]
    at = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert got["value"][0] == {"at": at, "label": "l", "count": 7,
                               "extra": '{"k": [1.0, "x"]}', "text": "t", "number": None}
    assert got["value"][1] == {"at": None, "label": None, "count": None, "extra": None,
                               "text": None, "number": 3}
