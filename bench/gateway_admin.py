"""What Kafka's admin APIs cost through the gateway, against txnlog's own AdminClient.

The same admin work done (a) by confluent-kafka's ``AdminClient`` through ``txnlog
gateway`` and (b) by ``txnlog.AdminClient`` talking to the coordinator and storage
directly, rounds interleaved (b a a b ...): a topic lifecycle (create, describe configs,
alter a config, add partitions, delete) for ``--topics`` topics, and ``--describes``
DescribeConfigs + ListGroups. Prints the seconds per round, the load, and the median of the
per-round ratios (gateway / direct): the gateway's added cost is a Kafka request, one
coordinator (HTTP) call per item and the topic metadata read from storage.

    python bench/gateway_admin.py --topics 20 --describes 50 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka.admin import AdminClient as CKAdmin
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from txnlog import AdminClient


def _wait(futures: dict[object, object]) -> None:
    for f in futures.values():
        f.result(120)  # type: ignore[attr-defined]


def lifecycle_gateway(admin: CKAdmin, names: list[str]) -> float:
    t0 = time.perf_counter()
    _wait(admin.create_topics([NewTopic(n, 2, 1) for n in names]))
    _wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names]))
    _wait(admin.incremental_alter_configs([ConfigResource(
        ResourceType.TOPIC, n, incremental_configs=[ConfigEntry(
            "retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
        for n in names]))
    _wait(admin.create_partitions([NewPartitions(n, 3) for n in names]))
    _wait(admin.delete_topics(names))
    return time.perf_counter() - t0


def lifecycle_direct(admin: AdminClient, names: list[str]) -> float:
    t0 = time.perf_counter()
    admin.create_topics([(n, 2, None) for n in names])
    for n in names:
        admin.describe_configs(n)
    for n in names:
        admin.incremental_alter_configs(n, {"retention.ms": "3600000"})
    for n in names:
        admin.create_partitions(n, 3)
    admin.delete_topics(names)
    return time.perf_counter() - t0


def describes_gateway(admin: CKAdmin, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        _wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]))
        admin.list_consumer_groups().result(60)
    return time.perf_counter() - t0


def describes_direct(admin: AdminClient, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        admin.describe_configs(topic)
        admin.list_consumer_groups()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--describes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = "file://" + tempfile.mkdtemp(prefix="bench-gw-admin-")
    coord = CoordinatorProc(root)
    coord.wait_healthy()
    gateway = GatewayProc(root)
    try:
        gateway.wait_listening()
        ck = CKAdmin({"bootstrap.servers": gateway.bootstrap})
        direct = AdminClient(root, coordinator=coord.endpoint)
        direct.create_topics([("bench-desc", 4, {"segment.ms": "60000"})])
        describes_gateway(ck, "bench-desc", 3)  # warm both paths
        describes_direct(direct, "bench-desc", 3)
        life_ratios, desc_ratios = [], []
        for rnd in range(args.rounds):
            order = ("direct", "gateway") if rnd % 2 == 0 else ("gateway", "direct")
            times: dict[str, tuple[float, float]] = {}
            for side in order:
                names = [f"bench-{side}-{rnd}-{i}" for i in range(args.topics)]
                if side == "gateway":
                    times[side] = (lifecycle_gateway(ck, names),
                                   describes_gateway(ck, "bench-desc", args.describes))
                else:
                    times[side] = (lifecycle_direct(direct, names),
                                   describes_direct(direct, "bench-desc", args.describes))
            life_ratios.append(times["gateway"][0] / times["direct"][0])
            desc_ratios.append(times["gateway"][1] / times["direct"][1])
            print(f"round {rnd} load {os.getloadavg()[0]:.1f}: lifecycle of {args.topics} "
                  f"topics gateway {times['gateway'][0]:.2f} s direct "
                  f"{times['direct'][0]:.2f} s; {args.describes} x (DescribeConfigs + "
                  f"ListGroups) gateway {times['gateway'][1]:.2f} s direct "
                  f"{times['direct'][1]:.2f} s", flush=True)
        print(f"median time ratio gateway/direct: topic lifecycle "
              f"{statistics.median(life_ratios):.2f}x, describe configs + list groups "
              f"{statistics.median(desc_ratios):.2f}x (load {os.getloadavg()[0]:.1f})")
    finally:
        gateway.stop()
        coord.stop()


if __name__ == "__main__":
    main()
