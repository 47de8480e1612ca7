"""The log cleaner's bytes (log_format/log_cleaner.py): Kafka's compaction rules, checked
against a model.

A hypothesis state machine writes keyed records, tombstones, committed and aborted
transactions (interleaved, some left open), rolls segments and compacts the closed ones
below the LSO at random moments with a clock that moves. At every step:

- a read_committed read of the whole log (cleaned segments, then what is not cleaned yet,
  through ``decode_to_arrow`` + ``AbortedFilter``, the readers' path) gives exactly the
  model's latest value per key (a tombstone: the key is absent);
- every record read sits at the offset it was written at, with its key and value (offsets
  are never renumbered);
- kafka-python parses every cleaned segment, CRCs included, and agrees record for record;
- a second cleaning of the same inputs gives the same bytes (what a restart relies on).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafka.record import MemoryRecords
from txnlog.log_format.arrow.arrow_codec import AbortedFilter, decode_to_arrow
from txnlog.log_format.codec.compression import Codec
from txnlog.log_format.codec.control import ControlType, encode_control_batch
from txnlog.log_format.codec.indexes import (
    AbortedTxn,
    build_indexes,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    encode_txn_index,
)
from txnlog.log_format.codec.records import decode_batches, encode_batch
from txnlog.log_format.segments.log_cleaner import (
    CleanerInput,
    ProducerLast,
    build_offset_map,
    clean_log,
    group_by_size,
)

KEYS = [b"k%d" % i for i in range(4)]
# sparse index entries every 64 bytes (Kafka's default, 4096, gives the model's segments of
# 100-1000 bytes one entry each): the cleaned segments' whole indexes are compared
INDEX_INTERVAL = 64


@dataclass
class Seg:
    base: int
    end: int
    data: bytes
    txn: list[AbortedTxn] = field(default_factory=list)

    def as_input(self) -> CleanerInput:
        return CleanerInput(self.base, self.end, self.data,
                            encode_txn_index(self.txn) if self.txn else None, f"seg@{self.base}")


class LogWithModel:
    """A partition's log (closed segments, the open one) and the model of what it holds."""

    def __init__(self) -> None:
        self.closed: list[Seg] = []  # contiguous from offset 0
        self.open: list[bytes] = []
        self.open_txn: list[AbortedTxn] = []
        self.open_base = 0
        self.next_offset = 0
        self.written: dict[int, tuple[bytes | None, bytes | None]] = {}
        self.txn_of: dict[int, int] = {}  # offset -> the transaction (pid) it was written in
        self.outcome: dict[int, bool] = {}  # pid -> committed (absent: still open)
        self.txns: dict[int, tuple[int, dict[bytes, bytes | None]]] = {}  # pid -> first, writes
        self.last_of: dict[int, ProducerLast] = {}
        self.now = 1_000_000
        self.first_dirty = 0
        self.cleaned_upto = 0  # closed[:n] are cleaned outputs

    def append(self, batch: bytes, n: int) -> int:
        base = self.next_offset
        self.open.append(batch)
        self.next_offset += n
        return base

    def write(self, records: list[tuple[bytes, bytes | None]], pid: int, codec: Codec) -> None:
        base = self.next_offset
        txn = pid in self.txns
        data = encode_batch([(k, v, (), self.now) for k, v in records], base_offset=base,
                            producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                            base_sequence=0 if pid >= 0 else -1, transactional=txn,
                            compression=codec)
        self.append(data, len(records))
        for i, (k, v) in enumerate(records):
            self.written[base + i] = (k, v)
            if txn:
                self.txn_of[base + i] = pid
        if txn:
            self.txns[pid][1].update(records)
        if pid >= 0:
            self.last_of[pid] = ProducerLast(base + len(records) - 1, 0)

    def end_txn(self, pid: int, commit: bool) -> None:
        first, writes = self.txns.pop(pid)
        at = self.next_offset
        self.append(encode_control_batch(ControlType.COMMIT if commit else ControlType.ABORT,
                                         producer_id=pid, producer_epoch=0,
                                         coordinator_epoch=0, base_offset=at,
                                         timestamp_ms=self.now), 1)
        self.outcome[pid] = commit
        if not commit:
            self.open_txn.append(AbortedTxn(pid, first, at, self.lso()))
        self.last_of[pid] = ProducerLast(None, 0) if not writes else self.last_of[pid]

    def model(self, below: int) -> dict[bytes, bytes]:
        """The latest committed value per key among offsets below ``below`` (tombstones
        delete the key)."""
        out: dict[bytes, bytes | None] = {}
        for offset in sorted(o for o in self.written if o < below):
            pid = self.txn_of.get(offset)
            if pid is None or self.outcome.get(pid) is True:
                key, value = self.written[offset]
                out[key] = value
        return {k: v for k, v in out.items() if v is not None}

    def lso(self) -> int:
        firsts = [f for f, _ in self.txns.values()]
        return min(firsts) if firsts else self.next_offset

    def roll(self) -> None:
        if not self.open:
            return
        self.closed.append(Seg(self.open_base, self.next_offset, b"".join(self.open),
                               self.open_txn))
        self.open, self.open_txn, self.open_base = [], [], self.next_offset

    def clean(self, retention_ms: int, segment_bytes: int) -> None:
        lso = self.lso()
        n = 0
        while n < len(self.closed) and self.closed[n].end <= lso:
            n += 1
        if n == 0:
            return
        inputs = [s.as_input() for s in self.closed[:n]]
        beyond = [e for s in self.closed[n:] for e in s.txn] + self.open_txn
        kwargs = dict(first_dirty=self.first_dirty, aborted_beyond=beyond,
                      active_producers=dict(self.last_of), now_ms=self.now,
                      delete_retention_ms=retention_ms, segment_bytes=segment_bytes,
                      index_interval_bytes=INDEX_INTERVAL)
        result = clean_log(inputs, **kwargs)
        again = clean_log(inputs, **kwargs)
        assert [(s.log, s.index, s.timeindex, s.txnindex) for s in result.segments] == \
            [(s.log, s.index, s.timeindex, s.txnindex) for s in again.segments]
        new = [Seg(s.base_offset, s.end_offset, s.log,
                   decode_txn_index(s.txnindex) if s.txnindex else [])
               for s in result.segments]
        for s in result.segments:  # the indexes are Kafka's for the cleaned bytes
            idx, tidx = build_indexes(s.log, s.base_offset, index_interval_bytes=INDEX_INTERVAL)
            assert decode_offset_index(s.index, s.base_offset) == idx
            assert decode_time_index(s.timeindex, s.base_offset) == tidx
        self.closed[:n] = new
        self.first_dirty = result.upper

    # ------------------------------------------------------------------ reading back
    def segments(self) -> list[Seg]:
        tail = [Seg(self.open_base, self.next_offset, b"".join(self.open), self.open_txn)] \
            if self.open else []
        return self.closed + tail

    def read_committed(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """What a read_committed consumer of the whole log gets, up to the LSO."""
        lso = self.lso()
        entries = [e for s in self.segments() for e in s.txn]
        aborted = AbortedFilter(entries)
        out = []
        cursor = 0
        for s in self.segments():
            if not s.data or s.base >= lso:
                continue
            res = decode_to_arrow(s.data, topic="t", partition=0, start_offset=cursor,
                                  end_offset=lso, aborted=aborted)
            cursor = max(cursor, res.next_offset)
            t = res.batch
            out += list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                            t.column("value").to_pylist(), strict=True))
        return out


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log = LogWithModel()
        self.next_pid = 100

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
          tomb=st.lists(st.booleans(), min_size=3, max_size=3),
          gz=st.booleans(), idempotent=st.booleans())
    def write(self, keys: list[bytes], tomb: list[bool], gz: bool, idempotent: bool) -> None:
        val = b"v%d" % self.log.next_offset
        recs = [(k, None if t else val + b".%d" % i)
                for i, (k, t) in enumerate(zip(keys, tomb, strict=False))]
        self.log.write(recs, 1 if idempotent else -1, Codec.GZIP if gz else Codec.NONE)

    @rule()
    def begin(self) -> None:
        pid = self.next_pid
        self.next_pid += 1
        self.log.txns[pid] = (self.log.next_offset, {})

    @precondition(lambda self: bool(self.log.txns))
    @rule(data=st.data(), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
          tomb=st.booleans())
    def txn_write(self, data: st.DataObject, keys: list[bytes], tomb: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.log.txns)))
        val = b"t%d" % self.log.next_offset
        _, writes = self.log.txns[pid]
        if not writes:  # the transaction's first offset is its first data batch
            self.log.txns[pid] = (self.log.next_offset, writes)
        self.log.write([(k, None if tomb and i == 0 else val) for i, k in enumerate(keys)],
                       pid, Codec.NONE)

    @precondition(lambda self: bool(self.log.txns))
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.log.txns)))
        self.log.end_txn(pid, commit)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(advance=st.sampled_from([0, 10, 1000]), segment_bytes=st.sampled_from([100, 400,
                                                                                 1 << 20]))
    def clean(self, advance: int, segment_bytes: int) -> None:
        self.log.now += advance
        self.log.clean(retention_ms=500, segment_bytes=segment_bytes)

    @invariant()
    def reads_the_model(self) -> None:
        rows = self.log.read_committed()
        table: dict[bytes, bytes | None] = {}
        last = -1
        for offset, key, value in rows:
            assert offset > last
            last = offset
            assert self.log.written[offset] == (key, value), f"offset {offset} renumbered"
            table[key] = value
        got = {k: v for k, v in table.items() if v is not None}
        assert got == self.log.model(self.log.lso())

    @invariant()
    def kafka_python_parses(self) -> None:
        for s in self.log.closed:
            mr = MemoryRecords(s.data)
            ours = [(r.offset, r.key, r.value) for b in decode_batches(s.data) for r in b]
            theirs = []
            while (batch := mr.next_batch()) is not None:
                assert batch.validate_crc()
                theirs += [(r.offset, r.key, r.value) for r in batch]
            assert theirs == ours


