"""The coordinator protocol end to end: real coordinator processes, file:// and S3.

Every flow is checked on storage afterwards: partitions parse as Kafka batches (our codec and
kafka-python's MemoryRecords), markers are where they should be, and a read_committed reader
sees exactly the committed records.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc
from kafka.record.memory_records import MemoryRecords
from txnlog.coordinator import errors
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import IdempotentProducer, TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.codec.control import ControlType, control_info
from txnlog.log_format.codec.records import decode_batches, encode_batch
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage


@pytest.fixture(scope="module", params=["file", "s3"])
def coord(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[CoordinatorProc]:
    if request.param == "file":
        root = (tmp_path_factory.mktemp("proto") / "root").as_uri()
    else:
        request.getfixturevalue("s3_server")
        root = f"s3://txnlog-tests/proto-{uuid.uuid4().hex[:10]}"
    log = tmp_path_factory.mktemp("logs") / "coordinator.log"
    with CoordinatorProc(root, log_path=log) as proc:
        yield proc


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def partition_objects(storage: Storage, topic: str, p: int) -> list[tuple[int, bytes]]:
    """What the partition holds, by base offset: its own objects (these tests write data
    the way earlier versions did, an object per partition per write; fences), and the runs
    in shared objects its published tail names (markers: one object per transaction)."""
    out = []
    for obj in storage.list(layout.partition_dir(topic, p)):
        seg = layout.parse_segment_name(obj.name)
        if seg and seg.suffix == ".log":
            out.append((seg.base_offset, storage.get(f"{layout.partition_dir(topic, p)}/"
                                                     f"{obj.name}")))
    snap = read_latest_stable(storage)
    for run in snap.tail(topic, p) if snap is not None else ():
        out.append((run.base, storage.get(run.path, run.position, run.position + run.size)))
    return sorted(out, key=lambda x: x[0])


def check_partition(storage: Storage, topic: str, p: int) -> dict[str, object]:
    """Parse every object of a partition; return markers and data batches found."""
    markers: list[tuple[int, int, ControlType, int]] = []  # offset, pid, type, epoch
    data: list[tuple[int, int, int]] = []  # (base offset, pid, records)
    offsets: list[int] = []
    segment = b""
    for base, blob in partition_objects(storage, topic, p):
        if not blob:
            offsets.append(base)  # a 0-byte fence holds its base offset
            continue
        batches = decode_batches(blob)
        assert batches[0].header.base_offset == base
        for b in batches:
            offsets.extend(range(b.header.base_offset, b.header.next_offset))
            info = control_info(b)
            if info is not None:
                markers.append((b.header.base_offset, b.header.producer_id, info.control_type,
                                b.header.producer_epoch))
            else:
                data.append((b.header.base_offset, b.header.producer_id, len(b.records)))
        segment += blob
    assert len(offsets) == len(set(offsets)), f"offset reused in {topic}-{p}: {offsets}"
    # kafka-python reads the concatenated objects as one segment.
    mr = MemoryRecords(segment)
    n = 0
    while (batch := mr.next_batch()) is not None:
        n += 1
        list(batch)
    assert n == len(markers) + len(data)
    return {"markers": markers, "data": data}


def read_values(storage: Storage, topic: str, p: int, level: str = "read_committed"
                ) -> list[bytes]:
    r = PartitionReader(storage, topic, p, isolation_level=level)
    return r.read_table().column("value").to_pylist()


# ------------------------------------------------------------------------- flows


def test_commit_multi_partition_multi_topic(coord: CoordinatorProc) -> None:
    c = coord.client()
    a, b = name("a"), name("b")
    c.create_topic(a, 3)
    c.create_topic(b, 2)
    st = Storage.for_url(coord.root)
    with TransactionalProducer(coord.root, name("tx"), coordinator=coord.endpoint) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        futs = [prod.send(a, f"a{i}", key=f"k{i}") for i in range(30)]
        futs += [prod.send(b, f"b{i}", partition=i % 2) for i in range(10)]
        prod.flush()
        # not visible before commit
        assert sum(len(read_values(st, a, p)) for p in range(3)) == 0
        prod.send(a, "late", key="k0")
        prod.commit_transaction()
        assert all(f.done() for f in futs)
        pid = prod.producer_id
    got_a = sorted(v for p in range(3) for v in read_values(st, a, p))
    assert got_a == sorted([f"a{i}".encode() for i in range(30)] + [b"late"])
    assert sorted(v for p in range(2) for v in read_values(st, b, p)) == \
        sorted(f"b{i}".encode() for i in range(10))
    for topic, n in ((a, 3), (b, 2)):
        for p in range(n):
            found = check_partition(st, topic, p)
            if found["data"]:
                assert [m[1:3] for m in found["markers"]] == [(pid, ControlType.COMMIT)]
    # keyed records landed where Kafka's partitioner puts them
    from txnlog.log_format.codec.partitioner import partition_for_key
    for f, i in zip(futs[:30], range(30), strict=True):
        assert f.result().partition == partition_for_key(f"k{i}".encode(), 3)


def test_abort_leaves_nothing_visible(coord: CoordinatorProc) -> None:
    c = coord.client()
    t = name("ab")
    c.create_topic(t, 2)
    st = Storage.for_url(coord.root)
    with TransactionalProducer(coord.root, name("tx"), coordinator=coord.endpoint) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        for i in range(10):
            prod.send(t, f"x{i}", partition=i % 2)
        prod.flush()
        prod.abort_transaction()
        prod.begin_transaction()
        prod.send(t, "kept", partition=0)
        prod.commit_transaction()
    assert read_values(st, t, 0) == [b"kept"]
    assert read_values(st, t, 1) == []
    assert len(read_values(st, t, 1, "read_uncommitted")) == 5
    head = read_latest_stable(st)
    assert head is not None
    paths = set()
    for p in range(2):
        found = check_partition(st, t, p)
        kinds = [m[2] for m in found["markers"]]
        assert kinds[0] is ControlType.ABORT
        first_marker = found["markers"][0][0]
        # the abort's .txnindex entry is published with its marker's run, not written as an
        # object of the partition's own
        assert not [o.name for o in st.list(layout.partition_dir(t, p))
                    if o.name.endswith(".txnindex")]
        run = next(r for r in head.tail(t, p) if r.base == first_marker)
        paths.add(run.path)
        pid, first, last, _lso = run.aborted[0]
        assert len(run.aborted) == 1 and (first, last) == (0, first_marker)
        got = PartitionReader(st, t, p, snapshot=head).aborted_transactions(0, first_marker + 1)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in got] == \
            [(pid, 0, first_marker)]
    assert len(paths) == 1  # both partitions' ABORT markers: one object


def test_offsets_in_transaction(coord: CoordinatorProc) -> None:
    c = coord.client()
    t = name("off")
    c.create_topic(t, 1)
    group = name("g")
    with TransactionalProducer(coord.root, name("tx"), coordinator=coord.endpoint) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send(t, "v", partition=0)
        prod.send_offsets_to_transaction({("in", 0): 42, ("in", 1): 7}, group)
        assert c.committed_offsets(group) == {}
        prod.abort_transaction()
        assert c.committed_offsets(group) == {}
        prod.begin_transaction()
        prod.send_offsets_to_transaction({("in", 0): 43}, group)
        prod.commit_transaction()
    assert c.committed_offsets(group) == {("in", 0): 43}
    # the OffsetCommit records live in __consumer_offsets, committed by the same markers
    from txnlog.log_format.codec.consumer_offsets import offsets_partition
    st = Storage.for_url(coord.root)
    p = offsets_partition(group)
    found = check_partition(st, "__consumer_offsets", p)
    assert [m[2] for m in found["markers"]][-2:] == [ControlType.ABORT, ControlType.COMMIT]
    # read_committed: exactly the committed transaction's one OffsetCommit record; the
    # aborted transaction's two (offsets 42 and 7) are in the log but never visible
    committed = PartitionReader(st, "__consumer_offsets", p).read_table()
    assert committed.num_rows == 1, committed.to_pylist()
    assert offset_in(committed.column("value")[0].as_py()) == 43
    everything = PartitionReader(st, "__consumer_offsets", p,
                                 isolation_level="read_uncommitted").read_table()
    assert sorted(offset_in(v) for v in everything.column("value").to_pylist()) == [7, 42, 43]


def offset_in(value: bytes) -> int:
    """The offset of Kafka's OffsetCommitValue (v1+: version int16, then offset int64)."""
    import struct

    return int(struct.unpack(">hq", value[:10])[1])


