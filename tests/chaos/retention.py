"""Retention in the chaos harness: what ``run.py --retention`` adds.

The chaos topics get ``retention.bytes`` (a few segments of 2 KiB: closed segments are
deleted many times a minute) and the coordinators check retention every 300 ms; a thread
moves random partitions' log start offsets with DeleteRecords (to an offset between the
log start and the high watermark, inside segments too) every ~2 s, through every fault.
The checker then knows each read's log start (``log_start`` of every read op): a record
below it was deleted, not lost; a record returned below it is ``read-below-log-start``.
"""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

from . import workload

RETENTION_CONFIG = {"retention.bytes": 6144}
COORDINATOR_ARGS = ["--retention-check-interval-ms", "300"]
# Armed in coordinator-faultpoints (and mixed) runs with --retention, beside the commit
# path's: a coordinator dies between the durable steps of a log start change (DeleteTopics
# is not in the workload, so after_topic_delete_data is left to test_log_retention).
FAULT_POINTS = ("after_retain_plan", "after_retain_manifest")


def delete_records_loop(root: str, note: Any, stop: threading.Event, seed: int) -> None:
    """DeleteRecords on a random chaos partition every 1-3 s until ``stop``; failures
    (coordinator down, storage faults) are noted and retried at the next turn."""
    rng = random.Random(seed)
    storage = Storage.for_url(root)
    while not stop.wait(rng.uniform(1.0, 3.0)):
        topic, p = rng.choice(workload.partitions())
        with contextlib.suppress(Exception):
            reader = PartitionReader(storage, topic, p)
            lo, hw = reader.earliest_offset(), reader.high_watermark()
            if hw <= lo:
                continue
            target = rng.randint(lo, hw)
            client = CoordinatorClient(workload.discover(root, timeout=5.0), timeout=10,
                                       retry_for=5)
            low = client.delete_records({(topic, p): target}, timeout_ms=10_000)
            note("delete-records", tp=f"{topic}-{p}", offset=target,
                 low_watermark=low[(topic, p)])


def final_log_starts(root: str) -> dict[str, int]:
    storage = Storage.for_url(root)
    return {f"{t}-{p}": PartitionReader(storage, t, p).earliest_offset()
            for t, p in workload.partitions()}