TestCleanerModel = CleanerMachine.TestCase
EXAMPLES = int(os.environ.get("TXNLOG_CLEANER_EXAMPLES", "80"))  # a planted bug: caught at 80
TestCleanerModel.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
                                     suppress_health_check=list(HealthCheck))


# ----------------------------------------------------------------------- Kafka's rules


def _seg(batches: list[bytes], base: int, end: int, txn: list[AbortedTxn] | None = None
         ) -> CleanerInput:
    return CleanerInput(base, end, b"".join(batches),
                        encode_txn_index(txn) if txn else None, f"seg@{base}")


def test_latest_per_key_kept_offsets_kept() -> None:
    b0 = encode_batch([(b"a", b"1", (), 1), (b"b", b"1", (), 1), (b"a", b"2", (), 1)])
    b1 = encode_batch([(b"b", b"2", (), 2)], base_offset=3)
    out = clean_log([_seg([b0], 0, 3), _seg([b1], 3, 4)], first_dirty=0, now_ms=10)
    assert len(out.segments) == 1 and out.upper == 4
    batches = decode_batches(out.segments[0].log)
    assert [(r.offset, r.key, r.value) for b in batches for r in b] == \
        [(2, b"a", b"2"), (3, b"b", b"2")]
    assert batches[0].header.base_offset == 0 and batches[0].header.last_offset_delta == 2
    assert out.segments[0].log.endswith(b1)  # a batch that keeps all its records: same bytes


