"""Stable heads over bases (publishing): what a commit writes no longer grows with
the root, and readers still see a transaction in all partitions or in none, never go
backwards, never trust a fenced coordinator's late object, and refuse a corrupt one.

The publisher tests run a real coordinator in this process with a tiny rebase bound, so
bases are written (in the background, while heads go on) every few commits.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import threading
from typing import Any

import pytest
from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.state.txn_log_records import LogRecord
from txnlog.coordinator.transaction import stable_publisher
from txnlog.coordinator.transaction.stable_changes import touched
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format import layout, stable
from txnlog.log_format.stable import (
    StableSnapshot,
    StableSnapshotError,
    encode_base,
    encode_delta,
    list_stable_objects,
    make_snapshot,
    prune_stable,
    read_latest_stable,
    write_base,
    write_delta,
    write_stable,
)
from txnlog.log_format.storage import Storage

from tests.coordinator.server.test_coordinator_protocol import write


@pytest.fixture(autouse=True)
def _cold_cache() -> None:
    stable.clear_base_cache()  # each test reads its own root from storage


def _delta_root(st: Storage, epoch: int = 1) -> stable.BaseRef:
    """Base (epoch, 1) with two partitions and heads 1..3 over it."""
    ref = write_base(st, epoch, 1, encode_base(epoch, 1, {"t-0": (5, 5), "t-1": (7, 3)}))
    assert ref is not None
    assert write_delta(st, epoch, 1, encode_delta(epoch, 1, ref, {}))
    assert write_delta(st, epoch, 2, encode_delta(epoch, 2, ref, {"t-1": (9, 9)}))
    assert write_delta(st, epoch, 3, encode_delta(epoch, 3, ref, {"t-1": (9, 9),
                                                                    "t-2": (1, 1)}))
    return ref


# ------------------------------------------------------------------------------ format
def test_a_delta_head_publishes_its_base_overlaid(every_root: str) -> None:
    st = Storage.for_url(every_root)
    _delta_root(st)
    snap = read_latest_stable(st)
    assert snap is not None and snap.key == (1, 3)
    assert dict(snap.partitions) == {"t-0": (5, 5), "t-1": (9, 9), "t-2": (1, 1)}
    assert snap.offsets("t", 1) == (9, 9) and snap.offsets("t", 9) == (0, 0)
    assert len(snap.partitions) == 3 and "t-2" in snap.partitions
    # the newest head is not newer than what the reader holds: it keeps what it has
    assert read_latest_stable(st, not_below=snap) is snap


def test_a_reader_of_the_previous_version_refuses_a_delta_head(file_root: str) -> None:
    """A head of the new format has no ``partitions``: the previous version's parser
    (``obj["partitions"]``) fails with "not a valid stable snapshot" rather than taking
    the changed partitions for the whole root."""
    st = Storage.for_url(file_root)
    _delta_root(st)
    raw = json.loads(st.get(layout.stable_path(1, 3)))
    assert "partitions" not in raw and raw["kind"] == "delta"
    with pytest.raises(StableSnapshotError, match="delta head"):
        StableSnapshot.from_json(st.get(layout.stable_path(1, 3)))
    # and the bases are invisible to it: its name pattern does not match them
    names = [o.name for o in st.list(layout.STABLE_DIR)]
    assert [layout.parse_stable_name(n) for n in names].count(None) == 1


def test_an_old_root_of_full_snapshots_reads_as_it_is(any_root: str) -> None:
    st = Storage.for_url(any_root)
    old = make_snapshot(4, 17, {"t-0": (3, 2), "u-1": (8, 8)}, now_ms=1)
    assert write_stable(st, make_snapshot(4, 16, {"t-0": (3, 1)}, now_ms=0))
    assert write_stable(st, old)
    got = read_latest_stable(st)
    assert got == old and got.base is None
    # a head of the new format at a higher epoch (the converting coordinator) wins
    ref = write_base(st, 5, 1, encode_base(5, 1, {"t-0": (3, 2), "u-1": (8, 8)}))
    assert ref is not None and write_delta(st, 5, 1, encode_delta(5, 1, ref, {"t-0": (4, 4)}))
    new = read_latest_stable(st, not_below=got)
    assert new is not None and new.key == (5, 1) and new.offsets("t", 0) == (4, 4)


def test_a_fresh_reader_lists_once_and_gets_twice_then_once(file_root: str,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    st = Storage.for_url(file_root)
    ref = _delta_root(st)
    calls: list[tuple[str, str]] = []
    real_get, real_list = st.get, st.list

    def get(path: str, *a: Any) -> bytes:
        calls.append(("GET", path))
        return real_get(path, *a)

    def lst(d: str) -> Any:
        calls.append(("LIST", d))
        return real_list(d)

    monkeypatch.setattr(st, "get", get)
    monkeypatch.setattr(st, "list", lst)
    first = read_latest_stable(st)
    assert sorted(c[0] for c in calls) == ["GET", "GET", "LIST"], calls
    calls.clear()
    assert write_delta(st, 1, 4, encode_delta(1, 4, ref, {"t-2": (2, 2)}))
    second = read_latest_stable(st, not_below=first)
    assert second is not None and second.offsets("t", 2) == (2, 2)
    assert sorted(c[0] for c in calls) == ["GET", "LIST"], calls  # same base: head only


# ------------------------------------------------------------------------ corruption
def test_a_truncated_or_foreign_base_is_refused_by_name(any_root: str) -> None:
    st = Storage.for_url(any_root)
    ref = _delta_root(st)
    good = st.get(ref.path)
    st.delete(ref.path)
    assert st.put_if_absent(ref.path, good[:-7])
    with pytest.raises(StableSnapshotError, match=r"\.base\.json.*corrupt or truncated"):
        read_latest_stable(st)
    st.delete(ref.path)  # valid JSON, but not the base the heads were written over
    assert st.put_if_absent(ref.path, encode_base(1, 1, {"t-0": (99, 99), "t-1": (7, 3)}))
    with pytest.raises(StableSnapshotError, match="corrupt or truncated"):
        read_latest_stable(st)


def test_a_base_that_matches_its_head_but_lies_inside_is_refused(file_root: str) -> None:
    st = Storage.for_url(file_root)
    bad = encode_base(1, 1, {"t-0": (2, 5)})  # lso > hw
    ref = write_base(st, 1, 1, bad)
    assert ref is not None and write_delta(st, 1, 1, encode_delta(1, 1, ref, {}))
    with pytest.raises(StableSnapshotError, match="lso 5 > hw 2"):
        read_latest_stable(st)
    other = encode_base(1, 2, {"t-0": (2, 2)})  # a base whose key is not the one named
    assert st.put_if_absent(layout.stable_base_path(1, 3), other)
    wrong = stable.base_ref(1, 3, other)
    assert write_delta(st, 1, 2, encode_delta(1, 2, wrong, {}))
    with pytest.raises(StableSnapshotError, match="holds key"):
        read_latest_stable(st)


def test_a_corrupt_head_is_refused_by_name(any_root: str) -> None:
    st = Storage.for_url(any_root)
    _delta_root(st)
    data = st.get(layout.stable_path(1, 3))
    assert st.put_if_absent(layout.stable_path(1, 4), data[: len(data) // 2])
    with pytest.raises(StableSnapshotError, match=r"0000000001-00000000000000000004\.json"):
        read_latest_stable(st)


def test_a_base_that_stays_missing_fails_clearly(file_root: str) -> None:
    st = Storage.for_url(file_root)
    ref = _delta_root(st)
    st.delete(ref.path)
    with pytest.raises(StableSnapshotError, match="kept vanishing"):
        read_latest_stable(st)


# ---------------------------------------------------------------------------- pruning
def test_pruning_keeps_the_bases_the_newest_heads_stand_on(every_root: str) -> None:
    st = Storage.for_url(every_root)
    ref1 = write_base(st, 2, 1, encode_base(2, 1, {"t-0": (1, 1)}))
    assert ref1 is not None
    for seq in range(1, 6):
        write_delta(st, 2, seq, encode_delta(2, seq, ref1, {"t-0": (seq, seq)}))
    # a fenced epoch-1 coordinator's late base and head sort below everything of epoch 2
    late = write_base(st, 1, 900, encode_base(1, 900, {"t-0": (500, 500)}))
    assert late is not None
    write_delta(st, 1, 901, encode_delta(1, 901, late, {"t-0": (501, 501)}))
    # epoch 2 writes base (2, 5) in the background: heads 6 and 7 still stand on (2, 1)
    ref5 = write_base(st, 2, 5, encode_base(2, 5, {"t-0": (5, 5)}))
    assert ref5 is not None
    for seq in (6, 7):
        write_delta(st, 2, seq, encode_delta(2, seq, ref1, {"t-0": (seq, seq)}))
    prune_stable(st, keep=1)
    heads, bases = list_stable_objects(st)
    assert heads == [(2, 7)] and bases == [(1, 900), (2, 1), (2, 5)]
    assert read_latest_stable(st).offsets("t", 0) == (7, 7)  # type: ignore[union-attr]
    # it switches; a third base; the one before the switch goes, the two newest stay
    write_delta(st, 2, 8, encode_delta(2, 8, ref5, {"t-0": (8, 8)}))
    assert write_base(st, 2, 8, encode_base(2, 8, {"t-0": (8, 8)})) is not None
    prune_stable(st, keep=1)
    assert list_stable_objects(st) == ([(2, 8)], [(2, 1), (2, 5), (2, 8)])
    prune_stable(st, keep=1, keep_bases=2)
    assert list_stable_objects(st) == ([(2, 8)], [(2, 5), (2, 8)])
    assert read_latest_stable(st).offsets("t", 0) == (8, 8)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="keep_bases"):
        prune_stable(st, keep=1, keep_bases=1)


# ------------------------------------------------------------------ the publisher
def _factory(engine: TransactionCoordinator, recovered: Any) -> TxnLog:
    return TxnLog(engine.storage, recovered.next_offset, snapshot_fn=engine.to_snapshot,
                  snapshot_offsets=recovered.snapshot_offsets,
                  protected_fn=lambda: list(engine.takeover_offsets),
                  on_fatal=lambda exc: None)


async def _start(st: Storage, keep: int = 10) -> TransactionCoordinator:
    engine = TransactionCoordinator(st, stable_keep=keep)
    await engine.start(_factory, await asyncio.to_thread(recover, st))
    return engine


class Producer:
    """One transactional id committing one record in each partition it is given."""

    def __init__(self, engine: TransactionCoordinator, st: Storage, tid: str) -> None:
        self.engine, self.st, self.tid = engine, st, tid
        self.pid = self.epoch = -1

    async def txn(self, parts: list[tuple[str, int]], commit: bool = True
                  ) -> dict[str, int]:
        """{"t-p": base offset} of the records of one transaction, once it is complete."""
        if self.pid < 0:
            r = await self.engine.init_producer_id(self.tid)
            self.pid, self.epoch = r["producer_id"], r["epoch"]
        res = await self.engine.reserve(self.pid, self.epoch, [
            {"topic": t, "partition": p, "base_sequence": 0, "count": 1} for t, p in parts])
        written, bases = [], {}
        for item in res:
            t, p, b = item["topic"], item["partition"], item["base_offset"]
            assert await asyncio.to_thread(write, self.st, t, p, b, self.pid, self.epoch,
                                           [f"{self.tid}@{b}"])
            written.append({"topic": t, "partition": p, "base_offset": b})
            bases[f"{t}-{p}"] = b
        r = await self.engine.end_txn(self.tid, self.pid, self.epoch, commit, written=written)
        self.pid, self.epoch = r["producer_id"], r["epoch"]
        return bases


@pytest.fixture
def small_rebase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new base every few changed partitions, so heads switch bases all the time."""
    monkeypatch.setattr(stable_publisher, "REBASE_MIN", 3)
    monkeypatch.setattr(stable_publisher, "REBASE_FRACTION", 10_000)
    monkeypatch.setattr(stable_publisher, "PRUNE_EVERY", 1)


