"""The Spark source's ``value.format=avro`` decoder without Spark: options checked when the
read is planned (unknown format, no subject, a JSON schema, unsupported Avro types), values
decoded from a real root's records with schemas from its ``_schemas`` (evolution, null
values), and a value that is not framed or names an unknown id failing with its offset."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import httpx
import pytest
from registry_proc import Served
from txnlog import IdempotentProducer
from txnlog.datasource.options import InvalidOptionError, parse_read_options
from txnlog.datasource.read.projection import arrow_schema, full_read_schema
from txnlog.datasource.read.value_decoding import ValueDecodeError, ValueDecoder, plan
from txnlog.log_format.consumer import Consumer

V1 = {"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "kind", "default": "A", "type": {
    "type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]}


def framed(schema_id: int, schema: dict, record: dict) -> bytes:
    buf = io.BytesIO(b"\x00" + struct.pack(">I", schema_id))
    buf.seek(5)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def options(served: Served, topic: str, **extra: str) -> dict[str, str]:
    return {"path": served.root, "subscribe": topic, "value.format": "avro", **extra}


def test_decoder_reads_evolved_records_and_fails_on_unframed(served: Served) -> None:
    http = httpx.Client(base_url=served.registry.url, timeout=60)
    id1 = http.post("/subjects/readings-value/versions",
                    json={"schema": json.dumps(V1)}).json()["id"]
    id2 = http.post("/subjects/readings-value/versions",
                    json={"schema": json.dumps(V2)}).json()["id"]
    served.coord.client().create_topic("readings", 1)
    with IdempotentProducer(served.root, coordinator=served.coord.endpoint) as p:
        p.send("readings", framed(id1, V1, {"sensor": "s1", "at": 1000, "attrs": {"x": 1}}))
        p.send("readings", framed(id2, V2, {"sensor": "s2", "at": 2000, "attrs": {},
                                            "kind": "B"}))
        p.send("readings", None, key=b"k")
        p.send("readings", b"\x00\x00\x0f\x42\x40payload")  # schema id 1000000: unknown
        p.send("readings", b"not framed")
        p.flush()
    decoding = plan(parse_read_options(options(served, "readings")))
    assert decoding is not None and decoding.reader_id == id2
    assert decoding.value_type().simpleString() == (
        "struct<sensor:string,at:timestamp,attrs:map<string,int>,kind:string>")
    target = arrow_schema(full_read_schema(False, decoding.value_type()))
    decoder = ValueDecoder(decoding, target.field("value").type)
    with Consumer(served.root, "readings") as consumer:
        batch = consumer.read_table().to_batches()[0]
    good = decoder.decode(batch.slice(0, 3)).column("value").to_pylist()
    assert [(v["sensor"], v["at"].timestamp(), v["attrs"], v["kind"]) for v in good[:2]] == [
        ("s1", 1.0, [("x", 1)], "A"), ("s2", 2.0, [], "B")]
    assert good[2] is None
    with pytest.raises(ValueDecodeError, match=r"offset 3 \(schema id 1000000\)"):
        decoder.decode(batch.slice(3, 1))
    with pytest.raises(ValueDecodeError, match="offset 4 is not in Confluent's wire format"):
        decoder.decode(batch.slice(4, 1))


def test_options_are_checked_when_the_read_is_planned(served: Served) -> None:
    with pytest.raises(InvalidOptionError, match="must be one of avro"):
        parse_read_options(options(served, "readings", **{"value.format": "xml"}))
    with pytest.raises(InvalidOptionError, match=r"need 'value\.format'"):
        parse_read_options({"path": served.root, "subscribe": "t", "value.subject": "s"})
    with pytest.raises(InvalidOptionError, match=r"'value\.message' applies to value\.format="
                                                 "protobuf only"):
        parse_read_options(options(served, "readings", **{"value.message": "a.B"}))
    with pytest.raises(InvalidOptionError, match=r"give one of 'value\.schema' and "):
        from txnlog.datasource.options import parse_write_options

        parse_write_options({"path": served.root, "topic": "t", "value.format": "avro",
                             "value.schema": '"string"', "value.schemaId": "1"})
    with pytest.raises(InvalidOptionError, match=r"unknown option 'value\.schema'"):
        parse_read_options(options(served, "readings", **{"value.schema": '"string"'}))
    with pytest.raises(InvalidOptionError, match=r"need 'key\.format'"):
        parse_read_options({"path": served.root, "subscribe": "t", "key.schemaId": "3"})
    with pytest.raises(InvalidOptionError, match="'nothing-here-value' has no live version"):
        plan(parse_read_options(options(served, "nothing-here")))
    with pytest.raises(InvalidOptionError, match="schema id 999999 is not in"):
        plan(parse_read_options(options(served, "x", **{"value.schemaId": "999999"})))
    http = httpx.Client(base_url=served.registry.url, timeout=60)
    js = http.post("/subjects/js-value/versions", json={
        "schema": '{"type": "object"}', "schemaType": "JSON"}).json()["id"]
    with pytest.raises(InvalidOptionError, match="needs an Avro schema"):
        plan(parse_read_options(options(served, "x", **{"value.schemaId": str(js)})))
    union = http.post("/subjects/union-value/versions", json={
        "schema": '["int", "string"]'}).json()["id"]
    with pytest.raises(InvalidOptionError, match="union of several non-null types"):
        plan(parse_read_options(options(served, "x", **{"value.schemaId": str(union)})))
    # a primitive schema becomes a one-field struct
    prim = http.post("/subjects/prim-value/versions", json={"schema": '"string"'}).json()["id"]
    got = plan(parse_read_options(options(served, "x", **{"value.schemaId": str(prim)})))
    assert got is not None and got.value_type().simpleString() == "struct<value:string>"


@pytest.mark.parametrize(("namespace", "shortcut"), [("a", True), ("b", False)])
def test_the_projection_shortcut_equals_avros_resolution(served: Served, namespace: str,
                                                         shortcut: bool) -> None:
    """Writer and reader differing only by fields added with defaults or removed are read
    with the writer schema and projected: the same records as fastavro's resolution (which
    reads them when a nested type's full name differs)."""
    import pyarrow as pa

    inner = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}
    w = {"type": "record", "name": "W", "namespace": "a", "fields": [
        {"name": "id", "type": "long"}, {"name": "gone", "type": "string"},
        {"name": "inner", "type": inner}]}
    r = {"type": "record", "name": "W", "namespace": namespace, "fields": [
        {"name": "inner", "type": inner}, {"name": "id", "type": "long"},
        {"name": "n", "type": ["null", "string"], "default": None},
        {"name": "d", "type": "double", "default": 1.5},
        {"name": "l", "type": {"type": "array", "items": "int"}, "default": []}]}
    subject = f"shortcut-{namespace}-value"
    http = httpx.Client(base_url=served.registry.url, timeout=60)
    http.put(f"/config/{subject}", json={"compatibility": "NONE"})
    wid = http.post(f"/subjects/{subject}/versions", json={"schema": json.dumps(w)}).json()
    rid = http.post(f"/subjects/{subject}/versions", json={"schema": json.dumps(r)}).json()
    opts = options(served, "shortcut", **{"value.schemaId": str(rid["id"])})
    decoding = plan(parse_read_options(opts))
    assert decoding is not None
    decoder = ValueDecoder(decoding, arrow_schema(
        full_read_schema(False, decoding.value_type())).field("value").type)
    assert (decoder.records._shortcut(wid["id"]) is not None) is shortcut  # type: ignore[attr-defined]
    value = framed(wid["id"], w, {"id": 7, "gone": "x", "inner": {"x": 3}})
    batch = pa.RecordBatch.from_pydict({"value": [value], "topic": ["shortcut"],
                                        "partition": [0], "offset": [0]})
    got = decoder.decode(batch).column("value").to_pylist()[0]
    buf = io.BytesIO(value)
    buf.seek(5)
    assert got == fastavro.schemaless_reader(buf, fastavro.parse_schema(w),
                                             fastavro.parse_schema(r))


