"""Encode/decode throughput of the Arrow codec vs aiokafka's C codec and kafka-python.

    python bench/codec.py [--records 1000000] [--rounds 5] [--kafka-python-records 100000]

Records: 16-byte random keys, 100-byte values of random letters (MB below = key+value
bytes / 1e6), batches of up to 1 MiB, CRC verified on decode. Ours goes Arrow -> bytes ->
Arrow; the client libraries go Python objects -> bytes -> Python objects, which is how they
are used. One thread, numba compile time excluded (warm-up first).

Fairness on a shared, loaded machine: txnlog and aiokafka runs are interleaved round by
round (the order flips every round), each run starts after a gc.collect() with the GC off
while it runs (1 M record objects would otherwise trigger collections in aiokafka's
decode), and the table gives medians over the rounds of both wall-clock time and the
process's CPU time (which excludes time spent descheduled by other load). Ratios are of
those medians. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import _DefaultRecordBatchBuilderCython as AioBuilder
from aiokafka.record.default_records import _DefaultRecordBatchCython as AioBatch
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from txnlog.log_format.arrow.arrow_codec import decode_to_arrow, encode_arrow, scan_batches

KEY, VALUE = 16, 100
BATCH = 1 << 20
T0 = 1_700_000_000_000
CODECS = ((0, "none"), (4, "zstd"))


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


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, CPU s, result) of one run, GC collected before and off during."""
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        return time.perf_counter() - wall, time.process_time() - cpu, out
    finally:
        gc.enable()


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


class Sample:
    """Wall and CPU times of one (implementation, op, codec) over the rounds."""

    def __init__(self, impl: str, op: str, codec: str, records: int, size: int) -> None:
        self.impl, self.op, self.codec, self.records, self.size = impl, op, codec, records, size
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def rate(self, cpu: bool) -> float:
        """Records per second at the median time."""
        return self.records / statistics.median(self.cpu if cpu else self.wall)


def run(n: int, rounds: int, kp_n: int) -> list[Sample]:
    rb = make_arrow(n)
    keys, values = rb.column("key").to_pylist(), rb.column("value").to_pylist()
    records = list(zip(rb.column("timestamp").to_pylist(), keys, values, strict=True))
    small = make_arrow(1000, seed=1)
    samples = []
    for codec, name in CODECS:
        warm = encode_arrow(small, compression=codec, now_ms=T0)  # compile / load caches
        decode_to_arrow(warm.with_base_offset(0), topic="bench", partition=0)
        client_decode(AioBatch, client_encode(AioBuilder, records[:1000], codec))
        data = encode_arrow(rb, compression=codec, max_batch_bytes=BATCH,
                            now_ms=T0).with_base_offset(0)
        theirs = client_encode(AioBuilder, records, codec)
        size = sum(len(b) for b in theirs)
        ours = {op: Sample("txnlog Arrow", op, name, n, len(data)) for op in ("encode", "decode")}
        aio = {op: Sample("aiokafka C", op, name, n, size) for op in ("encode", "decode")}
        scan = Sample("txnlog scan_batches", "scan+crc", name, n, len(data))

        def ours_encode(c: int = codec) -> None:
            enc = encode_arrow(rb, compression=c, max_batch_bytes=BATCH, now_ms=T0)
            assert enc.record_count == n

        def ours_decode(d: bytes = data) -> None:
            res = decode_to_arrow(d, topic="bench", partition=0)
            assert res.batch.num_rows == n

        def aio_encode(c: int = codec, nb: int = len(theirs)) -> None:
            assert len(client_encode(AioBuilder, records, c)) == nb

        def aio_decode(bs: list[bytes] = theirs) -> None:
            assert client_decode(AioBatch, bs) == n

        steps = [(ours["encode"], ours_encode), (aio["encode"], aio_encode),
                 (ours["decode"], ours_decode), (aio["decode"], aio_decode),
                 (scan, lambda d=data: scan_batches(d))]
        for r in range(rounds):
            for sample, fn in (steps if r % 2 == 0 else steps[::-1]):
                wall, cpu, _ = timed(fn)
                sample.add(wall, cpu)
        res = decode_to_arrow(data, topic="bench", partition=0)
        assert res.batch.column("value").equals(rb.column("value"))
        assert res.batch.column("key").equals(rb.column("key"))

        sub = records[:kp_n]
        kp_enc = Sample("kafka-python", "encode", name, kp_n, 0)
        kp_dec = Sample("kafka-python", "decode", name, kp_n, 0)
        wall, cpu, kp_batches = timed(lambda s=sub, c=codec: client_encode(KpBuilder, s, c))
        kp_enc.add(wall, cpu)
        kp_enc.size = kp_dec.size = sum(len(b) for b in kp_batches)
        wall, cpu, got = timed(lambda bs=kp_batches: client_decode(KpBatch, bs))
        assert got == kp_n
        kp_dec.add(wall, cpu)
        samples += [ours["encode"], ours["decode"], scan, aio["encode"], aio["decode"],
                    kp_enc, kp_dec]
    return samples


def table(samples: list[Sample]) -> str:
    base = {(s.op, s.codec): s for s in samples if s.impl == "aiokafka C"}
    lines = [f"{'implementation':<20} {'op':<9} {'codec':<5} {'records':>9} {'runs':>4} "
             f"{'M rec/s':>8} {'MB/s':>6} {'ratio':>6} {'cpu M rec/s':>11} {'cpu ratio':>9} "
             f"{'bytes/rec':>9}"]
    for s in samples:
        mb = s.records * (KEY + VALUE) / 1e6
        wall, cpu = s.rate(cpu=False), s.rate(cpu=True)
        ref = base.get((s.op, s.codec))
        ratio = f"{wall / ref.rate(cpu=False):.2f}x" if ref else "-"
        cpu_ratio = f"{cpu / ref.rate(cpu=True):.2f}x" if ref else "-"
        lines.append(f"{s.impl:<20} {s.op:<9} {s.codec:<5} {s.records:>9} {len(s.wall):>4} "
                     f"{wall / 1e6:>8.2f} {mb * wall / s.records:>6.0f} {ratio:>6} "
                     f"{cpu / 1e6:>11.2f} {cpu_ratio:>9} {s.size / s.records:>9.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kafka-python-records", type=int, default=100_000)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs); medians of {args.rounds} interleaved rounds")
    samples = run(args.records, args.rounds, args.kafka_python_records)
    print(table(samples))
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