def test_idempotent_producer(coord: CoordinatorProc) -> None:
    c = coord.client()
    t = name("idem")
    c.create_topic(t, 1)
    st = Storage.for_url(coord.root)
    with IdempotentProducer(coord.root, coordinator=coord.endpoint) as prod:
        for i in range(5):
            prod.send(t, f"i{i}")
        prod.flush()
        assert read_values(st, t, 0) == [f"i{i}".encode() for i in range(5)]


# ------------------------------------------------------------------------- misuse


def test_kafka_errors_for_misuse(coord: CoordinatorProc) -> None:
    c = coord.client()
    t = name("err")
    c.create_topic(t, 1)
    tid = name("tx")
    pid, ep = c.init_producer_id(tid)
    with pytest.raises(errors.InvalidTxnStateError):  # commit without begin / no txn
        c.end_txn(tid, pid, ep, True)
    with pytest.raises(errors.InvalidProducerEpochError):
        c.reserve(pid, ep + 5, {(t, 0): (0, 1)})
    with pytest.raises(errors.OutOfOrderSequenceError):  # a gap: first sequence must be 0
        c.reserve(pid, ep, {(t, 0): (3, 1)})
    first = c.reserve(pid, ep, {(t, 0): (0, 4)})
    assert c.reserve(pid, ep, {(t, 0): (0, 4)}) == first  # retry -> same offsets
    with pytest.raises(errors.DuplicateSequenceError):
        c.reserve(pid, ep, {(t, 0): (0, 2)})
    with pytest.raises(errors.OutOfOrderSequenceError):
        c.reserve(pid, ep, {(t, 0): (5, 1)})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        c.reserve(pid, ep, {(t, 1): (0, 1)})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        c.reserve(pid, ep, {(name("nope"), 0): (0, 1)})
    with pytest.raises(errors.InvalidTopicError):
        c.create_topic("../etc", 1)
    with pytest.raises(errors.InvalidTransactionTimeoutError):
        c.init_producer_id(name("tx"), transaction_timeout_ms=10**9)
    with pytest.raises(errors.InvalidProducerIdMappingError):
        c.end_txn(name("unknown"), 1, 0, True)
    with pytest.raises(errors.TopicAlreadyExistsError):
        c.create_topic(t, 3)
    # a newer instance fences this one; the open transaction is aborted
    pid2, ep2 = c.init_producer_id(tid)
    assert (pid2, ep2) != (pid, ep) and ep2 > ep
    with pytest.raises(errors.ProducerFencedError):
        c.end_txn(tid, pid, ep, True)
    with pytest.raises(errors.ProducerFencedError):
        c.reserve(pid, ep, {(t, 0): (4, 1)})
    # the reserved range was never written: fenced with a 0-byte object, zombie write fails
    st = Storage.for_url(coord.root)
    path = layout.segment_path(t, 0, first[(t, 0)])
    assert st.get(path) == b""
    assert st.put_if_absent(path, b"zombie bytes") is False


