"""Idempotent data becomes visible by itself, and ``flush`` waits for all of it.

Found through the gateway's bench: 100,000 records sent and flushed through an
``IdempotentProducer`` were published with HW 0. ``send`` writes a full buffer itself without
waiting (``buffer_records``), so ``flush`` found nothing left and returned at once; and the
coordinator published a head after a confirm only when the confirming client waited, so the
confirmed ranges stayed invisible until some other change published one.
"""

from __future__ import annotations

import time

from txnlog import IdempotentProducer
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

from tests.coordinator_proc import CoordinatorProc


def _published_hw(root: str) -> int:
    Storage.clear_cache()  # a fresh reader: the newest head, nothing cached
    return PartitionReader(Storage.for_url(root), "t", 0).high_watermark()


def test_flush_waits_for_what_a_full_buffer_wrote(file_root: str) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 1)
        with IdempotentProducer(file_root, coordinator=coord.endpoint,
                                buffer_records=10) as producer:
            for i in range(20):  # two full buffers, written by send itself
                producer.send("t", f"v{i}".encode(), partition=0)
            producer.flush()  # nothing left to write: still returns only once published
            assert _published_hw(file_root) == 20


def test_confirmed_data_is_published_without_anyone_waiting(file_root: str) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 1)
        producer = IdempotentProducer(file_root, coordinator=coord.endpoint, buffer_records=5)
        for i in range(5):  # a full buffer: written and confirmed, nobody waits
            producer.send("t", f"v{i}".encode(), partition=0)
        deadline = time.monotonic() + 60
        while _published_hw(file_root) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _published_hw(file_root) == 5
