"""Confluent-framed values through Spark both ways: the sink encodes a struct ``value``
column with the subject's registered schema (Avro, JSON Schema, Protobuf) and frames it;
the batch and streaming sources decode it back into columns, across a schema evolved
between writes; a row that does not fit the schema fails the write, naming why. Schemas are
registered with the registry's own code against a coordinator process and read by Spark
straight from the root's ``_schemas``. Values framed by confluent-kafka's serializers are
decoded in tests/coordinator/schema_registry/test_framed_columns.py."""

from __future__ import annotations

import datetime as dt
import io
import json

import fastavro
import pytest
from txnlog.coordinator.schema_registry.registry import Registry
from txnlog.coordinator.schema_registry.store import SchemaStore

V1 = {"type": "record", "name": "Event", "namespace": "fv", "fields": [
    {"name": "name", "type": "string"},
    {"name": "n", "type": "long"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
     "default": None}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "score", "type": "double", "default": 0.5}]}
VALUE_V1 = ("struct<name:string,n:bigint,tags:array<string>,attrs:map<string,int>,"
            "at:timestamp>")
AT = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def write(spark, root: str, coord, topic: str, rows: list, ddl: str, **opts: str) -> None:
    df = spark.createDataFrame(rows, ddl)
    w = (df.write.format("txnlog").mode("append").option("topic", topic)
         .option("coordinator", coord.endpoint))
    for k, v in opts.items():
        w = w.option(k, v)
    w.save(root)


@pytest.mark.spark
def test_the_sink_frames_avro_and_the_sources_decode_it(spark, file_root: str, coord,
                                                        tmp_path) -> None:
    store = SchemaStore(file_root, coord.endpoint)
    registry = Registry(store)
    try:
        id1 = registry.register("fv-value", {"schema": json.dumps(V1)})["id"]
        ddl = f"key string, value {VALUE_V1}"
        write(spark, file_root, coord, "fv", [
            ("a", ("ann", 1, ["x"], {"k": 1}, AT)), ("b", ("bob", 2, [], {}, None))],
            ddl, **{"value.format": "avro"})
        # the sink registers the evolved schema (BACKWARD-compatible); a row without
        # score takes the default
        write(spark, file_root, coord, "fv", [("c", ("cy", 3, [], {}, None))], ddl,
              **{"value.format": "avro", "value.schema": json.dumps(V2)})
        id2 = registry.register("fv-value", {"schema": json.dumps(V2)})["id"]  # no new one
        assert [v.id for v in registry.fresh().versions("fv-value")] == [id1, id2]
        write(spark, file_root, coord, "fv", [("d", ("di", 4, [], {}, None, 9.5))],
              "key string, value struct<name:string,n:bigint,tags:array<string>,"
              "attrs:map<string,int>,at:timestamp,score:double>", **{"value.format": "avro"})
    finally:
        store.close()

    raw = (spark.read.format("txnlog").option("subscribe", "fv").load(file_root)
           .orderBy("offset").collect())
    assert [bytes(r.value[:5]) for r in raw] == [b"\x00" + i.to_bytes(4, "big")
                                                 for i in (id1, id1, id2, id2)]
    buf = io.BytesIO(bytes(next(r for r in raw if r.key == b"a").value)[5:])
    assert fastavro.schemaless_reader(buf, fastavro.parse_schema(V1), None) == {
        "name": "ann", "n": 1, "tags": ["x"], "attrs": {"k": 1}, "at": AT}

    want = [("ann", 1, ["x"], {"k": 1}, AT.replace(tzinfo=None), 0.5),  # UTC session
            ("bob", 2, [], {}, None, 0.5), ("cy", 3, [], {}, None, 0.5),
            ("di", 4, [], {}, None, 9.5)]
    got = (spark.read.format("txnlog").option("subscribe", "fv")
           .option("value.format", "avro").load(file_root).orderBy("key")
           .select("key", "value.*").collect())
    assert [r.key for r in got] == [b"a", b"b", b"c", b"d"]
    assert [tuple(r)[1:] for r in got] == want

    # a stream decodes the same way
    (spark.readStream.format("txnlog").option("subscribe", "fv")
     .option("value.format", "avro").option("startingOffsets", "earliest").load(file_root)
     .select("key", "value.*").writeStream.format("memory").queryName("fv_stream")
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
     .start().awaitTermination(120))
    streamed = spark.sql("SELECT * FROM fv_stream ORDER BY key").collect()
    assert [tuple(r)[1:] for r in streamed] == want