PARTS = [("a", p) for p in range(8)] + [("b", p) for p in range(4)]


async def _idempotent_write(engine: TransactionCoordinator, st: Storage, pid: int,
                            seqs: dict[tuple[str, int], int], topic: str, p: int,
                            tid: str | None = None) -> None:
    """Reserve, write and confirm one record (of a producer's open transaction if ``tid``,
    else idempotent), answered once a head shows it: the HW moves, and only the journal
    of changed partitions (no completed transaction) tells the publisher where."""
    seq = seqs.get((topic, p), 0)
    (item,) = await engine.reserve(pid, 0, [{"topic": topic, "partition": p,
                                             "base_sequence": seq, "count": 1}])
    seqs[(topic, p)] = seq + 1
    assert await asyncio.to_thread(write, st, topic, p, item["base_offset"], pid, 0, ["i"], seq)
    await engine.confirm(pid, 0, [{"topic": topic, "partition": p,
                                   "base_offset": item["base_offset"]}], wait_stable=True)


def test_each_head_publishes_what_a_full_recompute_gives(every_root: str, small_rebase: None
                                                         ) -> None:
    """The incremental view (partitions changed since the last head) equals the full scan
    after every commit, abort, idempotent write and write of a transaction left open,
    across many base switches, with pruning after every head (keep=1): the newest head's
    base is always there."""
    st = Storage.for_url(every_root)
    rng = random.Random(12)

    async def scenario() -> None:
        engine = await _start(st, keep=1)
        await engine.create_topic("a", 8)
        await engine.create_topic("b", 4)
        producers = [Producer(engine, st, f"p{i}") for i in range(3)]
        idem = (await engine.init_producer_id(None))["producer_id"]
        opened = (await engine.init_producer_id("open"))["producer_id"]
        idem_seqs: dict[tuple[str, int], int] = {}
        open_seqs: dict[tuple[str, int], int] = {}
        bases_seen = set()
        for i in range(40):
            prod = producers[i % 3]
            await prod.txn(rng.sample(PARTS, rng.randint(1, 4)), commit=rng.random() > 0.2)
            await _idempotent_write(engine, st, idem, idem_seqs, *rng.choice(PARTS))
            if i < 30:  # a transaction that stays open: its HW moves, its LSO may not
                await _idempotent_write(engine, st, opened, open_seqs, *rng.choice(PARTS),
                                        tid="open")
            snap = await asyncio.to_thread(read_latest_stable, st)
            assert snap is not None and snap.key == engine.stable_written.key  # type: ignore
            assert dict(snap.partitions) == engine.hw_lso(), i
            if snap.base is not None:
                bases_seen.add(snap.base.ref.key)
        await engine.stop()
        assert len(bases_seen) >= 4, bases_seen  # the heads switched bases many times

    asyncio.run(scenario())


