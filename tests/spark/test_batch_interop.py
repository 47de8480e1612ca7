"""Spark against the rest of the Kafka world, read options end to end, and clear errors.

- Records written by the Python ``TransactionalProducer`` and batches built by kafka-python
  (laid into the same partition as segment objects, with a COMMIT marker and a stable
  snapshot) read back through Spark exactly as written.
- The segment objects Spark writes parse in kafka-python: valid CRCs, transactional batches,
  COMMIT markers.
- Read options (offset JSON, timestamps, splitting, subscribePattern, assign) and filter
  pushdown give exactly the rows a plain read filtered in Python gives.
- Bad input fails with an error that names the culprit.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)
N = 300  # rows of topic "ev": partition i % 3, timestamp T0 + i s


def ms(ts: dt.datetime) -> int:
    """Spark hands back naive datetimes in the session time zone (UTC here)."""
    return round(ts.replace(tzinfo=dt.UTC).timestamp() * 1000)


def norm(rows) -> list[tuple]:
    """Comparable rows: (topic, partition, offset, key, value, timestamp ms, headers)."""
    out = []
    for r in rows:
        d = r.asDict()
        headers = d.get("headers")
        out.append((r.topic, r.partition, r.offset,
                    None if r.key is None else bytes(r.key),
                    None if r.value is None else bytes(r.value), ms(r.timestamp),
                    None if headers is None else tuple(
                        (h.key, None if h.value is None else bytes(h.value)) for h in headers)))
    return sorted(out)


def load(spark, root: str, **options: str):
    reader = spark.read.format("txnlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(root)


@pytest.fixture(scope="module")
def ev_root(spark, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Topics "ev" (3 partitions, uncompressed), "ev2" (1 partition, gzip) and "other",
    all written by Spark."""
    from pyspark.sql import functions as F

    root = (tmp_path_factory.mktemp("ev") / "root").as_uri()
    df = (spark.range(0, N, numPartitions=1)
          .select(F.format_string("k%04d", "id").alias("key"),
                  F.format_string("v%04d", "id").alias("value"),
                  (F.col("id") % 3).cast("int").alias("partition"),
                  F.timestamp_seconds(F.col("id") + T0_MS // 1000).alias("timestamp")))
    df.write.format("txnlog").option("topic", "ev").option("partitions", "3") \
        .mode("append").save(root)
    small = df.limit(40).drop("partition")
    small.write.format("txnlog").option("topic", "ev2").option("compression", "gzip") \
        .mode("append").save(root)
    small.write.format("txnlog").option("topic", "other").mode("append").save(root)
    return root


@pytest.fixture(scope="module")
def ev_rows(spark, ev_root: str) -> list[tuple]:
    rows = norm(load(spark, ev_root, subscribe="ev").collect())
    assert len(rows) == N
    return rows


# ------------------------------------------------------------------------ interop

def kp_batch(records: list[tuple], base_offset: int, *, producer_id: int, base_sequence: int,
             compression: int = 0) -> bytes:
    """A transactional batch built by kafka-python, then placed at ``base_offset``."""
    builder = DefaultRecordBatchBuilder(2, compression, 1, producer_id, 0, base_sequence,
                                        1 << 20)
    for i, (key, value, headers, ts) in enumerate(records):
        assert builder.append(i, ts, key, value, headers) is not None
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)  # baseOffset is outside the CRC
    return bytes(buf)


def kp_commit_marker(base_offset: int, *, producer_id: int, ts: int) -> bytes:
    """kafka-format.md section 11: build via kafka-python, patch offset, control bit, CRC."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, 0, -1, 1 << 20)
    builder.append(0, ts, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    buf[22] |= 0x20  # control bit, low byte of the int16 attributes
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_python_producer_and_kafka_python_batches_read_identically(spark,
                                                                  file_root: str) -> None:
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.coordinator.client.embedded import coordinator_for_root
    from txnlog.coordinator.client.producer import TransactionalProducer
    from txnlog.log_format import layout, stable
    from txnlog.log_format.stable import read_latest_stable
    from txnlog.log_format.storage import Storage

    CoordinatorClient(coordinator_for_root(file_root)).create_topic("mixed", 2)
    want = []
    with TransactionalProducer(file_root, "interop-producer", compression="zstd") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent = []
        for i in range(30):
            key, value = f"py{i}".encode(), f"python value {i}".encode() * (i % 3)
            headers = [("n", str(i).encode()), ("empty", None)] if i % 2 else []
            ts = T0_MS + 1000 * i
            sent.append(((key, value, headers, ts), producer.send(
                "mixed", value, key=key, headers=headers, partition=0, timestamp=ts)))
        producer.commit_transaction()
        for (key, value, headers, ts), fut in sent:
            want.append(("mixed", 0, fut.result().offset, key, value, ts,
                          tuple(headers) or None))
        producer.begin_transaction()  # an aborted transaction: never visible
        producer.send("mixed", b"aborted", key=b"x", partition=0)
        producer.flush()
        producer.abort_transaction()

    # kafka-python's batches and marker, laid after the coordinator's end of partition 0,
    # then a newer stable snapshot that covers them (the coordinator is not used again).
    storage = Storage.for_url(file_root)
    snap = read_latest_stable(storage)
    assert snap is not None
    base = snap.hw("mixed", 0)
    pid = 777_000
    first = [(f"kp{i}".encode(), f"kafka-python {i}".encode(), [("src", b"kp")], T0_MS + 50 + i)
             for i in range(20)]
    second = [(None, b"null key", [], T0_MS + 99), (b"kp-last", None, [("h", None)], T0_MS)]
    obj = (kp_batch(first, base, producer_id=pid, base_sequence=0, compression=1)  # gzip
           + kp_batch(second, base + 20, producer_id=pid, base_sequence=20)
           + kp_commit_marker(base + 22, producer_id=pid, ts=T0_MS + 100))
    assert storage.put_if_absent(layout.segment_path("mixed", 0, base), obj)
    for off, (key, value, headers, ts) in enumerate(first + second, start=base):
        want.append(("mixed", 0, off, key, value, ts, tuple(headers) or None))
    parts = dict(snap.partitions)
    parts["mixed-0"] = (base + 23, base + 23)
    # a head (on a base of its own) that keeps the runs the producer's shared objects hold
    epoch, seq = snap.coordinator_epoch, snap.seq + 1000
    ref = stable.write_base(storage, epoch, seq, stable.encode_base(
        epoch, seq, parts, tails={k: v for k, v in snap.tails.items() if v}))
    assert ref is not None
    assert stable.write_delta(storage, epoch, seq, stable.encode_delta(epoch, seq, ref, {}))

    got = norm(load(spark, file_root, subscribe="mixed", includeHeaders="true").collect())
    assert got == sorted(want)
    # read_uncommitted adds exactly the aborted record.
    everything = norm(load(spark, file_root, subscribe="mixed", includeHeaders="true",
                           **{"isolation.level": "read_uncommitted"}).collect())
    extra = [r for r in everything if r not in got]
    assert len(extra) == 1 and extra[0][3:5] == (b"x", b"aborted") and extra[0][2] < base


def _runs(root: Path, topic: str, p: int) -> list[tuple[str, bytes]]:
    """A partition's runs as Spark wrote them (its batches, byte for byte, inside the
    tasks' shared objects and the transactions' marker objects), by base offset."""
    from txnlog.log_format.segments.shared_object import read_footer

    out = []
    for obj in sorted((root / "_wal").glob("*.wal")):
        data = obj.read_bytes()
        out += [(e.base, f"{obj.name}#{topic}-{p}", data[e.position:e.position + e.size])
                for e in read_footer(data).entries if (e.topic, e.partition) == (topic, p)]
    return [(name, run) for _, name, run in sorted(out)]


def test_spark_written_segments_parse_in_kafka_python(ev_root: str, ev_rows: list) -> None:
    root = Path(urlparse(ev_root).path)
    for topic, partitions, rows in (("ev", 3, N), ("ev2", 1, 40)):
        data = commits = 0
        codecs = set()
        for p in range(partitions):
            for seg, run in _runs(root, topic, p):
                records = MemoryRecords(run)
                while (batch := records.next_batch()) is not None:
                    assert batch.validate_crc(), seg
                    assert batch.is_transactional and batch.producer_id >= 0, seg
                    if batch.is_control_batch:
                        kinds = [r.type for r in batch]
                        assert kinds == [1], f"{seg}: control records {kinds}, not COMMIT"
                        commits += 1
                    else:
                        codecs.add(batch.compression_type)
                        data += len(list(batch))
        assert data == rows and commits >= partitions, topic
        assert codecs == ({1} if topic == "ev2" else {0})
    # And the records kafka-python sees are the ones Spark reads.
    seen = []
    for _seg, run in _runs(root, "ev", 0):
        records = MemoryRecords(run)
        while (batch := records.next_batch()) is not None:
            if not batch.is_control_batch:
                seen += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    assert sorted(seen) == [(r[2], r[3], r[4], r[5]) for r in ev_rows if r[1] == 0]


# ------------------------------------------------------------------------ read options

def test_offsets_json(spark, ev_root: str, ev_rows: list) -> None:
    starting = {"ev": {"0": 10, "1": -2, "2": 95}}
    ending = {"ev": {"0": 20, "1": 5, "2": -1}}
    got = norm(load(spark, ev_root, subscribe="ev", startingOffsets=json.dumps(starting),
                    endingOffsets=json.dumps(ending)).collect())
    bounds = {0: (10, 20), 1: (0, 5), 2: (95, 100)}
    want = [r for r in ev_rows if bounds[r[1]][0] <= r[2] < bounds[r[1]][1]]
    assert got == want and len(want) == 10 + 5 + 5


def test_timestamps(spark, ev_root: str, ev_rows: list) -> None:
    start, end = T0_MS + 100_500, T0_MS + 200_000
    got = norm(load(spark, ev_root, subscribe="ev", startingTimestamp=str(start),
                    endingTimestamp=str(end)).collect())
    assert got == [r for r in ev_rows if start <= r[5] < end] and len(got) == 99
    per = {"ev": {"0": T0_MS + 270_000, "1": T0_MS, "2": T0_MS + 10_000_000}}
    got = norm(load(spark, ev_root, subscribe="ev", startingOffsetsByTimestampStrategy="latest",
                    startingOffsetsByTimestamp=json.dumps(per)).collect())
    assert got == [r for r in ev_rows if r[1] == 1 or (r[1] == 0 and r[5] >= T0_MS + 270_000)]
    with pytest.raises(Exception, match="no record in ev-2 has a timestamp"):
        load(spark, ev_root, subscribe="ev",
             startingOffsetsByTimestamp=json.dumps(per)).collect()


def test_split_across_tasks(spark, ev_root: str, ev_rows: list) -> None:
    # 100 records (and commit markers) per partition: by default one task reads all three
    # (minRecordsPerPartition, 50,000); minPartitions and maxRecordsPerPartition split.
    for opts, tasks in (({}, 1), ({"minRecordsPerPartition": "0"}, 3),
                        ({"minRecordsPerPartition": "150"}, 3),
                        ({"minRecordsPerPartition": "290"}, 2),
                        ({"maxRecordsPerPartition": "30"}, 12),
                        # packing never makes a task bigger than maxRecordsPerPartition
                        ({"maxRecordsPerPartition": "60", "minRecordsPerPartition": "999"}, 6),
                        ({"minPartitions": "7"}, 7),
                        ({"minPartitions": "5", "maxRecordsPerPartition": "60"}, 6)):
        df = load(spark, ev_root, subscribe="ev", **opts)
        assert df.rdd.getNumPartitions() == tasks, opts
        assert norm(df.collect()) == ev_rows, opts


def test_subscribe_pattern_assign_and_uncommitted(spark, ev_root: str, ev_rows: list) -> None:
    got = load(spark, ev_root, subscribePattern="ev.*").collect()
    assert {r.topic for r in got} == {"ev", "ev2"} and len(got) == N + 40
    got = norm(load(spark, ev_root, assign=json.dumps({"ev": [0, 2]})).collect())
    assert got == [r for r in ev_rows if r[1] in (0, 2)]
    got = norm(load(spark, ev_root, subscribe="ev",
                    **{"isolation.level": "read_uncommitted"}).collect())
    assert got == ev_rows  # nothing aborted here: the same rows


@pytest.fixture
def pushdown_enabled(spark) -> Iterator[None]:
    key = "spark.sql.python.filterPushdown.enabled"
    old = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, old)


def test_filter_pushdown_returns_the_same_rows(spark, ev_root: str, ev_rows: list,
                                               pushdown_enabled: None) -> None:
    t = (T0 + dt.timedelta(seconds=150)).strftime("%Y-%m-%d %H:%M:%S")
    filters = [
        "partition = 1",
        "offset >= 20 AND offset < 40",
        "partition = 2 AND offset > 90",
        f"timestamp >= TIMESTAMP'{t}'",
        f"timestamp > TIMESTAMP'{t}' AND partition IN (0, 2) AND offset <= 80",
        "offset <= 5 OR partition = 1",
        "partition = 7",
    ]
    for f in filters:
        plain = norm(load(spark, ev_root, subscribe="ev").where(f).collect())
        pushed_df = load(spark, ev_root, subscribe="ev", pushFilters="true").where(f)
        assert norm(pushed_df.collect()) == plain, f
    # The filters really were pushed: a partition filter plans one task instead of three
    # (one task per partition: minRecordsPerPartition=0).
    one_each = {"minRecordsPerPartition": "0"}
    assert load(spark, ev_root, subscribe="ev", **one_each).rdd.getNumPartitions() == 3
    pushed = (load(spark, ev_root, subscribe="ev", pushFilters="true", **one_each)
              .where("partition = 1"))
    assert pushed.rdd.getNumPartitions() == 1


# ------------------------------------------------------------------------ errors

def test_clear_errors(spark, ev_root: str, file_root: str) -> None:
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match=r"(?i)unknown option 'startingoffset'"):
        load(spark, ev_root, subscribe="ev", startingOffset="earliest").collect()
    with pytest.raises(Exception, match=r"(?i)unknown option 'compresion'"):
        df.write.format("txnlog").option("topic", "t").option("compresion", "gzip") \
            .mode("append").save(file_root)
    with pytest.raises(Exception, match=r"topic name 'no/slash' contains '/'"):
        df.write.format("txnlog").option("topic", "no/slash").mode("append").save(file_root)
    with pytest.raises(Exception, match=r"topic name 'a b' contains ' '"):
        load(spark, ev_root, subscribe="a b").collect()
    with pytest.raises(Exception, match=r"append-only log: mode\('overwrite'\)"):
        df.write.format("txnlog").option("topic", "t").mode("overwrite").save(file_root)
    with pytest.raises(Exception, match=r"needs a 'value' column"):
        df.select("key").write.format("txnlog").option("topic", "t").mode("append") \
            .save(file_root)
    with pytest.raises(Exception, match=r"'nope'.*topics under this root: ev, ev2, other"):
        load(spark, ev_root, subscribe="nope").collect()


def test_corrupt_segment_is_named(spark, file_root: str) -> None:
    spark.createDataFrame([(f"k{i}", f"value {i}") for i in range(50)],
                          "key string, value string").coalesce(1) \
        .write.format("txnlog").option("topic", "bad").mode("append").save(file_root)
    from txnlog.log_format.segments.shared_object import read_footer

    # the task's shared object: its run of bad-0's batches, corrupted in its middle
    seg, run = next((obj, e) for obj in sorted(Path(urlparse(file_root).path, "_wal")
                                               .glob("*.wal"))
                    for e in read_footer(obj.read_bytes()).entries
                    if (e.topic, e.partition) == ("bad", 0) and e.size > 200)
    data = bytearray(seg.read_bytes())
    data[run.position + run.size // 2] ^= 0xFF  # inside the run's records: a CRC mismatch
    seg.chmod(0o644)
    seg.write_bytes(bytes(data))
    with pytest.raises(Exception, match=rf"(?s)CRC.*{seg.parent.name}/{seg.name}"):
        load(spark, file_root, subscribe="bad").collect()


def test_empty_write_then_empty_read(spark, file_root: str) -> None:
    """An empty DataFrame commits nothing, and reading a topic with no records (PySpark then
    hands read() its placeholder InputPartition(None)) gives no rows, not an error."""
    spark.createDataFrame([], "key string, value string").write.format("txnlog") \
        .option("topic", "empty").mode("append").save(file_root)
    assert load(spark, file_root, subscribe="empty").collect() == []
