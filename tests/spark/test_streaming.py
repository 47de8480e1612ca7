"""readStream/writeStream.format("txnlog") in the shared Spark session: source offsets,
admission control, AvailableNow, new topics, read_committed; sink exactly-once and replay."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.dirname(__file__))

from coordinator_proc import CoordinatorProc
from stream_helpers import (
    check_exactly_once,
    end_offsets,
    offsets_log,
    produce_keyed,
    read_values,
    wait_for,
)
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.datasource.read.lag_metrics import source_lag
from txnlog.datasource.read.stream_checkpoint import clear_abandoned_first_batch
from txnlog.datasource.read.stream_reader import rate_limit, take_tails
from txnlog.datasource.stream_offsets import decode


def _data_ends(root: str, topic: str) -> dict[tuple[str, int], int]:
    """Per partition, the offset after its last record a read_committed reader returns."""
    out = {tp: 0 for tp in end_offsets(root, topic)}
    for p, off, _, _ in read_values(root, topic):
        out[(topic, p)] = max(out[(topic, p)], off + 1)
    return out


def _admitted(ends: dict, data: dict, budget: int) -> list[dict]:
    """The batch ends of ``maxOffsetsPerTrigger`` = ``budget`` from offset 0, as
    docs/streaming.md states the rule: Spark's Kafka proration of the budget over the
    backlog up to where each partition's records end, and a partition that gets there takes
    the markers after its last record with it."""
    want, cur = [], {tp: 0 for tp in ends}
    while cur != ends:
        if sum(ends[tp] - cur[tp] for tp in ends) <= budget:
            cur = dict(ends)
        else:
            upto = {tp: max(cur[tp], data[tp]) for tp in ends}
            cur = take_tails(rate_limit(cur, upto, budget), upto, ends)
        want.append(dict(cur))
    return want


def test_max_offsets_per_trigger_and_available_now(spark, file_root: str, coord, tmp_path
                                                   ) -> None:
    client = coord.client()
    client.create_topic("in", 3)
    produce_keyed(file_root, coord.endpoint, "in", keys=7, per_key=9, txns=3)
    ends = end_offsets(file_root, "in")
    ckpt = tmp_path / "ckpt"
    df = (spark.readStream.format("txnlog").option("subscribe", "in")
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "17")
          .option("coordinator", coord.endpoint).load(file_root))
    got: list[bytes] = []

    def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        got.extend(bytes(r.value) for r in batch.select("value").collect())

    q = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    # The batch boundaries are exactly Spark's Kafka proration of 17 offsets per batch, up
    # to where each partition's records end (markers after them join the batch).
    want = _admitted(ends, _data_ends(file_root, "in"), 17)
    assert [decode(o) for o in offsets_log(ckpt)] == want
    assert len(want) > 3
    assert len(got) == 63 and len(set(got)) == 63
    got.clear()

    # More input: the same checkpoint continues exactly where it stopped.
    produce_keyed(file_root, coord.endpoint, "in", keys=7, per_key=1, txns=1,
                  start={f"k{i}": 9 for i in range(7)})
    q = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert decode(offsets_log(ckpt)[-1]) == end_offsets(file_root, "in")
    assert sorted(got) == sorted(f"k{i}:9".encode() for i in range(7))


def test_available_now_spends_no_micro_batch_on_markers(spark, file_root: str, coord,
                                                        tmp_path) -> None:
    """80 records in one transaction over 4 partitions, 20 per trigger: 84 offsets (each
    partition's COMMIT marker takes one), and exactly 4 micro-batches of 20 records, where
    counting every offset ran a fifth with the markers the budget left behind and nothing
    else - a whole trigger and a sink transaction. Exactly once, and the checkpoint's
    offsets, the group's and the lag end at each partition's LSO."""
    client: CoordinatorClient = coord.client()
    client.create_topic("in", 4)
    expected = produce_keyed(file_root, coord.endpoint, "in", keys=8, per_key=10, txns=1)
    ends = end_offsets(file_root, "in")
    assert sum(ends.values()) == 80 + sum(1 for off in ends.values() if off)
    data = _data_ends(file_root, "in")
    assert rate_limit(rate_limit(rate_limit(rate_limit(
        {tp: 0 for tp in ends}, ends, 20), ends, 20), ends, 20), ends, 20) != ends
    ckpt = tmp_path / "ckpt"
    q = (spark.readStream.format("txnlog").option("subscribe", "in")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
         .option("groupId", "g-tail").option("coordinator", coord.endpoint).load(file_root)
         .selectExpr("key", "concat(CAST('out:' AS BINARY), value) AS value")
         .writeStream.format("txnlog").option("topic", "out")
         .option("coordinator", coord.endpoint).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start(file_root))
    q.awaitTermination()
    batches = [p for p in q.recentProgress if "addBatch" in p["durationMs"]]
    assert [p["numInputRows"] for p in batches] == [20, 20, 20, 20]
    assert [decode(o) for o in offsets_log(ckpt)] == _admitted(ends, data, 20)
    assert len(offsets_log(ckpt)) == 4
    assert decode(offsets_log(ckpt)[-1]) == ends
    assert sorted(n for n in os.listdir(ckpt / "commits") if n.isdigit()) == \
        ["0", "1", "2", "3"]
    assert check_exactly_once(file_root, "out", expected) == 80
    assert client.committed_offsets("g-tail") == ends
    [lag] = source_lag(batches[-1])
    assert lag["metrics"] == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "0",
                              "avgOffsetsBehindLatest": "0.0"}
    [first] = source_lag(batches[0])
    behind = {tp: ends[tp] - off for tp, off in decode(offsets_log(ckpt)[0]).items()}
    assert first["metrics"]["maxOffsetsBehindLatest"] == str(max(behind.values()))


def test_latest_new_topics_and_read_committed(spark, file_root: str, coord) -> None:
    client = coord.client()
    client.create_topic("pa", 2)
    produce_keyed(file_root, coord.endpoint, "pa", keys=4, per_key=3, txns=2)
    q = (spark.readStream.format("txnlog").option("subscribePattern", "p.*")
         .option("coordinator", coord.endpoint).load(file_root)
         .writeStream.format("memory").queryName("latest")
         .trigger(processingTime="300 milliseconds").start())
    try:
        wait_for(lambda: q.lastProgress is not None, "the first trigger")
        rows = lambda: spark.sql("select topic, value from latest").collect()  # noqa: E731
        assert rows() == []  # startingOffsets defaults to latest for streams
        # New records, with aborted transactions between them, and a new topic with old data.
        produce_keyed(file_root, coord.endpoint, "pa", keys=4, per_key=2, txns=2,
                      start={f"k{i}": 3 for i in range(4)}, aborted_every=1, tid="g1")
        client.create_topic("pb", 3)
        produce_keyed(file_root, coord.endpoint, "pb", keys=5, per_key=2, txns=1,
                      aborted_every=1, tid="g2")
        wait_for(lambda: len(rows()) >= 18, "the new records")
        time.sleep(1.5)  # a few more triggers: nothing else may show up
        got = sorted((r.topic, bytes(r.value)) for r in rows())
    finally:
        q.stop()
    want = sorted([("pa", f"k{i}:{s}".encode()) for i in range(4) for s in (3, 4)]
                  + [("pb", f"k{i}:{s}".encode()) for i in range(5) for s in (0, 1)])
    assert got == want  # no ABORTED record, no record from before the start
    # read_uncommitted does see the aborted records.
    unc = (spark.read.format("txnlog").option("subscribe", "pa")
           .option("isolation.level", "read_uncommitted").load(file_root)
           .where("CAST(value AS STRING) = 'ABORTED'").count())
    assert unc == 9  # aborted transactions of 5 and 4 records


def _pipeline(spark, root: str, endpoint: str, ckpt: Path, group: str) -> None:  # type: ignore[no-untyped-def]
    q = (spark.readStream.format("txnlog").option("subscribe", "in")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25")
         .option("groupId", group).option("coordinator", endpoint).load(root)
         .selectExpr("key", "concat(CAST('out:' AS BINARY), value) AS value")
         .writeStream.format("txnlog").option("topic", "out").option("coordinator", endpoint)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(root))
    q.awaitTermination()


def test_sink_exactly_once_group_offsets_and_replay(spark, file_root: str, coord, tmp_path
                                                   ) -> None:
    client: CoordinatorClient = coord.client()
    client.create_topic("in", 3)
    expected = produce_keyed(file_root, coord.endpoint, "in", keys=6, per_key=10, txns=4,
                             aborted_every=2)
    ckpt = tmp_path / "ckpt"
    _pipeline(spark, file_root, coord.endpoint, ckpt, "g-sink")
    assert check_exactly_once(file_root, "out", expected) == 60
    # The group's offsets were committed inside the sink's transactions: already at the end.
    assert client.committed_offsets("g-sink") == end_offsets(file_root, "in")
    query_id = json.loads((ckpt / "metadata").read_text())["id"]
    batches = len([n for n in os.listdir(ckpt / "commits") if n.isdigit()])
    state = client.describe_txn(f"txnlog-sink-{query_id}")
    assert state["last_committed_batch"] == batches - 1

    # Spark dies after the sink committed the last batch but before commits/<id>: a restart
    # replays the batch; the sink must write nothing and report success.
    last = batches - 1
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    leo = client.describe_topic("out")["offsets"][0]["leo"]
    _pipeline(spark, file_root, coord.endpoint, ckpt, "g-sink")
    assert (ckpt / "commits" / str(last)).exists()
    assert client.describe_topic("out")["offsets"][0]["leo"] == leo  # not even aborted data
    assert check_exactly_once(file_root, "out", expected) == 60
    assert len(read_values(file_root, "out", "read_uncommitted")) == 60


def test_restart_after_a_kill_inside_the_first_offset_log_write(spark, file_root: str, coord,
                                                                tmp_path) -> None:
    """A driver killed between Spark's creating ``offsets/.0.<uuid>.tmp`` and renaming it to
    ``offsets/0`` leaves this checkpoint (as seen after real kills). Spark >= 4.1 refuses to
    start on it whatever the source and sink; once ``clear_abandoned_first_batch`` removed
    the file the query runs, under the checkpoint's query id (the sink's transactional id)."""
    client: CoordinatorClient = coord.client()
    client.create_topic("in", 3)
    expected = produce_keyed(file_root, coord.endpoint, "in", keys=4, per_key=5, txns=2)
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    query_id = str(uuid.uuid4())
    (ckpt / "metadata").write_text(json.dumps({"id": query_id}))
    u = uuid.uuid4()
    for name in (f".0.{u}.tmp", f"..0.{u}.tmp.crc"):
        (ckpt / "offsets" / name).write_bytes(b"")
        os.utime(ckpt / "offsets" / name, (time.time() - 60,) * 2)  # the kill was a while ago
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        _pipeline(spark, file_root, coord.endpoint, ckpt, "g-first")  # Spark's behaviour

    assert len(clear_abandoned_first_batch(str(ckpt))) == 2
    _pipeline(spark, file_root, coord.endpoint, ckpt, "g-first")
    assert check_exactly_once(file_root, "out", expected) == 20
    assert client.committed_offsets("g-first") == end_offsets(file_root, "in")
    assert json.loads((ckpt / "metadata").read_text())["id"] == query_id
    batches = len([n for n in os.listdir(ckpt / "commits") if n.isdigit()])
    assert client.describe_txn(f"txnlog-sink-{query_id}")["last_committed_batch"] == batches - 1


def _byte_batches(root: str, topic: str, end: int, data_end: int, budget: int) -> list[int]:
    """The batch ends ``maxBytesPerTrigger`` gives on one partition from offset 0, as
    docs/streaming.md states the rule: the backlog's bytes up to the partition's last
    record (``data_end``) are estimated from the sizes of the segment objects it spans
    (bytes per offset over those objects), and a batch that gets to that record takes the
    markers after it too."""
    from txnlog.log_format.reader import PartitionReader
    from txnlog.log_format.storage import Storage

    segs = [(s.base_offset, s.end_offset, s.size)
            for s in PartitionReader(Storage.for_url(root), topic, 0).segments()]
    begin, out = 0, []
    while begin < end:
        upto = max(begin, data_end)
        spanned = [(b, upto if e is None else e, size) for b, e, size in segs
                   if (upto if e is None else e) > begin and b < upto and size]
        per_offset = (sum(s for _, _, s in spanned)
                      / sum(max(1, e - b) for b, e, _ in spanned)) if spanned else 1.0
        if (upto - begin) * per_offset <= budget:
            begin = end
        else:
            begin = min(upto, begin + max(1, int(budget // per_offset)))
            if begin >= upto:
                begin = end
        out.append(begin)
    return out


def test_s3_root_max_bytes_per_trigger(spark, s3_root: str, tmp_path) -> None:
    """The pipeline on the S3 server root (source and sink; the checkpoint is local):
    maxBytesPerTrigger gives the batch boundaries of its rule, the output is exactly once and
    the group's offsets commit with it."""
    coord = CoordinatorProc(s3_root)
    try:
        coord.wait_healthy()
        client: CoordinatorClient = coord.client()
        client.create_topic("in", 1)
        expected = produce_keyed(s3_root, coord.endpoint, "in", keys=4, per_key=10, txns=4,
                                 aborted_every=2)
        ends = end_offsets(s3_root, "in")
        budget = 300  # a data object of this input is ~200 bytes, a marker object ~80
        want = _byte_batches(s3_root, "in", ends[("in", 0)],
                             _data_ends(s3_root, "in")[("in", 0)], budget)
        ckpt = tmp_path / "ckpt"
        q = (spark.readStream.format("txnlog").option("subscribe", "in")
             .option("startingOffsets", "earliest").option("maxBytesPerTrigger", str(budget))
             .option("groupId", "g-s3").option("coordinator", coord.endpoint).load(s3_root)
             .selectExpr("key", "concat(CAST('out:' AS BINARY), value) AS value")
             .writeStream.format("txnlog").option("topic", "out")
             .option("coordinator", coord.endpoint).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(s3_root))
        q.awaitTermination()
        assert [decode(o)[("in", 0)] for o in offsets_log(ckpt)] == want
        assert len(want) > 3
        assert check_exactly_once(s3_root, "out", expected) == 40
        assert client.committed_offsets("g-s3") == ends
    finally:
        coord.stop()