def test_tombstone_gets_a_horizon_then_goes() -> None:
    b0 = encode_batch([(b"a", b"1", (), 1)])
    b1 = encode_batch([(b"a", None, (), 2)], base_offset=1)
    first = clean_log([_seg([b0, b1], 0, 2)], first_dirty=0, now_ms=1000,
                      delete_retention_ms=500)
    (batch,) = decode_batches(first.segments[0].log)
    assert batch.header.delete_horizon_ms == 1500 and batch.records[0].value is None
    assert batch.records[0].timestamp == 2  # record timestamps survive the new base
    # the next cleanings (new dirty data: another key) keep it until the horizon
    dirty = _seg([encode_batch([(b"b", b"1", (), 3)], base_offset=2)], 2, 3)
    seg = CleanerInput(0, 2, first.segments[0].log)
    kept = clean_log([seg, dirty], first_dirty=2, now_ms=1499, delete_retention_ms=500,
                     segment_bytes=1)
    assert kept.segments[0].log == first.segments[0].log
    gone = clean_log([seg, dirty], first_dirty=2, now_ms=1500, delete_retention_ms=500,
                     segment_bytes=1)
    assert gone.segments[0].log == b"" and gone.segments[1].log == dirty.data


def test_aborted_data_goes_marker_stays_until_data_gone_and_horizon() -> None:
    pid = 7
    data = encode_batch([(b"a", b"x", (), 1)], base_offset=0, producer_id=pid,
                        producer_epoch=0, base_sequence=0, transactional=True)
    abort = encode_control_batch(ControlType.ABORT, producer_id=pid, producer_epoch=0,
                                 coordinator_epoch=0, base_offset=1, timestamp_ms=1)
    good = encode_batch([(b"a", b"y", (), 1)], base_offset=2)
    txn = [AbortedTxn(pid, 0, 1, 2)]
    first = clean_log([_seg([data, abort, good], 0, 3, txn)], first_dirty=0, now_ms=100,
                      delete_retention_ms=50)
    seg = first.segments[0]
    hdrs = [b.header for b in decode_batches(seg.log)]
    assert [h.is_control for h in hdrs] == [True, False]  # data gone, marker kept
    assert not hdrs[0].has_delete_horizon  # its data was seen in this pass
    assert decode_txn_index(seg.txnindex) == txn  # the entry stays with the marker
    dirty = _seg([encode_batch([(b"z", b"1", (), 3)], base_offset=3)], 3, 4)
    second = clean_log([CleanerInput(0, 3, seg.log, seg.txnindex), dirty], first_dirty=3,
                       now_ms=100, delete_retention_ms=50, segment_bytes=1)
    h = decode_batches(second.segments[0].log)[0].header
    assert h.is_control and h.delete_horizon_ms == 150 and second.segments[0].txnindex is None
    third = clean_log([CleanerInput(0, 3, second.segments[0].log), dirty], first_dirty=3,
                      now_ms=150, delete_retention_ms=50, segment_bytes=1)
    assert [b.header.is_control for b in decode_batches(third.segments[0].log)] == [False]


