"""Retention (retention.ms, retention.bytes) and DeleteRecords against real coordinator
processes (coordinator/log_retention.py): whole closed segments go, the log start offset
moves and is what readers call ``earliest``, a read below it is OffsetOutOfRange, the bytes
under the root really drop after file.delete.delay.ms, and a restart finishes a planned
change with the same manifest."""

from __future__ import annotations

import contextlib
import time

import pytest
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.coordinator.errors import (
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from txnlog.log_format import layout
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.errors import OffsetOutOfRangeError as ReadOutOfRange
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

from tests.coordinator_proc import CoordinatorProc

FAST = ["--merge-min-objects", "4", "--merge-fanout", "3", "--merge-interval-s", "0.1",
        "--retention-check-interval-ms", "200"]


def coordinator(root: str, *extra: str, faults: str | None = None) -> CoordinatorProc:
    """A coordinator process with this file's flags (``with``: healthy, then stopped)."""
    return CoordinatorProc(root, extra=[*FAST, *extra], faults=faults)


def write(root: str, endpoint: str, topic: str, n: int, *, start: int = 0,
          timestamp_ms: int | None = None, size: int = 100) -> None:
    producer = TransactionalProducer(root, f"w-{topic}", coordinator=endpoint)
    producer.init_transactions()
    for i in range(start, start + n):
        producer.begin_transaction()
        producer.send(topic, f"v{i:06d}".encode().ljust(size, b"."), partition=0,
                      timestamp=timestamp_ms)
        producer.commit_transaction()
    producer.close()


def tree_bytes(storage: Storage, topic: str) -> tuple[int, int]:
    """(objects, bytes) under the partition's directory, every level."""
    base = layout.partition_dir(topic, 0)
    n = size = 0
    stack = [base]
    while stack:
        d = stack.pop()
        for o in storage.list(d):
            n += 1
            size += o.size
        stack.extend(f"{d}/{sub}" for sub in storage.list_dirs(d))
    return n, size


def wait_for(what: str, check, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not reached in {timeout}s (last {last!r})")


def values(storage: Storage, topic: str, start: int | None = None) -> list[str]:
    reader = PartitionReader(storage, topic, 0)
    table = reader.read_table(start)
    return [v.decode().rstrip(".") for v in table.column("value").to_pylist()]


def recreate(client: CoordinatorClient, topic: str) -> None:
    """Create ``topic`` (1 partition) again once its deletion is finished: until then
    CreateTopics is refused as marked for deletion, and nothing else."""
    def created() -> bool:
        try:
            client.create_topic(topic, 1)
            return True
        except Exception as exc:  # marked for deletion until its objects are gone
            assert "marked for deletion" in str(exc), exc
            return False
    wait_for("re-created", created)


def test_choose_drop_follows_kafkas_three_predicates() -> None:
    """Kafka's deleteRetentionMsBreachedSegments / deleteRetentionSizeBreachedSegments /
    deleteLogStartOffsetBreachedSegments on closed segments (level 0), oldest first, each a
    prefix; runs of the open segment never go."""
    from txnlog.coordinator.maintenance.log_retention import choose_drop
    from txnlog.coordinator.state.merge_state import PartitionMerges
    from txnlog.coordinator.topic_config import effective_config
    from txnlog.log_format.manifest import MergedObject

    now = 10_000_000
    objs = [MergedObject(0, 0, 10, 1000, False, now - 5000),
            MergedObject(0, 10, 20, 1000, False, now - 3000),
            MergedObject(0, 20, 30, 1000, False, now - 500),
            MergedObject(1, 30, 35, 400, False, now - 6000)]  # a run: never deleted
    pm = PartitionMerges(seq=4, objects=objs)

    def drop(cfg: dict[str, str], wanted: int = 0, small: int = 0) -> tuple[int, int, str]:
        return choose_drop(pm, effective_config(cfg), wanted, now, small)

    assert drop({}) == (0, 0, "delete_records")  # 7 days: nothing
    assert drop({"retention.ms": "4000"})[:2] == (1, 10)
    assert drop({"retention.ms": "2999"})[:2] == (2, 20)
    assert drop({"retention.ms": "3000"})[:2] == (1, 10)  # "more than": strictly older
    assert drop({"retention.ms": "0"})[:2] == (3, 30)  # never the run
    assert drop({"retention.ms": "-1"})[:2] == (0, 0)
    # size 3400 + 600 not merged = 4000: over 2500 by 1500: one segment (1000) fits the
    # overshoot, a second (2000) does not
    assert drop({"retention.bytes": "2500"}, small=600)[:2] == (1, 10)
    assert drop({"retention.bytes": "2000"}, small=600)[:2] == (2, 20)
    assert drop({"retention.bytes": "0"}, small=600)[:2] == (3, 30)
    # cleanup.policy=compact: no time or size retention, but the log start still applies
    assert drop({"retention.ms": "0", "cleanup.policy": "compact"})[:2] == (0, 0)
    assert drop({"cleanup.policy": "compact"}, wanted=25)[:2] == (2, 25)
    assert drop({"cleanup.policy": "compact,delete", "retention.ms": "0"})[:2] == (3, 30)
    # DeleteRecords inside a segment: the log start moves, the segment stays
    assert drop({}, wanted=15) == (1, 15, "log_start")
    pm.log_start = 17
    assert drop({}, wanted=15)[:2] == (1, 17)  # never backwards


def test_retention_ms_deletes_old_segments_and_moves_log_start(every_root: str) -> None:
    storage = Storage.for_url(every_root)
    with coordinator(every_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("t", 1, {"segment.bytes": "2000", "retention.ms": "3000",
                                     "file.delete.delay.ms": "2000"})
        write(every_root, proc.endpoint, "t", 60)
        man = wait_for("retention applied", lambda: (m := read_latest_manifest(storage, "t", 0))
                       and m.log_start_offset > 0 and m)
        # whole segments only: the log start is the first kept object's base
        assert man.log_start_offset == man.start_offset
        client.alter_configs("t", {"retention.ms": "-1"})  # no more: exact checks below
        time.sleep(1)
        reader = PartitionReader(storage, "t", 0)
        start = reader.earliest_offset()
        man = read_latest_manifest(storage, "t", 0)
        assert start == man.log_start_offset == man.start_offset > 0
        # what is left: the newest records, contiguous up to the end
        got = values(storage, "t")
        assert got == [f"v{i:06d}" for i in range(60 - len(got), 60)]
        with pytest.raises(ReadOutOfRange) as exc:
            list(reader.read(0))
        assert exc.value.log_start == start and "[0, " in str(exc.value)
        # the deleted segments' objects are gone after the grace period
        assert wait_for("first segment deleted", lambda: not storage.exists(
            layout.merged_dir("t", 0, 0) + f"/{layout.segment_name(0)}"))


def test_retention_bytes_keeps_the_partition_under_the_limit(any_root: str) -> None:
    """Kafka's rule (``deleteRetentionSizeBreachedSegments``): the oldest segment goes while
    the partition is bigger than ``retention.bytes`` by at least its size, so what stays
    holds less than ``retention.bytes`` once its oldest segment is left out; and the
    segments dropped are deleted from storage after file.delete.delay.ms, nothing else."""
    retention_bytes = 6000
    storage = Storage.for_url(any_root)
    with coordinator(any_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("b", 1, {"segment.bytes": "3000",
                                     "retention.bytes": str(retention_bytes),
                                     "file.delete.delay.ms": "2000"})
        write(any_root, proc.endpoint, "b", 150, size=200)
        hw = PartitionReader(storage, "b", 0).high_watermark()

        def settled():  # type: ignore[no-untyped-def]
            m = read_latest_manifest(storage, "b", 0)
            if m is None or m.log_start_offset == 0:
                return None
            closed = [o.size for o in m.objects if o.level == 0]
            return m if closed and sum(closed) - closed[0] < retention_bytes else None
        man = wait_for("retention.bytes applied", settled)
        # what is left: the newest records, contiguous up to the end
        got = values(storage, "b")
        assert got == [f"v{i:06d}" for i in range(150 - len(got), 150)]
        # a reader's log start is the newest manifest's: compared with a manifest that did
        # not change around the read (merging may still close a segment of the runs, and
        # retention drop the oldest one, after ``settled`` first held)
        def read_between_equal_manifests():  # type: ignore[no-untyped-def]
            before = read_latest_manifest(storage, "b", 0)
            earliest = PartitionReader(storage, "b", 0).earliest_offset()
            return (before, earliest) if read_latest_manifest(storage, "b", 0) == before \
                else None
        now, earliest = wait_for("a manifest unchanged around a read",
                                 read_between_equal_manifests)
        assert earliest == now.log_start_offset >= man.log_start_offset
        # bytes under the root really drop: the closed segments left on storage are the
        # ones the manifest names, every dropped one deleted (the open segment's runs and
        # small objects are never deleted by retention, as Kafka keeps its active segment)
        def deleted():  # type: ignore[no-untyped-def]
            m = read_latest_manifest(storage, "b", 0)
            kept = sorted(p.rsplit("/", 1)[1] for o in m.objects if o.level == 0
                          for p in o.paths("b", 0))
            names = sorted(o.name for o in storage.list(layout.merged_dir("b", 0, 0)))
            return (m, names) if names == kept and m == read_latest_manifest(
                storage, "b", 0) else None
        man, on_storage = wait_for("dropped segments deleted", deleted)
        closed = [o.size for o in man.objects if o.level == 0]
        assert hw > 0 and on_storage and sum(closed) - closed[0] < retention_bytes, man


def test_delete_records_moves_log_start_inside_a_segment(every_root: str) -> None:
    storage = Storage.for_url(every_root)
    with coordinator(every_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("d", 1, {"segment.bytes": "2000", "file.delete.delay.ms": "2000"})
        write(every_root, proc.endpoint, "d", 60)
        hw = PartitionReader(storage, "d", 0).high_watermark()
        with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
            client.delete_records({("d", 0): hw + 1})
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_records({("d", 3): 1})
        # offset 21: inside a segment (records at even offsets, markers at odd ones)
        low = client.delete_records({("d", 0): 21})
        assert low == {("d", 0): 21}
        reader = PartitionReader(storage, "d", 0)
        assert reader.earliest_offset() == 21
        assert values(storage, "d") == [f"v{i:06d}" for i in range(11, 60)]
        with pytest.raises(ReadOutOfRange):
            list(reader.read(20))
        # a lower offset changes nothing (Kafka: the low watermark never moves back)
        assert client.delete_records({("d", 0): 5}) == {("d", 0): 21}
        # a consumer positioned below the log start resets to it (auto_offset_reset)
        consumer = Consumer(every_root, assignment={("d", 0): 0})
        got = [r.value.decode().rstrip(".") for r in consumer.poll(timeout_s=5).get(
            ("d", 0), [])]
        got += [r.value.decode().rstrip(".") for r in consumer.poll(timeout_s=5).get(
            ("d", 0), [])]
        assert got[:1] == ["v000011"]
        strict = Consumer(every_root, assignment={("d", 0): 0}, auto_offset_reset="none")
        with pytest.raises(ReadOutOfRange):
            strict.poll(timeout_s=1)
        # -1: everything up to the high watermark; closed segments below it go
        low = client.delete_records({("d", 0): -1})
        assert low == {("d", 0): hw}
        assert values(storage, "d") == []
        assert PartitionReader(storage, "d", 0).earliest_offset() == hw
        write(every_root, proc.endpoint, "d", 3, start=60)
        assert values(storage, "d") == ["v000060", "v000061", "v000062"]
    # a restarted coordinator keeps the log start offset
    with coordinator(every_root):
        assert PartitionReader(storage, "d", 0).earliest_offset() == hw


def test_alter_configs_validated_and_applied(file_root: str) -> None:
    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("c", 1, {"segment.bytes": "2000"})
        bad = [({"retention.msec": "1"}, "unknown topic config"),
               ({"retention.ms": "forever"}, "must be an integer"),
               ({"retention.ms": "-2"}, "must be in"),
               ({"cleanup.policy": "forever"}, "must be a list of"),
               ({"retention.ms": {"nested": 1}}, "retention.ms"),
               ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "conflict")]
        for cfg, why in bad:
            with pytest.raises(Exception, match=why) as exc:
                client.alter_configs("c", cfg)
            assert type(exc.value).__name__ in ("InvalidConfigError", "InvalidRequestError")
        with pytest.raises(InvalidConfigError):
            client.alter_configs("c", delete=["no.such.config"])
        with pytest.raises(UnknownTopicOrPartitionError):
            client.alter_configs("nope", {"retention.ms": "1"})
        # DeleteRecords on a compacted topic is Kafka's PolicyViolation
        from txnlog.coordinator.errors import PolicyViolationError
        client.create_topic("cmp", 1, {"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolationError, match=r"cleanup\.policy"):
            client.delete_records({("cmp", 0): 0})
        assert client.describe_topic("c")["config"] == {"segment.bytes": "2000"}
        # validate_only changes nothing
        client.alter_configs("c", {"retention.ms": "1000"}, validate_only=True)
        assert client.describe_topic("c")["config"] == {"segment.bytes": "2000"}
        # retention applies once altered: old records go
        write(file_root, proc.endpoint, "c", 40)
        wait_for("segments closed", lambda: (m := read_latest_manifest(storage, "c", 0))
                 and any(o.level == 0 for o in m.objects))
        time.sleep(1.5)
        assert PartitionReader(storage, "c", 0).earliest_offset() == 0
        out = client.alter_configs("c", {"retention.ms": "1000"}, delete=["segment.bytes"])
        assert out["config"] == {"retention.ms": "1000"}
        assert client.describe_topic("c")["config"] == {"retention.ms": "1000"}
        from txnlog.log_format.topics import read_topic
        assert dict(read_topic(storage, "c").config) == {"retention.ms": "1000"}
        wait_for("retention after alter", lambda: PartitionReader(
            storage, "c", 0).earliest_offset() > 0)
        client.alter_configs("c", {"segment.bytes": "2000"})
    with coordinator(file_root) as proc:  # the altered config is in the log
        assert CoordinatorClient(proc.endpoint).describe_topic("c")["config"] == {
            "retention.ms": "1000", "segment.bytes": "2000"}


def test_delete_topic_and_recreate_never_shows_the_predecessor(every_root: str) -> None:
    storage = Storage.for_url(every_root)
    with coordinator(every_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("x", 2, {"segment.bytes": "2000"})
        write(every_root, proc.endpoint, "x", 30)
        wait_for("merged", lambda: read_latest_manifest(storage, "x", 0))
        old_end = PartitionReader(storage, "x", 0).high_watermark()
        # a reader that listed the old objects a moment before the delete
        stale = PartitionReader(storage, "x", 0)
        assert stale.segments()
        client.delete_topic("x")
        from txnlog.log_format.topics import UnknownTopicError, list_topics, read_topic
        assert "x" not in list_topics(storage) and "x" not in client.list_topics()
        with pytest.raises(UnknownTopicError):
            read_topic(storage, "x")
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topic("x")
        recreate(client, "x")
        # every object of the predecessor is gone (a fresh manifest names the new start)
        n, _ = tree_bytes(storage, "x")
        assert n == 1 and tree_bytes_of(storage, "x", 1) == 0
        write(every_root, proc.endpoint, "x", 3, start=1000)
        # the new topic continues after the predecessor's offsets: its log start is there
        fresh = PartitionReader(storage, "x", 0)
        assert fresh.earliest_offset() == old_end
        assert values(storage, "x") == ["v001000", "v001001", "v001002"]
        # the stale reader never shows a predecessor's record: its old objects are gone,
        # its next listing finds the new manifest, and its old offsets are below the log
        # start (OffsetOutOfRange), or it reads from the log start
        stale.refresh()
        with pytest.raises(ReadOutOfRange):
            list(stale.read(0))
        got = [v.decode().rstrip(".") for c in stale.read(None)
               for v in c.batch.column("value").to_pylist()]
        assert got == ["v001000", "v001001", "v001002"]
        # a consumer of the topic sees only the new records
        assert [r.value.decode().rstrip(".") for r in Consumer(every_root, "x")] == got
    with coordinator(every_root) as proc:  # replayed: the same topic, offsets, log start
        assert values(storage, "x") == ["v001000", "v001001", "v001002"]
        assert CoordinatorClient(proc.endpoint).describe_topic("x")["partitions"] == 1


def tree_bytes_of(storage: Storage, topic: str, p: int) -> int:
    base = layout.partition_dir(topic, p)
    return len(storage.list(base)) + sum(len(storage.list(f"{base}/{d}"))
                                         for d in storage.list_dirs(base))


def test_create_partitions_grow_only_and_keyed_routing_follows(file_root: str) -> None:
    from txnlog.log_format.codec.partitioner import partition_for_key
    from txnlog.log_format.topics import read_topic

    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("k", 2)
        prod = TransactionalProducer(file_root, "keyed", coordinator=proc.endpoint)
        prod._partitions.max_age_s = 0.0  # Kafka's metadata.max.age.ms, shortened
        prod.init_transactions()
        keys = [f"key{i}".encode() for i in range(40)]

        def send_all(tag: str) -> dict[bytes, int]:
            prod.begin_transaction()
            futs = {k: prod.send("k", tag.encode(), key=k) for k in keys}
            prod.commit_transaction()
            return {k: f.result().partition for k, f in futs.items()}

        before = send_all("before")
        assert before == {k: partition_for_key(k, 2) for k in keys}
        from txnlog.coordinator.errors import InvalidPartitionsError
        with pytest.raises(InvalidPartitionsError, match="already has 2"):
            client.create_partitions("k", 2)
        with pytest.raises(InvalidPartitionsError, match="higher than the requested 1"):
            client.create_partitions("k", 1)
        with pytest.raises(UnknownTopicOrPartitionError):
            client.create_partitions("nope", 3)
        client.create_partitions("k", 5, validate_only=True)
        assert read_topic(storage, "k").partitions == 2
        client.create_partitions("k", 5)
        assert read_topic(storage, "k").partitions == 5
        assert client.describe_topic("k")["partitions"] == 5
        after = send_all("after")
        assert after == {k: partition_for_key(k, 5) for k in keys}
        assert set(after.values()) - {0, 1}  # some keys moved to the new partitions
        prod.close()
        # a consumer of the topic reads all five partitions
        got = sorted((r.partition, r.value) for r in Consumer(file_root, "k"))
        assert sorted(p for p, v in got if v == b"after") == sorted(after.values())
    with coordinator(file_root) as proc:
        assert CoordinatorClient(proc.endpoint).describe_topic("k")["partitions"] == 5


def test_cli_lifecycle_commands(file_root: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """kafka-delete-records / kafka-configs --alter / kafka-topics --alter and --delete
    through the txnlog CLI: output, exit codes, bad input refused with exit 1."""
    import json
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "txnlog.coordinator.cli", *args,
                               "--root", file_root], capture_output=True, text=True,
                              timeout=120)

    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        CoordinatorClient(proc.endpoint).create_topic("cli", 1)
        write(file_root, proc.endpoint, "cli", 5)
        spec = tmp_path / "d.json"
        spec.write_text(json.dumps({"partitions": [{"topic": "cli", "partition": 0,
                                                    "offset": 4}], "version": 1}))
        r = run("delete-records", "--offset-json-file", str(spec))
        assert r.returncode == 0, r.stderr
        assert "partition: cli-0\tlow_watermark: 4" in r.stdout
        assert PartitionReader(storage, "cli", 0).earliest_offset() == 4
        spec.write_text(json.dumps({"partitions": [{"topic": "cli", "partition": 0,
                                                    "offset": 999}]}))
        r = run("delete-records", "--offset-json-file", str(spec))
        assert r.returncode == 1 and "OffsetOutOfRange" in r.stderr, r.stderr
        r = run("configs", "alter", "--topic", "cli", "--add-config", "retention.ms=x")
        assert r.returncode == 1 and "InvalidConfig" in r.stderr and "Traceback" not in r.stderr
        r = run("configs", "alter", "--topic", "cli", "--add-config",
                "retention.ms=3600000,retention.bytes=1000000", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"retention.ms": "3600000", "retention.bytes": "1000000"}
        r = run("configs", "alter", "--topic", "cli", "--delete-config", "retention.bytes")
        assert r.returncode == 0 and "Completed updating config" in r.stdout, r.stderr
        r = run("topics", "alter", "--topic", "cli", "--partitions", "1")
        assert r.returncode == 1 and "InvalidPartitions" in r.stderr
        r = run("topics", "alter", "--topic", "cli", "--partitions", "3")
        assert r.returncode == 0 and "now has 3 partitions" in r.stdout, r.stderr
        r = run("topics", "describe", "--topic", "cli")
        assert "PartitionCount: 3" in r.stdout and "LogStartOffset: 4" in r.stdout, r.stdout
        r = run("topics", "delete", "--topic", "cli")
        assert r.returncode == 0 and "deleted" in r.stdout, r.stderr
        r = run("topics", "delete", "--topic", "cli")
        assert r.returncode == 1 and "UnknownTopicOrPartition" in r.stderr


def test_retention_state_survives_a_snapshot() -> None:
    """The records replay to the same state, and a snapshot holds what is pending."""
    import json

    from txnlog.coordinator.state.coordinator_state import CoordinatorState
    from txnlog.coordinator.state.txn_log_records import LogRecord

    st = CoordinatorState()
    st.apply(LogRecord("topic", {"id": "t", "name": "t", "partitions": 2, "config": {}}))
    for i in range(3):
        st.apply(LogRecord("merge", {
            "id": "t-0", "topic": "t", "p": 0, "seq": i + 1,
            "inputs": [[-1, 10 * i, 10 * i + 10, 100, 0, 0]],
            "output": [0, 10 * i, 10 * i + 10, 100, 0, 5], "open_since_ms": 0,
            "grace_ms": 2000, "ms": 1000}))
        st.apply(LogRecord("merged", {"id": "t-0", "seq": i + 1, "ms": 1000}))
    st.apply(LogRecord("log_start", {"id": "t-0", "topic": "t", "p": 0, "offset": 15}))
    st.apply(LogRecord("retain", {"id": "t-0", "topic": "t", "p": 0, "seq": 4, "drop": 1,
                                  "log_start": 15, "reason": "log_start", "grace_ms": 2000,
                                  "ms": 2000}))
    mid = CoordinatorState.from_snapshot(json.loads(json.dumps(st.to_snapshot())))
    assert mid.retain_planned == st.retain_planned and mid.log_start_wanted == {"t-0": 15}
    for s in (st, mid):
        s.apply(LogRecord("retained", {"id": "t-0", "seq": 4, "ms": 2500}))
        pm = s.merges["t-0"]
        assert (pm.seq, pm.start_offset, pm.log_start) == (4, 10, 15)
        assert [o.base_offset for o in pm.objects] == [10, 20]
        assert any(o.base_offset == 0 for g in pm.garbage for o in g.merged)
        s.apply(LogRecord("topic_config", {"id": "t", "name": "t",
                                           "config": {"retention.ms": "5"}}))
        assert s.topic_config("t")["retention.ms"] == "5"
        assert s.topic_config("t")["cleanup.policy"] == "delete"
        s.apply(LogRecord("topic_delete", {"id": "t", "name": "t", "partitions": 2}))
        assert "t" not in s.topics and s.topics_deleting == {"t": 2}
    again = CoordinatorState.from_snapshot(json.loads(json.dumps(st.to_snapshot())))
    assert again.topics_deleting == {"t": 2}
    assert again.merges["t-0"].to_json() == st.merges["t-0"].to_json()
    for s in (st, again):
        s.apply(LogRecord("topic_delete", {"id": "t", "name": "t", "partitions": 2,
                                           "done": True}))
        assert s.topics_deleting == {}
    assert st.to_snapshot() == again.to_snapshot()


@pytest.mark.parametrize("fault", ["after_retain_plan", "after_retain_manifest"])
def test_a_restart_mid_delete_records_finishes_it(file_root: str, fault: str) -> None:
    """A coordinator killed between the steps of a log start change (``retain`` logged;
    its manifest written or not; ``retained`` not logged): the next one finishes the same
    plan — the same manifest bytes (put-if-absent would refuse others), the same log
    start — and DeleteRecords asked again answers it."""
    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        CoordinatorClient(proc.endpoint).create_topic(
            "k", 1, {"segment.bytes": "2000", "file.delete.delay.ms": "2000"})
        write(file_root, proc.endpoint, "k", 60)
        wait_for("merged", lambda: read_latest_manifest(storage, "k", 0))
    # --no-merge from here: retention still runs and no new merge starts (one the first
    # coordinator planned is finished first: retention waits for it)
    dying = coordinator(file_root, "--no-merge", faults=f"{fault}:1")
    dying.wait_healthy()
    with pytest.raises(Exception):  # noqa: B017 - the coordinator dies under the call
        CoordinatorClient(dying.endpoint, retry_for=0).delete_records({("k", 0): 21})
    assert dying.wait(60) == -9, dying.log_tail()
    assert f"fault point {fault} reached" in dying.log_text()
    dying.stop()
    planned = read_latest_manifest(storage, "k", 0)  # written or not, per the fault point
    assert planned.log_start_offset == (21 if fault == "after_retain_manifest" else 0)
    with coordinator(file_root, "--no-merge") as again:
        man = wait_for("finished", lambda: (m := read_latest_manifest(storage, "k", 0))
                       and m.log_start_offset == 21 and m)
        if fault == "after_retain_manifest":
            assert man.to_json() == planned.to_json()  # the same bytes, not a second plan
        assert CoordinatorClient(again.endpoint).delete_records({("k", 0): 21}) == {("k", 0): 21}
        assert PartitionReader(storage, "k", 0).earliest_offset() == 21
        assert values(storage, "k") == [f"v{i:06d}" for i in range(11, 60)]
        assert "stopped:" not in again.log_text()


def test_a_restart_mid_delete_topic_finishes_it(file_root: str) -> None:
    """Killed after a deleted topic's objects are gone but before ``topic_delete`` done is
    logged: the next coordinator finishes the delete, and the name can be re-created with
    none of the predecessor's records."""
    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        CoordinatorClient(proc.endpoint).create_topic("z", 1, {"segment.bytes": "2000"})
        write(file_root, proc.endpoint, "z", 30)
        wait_for("merged", lambda: read_latest_manifest(storage, "z", 0))
    dying = coordinator(file_root, faults="after_topic_delete_data:1")
    dying.wait_healthy()
    with contextlib.suppress(Exception):  # it may die before or after answering
        CoordinatorClient(dying.endpoint, retry_for=0).delete_topic("z")
    assert dying.wait(60) == -9, dying.log_tail()
    dying.stop()
    with coordinator(file_root) as again:
        client = CoordinatorClient(again.endpoint)
        recreate(client, "z")
        write(file_root, again.endpoint, "z", 2, start=500)
        assert values(storage, "z") == ["v000500", "v000501"]
        assert "stopped:" not in again.log_text()