def test_a_transaction_is_seen_in_all_partitions_or_none_through_deltas(
        every_root: str, small_rebase: None) -> None:
    """A reader polling in a thread while transactions across three partitions of two
    topics commit concurrently (and bases switch under it): for every snapshot it took,
    each committed transaction is visible (LSO above its record) in all its partitions or
    in none, and no partition's HW or LSO ever went back."""
    st = Storage.for_url(every_root)
    seen: list[StableSnapshot] = []
    done = threading.Event()

    def reader() -> None:
        last = None
        while not done.is_set():
            snap = read_latest_stable(st, not_below=last)
            if snap is not None and snap is not last:
                seen.append(snap)
            last = snap

    async def scenario() -> list[dict[str, int]]:
        engine = await _start(st)
        await engine.create_topic("a", 8)
        await engine.create_topic("b", 4)
        rng = random.Random(3)
        producers = [Producer(engine, st, f"p{i}") for i in range(4)]
        th = threading.Thread(target=reader)
        th.start()
        txns: list[dict[str, int]] = []

        async def run(prod: Producer) -> None:
            for _ in range(8):
                parts = [("a", rng.randrange(8)), ("a", rng.randrange(8)), ("b", rng.randrange(4))]
                txns.append(await prod.txn(sorted(set(parts))))

        try:
            await asyncio.gather(*(run(p) for p in producers))
        finally:
            done.set()
            await asyncio.to_thread(th.join)
            await engine.stop()
        return txns

    txns = asyncio.run(scenario())
    assert len(seen) > 5
    for before, after in itertools.pairwise(seen):
        assert after.key > before.key
        for key, (hw, lso) in before.partitions.items():
            assert after.partitions[key][0] >= hw and after.partitions[key][1] >= lso, key
    final = read_latest_stable(st)
    assert final is not None
    for bases in txns:
        assert all(final.partitions[k][1] > b for k, b in bases.items())  # all committed
        for snap in seen:
            visible = {k: snap.partitions.get(k, (0, 0))[1] > b for k, b in bases.items()}
            assert len(set(visible.values())) == 1, (snap.key, bases, visible)