def test_aborted_data_does_not_shadow_committed_values() -> None:
    pid = 9
    good = encode_batch([(b"a", b"committed", (), 1)], base_offset=0)
    bad = encode_batch([(b"a", b"aborted", (), 1)], base_offset=1, producer_id=pid,
                       producer_epoch=0, base_sequence=0, transactional=True)
    out = clean_log([_seg([good, bad], 0, 2)], first_dirty=0, now_ms=1,
                    aborted_beyond=[AbortedTxn(pid, 1, 5, 6)])  # the marker lies later
    assert [r.value for b in decode_batches(out.segments[0].log) for r in b] == [b"committed"]


def test_commit_marker_goes_once_its_transaction_has_no_data() -> None:
    pid = 3
    data = encode_batch([(b"a", b"1", (), 1)], base_offset=0, producer_id=pid,
                        producer_epoch=0, base_sequence=0, transactional=True)
    commit = encode_control_batch(ControlType.COMMIT, producer_id=pid, producer_epoch=0,
                                  coordinator_epoch=0, base_offset=1, timestamp_ms=1)
    newer = encode_batch([(b"a", b"2", (), 1)], base_offset=2)
    one = clean_log([_seg([data, commit, newer], 0, 3)], first_dirty=0, now_ms=10,
                    delete_retention_ms=5)
    # this pass traversed the transaction's (now superseded) batch: the marker stays as is
    assert [b.header.is_control for b in decode_batches(one.segments[0].log)] == [True, False]
    dirty = _seg([encode_batch([(b"z", b"1", (), 3)], base_offset=3)], 3, 4)
    two = clean_log([CleanerInput(0, 3, one.segments[0].log), dirty], first_dirty=3,
                    now_ms=10, delete_retention_ms=5, segment_bytes=1)
    assert decode_batches(two.segments[0].log)[0].header.delete_horizon_ms == 15
    three = clean_log([CleanerInput(0, 3, two.segments[0].log), dirty], first_dirty=3,
                      now_ms=15, delete_retention_ms=5, segment_bytes=1)
    assert [b.header.is_control for b in decode_batches(three.segments[0].log)] == [False]


