"""The one write path of every txnlog producer: reserve → stamp → one shared object → confirm.

The Python producers (``producer.py``) and each Spark task's member producer
(``datasource/task_writer.py``) write records the same way (DESIGN 5, 11):

1. **reserve**: one Reserve call for every partition of a flush, each with the producer's
   next sequence number and record count, so a retried call gets the same offsets;
   sequences move on at once (a retry of the same data must go through a new reserve);
2. **stamp**: each partition's encoded batches get their base offsets, in place;
3. **one shared object** ``_wal/<pid>-<epoch>-<random>.wal`` put-if-absent, holding every
   partition's batches of the flush (``log_format.segments.shared_object``): one PUT per
   flush whatever the partition count, where one object per partition made a write's cost
   follow partitions times flushes. Its name is the writer's own and random, so no one else's
   write can be in the way; a zombie's late object is simply never confirmed, and nothing
   reads what is not confirmed;
4. **confirm** the written runs with where they lie (object, position, size), in one call
   (or hand them to EndTxn, which confirms them itself). From then on the coordinator's
   published state tells readers where each partition's run is.

What to write where is decided before that, by the same two rules for both producers:
``PartitionCounts`` (a topic's partition count, read once from its metadata object) and
``Partitioner`` (the record's own partition, else murmur2 of its key, else one sticky
partition per topic: Kafka's default partitioner). The Spark writer applies the same rules to
a whole Arrow batch at once (``datasource/routing.py``), taking its sticky choice from here.

This lives in ``coordinator`` and not in ``log_format`` because it talks to the coordinator;
``datasource`` imports it (never the reverse).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import NamedTuple

from txnlog.log_format import layout, topics
from txnlog.log_format.arrow.arrow_codec import EncodedRecords
from txnlog.log_format.codec.partitioner import partition_for_key
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage, aligned_empty

from ..errors import ProducerFencedError, UnknownTopicOrPartitionError
from ..topic_config import compacts
from .coordinator_client import CoordinatorClient


def put_shared_object(put_if_absent: Callable[[str, bytes], bool], data: bytes | memoryview,
                      producer_id: int, epoch: int, attempts: int = 3) -> str | None:
    """Put a shared object's ``data`` under a fresh name of the writer's; its path, or None
    if ``attempts`` fresh names were all taken (only a 64-bit collision takes one: nothing
    points at an object before its confirm, so another name is as good)."""
    for _ in range(attempts):
        path = layout.shared_object_path(layout.shared_object_name(
            max(producer_id, 0), max(epoch, 0), secrets.token_hex(8)))
        if put_if_absent(path, data):
            return path
    return None


class WrittenRange(NamedTuple):
    """A written range as the coordinator's confirm and end_txn take it: its partition and
    base offset, and where its bytes are (``object`` None: at ``<topic>-<p>/<base>.log``,
    what the gateway's and group offsets' writes still do)."""

    topic: str
    partition: int
    base: int
    object: str | None = None
    position: int = 0
    size: int = 0


Written = WrittenRange


class PartitionCounts:
    """How many partitions each topic has, read from ``_meta/topics`` and read again after
    ``max_age_s`` (Kafka's producer ``metadata.max.age.ms``, 5 minutes): partitions can be
    added (CreatePartitions, never removed), and keyed records then follow Kafka's
    ``murmur2(key) % n`` over the new count. ``create``: called for a topic that does not
    exist and returns its partition count once created (the Spark writer's auto-creation,
    through the coordinator so the creation is in its log); without it an unknown topic is
    ``UnknownTopicOrPartitionError``.
    """

    def __init__(self, storage: Storage, create: Callable[[str], int] | None = None,
                 max_age_s: float = 300.0) -> None:
        self.storage = storage
        self.create = create
        self.max_age_s = max_age_s
        self._counts: dict[str, tuple[int, float]] = {}
        self._compacted: dict[str, bool] = {}

    def __call__(self, topic: str) -> int:
        """The partition count of ``topic`` (read again after ``max_age_s``, so partitions
        added by CreatePartitions are followed, and a changed cleanup.policy)."""
        cached = self._counts.get(topic)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.max_age_s:
            return cached[0]
        try:
            meta = topics.read_topic(self.storage, topic)
            n = meta.partitions
            self._compacted[topic] = compacts(meta.config)  # the same GET tells
        except topics.UnknownTopicError as exc:
            if cached is not None:
                return cached[0]  # deleted under a producer: its reserve is refused
            if self.create is None:
                raise UnknownTopicOrPartitionError(str(exc)) from None
            n = self.create(topic)
        self._counts[topic] = (max(n, cached[0]) if cached else n, now)
        return self._counts[topic][0]

    def compacted(self, topic: str) -> bool:
        """Whether ``topic`` has ``cleanup.policy=compact`` (records need keys there), read
        once with its metadata (a topic created by the writer itself uses the defaults)."""
        known = self._compacted.get(topic)
        if known is None:
            try:
                known = compacts(topics.read_topic(self.storage, topic).config)
            except topics.UnknownTopicError:
                known = False
            self._compacted[topic] = known
        return known


class Partitioner:
    """Kafka's default partition choice, for one producer.

    A record's own partition if it names one (checked against the topic), else
    ``toPositive(murmur2(key)) % n`` (so every Kafka client agrees where a key lives), else the
    sticky partition: one random partition per topic for null keys, kept until ``new_batch``
    (Kafka's sticky partitioner: full batches instead of one record per partition).
    """

    def __init__(self, partitions_of: Callable[[str], int]) -> None:
        self.partitions_of = partitions_of
        self._sticky: dict[str, int] = {}

    def sticky(self, topic: str, n: int | None = None) -> int:
        """The partition null-keyed records of ``topic`` go to now (``n``: its count, if known)."""
        p = self._sticky.get(topic)
        if p is None:
            p = self._sticky[topic] = random.randrange(
                self.partitions_of(topic) if n is None else n)
        return p

    def choose(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition of one record (``partition``: the one it asks for, if any)."""
        n = self.partitions_of(topic)
        if partition is not None:
            if not 0 <= partition < n:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has {n} partitions; no partition {partition}")
            return partition
        if key is not None:
            return partition_for_key(key, n)
        return self.sticky(topic, n)

    def new_batch(self) -> None:
        """The batches were sent: null-keyed records may stick to other partitions now."""
        self._sticky.clear()


@dataclass(frozen=True)
class Reservation:
    """The offsets one flush got: each partition's encoded batches and their base offset."""

    encoded: Mapping[TopicPartition, EncodedRecords]
    bases: Mapping[TopicPartition, int]



class SegmentWriter:
    """One producer's (or member producer's) writes: sequences, reserve, put, confirm.

    Holds the producer id, epoch and next sequence number per partition; ``start_epoch``
    starts a new epoch (sequences from 0, as in KIP-890). ``reserve`` and ``start_epoch`` are
    not thread-safe (a producer calls them under its own lock, a Spark task from its own
    thread); ``write`` and ``confirm`` read no sequence state, so a Spark task's flush thread
    writes one reservation while the task reserves the next. ``io`` runs the puts of one
    flush in parallel. ``name`` says whose writes these are in
    errors (e.g. "producer", "txnlog member producer").
    """

    def __init__(self, client: CoordinatorClient, storage: Storage, producer_id: int,
                 epoch: int, io: Executor, name: str = "producer") -> None:
        self.client = client
        self.storage = storage
        self.producer_id = producer_id
        self.epoch = epoch
        self.io = io
        self.name = name
        self.sequences: dict[TopicPartition, int] = {}

    def start_epoch(self, producer_id: int, epoch: int) -> None:
        """Write as (producer_id, epoch) from now on; its sequences start at 0."""
        self.producer_id, self.epoch = producer_id, epoch
        self.sequences.clear()

    def next_sequence(self, tp: TopicPartition) -> int:
        """The base sequence of the next batches encoded for ``tp``."""
        return self.sequences.get(tp, 0)

    def reserve(self, encoded: Mapping[TopicPartition, EncodedRecords]) -> Reservation:
        """Reserve offsets for every partition of ``encoded`` in one call.

        ``encoded[tp]`` must have been encoded with ``next_sequence(tp)``. The sequences move
        on even if the write then fails: the offsets are ours, and a retry of the same data
        must be a new reserve (the coordinator fences the old range). Raises
        ProducerFencedError if a newer epoch took over.
        """
        bases = self.client.reserve(
            self.producer_id, self.epoch,
            {tp: (self.sequences.get(tp, 0), enc.record_count) for tp, enc in encoded.items()})
        for tp, enc in encoded.items():
            self.sequences[tp] = self.sequences.get(tp, 0) + enc.record_count
        return Reservation(encoded, bases)

    def write(self, reservation: Reservation) -> list[Written]:
        """Stamp each partition's batches with its base offset (in place) and put them all
        in one shared object, put-if-absent; returns the written runs, in the order of
        ``reservation.encoded``, each naming the object and its bytes there.

        A name taken already (by nothing but a 64-bit collision) is retried under a new
        one: nothing points at an object before its confirm.
        """
        encoded, bases = reservation.encoded, reservation.bases
        runs = [shared_object.RunToWrite(t, p, bases[(t, p)],
                                         bases[(t, p)] + enc.record_count,
                                         enc.stamp_base_offset(bases[(t, p)]))
                for (t, p), enc in encoded.items()]
        data, entries = shared_object.build(
            runs, self.producer_id, self.epoch,
            aligned_empty if self.storage.writes_aligned_directly else None)
        path = put_shared_object(self.storage.put_if_absent, data, self.producer_id,
                                 self.epoch)
        if path is not None:
            return [WrittenRange(e.topic, e.partition, e.base, path, e.position, e.size)
                    for e in entries]
        raise ProducerFencedError(
            f"txnlog {self.name} {self.producer_id} (epoch {self.epoch}): three fresh "
            "shared object names were all taken: the root is not writable as expected")

    def confirm(self, written: list[Written], wait_stable: bool = False) -> None:
        """Report written ranges to the coordinator (``wait_stable``: return only once the
        stable snapshot includes them, for data visible without a transaction)."""
        self.client.confirm(self.producer_id, self.epoch, written, wait_stable=wait_stable)


__all__ = ["PartitionCounts", "Partitioner", "Reservation", "SegmentWriter", "Written",
           "WrittenRange", "put_shared_object"]
