"""Partition read throughput into Arrow: local files and a real S3 server vs. decode only.

    python bench/read.py [--records 1000000] [--segment-mb 8] [--no-s3]

Writes one partition (transactional batches committed per segment object, Kafka-sized
~1 MiB batches, 16-byte keys and 100-byte values by default) to a local root and to a
SeaweedFS server on 127.0.0.1 (tests/s3_server.py), then times
- decode only: `decode_to_arrow` over the same segment bytes already in memory,
- PartitionReader.read (read_committed: .txnindex collection + aborted filter + LSO bound)
  from each root,
and prints records/s, MB/s (of segment bytes) and the storage overhead ratio
(decode-only rate / read rate). Best of `--repeat` runs.
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

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from txnlog.log_format.arrow_codec import (  # noqa: E402
    AbortedFilter,
    decode_to_arrow,
    encode_arrow,
    scan_batches,
)
from txnlog.log_format.control import ControlType, Marker, encode_markers  # noqa: E402
from txnlog.log_format.layout import partition_dir, segment_path  # noqa: E402
from txnlog.log_format.reader import PartitionReader  # noqa: E402
from txnlog.log_format.stable import make_snapshot, write_stable  # noqa: E402
from txnlog.log_format.storage import Storage  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--segment-mb", type=float, default=8.0)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 server")
    ap.add_argument("--json", action="store_true", help="print one JSON line too")
    args = ap.parse_args()

    segments = make_segments(args.records, int(args.segment_mb * 2**20), args.key_size,
                             args.value_size)
    total_bytes = sum(len(d) for _, d in segments)
    results: dict[str, dict[str, float]] = {}

    def record(name: str, seconds: float, rows: int) -> None:
        assert rows == args.records, f"{name}: read {rows} of {args.records} records"
        results[name] = {"seconds": seconds, "records_per_s": rows / seconds,
                         "mb_per_s": total_bytes / seconds / 2**20}

    decode_only(segments[:1])  # compile / warm up
    record("decode_only", *best(lambda: decode_only(segments), args.repeat))

    tmp = tempfile.mkdtemp(prefix="txnlog-bench-")
    server = None
    try:
        local = Storage.for_url(Path(tmp, "root").as_uri())
        end = write_partition(local, segments)
        record("file", *best(lambda: read_root(local, end), args.repeat))
        if not args.no_s3:
            from s3_server import S3Server

            server = S3Server.start(Path(tmp, "weed"))
            server.create_bucket("bench")
            s3 = Storage.for_url("s3://bench/root", server.storage_options())
            end = write_partition(s3, segments)
            read_root(s3, end)  # warm the connection pool
            record("s3", *best(lambda: read_root(s3, end), args.repeat))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    base = results["decode_only"]["records_per_s"]
    print(f"{args.records:,} records, {len(segments)} objects, {total_bytes / 2**20:.1f} MiB "
          f"(key {args.key_size} B, value {args.value_size} B), best of {args.repeat}, "
          f"cpus={os.cpu_count()}")
    print(f"{'path':<12} {'records/s':>14} {'MB/s':>10} {'overhead':>9}")
    for name, r in results.items():
        print(f"{name:<12} {r['records_per_s']:>14,.0f} {r['mb_per_s']:>10.1f} "
              f"{base / r['records_per_s']:>8.2f}x")
    if args.json:
        print(json.dumps({"records": args.records, "bytes": total_bytes, **results}))


if __name__ == "__main__":
    main()
