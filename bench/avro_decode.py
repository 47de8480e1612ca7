"""Decoding Confluent-framed Avro, Protobuf and JSON Schema values (``value.format=...``)
against reading raw bytes.

    python bench/avro_decode.py [--records 200000] [--repeat 3] [--no-spark]
                                [--formats avro,protobuf,json]

Starts a coordinator process on a fresh local root and, per format, registers two versions
of one record schema (the second adds two fields: with defaults in Avro, new field numbers
in Protobuf, new properties of an object closed in the first version in JSON Schema) with
the schema registry's own code, and writes ``--records`` framed values to a topic of its
own (half with each version; 6 fields). It then times, in the same run and interleaved,
best of ``--repeat``:

- "reader raw" / "reader <format>": txnlog's PartitionReader into Arrow, without and with
  the Spark source's ``ValueDecoder`` (the evolved reader schema; old records resolved);
- "spark raw" / "spark <format>": ``spark.read.format("txnlog")`` (local[2], every row
  materialized by the ``noop`` sink), without and with ``value.format=<format>``.

Prints records/s and the decode cost as a ratio (raw rate / decoded rate).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fastavro  # noqa: E402
from coordinator_proc import CoordinatorProc  # noqa: E402
from txnlog import IdempotentProducer  # noqa: E402
from txnlog.coordinator.schema_registry.protobuf_schema import parse as parse_proto  # noqa: E402
from txnlog.coordinator.schema_registry.registry import Registry  # noqa: E402
from txnlog.coordinator.schema_registry.store import SchemaStore  # noqa: E402
from txnlog.datasource.options import parse_read_options  # noqa: E402
from txnlog.datasource.read.projection import arrow_schema, full_read_schema  # noqa: E402
from txnlog.datasource.read.value_decoding import ValueDecoder, plan  # noqa: E402
from txnlog.log_format.reader import PartitionReader  # noqa: E402
from txnlog.log_format.storage import Storage  # noqa: E402

TOPIC = "events"
V1 = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "ok", "type": "boolean"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "tags", "type": {"type": "array",
                                                                  "items": "string"},
                                       "default": []},
                       {"name": "note", "type": ["null", "string"], "default": None}]}


PROTO_V1 = """syntax = "proto3";
package bench;
message Event { int64 id = 1; string user = 2; double amount = 3; bool ok = 4; }
"""
PROTO_V2 = PROTO_V1.replace("bool ok = 4;", "bool ok = 4; repeated string tags = 5; "
                            "optional string note = 6;")
JSON_V1 = {"type": "object", "additionalProperties": False, "properties": {
    "id": {"type": "integer"}, "user": {"type": "string"}, "amount": {"type": "number"},
    "ok": {"type": "boolean"}}}
JSON_V2 = {**JSON_V1, "additionalProperties": True, "properties": {
    **JSON_V1["properties"], "tags": {"type": "array", "items": {"type": "string"}},
    "note": {"type": ["string", "null"]}}}


def _encoders(fmt: str, ids: list[int]) -> list:  # type: ignore[type-arg]
    """Per version, a function record -> framed bytes."""
    heads = [b"\x00" + struct.pack(">I", i) for i in ids]
    if fmt == "avro":
        parsed = [fastavro.parse_schema(s) for s in (V1, V2)]

        def avro(v: int):  # type: ignore[no-untyped-def]
            def enc(rec: dict) -> bytes:
                buf = io.BytesIO()
                buf.write(heads[v])
                fastavro.schemaless_writer(buf, parsed[v], rec)
                return buf.getvalue()
            return enc
        return [avro(0), avro(1)]
    if fmt == "protobuf":
        from google.protobuf import descriptor_pool, message_factory

        def proto(v: int):  # type: ignore[no-untyped-def]
            pool = descriptor_pool.DescriptorPool()
            pool.Add(parse_proto((PROTO_V1, PROTO_V2)[v].strip()))
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))
            return lambda rec: heads[v] + b"\x00" + cls(**rec).SerializeToString()
        return [proto(0), proto(1)]
    return [lambda rec, v=v: heads[v] + json.dumps(rec).encode() for v in (0, 1)]


SCHEMAS = {"avro": (None, [V1, V2]), "protobuf": ("PROTOBUF", [PROTO_V1, PROTO_V2]),
           "json": ("JSON", [JSON_V1, JSON_V2])}


def write(root: str, endpoint: str, records: int, fmt: str) -> str:
    topic = f"{TOPIC}-{fmt}"
    store = SchemaStore(root, endpoint)
    reg = Registry(store)
    kind, versions = SCHEMAS[fmt]
    ids = [reg.register(f"{topic}-value", {
        "schema": s if isinstance(s, str) else json.dumps(s),
        **({"schemaType": kind} if kind else {})})["id"] for s in versions]
    encoders = _encoders(fmt, ids)
    with IdempotentProducer(root, coordinator=endpoint) as p:
        for i in range(records):
            v = 0 if i < records // 2 else 1
            rec = {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.5, "ok": i % 2 == 0}
            if v:
                rec.update(tags=["a", "b"], note="n")
            p.send(topic, encoders[v](rec), key=str(i % 64).encode())
            if i % 50_000 == 49_999:
                p.flush()
        p.flush()
    store.close()
    return topic


def reader_rate(root: str, topic: str, end: int, decoder: ValueDecoder | None) -> float:
    reader = PartitionReader(Storage.for_url(root), topic, 0)
    t0 = time.perf_counter()
    n = 0
    for chunk in reader.read(0, end):
        batch = decoder.decode(chunk.batch) if decoder is not None else chunk.batch
        n += batch.num_rows
    return n / (time.perf_counter() - t0)


def spark_rate(spark, root: str, records: int, topic: str,  # type: ignore[no-untyped-def]
               fmt: str | None) -> float:
    df = spark.read.format("txnlog").option("subscribe", topic)
    if fmt:
        df = df.option("value.format", fmt)
    t0 = time.perf_counter()
    df.load(root).write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--formats", default="avro,protobuf,json")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    root = Path(tempfile.mkdtemp(prefix="txnlog-avro-bench-")).as_uri()
    coord = CoordinatorProc(root)
    try:
        endpoint = coord.wait_healthy()
        decoders, ends = {}, {}
        for fmt in formats:
            coord.client().create_topic(f"{TOPIC}-{fmt}", 1)
            t0 = time.perf_counter()
            topic = write(root, endpoint, args.records, fmt)
            print(f"wrote {args.records} framed {fmt} records in "
                  f"{time.perf_counter() - t0:.1f} s")
            ends[fmt] = PartitionReader(Storage.for_url(root), topic, 0).latest_offset()
            opts = parse_read_options({"path": root, "subscribe": topic, "value.format": fmt})
            decoding = plan(opts)
            assert decoding is not None
            target = arrow_schema(full_read_schema(False, decoding.value_type()))
            decoders[fmt] = ValueDecoder(decoding, target.field("value").type)
        rates: dict[str, list[float]] = {"reader raw": []}
        rates.update({f"reader {f}": [] for f in formats})
        for _ in range(args.repeat):
            rates["reader raw"].append(reader_rate(root, f"{TOPIC}-{formats[0]}",
                                                   ends[formats[0]], None))
            for fmt in formats:
                rates[f"reader {fmt}"].append(reader_rate(root, f"{TOPIC}-{fmt}", ends[fmt],
                                                          decoders[fmt]))
        if not args.no_spark:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            spark = (SparkSession.builder.master("local[2]").appName("avro-bench")
                     .config("spark.ui.enabled", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            raw_topic = f"{TOPIC}-{formats[0]}"  # its raw bytes: the baseline
            spark_rate(spark, root, args.records, raw_topic, None)  # warm-up of every path
            for fmt in formats:
                spark_rate(spark, root, args.records, f"{TOPIC}-{fmt}", fmt)
            rates["spark raw"] = []
            rates.update({f"spark {f}": [] for f in formats})
            for _ in range(args.repeat):
                rates["spark raw"].append(spark_rate(spark, root, args.records, raw_topic,
                                                     None))
                for fmt in formats:
                    rates[f"spark {fmt}"].append(spark_rate(spark, root, args.records,
                                                            f"{TOPIC}-{fmt}", fmt))
            spark.stop()
        best = {k: max(v) for k, v in rates.items()}
        for k, v in best.items():
            print(f"{k:16s} {v:12,.0f} records/s")
        for side in ("reader", "spark"):
            for fmt in formats:
                if f"{side} {fmt}" in best:
                    print(f"{side}: raw / {fmt} = "
                          f"{best[f'{side} raw'] / best[f'{side} {fmt}']:.1f}x")
    finally:
        coord.stop()


if __name__ == "__main__":
    main()
