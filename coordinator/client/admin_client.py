"""``AdminClient``: Kafka's AdminClient for a txnlog root, used by the ``txnlog`` CLI.

The method names are Kafka's (``list_topics``, ``describe_consumer_groups``,
``list_offsets``, ``abort_transaction``, ...), so a Kafka user finds them where they expect.
What lives in storage (topic metadata, offsets of the log, timestamps) is read from storage
directly, as any txnlog reader does; what the coordinator decides (groups' committed
offsets, transactions, producers) is asked of the coordinator registered for the root (or
the one named), through ``CoordinatorClient``. Answers are plain JSON-able dicts and lists,
so ``txnlog ... --json`` prints exactly what this API returns.

What txnlog cannot do is refused with ``UnsupportedOperationError`` naming why, never
faked. The topic lifecycle (DeleteRecords, DeleteTopics, CreatePartitions, altering
configs) goes through the coordinator's log (``topic_admin.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from txnlog.log_format import layout, topics
from txnlog.log_format.errors import TxnlogError
from txnlog.log_format.layout import TopicPartition

if TYPE_CHECKING:
    from txnlog.log_format.reader import PartitionReader
    from txnlog.log_format.storage import Storage

    from .coordinator_client import CoordinatorClient

# Kafka's ListOffsets specs (kafka-get-offsets --time): -1 latest, -2 earliest, -3 max-ts.
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
OFFSET_SPECS = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}
# Kafka's topic-level defaults, shown by describe_configs for what a topic does not set;
# "honoured" says whether txnlog acts on the setting today.
DEFAULT_CONFIGS: dict[str, tuple[str, bool]] = {
    "cleanup.policy": ("delete", True),
    "retention.ms": ("604800000", True),
    "retention.bytes": ("-1", True),
    "segment.bytes": ("1073741824", True),
    "segment.ms": ("604800000", True),
    "delete.retention.ms": ("86400000", False),
    "file.delete.delay.ms": ("60000", True),
}
ADMIN_TID_PREFIX = "txnlog-admin-offsets-"


class UnsupportedOperationError(TxnlogError):
    """An operation txnlog does not offer (yet): the message says why and what instead."""


class AdminClient:
    """Administration of one txnlog root: topics, offsets, groups, transactions, configs.

    ``coordinator``: an endpoint URL; by default the coordinator registered for the root is
    used (and started, for a local root, as every txnlog writer does). Operations that need
    storage only never contact it.
    """

    def __init__(self, root: str, *, coordinator: str | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 timeout: float = 60.0) -> None:
        self.root = root
        self.coordinator = coordinator
        self.storage_options = dict(storage_options or {})
        self.timeout = timeout
        self._storage: Storage | None = None
        self._client: CoordinatorClient | None = None

    def __repr__(self) -> str:
        return f"AdminClient({self.root!r})"

    # ------------------------------------------------------------------ plumbing
    @property
    def storage(self) -> Storage:
        if self._storage is None:
            from txnlog.log_format.storage import Storage

            self._storage = Storage.for_url(self.root, self.storage_options)
        return self._storage

    @property
    def client(self) -> CoordinatorClient:
        """The coordinator's client, resolved on first use."""
        if self._client is None:
            from .coordinator_client import CoordinatorClient
            from .embedded import coordinator_for_root

            endpoint = self.coordinator or coordinator_for_root(self.root,
                                                                self.storage_options)
            self._client = CoordinatorClient(endpoint, timeout=self.timeout)
        return self._client

    def _reader(self, tp: TopicPartition, isolation_level: str = "read_committed"
                ) -> PartitionReader:
        from txnlog.log_format.reader import PartitionReader

        return PartitionReader(self.storage, tp[0], tp[1], isolation_level=isolation_level)

    def _partitions(self, topic: str) -> list[TopicPartition]:
        meta = topics.read_topic(self.storage, topic)
        return [TopicPartition(topic, p) for p in range(meta.partitions)]

    # -------------------------------------------------------------------- topics
    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names under the root, sorted (``__consumer_offsets`` only with
        ``include_internal``, as ``kafka-topics --list --exclude-internal`` reverses)."""
        names = topics.list_topics(self.storage)
        return [n for n in names if include_internal or not n.startswith("__")]

    def describe_topics(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """Per topic: partition count, config, and per partition the log start offset,
        the high watermark and the last stable offset readers see (storage only)."""
        from txnlog.log_format.stable import read_latest_stable

        snap = read_latest_stable(self.storage)
        out = []
        for name in names:
            meta = topics.read_topic(self.storage, name)
            parts = []
            for p in range(meta.partitions):
                reader = self._reader(TopicPartition(name, p))
                reader.advance_snapshot(snap)
                parts.append({"partition": p, "log_start_offset": reader.earliest_offset(),
                              "high_watermark": reader.high_watermark(),
                              "last_stable_offset": reader.last_stable_offset()})
            out.append({"name": name, "partitions": meta.partitions,
                        "config": dict(meta.config), "created_ms": meta.created_ms,
                        "internal": name.startswith("__"), "offsets": parts})
        return out

    def create_topics(self, new_topics: Iterable[tuple[str, int, Mapping[str, str] | None]],
                      *, exist_ok: bool = False) -> list[dict[str, Any]]:
        """Create ``(name, partitions, config)`` topics through the coordinator's log (so a
        coordinator knows them at once); an existing one is TopicAlreadyExists unless
        ``exist_ok``."""
        return [self.client.create_topic(name, n, dict(cfg or {}), exist_ok=exist_ok)
                for name, n, cfg in new_topics]

    def delete_topics(self, names: Iterable[str]) -> None:
        """Kafka's DeleteTopics: each topic is gone at once for readers, writers and tools;
        its objects are deleted in the background. A topic re-created under the name
        continues after its predecessor's offsets, so nothing of the old one can show."""
        for name in names:
            self.client.delete_topic(name)

    def create_partitions(self, topic: str, total: int) -> None:
        """Kafka's CreatePartitions: grow ``topic`` to ``total`` partitions (never shrink:
        InvalidPartitions). Keyed records written afterwards follow the new count, readers
        and running streams pick the new partitions up from earliest."""
        self.client.create_partitions(topic, total)

    # ------------------------------------------------------------------- configs
    def describe_configs(self, topic: str) -> list[dict[str, Any]]:
        """The topic's configs: what it sets (source TOPIC_CONFIG) and Kafka's defaults
        for the rest (DEFAULT_CONFIG), each with whether txnlog acts on it."""
        meta = topics.read_topic(self.storage, topic)
        out = []
        for key in sorted(set(meta.config) | set(DEFAULT_CONFIGS)):
            default, honoured = DEFAULT_CONFIGS.get(key, ("", False))
            given = key in meta.config
            out.append({"name": key, "value": meta.config[key] if given else default,
                        "source": "TOPIC_CONFIG" if given else "DEFAULT_CONFIG",
                        "read_only": False, "honoured": honoured})
        return out

    def incremental_alter_configs(self, topic: str, set_configs: Mapping[str, str],
                                  delete_configs: Iterable[str] = (), *,
                                  validate_only: bool = False) -> dict[str, str]:
        """Kafka's IncrementalAlterConfigs (SET and DELETE) of one topic, through the
        coordinator's log: unknown names and bad values are InvalidConfig (nothing changed).
        Returns the topic's configs after the change."""
        out = self.client.alter_configs(topic, dict(set_configs), list(delete_configs),
                                        validate_only)
        return dict(out["config"])

    alter_configs = incremental_alter_configs

    # ------------------------------------------------------------------- offsets
    def list_offsets(self, specs: Mapping[TopicPartition, int | str],
                     isolation_level: str = "read_committed") -> dict[TopicPartition,
                                                                      dict[str, Any]]:
        """Kafka's ListOffsets: per partition ``{"offset", "timestamp"}`` for ``earliest``
        (-2), ``latest`` (-1: the LSO, or the HW with read_uncommitted), ``max-timestamp``
        (-3: the record with the largest timestamp) or a timestamp in ms (the first offset
        with a timestamp at or after it; -1 when there is none, as Kafka answers)."""
        from txnlog.log_format.stable import read_latest_stable

        snap = read_latest_stable(self.storage) if specs else None  # one for all partitions
        out = {}
        for tp, spec in specs.items():
            tp = TopicPartition(*tp)
            code = OFFSET_SPECS.get(spec, spec) if isinstance(spec, str) else spec
            if not isinstance(code, int):
                raise ValueError(f"offset spec {spec!r}: use earliest, latest, max-timestamp "
                                 "or a timestamp in ms")
            reader = self._reader(tp, isolation_level)
            reader.advance_snapshot(snap)
            if code == EARLIEST:
                out[tp] = {"offset": reader.earliest_offset(), "timestamp": -1}
            elif code == LATEST:
                out[tp] = {"offset": reader.latest_offset(), "timestamp": -1}
            elif code == MAX_TIMESTAMP:
                out[tp] = _max_timestamp(reader)
            elif code >= 0:
                found = reader.offset_for_timestamp(code)
                out[tp] = {"offset": -1 if found is None else found, "timestamp": code}
            else:
                raise ValueError(f"offset spec {spec!r} is not -1, -2, -3 or a timestamp")
        return out

    def partitions_of(self, topic: str, partitions: Iterable[int] | None = None
                      ) -> list[TopicPartition]:
        """The topic's partitions (all, or those named; an unknown one is an error)."""
        every = self._partitions(topic)
        if partitions is None:
            return every
        wanted = sorted(set(partitions))
        bad = [p for p in wanted if not 0 <= p < len(every)]
        if bad:
            raise ValueError(f"topic {topic!r} has {len(every)} partitions; no partition "
                             f"{', '.join(map(str, bad))}")
        return [TopicPartition(topic, p) for p in wanted]

    def delete_records(self, before: Mapping[TopicPartition, int]
                       ) -> dict[TopicPartition, int]:
        """Kafka's DeleteRecords: each partition's log start offset moves to its offset (-1:
        the high watermark); records below it are gone for readers at once and their whole
        segments from storage after file.delete.delay.ms. Returns the new low watermarks."""
        low = self.client.delete_records({(t, p): int(o) for (t, p), o in before.items()})
        return {TopicPartition(t, p): w for (t, p), w in low.items()}

    # -------------------------------------------------------------------- groups
    def list_consumer_groups(self) -> list[dict[str, Any]]:
        """Every group with committed offsets (or offsets in an open transaction)."""
        return self.client.call("list_groups", {})["groups"]

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets: the next offset to read, per partition."""
        return self.client.committed_offsets(group_id)

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Per group and partition: CURRENT-OFFSET (committed), LOG-END-OFFSET (the LSO a
        read_committed reader ends at) and LAG, as ``kafka-consumer-groups --describe``."""
        out = []
        for group in group_ids:
            committed = self.list_consumer_group_offsets(group)
            ends = self.list_offsets(dict.fromkeys(committed, LATEST)) if committed else {}
            rows = []
            for tp in sorted(committed):
                end = ends[tp]["offset"]
                rows.append({"topic": tp[0], "partition": tp[1],
                             "current_offset": committed[tp], "log_end_offset": end,
                             "lag": max(0, end - committed[tp])})
            out.append({"group_id": group, "state": "Empty" if rows else "Dead",
                        "members": [], "offsets": rows})
        return out

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int]) -> None:
        """Set the group's committed offsets, in one transaction of the admin's own
        transactional id (``txnlog-admin-offsets-<group>``), so they commit all at once."""
        if not offsets:
            return
        bad = {tp: o for tp, o in offsets.items() if not isinstance(o, int) or o < 0}
        if bad:
            raise ValueError(f"offsets must be integers >= 0: {bad}")
        client = self.client
        tid = ADMIN_TID_PREFIX + group_id
        pid, epoch = client.init_producer_id(tid)
        try:
            client.add_offsets(tid, pid, epoch, group_id,
                               {TopicPartition(*tp): o for tp, o in offsets.items()})
        except BaseException:
            client.end_txn(tid, pid, epoch, commit=False)
            raise
        client.end_txn(tid, pid, epoch, commit=True)

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, bool]:
        """Forget the groups' committed offsets; ``{group: deleted}`` (False: unknown)."""
        return {g: bool(self.client.call("delete_group", {"group_id": g})["deleted"])
                for g in group_ids}

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[TopicPartition]) -> bool:
        """Forget the group's committed offsets of these partitions (Kafka's OffsetDelete);
        False when it had none of them."""
        return bool(self.client.call("delete_group", {"group_id": group_id, "partitions": [
            {"topic": t, "partition": p} for t, p in partitions]})["deleted"])

    # -------------------------------------------------------------- transactions
    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int | None = None) -> list[dict[str, Any]]:
        """Every transactional id the coordinator knows, with Kafka's filters."""
        body: dict[str, Any] = {"states": list(states), "producer_ids": list(producer_ids)}
        if duration_ms is not None:
            body["duration_ms"] = duration_ms
        return self.client.call("list_transactions", body)["transactions"]

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[dict[str, Any]]:
        return self.client.call("describe_transactions",
                                {"transactional_ids": list(transactional_ids)})["transactions"]

    def describe_producers(self, partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
        """Per partition, the producers with state there (Kafka's DescribeProducers)."""
        return self.client.call("describe_producers", {"partitions": [
            {"topic": t, "partition": p} for t, p in partitions]})["partitions"]

    def find_hanging_transactions(self, partitions: Iterable[TopicPartition] | None = None,
                                  max_transaction_timeout_ms: int = 900_000
                                  ) -> list[dict[str, Any]]:
        """Open transactions that have held a partition's LSO back for longer than
        ``max_transaction_timeout_ms`` (Kafka's find-hanging default: 15 minutes) — the
        coordinator should have aborted them — per partition they hold."""
        wanted = None if partitions is None else {layout.partition_dir(*tp)
                                                  for tp in partitions}
        out = []
        for txn in self.list_transactions(states=["Ongoing", "PrepareCommit",
                                                  "PrepareAbort"]):
            if txn["duration_ms"] < max_transaction_timeout_ms:
                continue
            for key, first in sorted(txn["first_offsets"].items()):
                if wanted is not None and key not in wanted:
                    continue
                topic, _, p = key.rpartition("-")
                out.append({"topic": topic, "partition": int(p),
                            "transactional_id": txn["transactional_id"],
                            "producer_id": txn["producer_id"], "producer_epoch": txn["epoch"],
                            "coordinator_epoch": txn["coordinator_epoch"],
                            "start_offset": first, "last_timestamp": txn["last_update_ms"],
                            "duration_ms": txn["duration_ms"], "state": txn["state"]})
        return out

    def abort_transaction(self, transactional_id: str | None = None, *,
                          topic: str | None = None, partition: int | None = None,
                          start_offset: int | None = None) -> dict[str, Any]:
        """Abort an Ongoing transaction (its producer is fenced by an epoch bump), named by
        its id or by the partition and first offset where it holds the LSO."""
        if transactional_id is not None:
            body: dict[str, Any] = {"transactional_id": transactional_id}
        elif topic is not None and partition is not None and start_offset is not None:
            body = {"topic": topic, "partition": partition, "start_offset": start_offset}
        else:
            raise ValueError("name the transaction: transactional_id, or topic, partition "
                             "and start_offset")
        return self.client.call("abort_transaction", body)


def _max_timestamp(reader: PartitionReader) -> dict[str, Any]:
    """The offset and timestamp of the record with the largest timestamp below the
    reader's end (the first such record; control and aborted batches skipped)."""
    from txnlog.log_format.arrow.arrow_scan import CONTROL_FLAG, scan_batches
    from txnlog.log_format.codec.records import decode_batch

    bound = reader.latest_offset()
    aborted = reader.aborted_transactions(0, bound) \
        if reader.isolation_level == "read_committed" else []
    best: tuple[int, bytes, int] | None = None  # (max_ts, batch bytes, base)
    for seg in reader.segments():
        if seg.base_offset >= bound or seg.size == 0:
            continue
        data = seg.read_all(reader.storage)
        index = scan_batches(data, source=seg.path, verify_crc=False)
        for row in index:
            base = int(row["base_offset"])
            last = base + int(row["last_offset_delta"])
            if (int(row["attributes"]) & CONTROL_FLAG) or base >= bound \
                    or int(row["records_count"]) == 0:
                continue
            pid = int(row["producer_id"])
            if any(a.producer_id == pid and a.first_offset <= base <= a.last_offset
                   for a in aborted):
                continue
            ts = int(row["max_timestamp"])
            if best is None or ts > best[0]:
                pos, size = int(row["position"]), int(row["size"])
                best = (ts, data[pos:pos + size], last)
    if best is None:
        return {"offset": -1, "timestamp": -1}
    ts, raw, _ = best
    for rec in decode_batch(raw).records:
        if rec.timestamp == ts:
            return {"offset": rec.offset, "timestamp": ts}
    return {"offset": best[2], "timestamp": ts}