def test_send_after_fence(coord: CoordinatorProc) -> None:
    c = coord.client()
    t = name("fence")
    c.create_topic(t, 1)
    tid = name("tx")
    old = TransactionalProducer(coord.root, tid, coordinator=coord.endpoint)
    old.init_transactions()
    old.begin_transaction()
    old.send(t, "old")
    old.flush()
    new = TransactionalProducer(coord.root, tid, coordinator=coord.endpoint)
    new.init_transactions()
    old.send(t, "old2")
    with pytest.raises(errors.ProducerFencedError):
        old.commit_transaction()
    with pytest.raises(errors.ProducerFencedError):
        old.send(t, "old3")
    new.begin_transaction()
    new.send(t, "new")
    new.commit_transaction()
    new.close()
    old.close()
    assert read_values(Storage.for_url(coord.root), t, 0) == [b"new"]


def test_local_state_errors(coord: CoordinatorProc) -> None:
    prod = TransactionalProducer(coord.root, name("tx"), coordinator=coord.endpoint)
    with pytest.raises(errors.InvalidTxnStateError):
        prod.begin_transaction()  # before init_transactions
    prod.init_transactions()
    with pytest.raises(errors.InvalidTxnStateError):
        prod.commit_transaction()  # without begin
    with pytest.raises(errors.InvalidTxnStateError):
        prod.send("x", "v")  # outside a transaction
    prod.close()


# ------------------------------------------------------------------------ members


def write(st: Storage, topic: str, p: int, base: int, pid: int, epoch: int, values: list[str],
          seq: int = 0) -> bool:
    data = encode_batch([(None, v.encode(), [], None) for v in values], base_offset=base,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)
    return st.put_if_absent(layout.segment_path(topic, p, base), data)