def test_last_batch_of_an_active_producer_is_kept_empty() -> None:
    old = encode_batch([(b"a", b"1", (), 5)], base_offset=0, producer_id=4, producer_epoch=2,
                       base_sequence=17)
    newer = encode_batch([(b"a", b"2", (), 6)], base_offset=1)
    out = clean_log([_seg([old, newer], 0, 2)], first_dirty=0, now_ms=1,
                    active_producers={4: ProducerLast(0, 2)})
    first = decode_batches(out.segments[0].log)[0]
    assert first.header.records_count == 0 and first.records == []
    assert (first.header.producer_id, first.header.producer_epoch,
            first.header.base_sequence, first.header.last_offset) == (4, 2, 17, 0)
    assert MemoryRecords(out.segments[0].log).next_batch().validate_crc()
    gone = clean_log([_seg([old, newer], 0, 2)], first_dirty=0, now_ms=1)
    assert len(decode_batches(gone.segments[0].log)) == 1


def test_null_keys_are_dropped_and_counted() -> None:
    b0 = encode_batch([(None, b"x", (), 1), (b"a", b"1", (), 1)])
    out = clean_log([_seg([b0], 0, 2)], first_dirty=0, now_ms=1)
    assert [r.key for b in decode_batches(out.segments[0].log) for r in b] == [b"a"]
    assert out.stats.invalid_records == 1


def test_grouping_by_segment_bytes_and_offset_span() -> None:
    segs = [CleanerInput(i * 10, i * 10 + 10, b"x" * 40) for i in range(5)]
    assert [len(g) for g in group_by_size(segs, 100)] == [2, 2, 1]
    wide = [CleanerInput(0, 1 << 31, b""), CleanerInput(1 << 31, (1 << 31) + 1, b"")]
    assert [len(g) for g in group_by_size(wide, 100)] == [1, 1]


def test_offset_map_skips_aborted_and_clean_section() -> None:
    pid = 2
    b0 = encode_batch([(b"a", b"1", (), 1)])
    b1 = encode_batch([(b"b", b"1", (), 1)], base_offset=1, producer_id=pid,
                      producer_epoch=0, base_sequence=0, transactional=True)
    m, latest = build_offset_map([_seg([b0, b1], 0, 2)], 0, [AbortedTxn(pid, 1, 3, 4)])
    assert m == {b"a": 0} and latest == 1
    m, latest = build_offset_map([_seg([b0, b1], 0, 2)], 2, [])
    assert m == {} and latest == -1


def test_corrupt_input_is_refused() -> None:
    b0 = bytearray(encode_batch([(b"a", b"1", (), 1)]))
    b0[-1] ^= 1
    with pytest.raises(Exception, match=r"(?i)crc"):
        clean_log([CleanerInput(0, 1, bytes(b0), source="bad")], first_dirty=0, now_ms=1)
    with pytest.raises(Exception, match="outside"):
        clean_log([CleanerInput(5, 6, encode_batch([(b"a", b"1", (), 1)]))],
                  first_dirty=0, now_ms=1)


