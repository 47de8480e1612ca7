"""``value.format=avro``: Spark reads Confluent-framed Avro values into a struct column, with
schemas read straight from the root's ``_schemas`` topic (written by the schema registry's
own code against a coordinator process), a schema evolved between writes (old records read
with the new field's default) and a pinned schema id. The decoder's errors and options are
checked without Spark in tests/coordinator/schema_registry/test_value_decoding.py."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from txnlog import IdempotentProducer
from txnlog.coordinator.schema_registry.registry import Registry
from txnlog.coordinator.schema_registry.store import SchemaStore

V1 = {"type": "record", "name": "User", "namespace": "t",
      "fields": [{"name": "name", "type": "string"},
                 {"name": "tags", "type": {"type": "array", "items": "string"}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "age", "type": ["null", "long"],
                                          "default": None},
                       {"name": "score", "type": "double", "default": 0.5}]}


def framed(schema_id: int, schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


@pytest.mark.spark
@pytest.mark.slow  # ~35 s of Spark queries; the decoder itself runs by default
def test_spark_reads_framed_avro_with_an_evolved_schema(spark, file_root: str, coord) -> None:
    store = SchemaStore(file_root, coord.endpoint)
    registry = Registry(store)
    id1 = registry.register("users-value", {"schema": json.dumps(V1)})["id"]
    with IdempotentProducer(file_root, coordinator=coord.endpoint) as p:
        coord.client().create_topic("users", 1)
        for i in range(3):
            p.send("users", framed(id1, V1, {"name": f"old{i}", "tags": ["a"] * i}))
        p.flush()
        id2 = registry.register("users-value", {"schema": json.dumps(V2)})["id"]
        for i in range(3):
            p.send("users", framed(id2, V2, {"name": f"new{i}", "tags": [], "age": i,
                                             "score": 1.0 + i}))
        p.send("users", None, key=b"tombstone")
        p.flush()
    store.close()

    df = (spark.read.format("txnlog").option("subscribe", "users")
          .option("value.format", "avro").load(file_root))
    assert df.schema["value"].dataType.simpleString() == (
        "struct<name:string,tags:array<string>,age:bigint,score:double>")
    rows = df.orderBy("offset").select("value.name", "value.tags", "value.age",
                                       "value.score", "value").collect()
    assert [(r.name, r.tags, r.age, r.score) for r in rows[:6]] == [
        ("old0", [], None, 0.5), ("old1", ["a"], None, 0.5), ("old2", ["a", "a"], None, 0.5),
        ("new0", [], 0, 1.0), ("new1", [], 1, 2.0), ("new2", [], 2, 3.0)]
    assert rows[6].value is None
    # pinned to the first schema: the new fields are dropped from the new records
    pinned = (spark.read.format("txnlog").option("subscribe", "users")
              .option("value.format", "avro").option("value.schemaId", str(id1))
              .load(file_root).orderBy("offset").select("value.*").collect())
    assert [tuple(r) for r in pinned[:6]] == [
        ("old0", []), ("old1", ["a"]), ("old2", ["a", "a"]), ("new0", []), ("new1", []),
        ("new2", [])]