def test_members_commit_named_abort_others(coord: CoordinatorProc) -> None:
    c = coord.client()
    st = Storage.for_url(coord.root)
    t = name("mem")
    c.create_topic(t, 2)
    tid = name("job")
    pid, ep = c.init_producer_id(tid)
    m1 = c.add_member(tid, pid, ep, "p0-a0")
    assert c.add_member(tid, pid, ep, "p0-a0") == m1  # retry: same member
    m2 = c.add_member(tid, pid, ep, "p1-a0")
    m3 = c.add_member(tid, pid, ep, "p1-a1")  # speculative attempt: loses
    m4 = c.add_member(tid, pid, ep, "p0-a1")  # reserved, never wrote (killed)
    assert c.heartbeat(tid, m1[0], 0) == "Ongoing"
    r1 = c.reserve(m1[0], 0, {(t, 0): (0, 2)})
    r2 = c.reserve(m2[0], 0, {(t, 1): (0, 1)})
    r3 = c.reserve(m3[0], 0, {(t, 1): (0, 1)})
    r4 = c.reserve(m4[0], 0, {(t, 0): (0, 3)})
    assert write(st, t, 0, r1[(t, 0)], m1[0], 0, ["a", "b"])
    c.confirm(m1[0], 0, [(t, 0, r1[(t, 0)])])
    assert write(st, t, 1, r2[(t, 1)], m2[0], 0, ["c"])  # written, not confirmed
    assert write(st, t, 1, r3[(t, 1)], m3[0], 0, ["speculative"])
    c.confirm(m3[0], 0, [(t, 1, r3[(t, 1)])])
    with pytest.raises(errors.InvalidTxnStateError):  # not a member
        c.end_txn(tid, pid, ep, True, members=[m1[0], 999_999])
    out = c.end_txn(tid, pid, ep, True, members=[m1[0], m2[0]])
    assert out["outcome"] == "commit" and out["epoch"] == ep + 1
    assert read_values(st, t, 0) == [b"a", b"b"]
    assert read_values(st, t, 1) == [b"c"]
    # the unwritten reservation of m4 is fenced: its late write fails
    assert write(st, t, 0, r4[(t, 0)], m4[0], 0, ["z", "z", "z"]) is False
    with pytest.raises(errors.ProducerFencedError):
        c.reserve(m4[0], 0, {(t, 0): (3, 1)})
    with pytest.raises(errors.ProducerFencedError):
        c.heartbeat(tid, m3[0], 0)
    found = check_partition(st, t, 1)
    assert sorted((m[1], m[2]) for m in found["markers"]) == sorted(
        [(m2[0], ControlType.COMMIT), (m3[0], ControlType.ABORT)])
    # markers of one transaction in one partition share one object
    assert found["markers"][1][0] == found["markers"][0][0] + 1
    # retry of the same EndTxn after it completed: same answer, nothing rewritten
    assert c.end_txn(tid, pid, ep, True, members=[m1[0], m2[0]])["outcome"] == "commit"
    assert check_partition(st, t, 1)["markers"] == found["markers"]


def test_commit_refused_for_unwritten_named_member(coord: CoordinatorProc) -> None:
    c = coord.client()
    st = Storage.for_url(coord.root)
    t = name("unw")
    c.create_topic(t, 1)
    tid = name("job")
    pid, ep = c.init_producer_id(tid)
    m = c.add_member(tid, pid, ep, "p0-a0")
    r = c.reserve(m[0], 0, {(t, 0): (0, 1)})
    with pytest.raises(errors.InvalidTxnStateError, match="never written"):
        c.end_txn(tid, pid, ep, True, members=[m[0]])
    c.end_txn(tid, pid, ep, False)
    assert st.get(layout.segment_path(t, 0, r[(t, 0)])) == b""
    assert read_values(st, t, 0) == []


# ---------------------------------------------------------------------- streaming