# ------------------------------------------------------------- when (LogCleanerManager)


def test_choose_cleaning_honours_lso_ratio_and_lags() -> None:
    from txnlog.coordinator.maintenance.log_cleaner import choose_cleaning, compaction_config
    from txnlog.log_format.manifest import MergedObject

    segs = [MergedObject(0, 0, 10, 100, max_timestamp=1000),
            MergedObject(0, 10, 20, 100, max_timestamp=2000),
            MergedObject(0, 20, 30, 100, max_timestamp=3000),
            MergedObject(1, 30, 35, 50, max_timestamp=3500)]  # a run: the open segment
    cfg = compaction_config({"cleanup.policy": "compact"})
    assert cfg.compact and cfg.min_cleanable_dirty_ratio == 0.5
    assert not compaction_config({"cleanup.policy": "delete"}).compact
    assert compaction_config({"cleanup.policy": "compact,delete"}).compact
    # never cleaned: all dirty, everything closed below the LSO, never the open segment
    assert choose_cleaning(segs, 0, 100, 10_000, cfg) == segs[:3]
    # the LSO inside the third segment: an undecided transaction's data is never touched
    assert choose_cleaning(segs, 0, 25, 10_000, cfg) == segs[:2]
    # clean up to 20, one dirty segment of three: ratio 1/3 < 0.5
    assert choose_cleaning(segs, 20, 100, 10_000, cfg) is None
    low = compaction_config({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.3"})
    assert choose_cleaning(segs, 20, 100, 10_000, low) == segs[:3]
    # max.compaction.lag.ms: an old dirty segment is cleaned whatever the ratio
    overdue = compaction_config({"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"})
    assert choose_cleaning(segs, 20, 100, 10_000, overdue) == segs[:3]
    assert choose_cleaning(segs, 20, 100, 7_000, overdue) is None
    # min.compaction.lag.ms: records younger than the lag stay dirty (and what follows)
    young = compaction_config({"cleanup.policy": "compact", "min.compaction.lag.ms": "8500"})
    assert choose_cleaning(segs, 0, 100, 10_000, young) == segs[:1]
    assert choose_cleaning(segs, 0, 100, 9_000, young) is None
    # nothing dirty: nothing to do
    assert choose_cleaning(segs, 30, 100, 10_000, cfg) is None


def test_max_compaction_lag_counts_from_the_first_batch_of_the_oldest_dirty_segment() -> None:
    """KIP-354 (LogCleanerManager.maxCompactionDelay): the first batch's maxTimestamp, read
    from a segment's first bytes; its largest timestamp could only find it overdue later."""
    from txnlog.coordinator.maintenance.log_cleaner import (
        FIRST_HEADER_BYTES,
        choose_cleaning,
        compaction_config,
        first_batch_timestamp,
        first_dirty_segment,
    )
    from txnlog.log_format.manifest import MergedObject

    data = encode_batch([(b"k", b"v", None, 4_000)], base_offset=20) + \
        encode_batch([(b"k", b"w", None, 8_000)], base_offset=21)
    assert first_batch_timestamp(data[:FIRST_HEADER_BYTES]) == 4_000
    assert first_batch_timestamp(b"") == -1
    segs = [MergedObject(0, 0, 10, 100, max_timestamp=1000),
            MergedObject(0, 10, 20, 100, max_timestamp=2000),
            MergedObject(0, 20, 30, 100, max_timestamp=8000)]
    assert first_dirty_segment(segs, 20, 100) == segs[2]
    assert first_dirty_segment(segs, 20, 25) is None  # past the LSO: not cleanable anyway
    cfg = compaction_config({"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"})
    assert choose_cleaning(segs, 20, 100, 10_000, cfg) is None  # by its last record: not yet
    assert choose_cleaning(segs, 20, 100, 10_000, cfg, first_batch_ms=4_000) == segs
    assert choose_cleaning(segs, 20, 100, 8_000, cfg, first_batch_ms=4_000) is None
