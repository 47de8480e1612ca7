"""The coordinator's Prometheus metrics (served at ``GET /metrics``).

Counters and histograms the transaction coordinator and the API update as they work, and
gauges read from it when scraped. One registry per process (not the global default), so a
test can run several coordinators in one interpreter.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..transaction.transaction_coordinator import TransactionCoordinator


class Metrics:
    """Every metric of one coordinator process, in its own registry."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.transactions = Counter("txnlog_coordinator_transactions",
                                    "transactions ended, by outcome", ["outcome"], registry=r)
        self.commit_latency = Histogram(
            "txnlog_coordinator_commit_latency_seconds", "EndTxn(commit) to reply",
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10), registry=r)
        self.reservations = Counter("txnlog_coordinator_reservations",
                                    "reserve calls that handed out offsets", registry=r)
        self.storage_errors = Counter("txnlog_coordinator_storage_errors",
                                      "storage calls that failed after retries", registry=r)
        self.requests = Counter("txnlog_coordinator_requests", "requests by operation and error",
                                ["op", "error"], registry=r)
        self.commit_round_trips = Histogram(
            "txnlog_coordinator_commit_round_trips",
            "sequential storage round trips an EndTxn reply waited for (verify, Prepare, "
            "markers+fences, Complete+stable)", buckets=(1, 2, 3, 4, 5, 6), registry=r)
        self.commit_storage_calls = Histogram(
            "txnlog_coordinator_commit_storage_calls",
            "storage calls on an EndTxn's critical path", buckets=(2, 4, 8, 16, 32, 64, 128),
            registry=r)
        self.refused = Counter("txnlog_coordinator_requests_unauthenticated",
                               "requests refused with 401 (no or wrong bearer token)",
                               registry=r)
        self.objects_written = Counter(
            "txnlog_coordinator_objects_written",
            "objects written outside the coordinator's log, by kind", ["kind"], registry=r)
        self.merge_bytes = Counter(
            "txnlog_coordinator_merge_bytes",
            "bytes of runs and segments (logs and indexes) merges wrote: with the partitions' "
            "bytes, the write amplification of merging", registry=r)
        log_records = Gauge("txnlog_coordinator_log_records_written",
                            "records in the __transaction_state objects written by this process",
                            registry=r)
        log_records.set_function(lambda: coordinator.log.records_written if coordinator.log else 0)
        open_txns = Gauge("txnlog_coordinator_open_transactions",
                          "transactions not Empty/Complete*", registry=r)
        open_txns.set_function(coordinator.open_transactions)
        log_objects = Gauge("txnlog_coordinator_log_objects_written",
                            "__transaction_state objects written by this process", registry=r)
        log_objects.set_function(lambda: coordinator.log.objects_written if coordinator.log else 0)
        self._ok: dict[str, Any] = {}

    def request_ok(self, op: str) -> None:
        """The success counter of ``op`` (labels() takes a lock and builds a key: cache it)."""
        child = self._ok.get(op)
        if child is None:
            child = self._ok[op] = self.requests.labels(op, "")
        child.inc()