def test_streaming_batches(coord: CoordinatorProc) -> None:
    c = coord.client()
    st = Storage.for_url(coord.root)
    t = name("stream")
    c.create_topic(t, 1)
    tid = name("sink")
    b0 = c.begin_batch(tid, 0)
    assert c.begin_batch(tid, 0) == b0  # a later task joins the same transaction
    m = c.add_member(tid, b0["producer_id"], b0["epoch"], "p0-a0")
    r = c.reserve(m[0], 0, {(t, 0): (0, 1)})
    write(st, t, 0, r[(t, 0)], m[0], 0, ["batch0"])
    c.confirm(m[0], 0, [(t, 0, r[(t, 0)])])
    c.end_txn(tid, b0["producer_id"], b0["epoch"], True, [m[0]], batch_id=0)
    # a replay of batch 0 already committed: tasks write nothing, commit answers success
    assert c.begin_batch(tid, 0) == {"state": "committed"}
    assert c.end_txn(tid, b0["producer_id"], b0["epoch"], True, [], batch_id=0)[
        "outcome"] == "commit"
    # batch 1 starts, writes, but its driver dies; batch 2 begins -> batch 1 is aborted
    b1 = c.begin_batch(tid, 1)
    m1 = c.add_member(tid, b1["producer_id"], b1["epoch"], "p0-a0")
    r1 = c.reserve(m1[0], 0, {(t, 0): (0, 1)})
    write(st, t, 0, r1[(t, 0)], m1[0], 0, ["batch1-lost"])
    b2 = c.begin_batch(tid, 2)
    assert b2["epoch"] > b1["epoch"]
    with pytest.raises(errors.ProducerFencedError):
        c.begin_batch(tid, 1)  # an older copy of the query is fenced
    with pytest.raises(errors.ProducerFencedError):
        c.end_txn(tid, b1["producer_id"], b1["epoch"], True, [m1[0]], batch_id=1)
    assert read_values(st, t, 0) == [b"batch0"]
    assert c.describe_txn(tid)["last_committed_batch"] == 0


