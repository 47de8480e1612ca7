"""Compacted topics end to end (coordinator/log_cleaner.py), against real coordinator
processes: keyed transactions (some aborted, some tombstones) into a topic with
``cleanup.policy=compact`` are merged into segments and compacted by themselves; a
read_committed read gives the latest value per key before and after, offsets are kept,
the cleaned segments are new objects kafka-python parses, what they replaced is deleted
after the grace period, and a coordinator killed at each compaction fault point finishes
the compaction with the same bytes on restart."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.coordinator.errors import InvalidRecordError
from txnlog.log_format import layout
from txnlog.log_format.codec.consumer_offsets import offsets_partition
from txnlog.log_format.codec.dump import dump_files
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.manifest import PartitionManifest, read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

from tests.coordinator_proc import CoordinatorProc

FAST = ["--merge-min-objects", "4", "--merge-fanout", "3", "--merge-interval-s", "0.1"]
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2000",
           "min.cleanable.dirty.ratio": "0.3", "delete.retention.ms": "1500",
           "file.delete.delay.ms": "2000"}
KEYS = 7


def coordinator(root: str, *extra: str, faults: str | None = None) -> CoordinatorProc:
    """A coordinator process with this file's flags (``with``: healthy, then stopped)."""
    return CoordinatorProc(root, extra=[*FAST, *extra], faults=faults)


def write(root: str, endpoint: str, topic: str, n: int, model: dict[str, str | None],
          written: dict[int, tuple[str, str | None]] | None = None, start: int = 0) -> None:
    """n transactions of two keyed records on partition 0: every 5th aborted, every 7th
    writes a tombstone; ``model`` gets the committed latest value per key."""
    producer = TransactionalProducer(root, f"w-{topic}", coordinator=endpoint)
    producer.init_transactions()
    for i in range(start, start + n):
        producer.begin_transaction()
        recs = [(f"k{i % KEYS}", None if i % 7 == 6 else f"v{i}"),
                (f"k{(i * 3) % KEYS}", f"w{i}")]
        futures = [producer.send(topic, None if v is None else v.encode(), key=k.encode(),
                                 partition=0) for k, v in recs]
        if i % 5 == 4:
            producer.flush()
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            for k, v in recs:
                model[k] = v
            if written is not None:
                for f, (k, v) in zip(futures, recs, strict=True):
                    written[f.result().offset] = (k, v)
    producer.close()


def table(storage: Storage, topic: str
          ) -> tuple[dict[str, str], list[tuple[int, str, str | None]]]:
    """The latest non-null value per key of a read_committed read, and the records read."""
    t = PartitionReader(storage, topic, 0).read_table()
    out: dict[str, str | None] = {}
    rows = []
    for o, k, v in zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                       t.column("value").to_pylist(), strict=True):
        out[k.decode()] = None if v is None else v.decode()
        rows.append((o, k.decode(), None if v is None else v.decode()))
    return {k: v for k, v in out.items() if v is not None}, rows


