"""Partition read throughput into Arrow: local files and a real S3 server vs. decode only.

    python bench/read.py [--records 1000000] [--segment-mb 8] [--no-s3]
                         [--merged-segment-mb 1024] [--spark]

Writes one partition (transactional batches committed per segment object, Kafka-sized
~1 MiB batches, 16-byte keys and 100-byte values by default) to a local root and to a
SeaweedFS server on 127.0.0.1 (tests/s3_server.py), then times
- decode only: `decode_to_arrow` over the same segment bytes already in memory,
- PartitionReader.read (read_committed: .txnindex collection + aborted filter + LSO bound)
  from each root,
and prints records/s, MB/s (of segment bytes) and the storage overhead ratio
(decode-only rate / read rate). Best of `--repeat` runs.

Each root is read twice, interleaved: as the small objects commits leave ("file", "s3") and
merged into Kafka segments of ``--merged-segment-mb`` with their indexes and a manifest, as
the coordinator's merger leaves them ("file merged", "s3 merged": reads from
merged segments must be at least as fast). The last column is merged / small.

``--spark`` also reads each root with ``spark.read.format("txnlog")`` in a local[2] session
(``assign`` the partition, ``minPartitions`` 2, every row materialized by the ``noop``
sink), small and merged interleaved, best of ``--repeat`` after one warm-up read of each:
"spark file", "spark file merged", "spark s3", "spark s3 merged".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from txnlog.log_format.arrow.arrow_codec import (  # noqa: E402
    AbortedFilter,
    decode_to_arrow,
    encode_arrow,
    scan_batches,
)
from txnlog.log_format.codec.control import ControlType, Marker, encode_markers  # noqa: E402
from txnlog.log_format.layout import (  # noqa: E402
    partition_dir,
    segment_path,
)
from txnlog.log_format.manifest import MergedObject, new_manifest  # noqa: E402
from txnlog.log_format.reader import PartitionReader  # noqa: E402
from txnlog.log_format.segments.segment_merge import MergeInput, merge_segment  # noqa: E402
from txnlog.log_format.stable import make_snapshot, write_stable  # noqa: E402
from txnlog.log_format.storage import Storage  # noqa: E402
from txnlog.log_format.topics import create_topic  # noqa: E402

TOPIC = "bench"


def make_segments(records: int, segment_bytes: int, key_size: int,
                  value_size: int) -> list[tuple[int, bytes]]:
    """(base offset, object bytes): each object one producer's committed transaction."""
    rng = np.random.default_rng(7)
    per_record = key_size + value_size + 12
    per_segment = max(1, segment_bytes // per_record)
    out: list[tuple[int, bytes]] = []
    offset, done, pid, now = 0, 0, 1000, 1_700_000_000_000
    while done < records:
        n = min(per_segment, records - done)
        done += n
        keys = rng.integers(0, 256, size=(n, key_size), dtype=np.uint8)
        values = rng.integers(0, 256, size=(n, value_size), dtype=np.uint8)
        cols = pa.record_batch({
            "key": pa.array(list(keys.view(f"S{key_size}").ravel()), pa.binary()),
            "value": pa.array(list(values.view(f"S{value_size}").ravel()), pa.binary()),
        })
        enc = encode_arrow(cols, producer_id=pid, producer_epoch=0, base_sequence=0,
                           transactional=True, now_ms=now)
        data = enc.with_base_offset(offset)
        marker = encode_markers([Marker(ControlType.COMMIT, pid, 0, 1, now)],
                                base_offset=offset + n)
        out.append((offset, data + marker))
        offset += n + 1
        pid += 1
    return out


def write_partition(storage: Storage, segments: list[tuple[int, bytes]]) -> int:
    for base, data in segments:
        assert storage.put_if_absent(segment_path(TOPIC, 0, base), data)
    end = segments[-1][0] + count_offsets(segments[-1][1])
    write_stable(storage, make_snapshot(1, 0, {partition_dir(TOPIC, 0): (end, end)}))
    create_topic(storage, TOPIC, 1)
    return end


def write_merged(storage: Storage, segments: list[tuple[int, bytes]],
                 segment_bytes: int) -> int:
    """The same partition as the merger leaves it: closed segments of at most
    ``segment_bytes`` with .index/.timeindex, named by a manifest."""
    end = segments[-1][0] + count_offsets(segments[-1][1])
    bases = [b for b, _ in segments] + [end]
    groups: list[list[int]] = [[]]
    size = 0
    for i, (_, data) in enumerate(segments):
        if groups[-1] and size + len(data) > segment_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += len(data)
    objects = []
    for g in groups:
        merged = merge_segment([MergeInput(bases[i], bases[i + 1], segments[i][1]) for i in g])
        obj = MergedObject(0, merged.base_offset, merged.end_offset, len(merged.log),
                           merged.txnindex is not None, merged.max_timestamp)
        for path, data in obj.files(TOPIC, 0, merged):
            assert storage.put_if_absent(path, data)
        objects.append(obj)
    man = new_manifest(TOPIC, 0, 1, objects, 0, 0, 60_000)
    assert storage.put_if_absent(man.path, man.to_json())
    write_stable(storage, make_snapshot(1, 0, {partition_dir(TOPIC, 0): (end, end)}))
    create_topic(storage, TOPIC, 1)
    return end


def count_offsets(data: bytes) -> int:
    idx = scan_batches(data, verify_crc=False)
    return int(idx["base_offset"][-1] + idx["last_offset_delta"][-1] + 1 - idx["base_offset"][0])


def best(fn, repeat: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = fn()
        times.append(time.perf_counter() - t0)
    return min(times), rows


def best_pair(small, merged, repeat: int) -> tuple[tuple[float, int], tuple[float, int]]:
    """Both reads, interleaved (small, merged, merged, small, ...): best of each."""
    a: list[float] = []
    b: list[float] = []
    rows_a = rows_b = 0
    for r in range(repeat):
        order = [(small, a), (merged, b)] if r % 2 == 0 else [(merged, b), (small, a)]
        for fn, times in order:
            t0 = time.perf_counter()
            n = fn()
            times.append(time.perf_counter() - t0)
            if fn is small:
                rows_a = n
            else:
                rows_b = n
    return (min(a), rows_a), (min(b), rows_b)


def decode_only(segments: list[tuple[int, bytes]]) -> int:
    rows = 0
    aborted = AbortedFilter([])
    for _base, data in segments:
        rows += decode_to_arrow(data, topic=TOPIC, partition=0, aborted=aborted).batch.num_rows
    return rows


def read_root(storage: Storage, end: int) -> int:
    reader = PartitionReader(storage, TOPIC, 0)
    rows = sum(c.batch.num_rows for c in reader.read(0, end))
    return rows


def spark_session() -> Any:
    """A local[2] session (pyspark is imported only with --spark); its Python workers run
    this interpreter, so they import this checkout's txnlog."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable

    return (SparkSession.builder.master("local[2]").appName("txnlog-bench-read")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate())


def spark_read(spark: Any, url: str, options: dict[str, str]) -> int:
    """Every row of the partition through Spark's Python data source into the noop sink;
    -1: the rows are not counted here (``spark_count`` checks them once, before)."""
    (spark.read.format("txnlog").options(**options)
     .option("assign", json.dumps({TOPIC: [0]})).option("minPartitions", "2").load(url)
     .write.format("noop").mode("overwrite").save())
    return -1


def spark_count(spark: Any, url: str, options: dict[str, str]) -> int:
    return (spark.read.format("txnlog").options(**options)
            .option("assign", json.dumps({TOPIC: [0]})).load(url).count())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--segment-mb", type=float, default=8.0)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--merged-segment-mb", type=float, default=1024.0)
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 server")
    ap.add_argument("--json", action="store_true", help="print one JSON line too")
    ap.add_argument("--spark", action="store_true",
                    help="also read each root with spark.read.format('txnlog')")
    args = ap.parse_args()

    segments = make_segments(args.records, int(args.segment_mb * 2**20), args.key_size,
                             args.value_size)
    total_bytes = sum(len(d) for _, d in segments)
    results: dict[str, dict[str, float]] = {}

    def record(name: str, seconds: float, rows: int) -> None:
        if rows == -1:  # a Spark read into noop: its count was checked before
            rows = args.records
        assert rows == args.records, f"{name}: read {rows} of {args.records} records"
        results[name] = {"seconds": seconds, "records_per_s": rows / seconds,
                         "mb_per_s": total_bytes / seconds / 2**20}

    decode_only(segments[:1])  # compile / warm up
    record("decode_only", *best(lambda: decode_only(segments), args.repeat))

    tmp = tempfile.mkdtemp(prefix="txnlog-bench-")
    server = None
    spark = None
    try:
        seg_bytes = int(args.merged_segment_mb * 2**20)
        local = Storage.for_url(Path(tmp, "root").as_uri())
        local_m = Storage.for_url(Path(tmp, "merged").as_uri())
        end = write_partition(local, segments)
        write_merged(local_m, segments, seg_bytes)
        small, merged = best_pair(lambda: read_root(local, end), lambda: read_root(local_m, end),
                                  args.repeat)
        record("file", *small)
        record("file merged", *merged)
        spark = spark_session() if args.spark else None

        def spark_pair(name: str, small_url: str, merged_url: str,
                       options: dict[str, str]) -> None:
            for url in (small_url, merged_url):  # warm-up, and every row is there
                rows = spark_count(spark, url, options)
                assert rows == args.records, f"{url}: Spark read {rows} of {args.records}"
            small, merged = best_pair(lambda: spark_read(spark, small_url, options),
                                      lambda: spark_read(spark, merged_url, options),
                                      args.repeat)
            record(f"spark {name}", *small)
            record(f"spark {name} merged", *merged)

        if spark is not None:
            spark_pair("file", Path(tmp, "root").as_uri(), Path(tmp, "merged").as_uri(), {})
        if not args.no_s3:
            from s3_server import S3Server

            server = S3Server.start(Path(tmp, "weed"))
            server.create_bucket("bench")
            s3 = Storage.for_url("s3://bench/root", server.storage_options())
            s3_m = Storage.for_url("s3://bench/merged", server.storage_options())
            end = write_partition(s3, segments)
            write_merged(s3_m, segments, seg_bytes)
            read_root(s3, end)  # warm the connection pool
            small, merged = best_pair(lambda: read_root(s3, end), lambda: read_root(s3_m, end),
                                      args.repeat)
            record("s3", *small)
            record("s3 merged", *merged)
            if spark is not None:
                spark_pair("s3", "s3://bench/root", "s3://bench/merged",
                           server.storage_options())
    finally:
        if spark is not None:
            spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    base = results["decode_only"]["records_per_s"]
    print(f"{args.records:,} records, {len(segments)} objects, {total_bytes / 2**20:.1f} MiB "
          f"(key {args.key_size} B, value {args.value_size} B), best of {args.repeat}, "
          f"cpus={os.cpu_count()}")
    print(f"{'path':<18} {'records/s':>14} {'MB/s':>10} {'overhead':>9} {'merged/small':>13}"
          f"  (load {os.getloadavg()[0]:.1f})")
    for name, r in results.items():
        vs = ""
        if name.endswith(" merged"):
            vs = f"{r['records_per_s'] / results[name[:-7]]['records_per_s']:>12.2f}x"
        print(f"{name:<18} {r['records_per_s']:>14,.0f} {r['mb_per_s']:>10.1f} "
              f"{base / r['records_per_s']:>8.2f}x {vs}")
    if args.json:
        print(json.dumps({"records": args.records, "bytes": total_bytes, **results}))


if __name__ == "__main__":
    main()