def test_timeout_aborts_with_epoch_bump(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as proc:
        c = proc.client()
        c.create_topic("t", 1)
        with pytest.raises(errors.InvalidTransactionTimeoutError):
            c.init_producer_id("slow", transaction_timeout_ms=900_001)
        pid, ep = c.init_producer_id("slow", transaction_timeout_ms=300)
        r = c.reserve(pid, ep, {("t", 0): (0, 2)})
        import time
        deadline = time.monotonic() + 20
        while c.describe_txn("slow")["state"] != "CompleteAbort":
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
        assert c.describe_txn("slow")["epoch"] == ep + 1
        with pytest.raises(errors.InvalidProducerEpochError, match="timeout"):
            c.end_txn("slow", pid, ep, True)
        st = Storage.for_url(root)
        assert st.put_if_absent(layout.segment_path("t", 0, r[("t", 0)]), b"late") is False
        # it was the coordinator's timer that aborted it, for that reason
        assert "'slow': no heartbeat for" in proc.log_text()


def test_a_prepared_transaction_is_never_timed_out(tmp_path: Path) -> None:
    """Once PrepareCommit is logged the commit is decided, and only rolled forward: the
    timer must not abort it however long its markers take (a slow store, a restart that
    has not rolled it forward yet). In-process coordinator, timer run by hand: the marker
    writes are held while the transaction sits in PrepareCommit far past its 1 ms timeout
    with no completion in flight, the timer checks, then the writes go on."""
    import asyncio
    import time

    from txnlog.coordinator.state.states import TxnState
    from txnlog.coordinator.state.txn_log import TxnLog, recover
    from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator

    st = Storage.for_url((tmp_path / "root").as_uri())

    def factory(c: TransactionCoordinator, rec: object) -> TxnLog:
        return TxnLog(c.storage, rec.next_offset,  # type: ignore[attr-defined]
                      snapshot_fn=c.to_snapshot,
                      snapshot_offsets=rec.snapshot_offsets,  # type: ignore[attr-defined]
                      protected_fn=lambda: list(c.takeover_offsets),
                      on_fatal=lambda exc: None)

    async def main() -> None:
        c = TransactionCoordinator(st, merging=False)
        await c.start(factory, await asyncio.to_thread(recover, st))
        await c.timers.stop()  # checked by hand below
        try:
            await c.create_topic("t", 1)
            init = await c.init_producer_id("prep", 1)  # transaction.timeout.ms = 1
            pid, epoch = init["producer_id"], init["epoch"]
            r = await c.reserve(pid, epoch, [{"topic": "t", "partition": 0,
                                              "base_sequence": 0, "count": 1}])
            await c.confirm(pid, epoch, r)
            release = asyncio.Event()
            write_plans = c.completer._write_plans

            async def held(*args: object) -> int:
                await release.wait()
                return await write_plans(*args)  # type: ignore[arg-type]

            c.completer._write_plans = held  # type: ignore[method-assign]
            ending = asyncio.ensure_future(c.end_txn("prep", pid, epoch, True))
            deadline = time.monotonic() + 60
            while c.txns["prep"].state is not TxnState.PREPARE_COMMIT:
                assert time.monotonic() < deadline and not ending.done(), c.txns["prep"]
                await asyncio.sleep(0.01)
            # as after a restart, before the roll-forward: no completion in flight
            in_flight = c.completer._in_flight.pop("prep")
            c.txns["prep"].last_heartbeat = time.monotonic() - 3600
            ends: list[bool] = []
            end = c.completer.end

            async def spy(txn: object, *, commit: bool, **kw: object) -> object:
                ends.append(commit)
                return await end(txn, commit=commit, **kw)  # type: ignore[arg-type]

            c.completer.end = spy  # type: ignore[method-assign]
            await c.timers.check()
            await asyncio.sleep(0.1)  # anything the check spawned has started
            assert ends == [], "the timer ended a prepared transaction"
            assert c.txns["prep"].state is TxnState.PREPARE_COMMIT
            assert c.txns["prep"].epoch == epoch
            c.completer._in_flight["prep"] = in_flight
            release.set()
            assert (await asyncio.wait_for(ending, 60))["outcome"] == "commit"
            assert c.txns["prep"].state is TxnState.COMPLETE_COMMIT
            assert c.txns["prep"].last["reason"] == "client"  # the client's commit, not a timeout
        finally:
            await c.stop()

    asyncio.run(main())


def test_client_pickles_without_connections(coord: CoordinatorProc) -> None:
    import pickle
    c = CoordinatorClient(coord.endpoint)
    c.list_topics()
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.endpoint == c.endpoint and c2.list_topics() == c.list_topics()


def test_unconfirmed_idempotent_reservation_is_fenced_and_metrics(tmp_path: Path) -> None:
    import time
    import urllib.request
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log",
                         extra=["--reservation-timeout-ms", "300"]) as proc:
        c = proc.client()
        c.create_topic("t", 1)
        pid, ep = c.init_producer_id(None)
        r = c.reserve(pid, ep, {("t", 0): (0, 3)})  # the writer dies before writing
        deadline = time.monotonic() + 20
        while c.describe_topic("t")["offsets"][0]["hw"] != 3:
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
        st = Storage.for_url(root)
        assert st.get(layout.segment_path("t", 0, r[("t", 0)])) == b""
        # the writer comes back and wrote its shared object after all: its confirm is
        # refused (its put could not meet the fence), nothing of it becomes visible
        late = layout.shared_object_path(layout.shared_object_name(pid, ep, "ab" * 8))
        with pytest.raises(errors.ProducerFencedError, match="fenced before they were confirmed"):
            c.confirm(pid, ep, [("t", 0, r[("t", 0)], late, 0, 70)])
        assert c.describe_topic("t")["offsets"][0]["hw"] == 3
        text = urllib.request.urlopen(f"{proc.endpoint}/metrics").read().decode()
        assert "txnlog_coordinator_reservations_total 1.0" in text
        assert "txnlog_coordinator_open_transactions" in text


