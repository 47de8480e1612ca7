"""Shared objects over their life: merged out of by every partition, then deleted; never
confirmed, then swept; against a real coordinator process on a file root.

A flush writes one object for all its partitions (``_wal/``). It may go only once every
partition it holds runs of has merged past it (and the grace period for readers in flight
is over); an object no confirm ever named (a zombie's, a writer killed between its put and
its confirm) goes once it was seen unnamed for longer than any confirm could still come.
"""

from __future__ import annotations

import time

from coordinator_proc import CoordinatorProc
from txnlog import IdempotentProducer
from txnlog.log_format import layout
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage

FAST = ["--merge-min-objects", "2", "--merge-fanout", "2", "--merge-interval-s", "0.1"]


def _wal(storage: Storage) -> set[str]:
    return {o.name for o in storage.list(layout.SHARED_DIR)}


def _wait(cond, what: str, timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    """A liveness bound, not a timing claim."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.1)


def _values(storage: Storage, p: int) -> list[bytes]:
    return PartitionReader(storage, "t", p).read_table().column("value").to_pylist()


def test_every_partition_merges_out_of_a_shared_object_before_it_goes(file_root: str
                                                                      ) -> None:
    storage = Storage.for_url(file_root)
    with CoordinatorProc(file_root, extra=FAST) as coord:
        coord.client().create_topic("t", 2, {"file.delete.delay.ms": "2000"})
        with IdempotentProducer(file_root, coordinator=coord.endpoint) as p:
            for i in range(3):  # three flushes, each one object holding both partitions
                p.send("t", b"a%d" % i, partition=0)
                p.send("t", b"b%d" % i, partition=1)
                p.flush()
        written = _wal(storage)
        assert len(written) == 3
        for name in written:
            footer = shared_object.read_footer(storage.get(f"{layout.SHARED_DIR}/{name}"))
            assert sorted(e.partition for e in footer.entries) == [0, 1]
        # an idle partition's last run merges too (its end is known): both partitions reach
        # their high watermark, and then nothing names the objects any more
        for p_ in (0, 1):
            _wait(lambda p_=p_: (m := read_latest_manifest(storage, "t", p_)) is not None
                  and m.end_offset == 3, f"partition {p_} merged to its end")
        _wait(lambda: _wal(storage) == set(), "the merged-away shared objects deleted")
        assert _values(storage, 0) == [b"a0", b"a1", b"a2"]
        assert _values(storage, 1) == [b"b0", b"b1", b"b2"]


def test_an_object_no_confirm_named_is_swept_and_a_named_one_is_kept(file_root: str
                                                                     ) -> None:
    storage = Storage.for_url(file_root)
    with CoordinatorProc(file_root, extra=["--merge-min-objects", "1000",
                                           "--merge-interval-s", "0.1",
                                           "--shared-orphan-age-s", "1"]) as coord:
        coord.client().create_topic("t", 2)
        with IdempotentProducer(file_root, coordinator=coord.endpoint) as p:
            p.send("t", b"kept", partition=0)
            p.send("t", b"kept too", partition=1)
            p.flush()
        (named,) = _wal(storage)
        orphan = layout.shared_object_name(999, 0, "0123456789abcdef")
        data, _ = shared_object.build([shared_object.RunToWrite("t", 0, 5, 6, b"x" * 70)],
                                      999, 0)
        assert storage.put_if_absent(f"{layout.SHARED_DIR}/{orphan}", data)
        _wait(lambda: orphan not in _wal(storage), "the orphan swept")
        assert _wal(storage) == {named}
        assert _values(storage, 0) == [b"kept"] and _values(storage, 1) == [b"kept too"]