def test_takeover_never_goes_back_and_a_fenced_coordinators_late_objects_never_win(
        every_root: str, small_rebase: None) -> None:
    st = Storage.for_url(every_root)

    async def scenario() -> None:
        first = await _start(st)
        await first.create_topic("a", 8)
        prod = Producer(first, st, "x")
        for i in range(6):
            await prod.txn([("a", i), ("a", (i + 1) % 8)])
        held = await asyncio.to_thread(read_latest_stable, st)
        assert held is not None and held.key[0] == first.coordinator_epoch
        old_base = held.base
        assert old_base is not None
        await first.halt()  # killed; it may still write late (a zombie)
        second = await _start(st)
        assert second.coordinator_epoch > first.coordinator_epoch
        now = await asyncio.to_thread(read_latest_stable, st, held)
        assert now is not None and now.key[0] == second.coordinator_epoch
        assert now.base is not None and now.base.ref.key[0] == second.coordinator_epoch
        for key, (hw, lso) in held.partitions.items():
            assert now.partitions[key][0] >= hw and now.partitions[key][1] >= lso
        # the zombie's late delta (over its own base), late base and late full snapshot
        e1 = first.coordinator_epoch
        bogus = {"a-0": (10_000, 10_000)}
        assert write_delta(st, e1, 10_000, encode_delta(e1, 10_000, old_base.ref, bogus))
        late = write_base(st, e1, 10_001, encode_base(e1, 10_001, bogus))
        assert late is not None
        assert write_delta(st, e1, 10_002, encode_delta(e1, 10_002, late, bogus))
        assert write_stable(st, make_snapshot(e1, 10_003, bogus))
        # ... and its prune (it keeps running until it learns it is fenced)
        await asyncio.to_thread(prune_stable, st, 1)
        p2 = Producer(second, st, "y")
        await p2.txn([("a", 0)])
        stable.clear_base_cache()
        after = await asyncio.to_thread(read_latest_stable, st)
        assert after is not None and after.key[0] == second.coordinator_epoch
        assert after.offsets("a", 0)[0] < 10_000
        assert dict(after.partitions) == second.hw_lso()
        await second.stop()

    asyncio.run(scenario())