def latest(model: dict[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in model.items() if v is not None}


def wait_compacted(storage: Storage, topic: str, after_gen: int = 0,
                   timeout: float = 120.0) -> PartitionManifest:
    """The newest manifest once it names a segment compacted after manifest ``after_gen``."""
    deadline = time.monotonic() + timeout
    man = None
    while time.monotonic() < deadline:
        man = read_latest_manifest(storage, topic, 0)
        if man is not None and any(o.gen > after_gen for o in man.objects):
            return man
        time.sleep(0.2)
    raise AssertionError(f"never compacted after #{after_gen}: {man}")


def newest_gen(man: PartitionManifest) -> int:
    return max(o.gen for o in man.objects)


def test_compacted_topic_keeps_latest_per_key_and_offsets(every_root: str,
                                                          tmp_path: Path) -> None:
    """On files and on both S3 servers (the cleaner's writes, deletes and the in-flight
    reader's re-listing are storage calls each implementation answers its own way)."""
    root = every_root
    storage = Storage.for_url(root)
    model: dict[str, str | None] = {}
    written: dict[int, tuple[str, str | None]] = {}
    with coordinator(root) as proc:
        CoordinatorClient(proc.endpoint).create_topic("c", 1, COMPACT)
        write(root, proc.endpoint, "c", 60, model, written)
        before, _ = table(storage, "c")
        assert before == latest(model)
        # a reader in flight: it lists now and reads after what it listed was compacted
        # away and deleted (it must read the newest manifest and go on)
        early = PartitionReader(storage, "c", 0)
        listed = [(seg.path, seg.base_offset) for seg in early.segments()]
        man = wait_compacted(storage, "c")
        after, offsets = table(storage, "c")
        assert after == latest(model)
        for off, k, v in offsets:  # every record read sits where it was written
            assert written[off] == (k, v)
        cleaned = [o for o in man.objects if o.gen]
        for o in cleaned:
            data = storage.get(o.path("c", 0))
            mr = MemoryRecords(data)
            while (b := mr.next_batch()) is not None:
                assert b.validate_crc()
            # a compacted segment is a Kafka log dir's file: dump reads it and its indexes
            files = []
            for sfx in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIMEINDEX_SUFFIX):
                local = tmp_path / "dump" / Path(o.path("c", 0, sfx)).name
                local.parent.mkdir(exist_ok=True)
                local.write_bytes(storage.get(o.path("c", 0, sfx)))
                files.append(str(local))
            out, err = io.StringIO(), io.StringIO()
            assert dump_files(files, out=out, err=err) == 0, err.getvalue()
        # more updates of the same keys: compaction goes on by itself
        write(root, proc.endpoint, "c", 60, model, written, start=60)
        man2 = wait_compacted(storage, "c", newest_gen(man))
        after2, offsets2 = table(storage, "c")
        assert after2 == latest(model)
        # superseded records are gone: Kafka's rule, one record per key (its latest, or a
        # tombstone not yet past delete.retention.ms) in what the cleaner has cleaned
        cleaned_end = max(o.end_offset for o in man2.objects if o.gen)
        keys = [k for off, k, _ in offsets2 if off < cleaned_end]
        assert len(keys) == len(set(keys)) <= KEYS, sorted(keys)
        # the segments cleaned are deleted after the grace period
        first = cleaned[0]
        deadline = time.monotonic() + 60
        while storage.exists(first.path("c", 0)) and time.monotonic() < deadline:
            man2 = read_latest_manifest(storage, "c", 0)
            if first in man2.objects:
                write(root, proc.endpoint, "c", 10, model, written, start=200)
            time.sleep(0.5)
        assert not storage.exists(first.path("c", 0))
        # every object the in-flight reader listed and compaction or merging replaced is
        # gone too (deleted a grace period after its own replacement, which may come after
        # the first cleaned segment's): it must find what it listed gone and read what
        # replaced it, the records a fresh reader at its snapshot reads
        def replaced_left() -> list[str]:
            man = read_latest_manifest(storage, "c", 0)
            kept = {o.path("c", 0) for o in man.objects}
            return [p for p, base in listed  # below man.end_offset: merged or cleaned
                    if base < man.end_offset and p not in kept and storage.exists(p)]
        deadline = time.monotonic() + 60
        while replaced_left() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not replaced_left()
        assert "stopped:" not in proc.log_text()
        late = early.read_table()  # [0, the LSO it held): what is left of it now
        fresh = PartitionReader(storage, "c", 0, snapshot=early.snapshot).read_table()
        assert late.to_pylist() == fresh.to_pylist()
        for off, k, v in zip(late.column("offset").to_pylist(), late.column("key").to_pylist(),
                             late.column("value").to_pylist(), strict=True):
            assert written[off] == (k.decode(), None if v is None else v.decode())
    assert table(storage, "c")[0] == latest(model)


@pytest.mark.parametrize("fault", ["after_compact_plan", "after_compact_output",
                                   "after_compact_manifest"])
def test_a_restart_mid_compaction_finishes_it_with_the_same_bytes(file_root: str,
                                                                   fault: str) -> None:
    storage = Storage.for_url(file_root)
    model: dict[str, str | None] = {}
    with coordinator(file_root, "--no-merge") as proc:
        CoordinatorClient(proc.endpoint).create_topic("r", 1, COMPACT)
        write(file_root, proc.endpoint, "r", 50, model)
    dying = CoordinatorProc(file_root, extra=FAST, faults=f"{fault}:1")
    dying.proc.wait(120)
    assert dying.proc.returncode == -9, dying.log_tail()
    dying.stop()
    assert f"fault point {fault} reached" in dying.log_path.read_text()
    with coordinator(file_root) as again:
        man = wait_compacted(storage, "r")
        write(file_root, again.endpoint, "r", 30, model, start=50)
        wait_compacted(storage, "r", newest_gen(man))
        log = again.log_text()
        assert "stopped:" not in log, log[-3000:]  # no refusal: the same bytes again
        assert table(storage, "r")[0] == latest(model)


