"""What reading a partition costs when its open segment is many small runs.

Over many partitions each partition's runs are small (tens to hundreds of kB), and the
merger writes a run under 512 KiB without ``.index``/``.timeindex``
(``merge_policy.unindexed_run``). This bench measures what readers pay for that, at the
revision given and at the working tree with ``bench/ab.py``:

- a real coordinator merging (``--merge-min-objects 4``), a topic of ``--partitions``
  partitions written by txnlog's ``IdempotentProducer`` in flushes of ``--flush-records``
  records spread over every partition, so each partition's tail becomes small runs;
- once every partition's merged end is within one flush of its high watermark, per
  partition: the whole partition read (``read_table``), a read from the middle of every run
  (``read_table(start=...)``), a bounded raw read there as the gateway's Fetch does it
  (``read_raw``, 64 KiB), and ``offset_for_timestamp`` of a record in every run.

It prints, per kind of read, storage GETs per read and milliseconds per read (wall, best of
``--repeat`` passes), and the objects the merger wrote per partition:

    python bench/ab.py --rev 53a8f00 --rounds 2 --script-from-working-tree \
        --metric gets_per_read --metric ms_per_read -- small_runs_read.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from coordinator_proc import CoordinatorProc
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

MERGE = ["--merge-min-objects", "4", "--merge-fanout", "4", "--merge-interval-s", "0.2"]
TOPIC = "r"


class CountingStorage:
    """The root's storage with its GETs counted (every other call passed through)."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.gets = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return self._inner.get(*args, **kwargs)

    def get_view(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return self._inner.get_view(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def write(root: str, endpoint: str, partitions: int, records: int, flush: int,
          value_bytes: int) -> None:
    from txnlog.coordinator.client.producer import IdempotentProducer

    producer = IdempotentProducer(root, coordinator=endpoint)
    value = b"v" * value_bytes
    for i in range(records):
        producer.send(TOPIC, value, key=f"k{i}".encode(), partition=i % partitions)
        if (i + 1) % flush == 0:
            producer.flush()
    producer.flush()
    producer.close()


def wait_merged(storage: Storage, partitions: int, slack: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in range(partitions):
        hw = PartitionReader(storage, TOPIC, p).high_watermark()
        while True:
            man = read_latest_manifest(storage, TOPIC, p)
            if man is not None and man.end_offset >= hw - slack:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"partition {p} not merged within {timeout_s} s: {man}")
            time.sleep(0.2)


def measure(storage: Storage, partitions: int, repeat: int) -> list[dict[str, Any]]:
    kinds = ("whole", "from_mid_run", "raw_64k_mid_run", "by_timestamp")
    best: dict[str, float] = {k: float("inf") for k in kinds}
    gets: dict[str, int] = {k: 0 for k in kinds}
    reads: dict[str, int] = {k: 0 for k in kinds}
    runs_seen = unindexed = 0
    for rep in range(repeat):
        spent = {k: 0.0 for k in kinds}
        for p in range(partitions):
            man = read_latest_manifest(storage, TOPIC, p)
            runs = [o for o in man.objects if o.level > 0] if man is not None else []
            if rep == 0:
                runs_seen += len(runs)
                unindexed += sum(not getattr(o, "indexed", True) for o in runs)
            full = PartitionReader(storage, TOPIC, p).read_table()
            stamps = dict(zip(full.column("offset").to_pylist(),
                              full.column("timestamp").cast("int64").to_pylist(), strict=True))
            unit = 1000 if full.schema.field("timestamp").type.unit == "us" else 1
            jobs: list[tuple[str, Any]] = [("whole", lambda r: r.read_table())]
            for o in runs:
                mid = (o.base_offset + o.end_offset) // 2
                ts = stamps.get(mid)
                jobs.append(("from_mid_run", lambda r, m=mid: r.read_table(start=m)))
                jobs.append(("raw_64k_mid_run", lambda r, m=mid: r.read_raw(m, 64 << 10)))
                if ts is not None:
                    jobs.append(("by_timestamp",
                                 lambda r, t=ts // unit: r.offset_for_timestamp(t)))
            for kind, job in jobs:
                counting = CountingStorage(storage)
                reader = PartitionReader(counting, TOPIC, p)  # type: ignore[arg-type]
                reader.segments()  # the listing and manifest: not what is compared
                counting.gets = 0
                t0 = time.perf_counter()
                job(reader)
                spent[kind] += time.perf_counter() - t0
                if rep == 0:
                    gets[kind] += counting.gets
                    reads[kind] += 1
        for k in kinds:
            best[k] = min(best[k], spent[k])
    return [{"read": k, "reads": reads[k],
             "gets_per_read": round(gets[k] / reads[k], 3) if reads[k] else None,
             "ms_per_read": round(best[k] * 1000 / reads[k], 3) if reads[k] else None,
             "runs": runs_seen, "unindexed_runs": unindexed} for k in kinds]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--records", type=int, default=64_000)
    ap.add_argument("--flush-records", type=int, default=800)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON last")
    args = ap.parse_args()
    if min(args.partitions, args.records, args.flush_records, args.repeat) < 1:
        ap.error("--partitions, --records, --flush-records and --repeat must be >= 1")
    with tempfile.TemporaryDirectory(prefix="txnlog-small-runs-") as d:
        root = Path(d).as_uri()
        with CoordinatorProc(root, extra=MERGE) as coord:
            coord.wait_healthy()
            coord.client().create_topic(TOPIC, args.partitions)
            write(root, coord.endpoint, args.partitions, args.records, args.flush_records,
                  args.value_bytes)
            storage = Storage.for_url(root)
            # the merger leaves fewer than --merge-min-objects runs of the tail unmerged
            wait_merged(storage, args.partitions, 8 * args.flush_records // args.partitions
                        + 8, 300.0)
            rows = measure(storage, args.partitions, args.repeat)
    for r in rows:
        print(f"# {r['read']:16s} reads {r['reads']:5d}  GETs/read {r['gets_per_read']}  "
              f"ms/read {r['ms_per_read']}  (runs {r['runs']}, unindexed {r['unindexed_runs']})")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
