"""Decoding Confluent-framed Avro values (``value.format=avro``) against reading raw bytes.

    python bench/avro_decode.py [--records 200000] [--repeat 3] [--no-spark]

Starts a coordinator process on a fresh local root, registers two versions of a record
schema (the second adds fields with defaults) with the schema registry's own code, and
writes ``--records`` framed values (half with each version; 6 fields, ~60 bytes each). It
then times, in the same run and interleaved, best of ``--repeat``:

- "reader raw" / "reader avro": txnlog's PartitionReader into Arrow, without and with the
  Spark source's ``ValueDecoder`` (the evolved reader schema; old records resolved);
- "spark raw" / "spark avro": ``spark.read.format("txnlog")`` (local[2], every row
  materialized by the ``noop`` sink), without and with ``value.format=avro``.

Prints records/s and the decode cost as a ratio (raw rate / avro rate).
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


def write(root: str, endpoint: str, records: int) -> None:
    store = SchemaStore(root, endpoint)
    reg = Registry(store)
    ids = [reg.register(f"{TOPIC}-value", {"schema": json.dumps(s)})["id"] for s in (V1, V2)]
    parsed = [fastavro.parse_schema(s) for s in (V1, V2)]
    with IdempotentProducer(root, coordinator=endpoint) as p:
        for i in range(records):
            v = 0 if i < records // 2 else 1
            buf = io.BytesIO()
            buf.write(b"\x00" + struct.pack(">I", ids[v]))
            rec = {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.5, "ok": i % 2 == 0}
            if v:
                rec.update(tags=["a", "b"], note="n")
            fastavro.schemaless_writer(buf, parsed[v], rec)
            p.send(TOPIC, buf.getvalue(), key=str(i % 64).encode())
            if i % 50_000 == 49_999:
                p.flush()
        p.flush()
    store.close()


def reader_rate(root: str, end: int, decoder: ValueDecoder | None) -> float:
    reader = PartitionReader(Storage.for_url(root), TOPIC, 0)
    t0 = time.perf_counter()
    n = 0
    for chunk in reader.read(0, end):
        batch = decoder.decode(chunk.batch) if decoder is not None else chunk.batch
        n += batch.num_rows
    return n / (time.perf_counter() - t0)


def spark_rate(spark, root: str, records: int, avro: bool) -> float:  # type: ignore[no-untyped-def]
    df = spark.read.format("txnlog").option("subscribe", TOPIC)
    if avro:
        df = df.option("value.format", "avro")
    t0 = time.perf_counter()
    df.load(root).write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="txnlog-avro-bench-")).as_uri()
    coord = CoordinatorProc(root)
    try:
        endpoint = coord.wait_healthy()
        coord.client().create_topic(TOPIC, 1)
        t0 = time.perf_counter()
        write(root, endpoint, args.records)
        print(f"wrote {args.records} framed records in {time.perf_counter() - t0:.1f} s")
        end = PartitionReader(Storage.for_url(root), TOPIC, 0).latest_offset()
        opts = parse_read_options({"path": root, "subscribe": TOPIC, "value.format": "avro"})
        decoding = plan(opts)
        assert decoding is not None
        target = arrow_schema(full_read_schema(False, decoding.value_type()))
        decoder = ValueDecoder(decoding, target.field("value").type)
        rates: dict[str, list[float]] = {k: [] for k in ("reader raw", "reader avro")}
        for _ in range(args.repeat):
            rates["reader raw"].append(reader_rate(root, end, None))
            rates["reader avro"].append(reader_rate(root, end, decoder))
        if not args.no_spark:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            spark = (SparkSession.builder.master("local[2]").appName("avro-bench")
                     .config("spark.ui.enabled", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            spark_rate(spark, root, args.records, False)  # warm-up of both paths
            spark_rate(spark, root, args.records, True)
            rates.update({"spark raw": [], "spark avro": []})
            for _ in range(args.repeat):
                rates["spark raw"].append(spark_rate(spark, root, args.records, False))
                rates["spark avro"].append(spark_rate(spark, root, args.records, True))
            spark.stop()
        best = {k: max(v) for k, v in rates.items()}
        for k, v in best.items():
            print(f"{k:12s} {v:12,.0f} records/s")
        for side in ("reader", "spark"):
            if f"{side} raw" in best:
                print(f"{side}: raw / avro = {best[f'{side} raw'] / best[f'{side} avro']:.1f}x")
    finally:
        coord.stop()


if __name__ == "__main__":
    main()
