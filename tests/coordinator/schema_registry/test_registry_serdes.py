"""confluent-kafka's own Avro, JSON Schema and Protobuf serializers and deserializers use the
registry while producing to and consuming from ``txnlog gateway``: values are framed
(magic byte 0, the 4-byte schema id, the payload) with ids the registry handed out, and a
reader schema evolved between writes reads old and new records."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from registry_proc import Served

USER_V1 = json.dumps({"type": "record", "name": "User", "namespace": "txnlog.test",
                      "fields": [{"name": "name", "type": "string"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "txnlog.test",
                      "fields": [{"name": "name", "type": "string"},
                                 {"name": "age", "type": "int", "default": -1}]})


@pytest.fixture(scope="module")
def sr(served: Served) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": served.registry.url})


def produce(served: Served, topic: str, values: list[bytes]) -> None:
    served.coord.client().create_topic(topic, 1, exist_ok=True)
    p = Producer({"bootstrap.servers": served.gateway.bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0
    assert errors == []


def consume(served: Served, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": served.gateway.bootstrap, "group.id": f"g-{topic}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(200):
            if len(out) >= n:
                break
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def frame_id(value: bytes) -> int:
    assert value[0] == 0, "Confluent's wire format starts with magic byte 0"
    return struct.unpack(">I", value[1:5])[0]


def test_avro_serializer_and_deserializer_with_evolution(served: Served,
                                                         sr: SchemaRegistryClient) -> None:
    topic = "avro-users"
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(sr, USER_V1), AvroSerializer(sr, USER_V2)
    old = [v1({"name": f"old{i}"}, ctx) for i in range(3)]
    new = [v2({"name": f"new{i}", "age": i}, ctx) for i in range(3)]
    produce(served, topic, old + new)
    got = consume(served, topic, 6)
    assert got == old + new
    ids = [frame_id(v) for v in got]
    assert ids[0] == ids[2] != ids[3] == ids[5]
    assert sr.get_latest_version(f"{topic}-value").schema_id == ids[3]
    as_written = AvroDeserializer(sr)
    assert [as_written(v, ctx) for v in got] == (
        [{"name": f"old{i}"} for i in range(3)] + [{"name": f"new{i}", "age": i}
                                                   for i in range(3)])
    # the evolved reader schema reads the old records with the default
    evolved = AvroDeserializer(sr, USER_V2)
    assert [evolved(v, ctx)["age"] for v in got] == [-1, -1, -1, 0, 1, 2]
    # an incompatible writer is refused by the registry, so nothing is produced with it
    bad = json.dumps({"type": "record", "name": "User", "namespace": "txnlog.test",
                      "fields": [{"name": "name", "type": "int"}]})
    with pytest.raises(Exception, match=r"40901|incompatible"):
        AvroSerializer(sr, bad)({"name": 1}, ctx)


def test_json_schema_serializer_and_deserializer(served: Served,
                                                 sr: SchemaRegistryClient) -> None:
    topic = "json-orders"
    schema = json.dumps({"type": "object", "title": "Order",
                         "properties": {"id": {"type": "integer"},
                                        "item": {"type": "string"}},
                         "required": ["id"], "additionalProperties": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = JSONSerializer(schema, sr)
    orders = [{"id": i, "item": f"thing-{i}"} for i in range(4)]
    produce(served, topic, [ser(o, ctx) for o in orders])
    got = consume(served, topic, 4)
    assert len({frame_id(v) for v in got}) == 1
    de = JSONDeserializer(None, schema_registry_client=sr)
    assert [de(v, ctx) for v in got] == orders
    with pytest.raises(Exception, match=r"valid|required"):
        ser({"item": "no id"}, ctx)


def _ping_class() -> Callable[..., Any]:
    fdp = descriptor_pb2.FileDescriptorProto(name="txnlog_test/ping.proto",
                                             package="txnlogtest", syntax="proto3")
    msg = fdp.message_type.add(name="Ping")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="n", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    msg.field.add(name="who", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("txnlogtest.Ping"))


def test_protobuf_serializer_and_deserializer(served: Served,
                                              sr: SchemaRegistryClient) -> None:
    topic = "proto-pings"
    ping = _ping_class()
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = ProtobufSerializer(ping, sr, {"use.deprecated.format": False})
    msgs = [ping(n=i, who=f"p{i}") for i in range(3)]
    produce(served, topic, [ser(m, ctx) for m in msgs])
    got = consume(served, topic, 3)
    schema_id = frame_id(got[0])
    registered = sr.get_schema(schema_id)
    assert registered.schema_type == "PROTOBUF"
    de = ProtobufDeserializer(ping, {"use.deprecated.format": False}, sr)
    assert [de(v, ctx) for v in got] == msgs