def test_dump_prints_framed_values_decoded(served: Served, capsys) -> None:
    """``txnlog dump --value-decoder ...dump_decoder:confluent``: Avro, JSON Schema and
    Protobuf payloads as JSON with their schema ids; raw bytes print why not."""
    from google.protobuf import descriptor_pool, message_factory
    from txnlog.coordinator.cli import main
    from txnlog.coordinator.schema_registry.protobuf_schema import parse as parse_proto
    from txnlog.log_format.segments import shared_object
    from txnlog.log_format.storage import Storage

    http = httpx.Client(base_url=served.registry.url, timeout=60)
    avro = {"type": "record", "name": "D", "fields": [{"name": "n", "type": "int"}]}
    aid = http.post("/subjects/dumped-a/versions", json={"schema": json.dumps(avro)}).json()
    jid = http.post("/subjects/dumped-j/versions", json={
        "schema": '{"type": "object"}', "schemaType": "JSON"}).json()
    proto = 'syntax = "proto3";\npackage dp;\nmessage Outer { message In { string s = 1; } }\n'
    pid = http.post("/subjects/dumped-p/versions", json={
        "schema": proto, "schemaType": "PROTOBUF"}).json()
    pool = descriptor_pool.DescriptorPool()
    pool.Add(parse_proto(proto.strip()))
    inner = message_factory.GetMessageClass(pool.FindMessageTypeByName("dp.Outer.In"))
    # message indexes [0, 0] (Outer, then its first nested type), zigzag varints
    proto_value = (b"\x00" + struct.pack(">I", pid["id"]) + b"\x04\x00\x00"
                   + inner(s="hi").SerializeToString())
    served.coord.client().create_topic("dumped", 1)
    with IdempotentProducer(served.root, coordinator=served.coord.endpoint) as p:
        p.send("dumped", framed(aid["id"], avro, {"n": 5}))
        p.send("dumped", b"\x00" + struct.pack(">I", jid["id"]) + b'{"a": [1]}')
        p.send("dumped", proto_value)
        p.send("dumped", b"raw")
        p.flush()
    storage = Storage.for_url(served.root)
    # the partition's batches are runs in shared objects until merged: dump those
    logs = [f"{served.root}/_wal/{o.name}" for o in storage.list("_wal")
            if any(e.topic == "dumped" for e in shared_object.read_footer(
                storage.get(f"_wal/{o.name}")).entries)]
    assert logs
    rc = main(["dump", "--value-decoder",
               "txnlog.coordinator.schema_registry.dump_decoder:confluent",
               "--decoder-option", f"root={served.root}", *logs])
    out = capsys.readouterr().out
    assert rc == 0, out
    payloads = [line.split(" payload: ", 1)[1] for line in out.splitlines()
                if " payload: " in line]
    assert payloads[:3] == [
        json.dumps({"schemaId": aid["id"], "value": {"n": 5}}, separators=(",", ":")),
        json.dumps({"schemaId": jid["id"], "value": {"a": [1]}}, separators=(",", ":")),
        json.dumps({"schemaId": pid["id"], "value": {"s": "hi"}}, separators=(",", ":"))]
    assert payloads[3].startswith("<cannot decode: ValueError: not in Confluent's wire")
    assert main(["dump", "--value-decoder",
                 "txnlog.coordinator.schema_registry.dump_decoder:confluent", *logs]) == 2
    assert "needs --decoder-option root=URL" in capsys.readouterr().err
