"""Encode/decode throughput of the Arrow codec vs aiokafka's C codec and kafka-python.

    python bench/codec.py [--records 1000000] [--repeat 3] [--kafka-python-records 200000]

Records: 16-byte random keys, 100-byte values of random letters (MB below = key+value
bytes / 1e6), batches of up to 1 MiB, CRC verified on decode. Ours goes Arrow -> bytes ->
Arrow; the client libraries go Python objects -> bytes -> Python objects, which is how they
are used. One thread; numba compile time excluded (warm-up first); best of --repeat runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import _DefaultRecordBatchBuilderCython as AioBuilder
from aiokafka.record.default_records import _DefaultRecordBatchCython as AioBatch
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from txnlog.log_format.arrow_codec import decode_to_arrow, encode_arrow, scan_batches

KEY, VALUE = 16, 100
BATCH = 1 << 20
T0 = 1_700_000_000_000


def make_arrow(n: int, seed: int = 0) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)

    def fixed(width: int, low: int, high: int) -> pa.Array:
        data = pa.py_buffer(rng.integers(low, high, n * width, dtype=np.uint8).tobytes())
        offsets = pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32))
        return pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])

    # random keys; values of random lowercase letters, so zstd has something to do (with
    # incompressible values the client libraries silently fall back to no compression)
    return pa.record_batch({"key": fixed(KEY, 0, 256), "value": fixed(VALUE, 97, 123),
                            "timestamp": pa.array(T0 + np.arange(n) // 1000, pa.int64())})


def best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def client_encode(builder: type, records: list[tuple], codec: int) -> list[bytes]:
    batches, i, n = [], 0, len(records)
    while i < n:
        b = builder(2, codec, 0, -1, -1, -1, BATCH)
        start = i
        while i < n:
            ts, key, value = records[i]
            if b.append(i - start, ts, key, value, []) is None:
                break
            i += 1
        batches.append(bytes(b.build()))
    return batches


def client_decode(reader: type, batches: list[bytes]) -> int:
    count = 0
    for data in batches:
        batch = reader(data)
        if not batch.validate_crc():
            raise AssertionError("CRC")
        for record in batch:
            _ = record.key, record.value, record.offset, record.timestamp
            count += 1
    return count


def run(n: int, repeat: int, kp_n: int) -> list[tuple]:
    rb = make_arrow(n)
    raw_mb = n * (KEY + VALUE) / 1e6
    small = make_arrow(1000, seed=1)
    rows = []
    for codec, name in ((0, "none"), (4, "zstd")):
        warm = encode_arrow(small, compression=codec, now_ms=T0)  # compile / load caches
        decode_to_arrow(warm.with_base_offset(0), topic="bench", partition=0)

        enc_s, enc = best(lambda c=codec: encode_arrow(rb, compression=c, max_batch_bytes=BATCH,
                                                       now_ms=T0), repeat)
        data = enc.with_base_offset(0)
        dec_s, res = best(lambda d=data: decode_to_arrow(d, topic="bench", partition=0), repeat)
        assert res.batch.num_rows == n
        assert res.batch.column("value").equals(rb.column("value"))
        rows.append(("txnlog Arrow", "encode", name, n, enc_s, raw_mb, len(data)))
        rows.append(("txnlog Arrow", "decode", name, n, dec_s, raw_mb, len(data)))
        scan_s, _ = best(lambda d=data: scan_batches(d), repeat)
        rows.append(("txnlog scan_batches", "scan+crc", name, n, scan_s, raw_mb, len(data)))

        keys, values = rb.column("key").to_pylist(), rb.column("value").to_pylist()
        stamps = rb.column("timestamp").to_pylist()
        records = list(zip(stamps, keys, values, strict=True))
        for label, builder, reader, count in (("aiokafka C", AioBuilder, AioBatch, n),
                                              ("kafka-python", KpBuilder, KpBatch, kp_n)):
            sub = records[:count]
            sub_mb = count * (KEY + VALUE) / 1e6
            client_encode(builder, sub[:1000], codec)
            e_s, batches = best(lambda b=builder, s=sub, c=codec: client_encode(b, s, c),
                                repeat if label == "aiokafka C" else 1)
            d_s, got = best(lambda r=reader, bs=batches: client_decode(r, bs),
                            repeat if label == "aiokafka C" else 1)
            assert got == count
            size = sum(len(b) for b in batches)
            rows.append((label, "encode", name, count, e_s, sub_mb, size))
            rows.append((label, "decode", name, count, d_s, sub_mb, size))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kafka-python-records", type=int, default=200_000)
    args = parser.parse_args()
    rows = run(args.records, args.repeat, args.kafka_python_records)
    base = {(op, codec): cnt / s for impl, op, codec, cnt, s, _, _ in rows
            if impl == "aiokafka C"}
    print(f"{'implementation':<20} {'op':<9} {'codec':<5} {'records':>9} {'M rec/s':>8} "
          f"{'MB/s':>8} {'bytes/rec':>9} {'vs aiokafka C':>13}")
    for impl, op, codec, cnt, s, mb, size in rows:
        rate = cnt / s
        ratio = f"{rate / base[(op, codec)]:.2f}x" if (op, codec) in base else "-"
        print(f"{impl:<20} {op:<9} {codec:<5} {cnt:>9} {rate / 1e6:>8.2f} {mb / s:>8.0f} "
              f"{size / cnt:>9.1f} {ratio:>13}")


if __name__ == "__main__":
    main()