def test_an_old_root_is_converted_without_a_stop(file_root: str) -> None:
    """A root as the previous version left it (its coordinator's log, full snapshots only):
    a new coordinator reads the newest full snapshot as its floor, writes a base and delta
    heads at the next epoch, and pruning removes the full snapshots in time."""
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        old = await _start(st)
        await old.create_topic("a", 4)
        prod = Producer(old, st, "x")
        for i in range(3):
            await prod.txn([("a", i), ("a", 3)])
        view = old.hw_lso()
        await old.stop()
        # what the previous version published: full snapshots of every partition
        for key in stable.list_stable(st):
            st.delete(layout.stable_path(*key))
        for _, key in [(0, k) for k in list_stable_objects(st)[1]]:
            st.delete(layout.stable_base_path(*key))
        for seq in (1, 2):
            assert write_stable(st, make_snapshot(old.coordinator_epoch, seq, view))
        reader_held = read_latest_stable(st)
        assert reader_held is not None and reader_held.base is None
        new = await _start(st, keep=2)
        p = Producer(new, st, "y")
        for i in range(4):
            await p.txn([("a", i)])
        snap = await asyncio.to_thread(read_latest_stable, st, reader_held)
        assert snap is not None and snap.base is not None
        assert snap.key[0] == old.coordinator_epoch + 1
        for key, (hw, lso) in view.items():
            assert snap.partitions[key][0] >= hw and snap.partitions[key][1] >= lso
        await asyncio.to_thread(prune_stable, st, 2)
        heads = stable.list_stable(st)
        assert all(k[0] == new.coordinator_epoch for k in heads), heads
        await new.stop()

    asyncio.run(scenario())


def test_a_commit_in_a_broad_root_writes_a_head_of_its_own_partitions(file_root: str) -> None:
    """With 2,000 partitions in the root, a one-partition commit's head names one
    partition; the base holding all of them was written once, at takeover."""
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        engine = await _start(st)
        await engine.create_topic("hot", 1)
        await engine.create_topic("wide", 2000)
        prod = Producer(engine, st, "x")
        await prod.txn([("hot", 0)])
        bases_before = list_stable_objects(st)[1]
        for _ in range(5):
            await prod.txn([("hot", 0)])
        heads, bases = list_stable_objects(st)
        assert bases == bases_before  # no base on the commit path
        raw = json.loads(st.get(layout.stable_path(*heads[-1])))
        assert raw["kind"] == "delta" and set(raw["changed"]) <= {"hot-0"}, raw["changed"]
        assert set(raw.get("tails", {})) <= {"hot-0"}
        # what is left beside hot-0's own tail of runs (its markers' places in shared
        # objects, until merged) is a few hundred bytes: nothing of the other 2,000
        tail_bytes = len(json.dumps({k: raw[k] for k in ("objects", "tails") if k in raw},
                                    separators=(",", ":")))
        assert len(st.get(layout.stable_path(*heads[-1]))) - tail_bytes < 400
        await engine.stop()

    asyncio.run(scenario())


def test_an_unknown_record_kind_recomputes_every_partition() -> None:
    state = CoordinatorState()
    assert touched(state, LogRecord("takeover", {})) == set()
    assert touched(state, LogRecord("reserve", {"parts": [["t", 3, 0, 1, 9]]})) == {"t-3"}
    assert touched(state, LogRecord("something_new", {})) is None