def test_null_keys_are_refused_on_a_compacted_topic(file_root: str) -> None:
    storage = Storage.for_url(file_root)
    with coordinator(file_root) as proc:
        client = CoordinatorClient(proc.endpoint)
        client.create_topic("nk", 1, {"cleanup.policy": "compact,delete"})
        client.create_topic("plain", 1)
        producer = TransactionalProducer(file_root, "nk", coordinator=proc.endpoint)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("nk", b"kept", key=b"a")
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message "
                                                     "without key in topic partition 'nk'"):
            producer.send("nk", b"no key")
        producer.send("plain", b"no key is fine here")
        producer.commit_transaction()  # the refused record lost nothing else
        producer.close()
        assert table(storage, "nk")[0] == {"a": "kept"}
        assert PartitionReader(storage, "plain", 0).read_table().num_rows == 1


def test_consumer_offsets_are_compacted(file_root: str) -> None:
    """A group committing every batch: its __consumer_offsets partition keeps the latest
    commit per partition, however many there were."""
    storage = Storage.for_url(file_root)
    group = "g-compact"
    part = offsets_partition(group)
    with coordinator(file_root, "--no-merge") as proc:  # all commits first, then compaction
        client = CoordinatorClient(proc.endpoint)
        # the offsets topic as the coordinator makes it, with small segments for the test
        client.create_topic("__consumer_offsets", 50, {**COMPACT, "segment.bytes": "1500"})
        client.create_topic("src", 2)
        producer = TransactionalProducer(file_root, "oc", coordinator=proc.endpoint)
        producer.init_transactions()
        for i in range(60):
            producer.begin_transaction()
            producer.send("src", b"x", key=b"k", partition=0)
            producer.send_offsets_to_transaction(
                {TopicPartition("src", 0): i + 1, TopicPartition("src", 1): 2 * i}, group)
            producer.commit_transaction()
        producer.close()
    before = PartitionReader(storage, "__consumer_offsets", part).read_table()
    assert before.num_rows == 120
    want: dict[bytes, bytes] = {}
    for k, v in zip(before.column("key").to_pylist(), before.column("value").to_pylist(),
                    strict=True):
        want[k] = v
    with coordinator(file_root) as proc:
        wait_compacted_partition(storage, "__consumer_offsets", part)
        after = PartitionReader(storage, "__consumer_offsets", part).read_table()
        assert after.num_rows < 40  # the superseded commits are gone
        last: dict[bytes, bytes] = {}
        for k, v in zip(after.column("key").to_pylist(), after.column("value").to_pylist(),
                        strict=True):
            last[k] = v
        assert last == want
        assert CoordinatorClient(proc.endpoint).committed_offsets(group) == {
            TopicPartition("src", 0): 60, TopicPartition("src", 1): 118}


def wait_compacted_partition(storage: Storage, topic: str, p: int,
                             timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        man = read_latest_manifest(storage, topic, p)
        if man is not None and any(o.gen for o in man.objects):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}-{p} never compacted")


def test_aborts_beyond_the_cleaned_range_come_from_objects_and_the_tail(tmp_path: Path) -> None:
    """Cleaning [start, upper) must know every transaction with data there that was aborted
    by a marker beyond ``upper``: from the ``.txnindex`` objects of the partition (roots
    written before aborts' entries were published) and from the entries the tail publishes
    with an abort's markers in a shared object; missing one would let an aborted value
    supersede a committed one of the same key."""
    import asyncio

    from txnlog.coordinator.maintenance.log_cleaner import LogCleaner
    from txnlog.coordinator.state.coordinator_state import CoordinatorState
    from txnlog.coordinator.state.merge_state import PartitionMerges
    from txnlog.coordinator.state.runtime import Observer, StorageIO
    from txnlog.log_format.codec.indexes import AbortedTxn, encode_txn_index
    from txnlog.log_format.stable import TailEntry

    storage = Storage.for_url(tmp_path.as_uri())
    assert storage.put_if_absent(layout.segment_path("t", 0, 30, layout.TXNINDEX_SUFFIX),
                                 encode_txn_index([AbortedTxn(7, 5, 30, 12)]))
    state = CoordinatorState()
    state.shared.add("t-0", TailEntry(40, 41, "_wal/x.wal", 0, 61, ((8, 10, 40, 41),)))
    state.shared.add("t-0", TailEntry(41, 45, "_wal/y.wal", 0, 300))
    io_ = StorageIO(storage, Observer())
    cleaner = LogCleaner(state, None, io_, None, None, Observer(), enabled=False)  # type: ignore[arg-type]
    try:
        found = asyncio.run(cleaner._aborted_beyond("t", 0, PartitionMerges(), 0, 20))
    finally:
        io_.shutdown()
    # (the first entry's LSO, 12, was held below ``upper`` by a transaction open at 12, so
    # the walk goes on to the next, as TransactionIndex's does)
    assert found == [AbortedTxn(7, 5, 30, 12), AbortedTxn(8, 10, 40, 41)]
