"""The registry's store: the compacted ``_schemas`` topic of the root, written with txnlog's
own producer and read with txnlog's own consumer.

No registry process keeps state of its own: each one reads the topic up to its end before
it answers (``catch_up``, one stable-snapshot read when nothing is new), and a write
returns once the record is in the stable snapshot and applied here. So a schema registered
through one registry is visible through every other at its next request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from txnlog.log_format.consumer import Consumer
from txnlog.log_format.storage import Storage

from ..client.coordinator_client import CoordinatorClient
from ..client.producer import IdempotentProducer
from ..security import Credentials
from .claims import Claims
from .records import TOPIC, Key, encode_value
from .state import RegistryState

log = logging.getLogger("txnlog.schema_registry.store")
TOPIC_CONFIG = {"cleanup.policy": "compact"}


class SchemaStore:
    """The topic, the state read from it, and the claims beside it. Callers hold ``lock``
    around a read-decide-write sequence (one request at a time per process; other
    processes are kept apart by the claims)."""

    def __init__(self, root: str, coordinator: str, *,
                 storage_options: Mapping[str, Any] | None = None,
                 credentials: Credentials | None = None) -> None:
        self.root = root
        self.coordinator = coordinator
        self.storage_options = dict(storage_options or {})
        self.storage = Storage.for_url(root, self.storage_options)
        self.credentials = credentials or Credentials.resolve()
        self.claims = Claims(self.storage)
        self.lock = threading.RLock()
        client = CoordinatorClient(coordinator, root=root, storage_options=self.storage_options,
                                   credentials=self.credentials)
        client.create_topic(TOPIC, 1, TOPIC_CONFIG, exist_ok=True)
        self._consumer = Consumer(root, assignment={(TOPIC, 0): 0},
                                  storage_options=self.storage_options)
        self._producer: IdempotentProducer | None = None
        self.state = RegistryState()
        self.catch_up()

    def producer(self) -> IdempotentProducer:
        if self._producer is None:
            self._producer = IdempotentProducer(self.root, coordinator=self.coordinator,
                                                storage_options=self.storage_options)
        return self._producer

    def catch_up(self) -> int:
        """Apply every record up to the topic's current end; how many were applied."""
        applied = 0
        with self.lock:
            while True:
                polled = self._consumer.poll_arrow(0.0)
                if not polled:
                    return applied
                for batches in polled.values():
                    for batch in batches:
                        keys = batch.column("key").to_pylist()
                        values = batch.column("value").to_pylist()
                        for k, v in zip(keys, values, strict=True):
                            self.state.apply(k, v)
                        applied += batch.num_rows

    def write(self, records: list[tuple[Key, Any]]) -> None:
        """Append ``(key, value)`` records (value None: a tombstone) and return once they
        are stable and applied to ``state``. A failed write drops the producer, so the next
        one starts with a fresh producer id (a fenced or lost producer never sticks)."""
        with self.lock:
            try:
                p = self.producer()
                for key, value in records:
                    p.send(TOPIC, encode_value(value), key=key.encode(), partition=0)
                p.flush()
            except Exception:
                self._producer = None
                raise
            self.catch_up()

    def close(self) -> None:
        with self.lock:
            if self._producer is not None:
                self._producer.close()
            self._consumer.close()