@pytest.mark.spark
@pytest.mark.slow  # each failed task is tried 4 times (local[2,4]): ~15 s
def test_rows_and_schemas_that_do_not_fit_fail_the_write(spark, file_root: str,
                                                         coord) -> None:
    store = SchemaStore(file_root, coord.endpoint)
    registry = Registry(store)
    ddl = f"key string, value {VALUE_V1}"
    try:
        registry.register("fx-value", {"schema": json.dumps(V1)})
        # name is required by the schema
        with pytest.raises(Exception, match=r"row 0 of this task's input does not fit the "
                                            r"schema it is written with: .*name"):
            write(spark, file_root, coord, "fx", [("e", (None, 5, [], {}, None))], ddl,
                  **{"value.format": "avro"})
        bad = {**V1, "fields": [{"name": "name", "type": "long"}]}
        with pytest.raises(Exception, match=r"cannot be registered under 'fx-value': .*"
                                            r"incompatible"):
            write(spark, file_root, coord, "fx", [("e", ("e", 5, [], {}, None))], ddl,
                  **{"value.format": "avro", "value.schema": json.dumps(bad)})
        with pytest.raises(Exception, match="'nope-value' has no live version"):
            write(spark, file_root, coord, "fx", [("e", ("e", 5, [], {}, None))], ddl,
                  **{"value.format": "avro", "value.subject": "nope-value"})
        assert [v.id for v in registry.fresh().versions("fx-value")] == [
            registry.register("fx-value", {"schema": json.dumps(V1)})["id"]]
    finally:
        store.close()
    assert spark.read.format("txnlog").option("subscribe", "fx").load(file_root).count() == 0


PING = """syntax = "proto3";
package fvp;
message Ping {
  string who = 1;
  repeated int64 ns = 2;
  map<string, string> labels = 3;
  enum Kind { A = 0; B = 1; }
  Kind kind = 4;
}
"""
ORDER = {"type": "object", "properties": {
    "id": {"type": "integer"}, "item": {"type": "string", "maxLength": 5},
    "lines": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "n": {"type": "integer"}}}}},
    "required": ["id"]}


@pytest.mark.spark
@pytest.mark.slow  # ~20 s of Spark jobs; the decoders run by default without Spark
def test_the_sink_frames_protobuf_and_json_keys_and_values(spark, file_root: str,
                                                           coord) -> None:
    store = SchemaStore(file_root, coord.endpoint)
    registry = Registry(store)
    try:
        registry.register("fp-value", {"schema": PING, "schemaType": "PROTOBUF"})
        registry.register("fp-key", {"schema": json.dumps(ORDER), "schemaType": "JSON"})
        ddl = ("key struct<id:bigint,item:string,lines:array<struct<sku:string,n:bigint>>>, "
               "value struct<who:string,ns:array<bigint>,labels:map<string,string>,"
               "kind:string>")
        rows = [((1, "a", [("s", 2)]), ("ann", [1, 2], {"l": "v"}, "B")),
                ((2, None, None), ("bob", [], {}, "A"))]
        write(spark, file_root, coord, "fp", rows, ddl,
              **{"value.format": "protobuf", "key.format": "json"})
        with pytest.raises(Exception, match=r"item: 'toolong' is too long"):
            write(spark, file_root, coord, "fp", [((3, "toolong", None), None)], ddl,
                  **{"value.format": "protobuf", "key.format": "json"})
    finally:
        store.close()
    raw = spark.read.format("txnlog").option("subscribe", "fp").load(file_root).collect()
    first = next(r for r in raw if bytes(r.key)[5:].startswith(b'{"id":1'))
    assert bytes(first.key)[5:] == b'{"id":1,"item":"a","lines":[{"sku":"s","n":2}]}'
    assert bytes(first.value)[5:6] == b"\x00"  # message indexes [0], shortened
    got = (spark.read.format("txnlog").option("subscribe", "fp")
           .option("value.format", "protobuf").option("key.format", "json")
           .load(file_root).orderBy("key.id").select("key", "value").collect())
    assert [(tuple(r.key), tuple(r.value)) for r in got] == [
        ((1, "a", [(("s", 2))]), ("ann", [1, 2], {"l": "v"}, "B")),
        ((2, None, None), ("bob", [], {}, "A"))]
