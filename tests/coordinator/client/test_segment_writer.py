"""coordinator/segment_writer.py, the write path both producers share, without a coordinator:
a recording client stands in for it, so each step (sequences, stamping, the lost race,
confirm) and the partition rules are checked on their own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest
from txnlog.coordinator.client import segment_writer
from txnlog.coordinator.client.segment_writer import PartitionCounts, Partitioner, SegmentWriter
from txnlog.coordinator.errors import UnknownTopicOrPartitionError
from txnlog.log_format import layout, topics
from txnlog.log_format.arrow.arrow_codec import encode_arrow, scan_batches
from txnlog.log_format.codec.partitioner import partition_for_key
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage

_io = ThreadPoolExecutor(max_workers=2)


class RecordingClient:
    """Hands out offsets from a counter per partition and records every call."""

    def __init__(self) -> None:
        self.next: dict[tuple[str, int], int] = {}
        self.calls: list[tuple[str, Any]] = []

    def reserve(self, pid: int, epoch: int, parts: dict) -> dict:
        self.calls.append(("reserve", (pid, epoch, dict(parts))))
        out = {}
        for tp, (_seq, count) in parts.items():
            out[tp] = self.next.get(tp, 0)
            self.next[tp] = out[tp] + count
        return out

    def confirm(self, pid: int, epoch: int, written: list, wait_stable: bool = False) -> None:
        self.calls.append(("confirm", (pid, epoch, list(written), wait_stable)))


def encoded(n: int, seq: int, pid: int = 7, epoch: int = 0) -> Any:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v%d" % i for i in range(n)])})
    return encode_arrow(batch, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)


def test_reserve_stamp_put_confirm(file_root: str) -> None:
    storage = Storage.for_url(file_root)
    client = RecordingClient()
    w = SegmentWriter(client, storage, 7, 0, _io)  # type: ignore[arg-type]
    first = {("t", 0): encoded(3, w.next_sequence(("t", 0))),
             ("t", 1): encoded(2, w.next_sequence(("t", 1)))}
    sizes = [len(e.stamp_base_offset(0)) for e in first.values()]
    written = w.write(w.reserve(first))
    # one shared object for both partitions, each partition's batches one run in it
    assert [(x.topic, x.partition, x.base) for x in written] == [("t", 0, 0), ("t", 1, 0)]
    assert len({x.object for x in written}) == 1
    path = written[0].object
    assert path is not None and path.startswith("_wal/00000000000000000007-00000-")
    assert [(x.position, x.size) for x in written] == [(0, sizes[0]), (sizes[0], sizes[1])]
    assert storage.list(layout.partition_dir("t", 0)) == []  # nothing per partition
    footer = shared_object.read_footer(storage.get(path))
    assert (footer.producer_id, footer.epoch) == (7, 0)
    assert footer.entries == [("t", 0, 0, 3, 0, sizes[0]), ("t", 1, 0, 2, sizes[0], sizes[1])]
    assert w.sequences == {("t", 0): 3, ("t", 1): 2}
    w.confirm(written, wait_stable=True)
    second = {("t", 0): encoded(4, w.next_sequence(("t", 0)))}
    again = w.write(w.reserve(second))
    assert [(x.topic, x.partition, x.base) for x in again] == [("t", 0, 3)]
    assert again[0].object != path  # every flush its own object
    assert client.calls[0] == ("reserve", (7, 0, {("t", 0): (0, 3), ("t", 1): (0, 2)}))
    assert client.calls[1] == ("confirm", (7, 0, written, True))
    assert client.calls[2] == ("reserve", (7, 0, {("t", 0): (3, 4)}))
    # the run carries its reserved base offset (stamped in place, CRC still valid)
    run = storage.get(again[0].object, again[0].position, again[0].position + again[0].size)
    index = scan_batches(run)
    assert [int(b) for b in index["base_offset"]] == [3]
    assert [int(s) for s in index["base_sequence"]] == [3]
    w.start_epoch(8, 1)  # a new epoch starts its sequences at 0
    assert (w.producer_id, w.epoch, w.next_sequence(("t", 0))) == (8, 1, 0)


def test_a_local_flush_goes_out_from_aligned_memory(file_root: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a local root a flush's shared object is built in memory aligned for direct I/O
    (written without a copy into the page cache), holding exactly the bytes ``build``
    gives without an allocator."""
    import numpy as np
    from txnlog.log_format.storage import DIRECT_ALIGN
    from txnlog.log_format.storage import local as local_storage

    storage = Storage.for_url(file_root)
    assert storage.writes_aligned_directly
    seen: list[tuple[int, int]] = []
    real_put = type(storage).put_if_absent

    def put(self: Any, path: str, data: Any) -> bool:
        seen.append((np.frombuffer(data, np.uint8).ctypes.data % DIRECT_ALIGN,
                     local_storage._direct_head(memoryview(data))))
        return real_put(self, path, data)

    monkeypatch.setattr(type(storage), "put_if_absent", put)
    w = SegmentWriter(RecordingClient(), storage, 7, 0, _io)  # type: ignore[arg-type]
    big = {("t", p): encoded(40_000, 0) for p in range(2)}  # past direct I/O's minimum
    reservation = w.reserve(big)
    runs = [shared_object.RunToWrite("t", p, 0, 40_000, e.stamp_base_offset(0))
            for (_t, p), e in big.items()]
    expected, _ = shared_object.build(runs, 7, 0)
    (written, *_rest) = w.write(reservation)
    assert written.object is not None
    assert storage.get(written.object) == expected
    assert len(seen) == 1 and seen[0][0] == 0 and seen[0][1] > 0, seen


def test_a_taken_name_is_retried_under_a_new_one(file_root: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing points at a shared object before its confirm, so a name found taken (only a
    64-bit collision can do that) is simply replaced; the taken object is left as it was."""
    storage = Storage.for_url(file_root)
    client = RecordingClient()
    w = SegmentWriter(client, storage, 7, 0, _io)  # type: ignore[arg-type]
    taken = layout.shared_object_path(layout.shared_object_name(7, 0, "0" * 16))
    storage.put_if_absent(taken, b"someone else's")
    nonces = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(segment_writer.secrets, "token_hex", lambda _n: next(nonces))
    written = w.write(w.reserve({("t", 0): encoded(1, 0)}))
    assert written[0].object == layout.shared_object_path(layout.shared_object_name(7, 0,
                                                                                    "1" * 16))
    assert storage.get(taken) == b"someone else's"
    assert [c for c, _ in client.calls] == ["reserve"]

def test_partition_counts_read_once_or_create(file_root: str) -> None:
    storage = Storage.for_url(file_root)
    topics.create_topic(storage, "orders", 3)
    counts = PartitionCounts(storage)
    assert counts("orders") == 3
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        counts("nope")
    created: list[str] = []
    auto = PartitionCounts(storage, create=lambda t: created.append(t) or 5)
    assert (auto("new"), auto("new"), created) == (5, 5, ["new"])


def test_partitioner_explicit_keyed_sticky() -> None:
    p = Partitioner(lambda topic: 4)
    assert p.choose("t", b"k", 2) == 2
    with pytest.raises(UnknownTopicOrPartitionError, match="no partition 4"):
        p.choose("t", None, 4)
    assert p.choose("t", b"some key", None) == partition_for_key(b"some key", 4)
    sticky = p.choose("t", None, None)
    assert {p.choose("t", None, None) for _ in range(20)} == {sticky} == {p.sticky("t")}
    p.new_batch()
    assert {p.sticky("t") for _ in range(20)} <= set(range(4))
