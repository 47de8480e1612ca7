"""Lay out a partition on storage the way the coordinator would, and know what readers see.

Tests describe a log step by step (data batches, transactional batches, COMMIT/ABORT
markers, 0-byte fences, batches with gaps or no records) and the builder writes real objects
(`encode_arrow`, `encode_markers`, `encode_txn_index`, `records.encode_batch`) put-if-absent,
while keeping a model: which offsets hold data records and whether each is committed,
aborted or still open. `expected(isolation, start, end)` gives the offsets a correct reader
returns; `publish()` writes the stable snapshot (HW = next offset, LSO = first open txn).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from txnlog.log_format.arrow.arrow_codec import encode_arrow
from txnlog.log_format.codec.control import ControlType, Marker, encode_markers
from txnlog.log_format.codec.indexes import AbortedTxn, encode_txn_index
from txnlog.log_format.codec.records import Record, encode_batch
from txnlog.log_format.layout import partition_dir, segment_path
from txnlog.log_format.stable import make_snapshot, read_latest_stable, write_stable
from txnlog.log_format.storage import Storage

BASE_TS = 1_700_000_000_000


@dataclass
class ModelRecord:
    offset: int
    key: bytes
    value: bytes
    timestamp_ms: int
    producer_id: int  # -1: not transactional
    state: str  # "plain" | "open" | "committed" | "aborted"


@dataclass
class PartitionBuilder:
    storage: Storage
    topic: str
    partition: int = 0
    epoch: int = 1
    leo: int = 0  # next offset to hand out
    records: list[ModelRecord] = field(default_factory=list)
    open_txns: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    _object: bytearray = field(default_factory=bytearray)
    _object_base: int | None = None
    _object_aborts: list[AbortedTxn] = field(default_factory=list)
    _seq: int = 0
    _clock: int = BASE_TS

    # ---------------------------------------------------------------- building blocks
    def _append(self, data: bytes, count: int) -> int:
        if self._object_base is None:
            self._object_base = self.leo
        base = self.leo
        self._object += data
        self.leo += count
        return base

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def data(self, n: int = 3, *, pid: int = -1, epoch: int = 0, tag: str = "r",
             flush: bool = False, max_batch_bytes: int = 1 << 20,
             value_size: int = 0) -> list[int]:
        """`n` records in one or more batches (transactional when pid >= 0)."""
        base = self.leo
        stamps = [self._tick() for _ in range(n)]
        keys = [f"{tag}-k{base + i}".encode() for i in range(n)]
        values = [f"{tag}-v{base + i}".encode().ljust(value_size, b".") for i in range(n)]
        cols = pa.record_batch({
            "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(stamps, pa.int64())})
        txn = pid >= 0
        enc = encode_arrow(cols, producer_id=pid, producer_epoch=epoch if txn else -1,
                           base_sequence=0 if txn else -1, transactional=txn,
                           max_batch_bytes=max_batch_bytes)
        self._append(enc.with_base_offset(base), n)
        if txn:
            self.open_txns.setdefault(pid, base)
        for i in range(n):
            self.records.append(ModelRecord(base + i, keys[i], values[i], stamps[i], pid,
                                            "open" if txn else "plain"))
        if flush:
            self.flush()
        return list(range(base, base + n))

    def raw_batch(self, deltas: list[int], *, last_offset_delta: int | None = None,
                  pid: int = -1, tag: str = "g", flush: bool = False) -> list[int]:
        """One batch whose records sit at `base + delta` (gaps = compacted records); an empty
        `deltas` with `last_offset_delta` is a batch with no records at all."""
        base = self.leo
        recs = []
        for d in deltas:
            ts = self._tick()
            rec = Record(base + d, ts, f"{tag}-k{base + d}".encode(),
                         f"{tag}-v{base + d}".encode())
            recs.append(rec)
            self.records.append(ModelRecord(rec.offset, rec.key or b"", rec.value or b"", ts,
                                            pid, "plain" if pid < 0 else "open"))
        span = (last_offset_delta if last_offset_delta is not None else deltas[-1]) + 1
        data = encode_batch(recs, base_offset=base, producer_id=pid,
                            producer_epoch=0 if pid >= 0 else -1,
                            base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0,
                            last_offset_delta=span - 1, now_ms=self._clock)
        if pid >= 0:
            self.open_txns.setdefault(pid, base)
        self._append(data, span)
        if flush:
            self.flush()
        return [base + d for d in deltas]

    def markers(self, ends: list[tuple[int, bool]], *, flush: bool = True) -> int:
        """Markers (pid, commit?) at consecutive offsets, in one object as the coordinator
        writes them; ABORTs of pids with data here get a `.txnindex` entry."""
        if flush:
            self.flush()
        base = self.leo
        ms = [Marker(ControlType.COMMIT if commit else ControlType.ABORT, pid, 0, self.epoch,
                     self._tick()) for pid, commit in ends]
        self._append(encode_markers(ms, base_offset=base), len(ms))
        for i, (pid, commit) in enumerate(ends):
            first = self.open_txns.pop(pid, None)
            for r in self.records:
                if r.producer_id == pid and r.state == "open":
                    r.state = "committed" if commit else "aborted"
            if not commit and first is not None:
                others = [f for p, f in self.open_txns.items() if p != pid]
                lso = min(others) if others else base + i + 1
                self._object_aborts.append(AbortedTxn(pid, first, base + i, lso))
        if flush:
            self.flush()
        return base

    def commit(self, pid: int, **kw: bool) -> int:
        return self.markers([(pid, True)], **kw)

    def abort(self, pid: int, **kw: bool) -> int:
        return self.markers([(pid, False)], **kw)

    def fence(self, span: int) -> int:
        """A 0-byte `.log` at the next offset covering `span` offsets (fenced reservation)."""
        self.flush()
        base = self.leo
        assert self.storage.put_if_absent(segment_path(self.topic, self.partition, base), b"")
        self.leo += span
        return base

    def flush(self) -> int | None:
        """Write the pending object (and its `.txnindex`); returns its base offset."""
        if self._object_base is None:
            return None
        base = self._object_base
        assert self.storage.put_if_absent(segment_path(self.topic, self.partition, base),
                                          bytes(self._object))
        if self._object_aborts:
            assert self.storage.put_if_absent(
                segment_path(self.topic, self.partition, base, ".txnindex"),
                encode_txn_index(self._object_aborts))
        self._object = bytearray()
        self._object_base = None
        self._object_aborts = []
        return base

    # ---------------------------------------------------------------- publishing
    @property
    def hw(self) -> int:
        return self.leo

    @property
    def lso(self) -> int:
        return min([self.hw, *self.open_txns.values()])

    def publish(self, hw: int | None = None, lso: int | None = None) -> None:
        """Flush and write a stable snapshot for this partition (merged with the latest)."""
        self.flush()
        latest = read_latest_stable(self.storage)
        parts = dict(latest.partitions) if latest else {}
        seq = latest.seq + 1 if latest else 0
        parts[partition_dir(self.topic, self.partition)] = (
            self.hw if hw is None else hw, self.lso if lso is None else lso)
        assert write_stable(self.storage, make_snapshot(self.epoch, seq, parts))

    # ---------------------------------------------------------------- the model
    def expected(self, isolation: str = "read_committed", start: int = 0,
                 end: int | None = None) -> list[ModelRecord]:
        bound = self.lso if isolation == "read_committed" else self.hw
        end = bound if end is None else min(end, bound)
        out = []
        for r in sorted(self.records, key=lambda r: r.offset):
            if not start <= r.offset < end:
                continue
            if isolation == "read_committed" and r.state in ("aborted", "open"):
                continue
            out.append(r)
        return out
