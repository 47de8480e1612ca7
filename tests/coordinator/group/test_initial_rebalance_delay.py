"""Kafka's group.initial.rebalance.delay.ms: consumers of a new group starting together get
one rebalance, not one each.

Real processes (a coordinator with the delay set, a gateway) and librdkafka consumers: the
second consumer subscribes 0.5 s after the first. With a 2 s delay the group's first
generation already holds both; with the delay off the first consumer gets a generation of
its own and the second's arrival makes another.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc


def _consumer(bootstrap: str, group: str, topic: str) -> Any:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                    "session.timeout.ms": 30_000, "heartbeat.interval.ms": 500,
                    "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"})
    c.subscribe([topic])
    return c


@pytest.mark.parametrize(("delay_ms", "generations"), [(2000, 1), (0, 2)])
def test_consumers_starting_together_share_the_first_rebalance(
        file_root: str, delay_ms: int, generations: int) -> None:
    with CoordinatorProc(file_root, extra=["--group-initial-rebalance-delay-ms",
                                           str(delay_ms)]) as coord, \
            GatewayProc(file_root) as gw:
        client = coord.client()
        client.create_topic("t", 2)
        first = _consumer(gw.bootstrap, "g", "t")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            first.poll(0.05)
        second = _consumer(gw.bootstrap, "g", "t")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for c in (first, second):
                c.poll(0.05)
            d = client.call("describe_group", {"group_id": "g"})
            if d["state"] == "Stable" and len(d["members"]) == 2 and all(
                    m["assignment"] for m in d["members"]):
                break
        assert d["state"] == "Stable" and len(d["members"]) == 2, d
        assert d["generation"] == generations, d
        first.close()
        second.close()
