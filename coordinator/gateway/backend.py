"""What every handler of one gateway shares: storage, the coordinator, caches, thread pools.

The gateway keeps no state that matters: topic metadata and stable snapshots are caches of
storage (refreshed on a short clock, never moved backwards), partition readers are caches
of listings, and the coordinator client follows ``_coordinator.json`` after a failover. A
gateway can therefore be killed and restarted, or run many times over one root.

Storage and the coordinator client are synchronous (s3fs, ``http.client``), so their calls
run on thread pools: ``io`` for reads and writes, ``waits`` for coordinator calls that may
be held for a long time (JoinGroup, SyncGroup wait for a rebalance), so a rebalance never
starves fetches of threads.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from txnlog.log_format import layout, topics
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import StableSnapshot, read_latest_stable
from txnlog.log_format.storage import Storage

from ..access.kafka_authz import check_auto_create
from ..access.store import AccessStore
from ..client.coordinator_client import CoordinatorClient
from ..errors import NotCoordinatorError, UnknownTopicOrPartitionError
from ..security import Credentials
from .flush_window import DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_FLUSH_MAX_BYTES, FlushWindow

T = TypeVar("T")
TOPIC_TTL_S = 5.0          # topic metadata (partition counts never shrink)
UNKNOWN_TOPIC_TTL_S = 1.0  # a topic found missing is looked up again after this
STABLE_MIN_AGE_S = 0.02    # stable snapshot: at most one LIST+GET per 20 ms per gateway


# A Kafka client keeps at most 5 requests in flight per broker (an idempotent producer must),
# and librdkafka sends one partition per Produce request: against one broker a producer over
# 64 partitions got 5 of them into each flush window. The gateway listens as this many
# brokers (one port each, ids node_id, node_id + 1000, ...), the partitions' leadership
# spread over them, so a client opens as many connections and one window takes a batch of
# 40 partitions. Kafka clients tell brokers apart by connection, so each needs a port of its
# own: a broker's own lists (ListGroups, ListTransactions) are answered by the first alone.
DEFAULT_VIRTUAL_BROKERS = 8
VIRTUAL_BROKER_STRIDE = 1000


@dataclass
class GatewayConfig:
    root: str
    node_id: int = 0
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 9092
    # the other virtual brokers' advertised ports (the first is ``advertised_port``)
    more_ports: tuple[int, ...] = ()
    cluster_id: str = "txnlog"
    storage_options: dict[str, Any] | None = None
    coordinator: str | None = None  # endpoint; default: the root's _coordinator.json
    credentials: Credentials | None = None
    sasl_token: str | None = None   # SASL/PLAIN password every client must give
    io_threads: int = 16
    wait_threads: int = 64
    fetch_poll_s: float = 0.05      # how often a long-polling Fetch looks for new data
    max_request_bytes: int = 100 << 20  # Kafka's socket.request.max.bytes
    # Produce requests collected into one object (flush_window), or until this many bytes
    flush_interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS
    flush_max_bytes: int = DEFAULT_FLUSH_MAX_BYTES
    # Kafka's auto.create.topics.enable and num.partitions: a Metadata that allows it (or a
    # Produce) naming an unknown topic creates it with default configs, where both this
    # gateway and the coordinator allow it; num_partitions None: the coordinator's
    auto_create_topics: bool = True
    num_partitions: int | None = None
    # --sasl: clients authenticate as principals (PLAIN, SCRAM) and every request is
    # authorized with the root's ACLs (txnlog.coordinator.access)
    sasl: bool = False
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    acl_refresh_s: float = 1.0  # how stale this gateway's copy of the ACLs may be

    def brokers(self) -> list[tuple[int, int]]:
        """(broker id, advertised port) of each broker this gateway listens as; the first,
        ``node_id``, is the coordinator and controller clients find."""
        ports = (self.advertised_port, *self.more_ports)
        return [(self.node_id + VIRTUAL_BROKER_STRIDE * k, port) for k, port in enumerate(ports)]

    def leader(self, partition: int) -> int:
        """The broker id Metadata names as ``partition``'s leader (any of them serves any
        partition; the spread only gives a client more connections)."""
        return self.node_id + VIRTUAL_BROKER_STRIDE * (partition % (1 + len(self.more_ports)))


class Backend:
    """Storage, coordinator and caches of one gateway process."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.storage = Storage.for_url(config.root, config.storage_options)
        self.io = ThreadPoolExecutor(config.io_threads, thread_name_prefix="gw-io")
        self.waits = ThreadPoolExecutor(config.wait_threads, thread_name_prefix="gw-wait")
        self._client: CoordinatorClient | None = None
        self.access = AccessStore(self.storage, config.acl_refresh_s) if config.sasl else None
        self._client_lock = threading.Lock()
        self._topics: dict[str, tuple[float, topics.TopicMeta | None]] = {}
        self._snapshot: StableSnapshot | None = None
        self._snapshot_at = 0.0
        self._snapshot_lock = threading.Lock()
        self._written_at = 0.0  # when this gateway last acknowledged a write (monotonic)
        self._readers: dict[tuple[str, int, str], tuple[threading.Lock, PartitionReader]] = {}
        self._readers_lock = threading.Lock()
        self.flush_window = FlushWindow(self.run, lambda op, body: self.client.call(op, body),
                                        self.storage.put_if_absent, config.flush_interval_ms,
                                        config.flush_max_bytes)

    def close(self) -> None:
        self.io.shutdown(wait=False, cancel_futures=True)
        self.waits.shutdown(wait=False, cancel_futures=True)

    # ---- threads ---------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    async def wait(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.waits, fn, *args)

    # ---- coordinator -----------------------------------------------------------------
    @property
    def client(self) -> CoordinatorClient:
        """The root's coordinator (never started here: a gateway only follows it)."""
        with self._client_lock:
            if self._client is None:
                endpoint = self.config.coordinator
                if endpoint is None:
                    try:
                        info = json.loads(self.storage.get(layout.COORDINATOR_FILE))
                        endpoint = info["endpoint"]
                    except (FileNotFoundError, ValueError, KeyError, TypeError):
                        raise NotCoordinatorError(
                            f"no coordinator is registered for {self.config.root} "
                            "(start one with `txnlog coordinator --root ...`)") from None
                self._client = CoordinatorClient(
                    endpoint, timeout=30.0, retry_for=10.0, root=self.config.root,
                    storage_options=self.config.storage_options,
                    credentials=self.config.credentials or Credentials.resolve())
            return self._client

    def long_client(self, timeout_s: float) -> CoordinatorClient:
        """A client for one call held up to ``timeout_s`` (a rebalance's JoinGroup)."""
        base = self.client
        c = CoordinatorClient(base.endpoint, timeout=timeout_s + 10.0, retry_for=10.0,
                              root=self.config.root,
                              storage_options=self.config.storage_options,
                              credentials=base.credentials)
        return c

    # ---- topics ----------------------------------------------------------------------
    def topic_meta(self, topic: str) -> topics.TopicMeta | None:
        """The topic's metadata (partitions, configs, id, creation time), None if it does
        not exist (cached briefly)."""
        now = time.monotonic()
        hit = self._topics.get(topic)
        if hit is not None:
            at, meta = hit
            if now - at < (TOPIC_TTL_S if meta is not None else UNKNOWN_TOPIC_TTL_S):
                return meta
        try:
            layout.validate_topic(topic)
            meta = topics.read_topic(self.storage, topic)
        except (topics.UnknownTopicError, ValueError):
            meta = None
        self._topics[topic] = (now, meta)
        return meta

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count, None if it does not exist (cached briefly)."""
        meta = self.topic_meta(topic)
        return None if meta is None else meta.partitions

    def may_auto_create(self, topic: str) -> bool:
        """Whether an unknown ``topic`` may be created on a client's use: this gateway's
        ``auto.create.topics.enable``, a valid name, and not an internal (``__``) name,
        whose topics the coordinator creates with their own shapes."""
        if not self.config.auto_create_topics or topic.startswith("__"):
            return False
        try:
            layout.validate_topic(topic)
        except ValueError:
            return False
        return True

    def auto_create(self, topic: str) -> int | None:
        """Create ``topic`` as Kafka's auto-creation does (``num.partitions``, default
        configs) through the coordinator, which decides whether its root allows it and
        creates each name once (put-if-absent, one topic id): of two gateways creating it
        at once, both get the one topic. Answers its partition count (an existing topic's
        own), None where the coordinator does not auto-create. Blocks: run it on
        ``waits``."""
        try:
            meta = self.client.call("auto_create_topic", {
                "name": topic, "partitions": self.config.num_partitions})
        except UnknownTopicOrPartitionError:
            return None
        self.forget_topic(topic)
        return int(meta["partitions"])

    async def topic_partitions(self, topic: str, create: bool = False) -> int | None:
        """The topic's partition count; with ``create``, an unknown topic is auto-created
        where ``may_auto_create`` allows (a failure to create raises), if the request's
        principal may create it (else ``CreateRefused``)."""
        n = await self.run(self.partitions, topic)
        if n is None and create and self.may_auto_create(topic):
            check_auto_create(topic)
            n = await self.wait(self.auto_create, topic)
        return n

    def forget_topic(self, topic: str) -> None:
        """Drop the cached partition count (the topic was created, grown or deleted
        through this gateway, whose next Metadata must show it)."""
        self._topics.pop(topic, None)

    def list_topics(self) -> list[str]:
        return sorted(topics.list_topics(self.storage))

    # ---- what readers trust ----------------------------------------------------------
    def snapshot(self, max_age_s: float = STABLE_MIN_AGE_S) -> StableSnapshot | None:
        """The newest published stable state, read again once older than ``max_age_s``, or
        when this gateway acknowledged a write since it was read (read-your-writes: the
        write was published before its ack, so a ListOffsets or Fetch after the ack sees
        it, as from the partition's leader)."""
        with self._snapshot_lock:
            now = time.monotonic()
            if self._snapshot is None or now - self._snapshot_at >= max_age_s \
                    or self._snapshot_at <= self._written_at:
                self._snapshot = read_latest_stable(self.storage, not_below=self._snapshot)
                self._snapshot_at = now
            return self._snapshot

    def mark_written(self) -> None:
        """A write was acknowledged (published in the stable state before that): the next
        ``snapshot`` is read again, not taken from the cache."""
        self._written_at = time.monotonic()

    def reader(self, topic: str, partition: int, isolation: str
               ) -> tuple[threading.Lock, PartitionReader]:
        """A cached reader (and the lock its user holds: readers are not thread-safe)."""
        key = (topic, partition, isolation)
        with self._readers_lock:
            got = self._readers.get(key)
            if got is None:
                got = (threading.Lock(), PartitionReader(
                    self.storage, topic, partition, isolation_level=isolation,  # type: ignore[arg-type]
                    verify_crc=False))
                self._readers[key] = got
            return got