def _metric_samples(endpoint: str, name: str) -> dict[str, float]:
    import urllib.request
    text = urllib.request.urlopen(f"{endpoint}/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_commit_path_three_round_trips_with_fences(tmp_path: Path) -> None:
    """Fences go out with the markers: still 3 sequential round trips; late writes stay out.

    Member m2 reserved and never wrote (fenced, its late write fails); m3 wrote but neither
    confirmed nor was named, so its fence finds the data: the ABORT marker above it must
    hide it from read_committed readers whatever order the fence and marker puts land in.
    """
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as proc:
        c = proc.client()
        st = Storage.for_url(root)
        c.create_topic("t", 2)
        tid = "rt"
        pid, ep = c.init_producer_id(tid)
        m1 = c.add_member(tid, pid, ep, "a0")
        m2 = c.add_member(tid, pid, ep, "a1")
        m3 = c.add_member(tid, pid, ep, "a2")
        r1 = c.reserve(m1[0], 0, {("t", 0): (0, 1), ("t", 1): (0, 1)})
        r2 = c.reserve(m2[0], 0, {("t", 0): (0, 2)})
        r3 = c.reserve(m3[0], 0, {("t", 1): (0, 1)})
        for p in (0, 1):
            assert write(st, "t", p, r1[("t", p)], m1[0], 0, [f"ok{p}"])
        c.confirm(m1[0], 0, [("t", p, r1[("t", p)]) for p in (0, 1)])
        assert write(st, "t", 1, r3[("t", 1)], m3[0], 0, ["zombie"])  # never confirmed
        out = c.end_txn(tid, pid, ep, True, members=[m1[0]])
        assert out["outcome"] == "commit"
        assert read_values(st, "t", 0) == [b"ok0"]
        assert read_values(st, "t", 1) == [b"ok1"]
        assert st.get(layout.segment_path("t", 0, r2[("t", 0)])) == b""
        assert write(st, "t", 0, r2[("t", 0)], m2[0], 0, ["late", "late"]) is False
        rts = _metric_samples(proc.endpoint, "txnlog_coordinator_commit_round_trips")
        total = rts["txnlog_coordinator_commit_round_trips_count"]
        assert total >= 1
        assert rts['txnlog_coordinator_commit_round_trips_bucket{le="3.0"}'] == total
        assert rts['txnlog_coordinator_commit_round_trips_bucket{le="2.0"}'] == 0
        objs = _metric_samples(proc.endpoint, "txnlog_coordinator_objects_written_total")
        assert objs['txnlog_coordinator_objects_written_total{kind="fence"}'] == 1  # m2's
        # one marker object holds the markers of every partition of the transaction
        assert objs['txnlog_coordinator_objects_written_total{kind="marker"}'] == 1


def test_end_txn_confirms_written_ranges(tmp_path: Path) -> None:
    """EndTxn's ``written`` confirms in the same step: no Confirm RPC, no storage check
    (3 round trips, not 4), the commit is visible; a range of another producer is refused
    before anything changes; TransactionalProducer commits with reserve + end_txn only."""
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as proc:
        c = proc.client()
        st = Storage.for_url(root)
        c.create_topic("t", 2)
        pid, ep = c.init_producer_id("w")
        other, oep = c.init_producer_id("other")
        r = c.reserve(pid, ep, {("t", 0): (0, 1), ("t", 1): (0, 2)})
        ro = c.reserve(other, oep, {("t", 0): (0, 1)})
        assert write(st, "t", 0, r[("t", 0)], pid, ep, ["a"])
        assert write(st, "t", 1, r[("t", 1)], pid, ep, ["b", "c"])
        with pytest.raises(errors.InvalidRequestError):
            c.end_txn("w", pid, ep, True, written=[("t", 0, ro[("t", 0)])])
        assert c.describe_txn("w")["state"] == "Ongoing"
        out = c.end_txn("w", pid, ep, True, written=[(t, p, b) for (t, p), b in r.items()])
        assert out["outcome"] == "commit"
        # a retry of the same EndTxn (reply lost) answers the same, written or not
        assert c.end_txn("w", pid, ep, True, written=[("t", 0, r[("t", 0)])])["outcome"] \
            == "commit"
        rts = _metric_samples(proc.endpoint, "txnlog_coordinator_commit_round_trips")
        assert rts["txnlog_coordinator_commit_round_trips_bucket{le=\"3.0\"}"] == \
            rts["txnlog_coordinator_commit_round_trips_count"]
        c.end_txn("other", other, oep, False)
        for p, values in ((0, [b"a"]), (1, [b"b", b"c"])):
            got = PartitionReader(st, "t", p).read_table().column("value").to_pylist()
            assert got == values
        before = _metric_samples(proc.endpoint, "txnlog_coordinator_requests_total")
        with TransactionalProducer(root, "tp", coordinator=proc.endpoint) as prod:
            prod.init_transactions()
            for i in range(3):
                prod.begin_transaction()
                prod.send("t", f"p{i}".encode(), partition=i % 2)
                prod.commit_transaction()
        after = _metric_samples(proc.endpoint, "txnlog_coordinator_requests_total")
        ops = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k)}
        assert ops == {'txnlog_coordinator_requests_total{error="",op="init_producer_id"}': 1,
                       'txnlog_coordinator_requests_total{error="",op="reserve"}': 3,
                       'txnlog_coordinator_requests_total{error="",op="end_txn"}': 3}, ops
        assert PartitionReader(st, "t", 0).read_table().column("value").to_pylist() == \
            [b"a", b"p0", b"p2"]
