"""What authorizing a Kafka request costs the gateway: per request, against ACLs off.

In one process and one run, each Kafka request body (kio entities, as the gateway parses
them) goes through ``kafka_authz.guard`` to a handler that answers at once, so the figure is
the authorization layer alone (the checks, the split of a request's items, the answers of
refused items), not storage or the network:

- ``off``: the handler called directly (a gateway without ``--sasl``);
- ``super``: a super user (one flag test);
- ``N acls``: a user allowed by one ACL among N (literal and prefixed ACLs on other
  topics, groups and principals; N = 10 and 10,000 by default), and a refused user.

Rows: requests per second and microseconds per request for each, and the ratio to ``off``
measured in the same run. ``--json`` prints the rows as JSON last.

``--gateway``: the same question end to end, against real processes: one coordinator, a
gateway without ``--sasl`` and one with ``--sasl`` and ``--acls``' largest count of ACLs in
the root; one connection to each (SASL PLAIN as an allowed user on the second) sends
``--requests`` Metadata (one topic) and ListOffsets (one partition) requests, one at a
time, rounds interleaved (a b b a ...); printed: the median microseconds per request of
each side and the median of the per-round ratios (ACLs / off).

    python bench/authz_cost.py [--acls 10 10000] [--seconds 1.0] [--json]
    python bench/authz_cost.py --gateway [--requests 2000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from kio.schema.fetch.v12 import request as fr
from kio.schema.produce.v9 import request as pr
from kio.static.primitive import i32, i64
from txnlog.coordinator.access import kafka_authz
from txnlog.coordinator.access.authorizer import Authorizer
from txnlog.coordinator.access.model import AclBinding
from txnlog.coordinator.access.sasl import Subject


def _acls(n: int) -> list[AclBinding]:
    """n ACLs, one of which lets User:app WRITE and READ the topic `orders`."""
    out = [AclBinding.new("TOPIC", "orders", "LITERAL", "User:app", "*", "ALL", "ALLOW")]
    ops = ("READ", "WRITE", "DESCRIBE", "ALTER")
    for i in range(n - 1):
        kind = i % 4
        if kind == 0:
            out.append(AclBinding.new("TOPIC", f"t{i}", "LITERAL", f"User:u{i % 500}", "*",
                                      ops[i % 4], "ALLOW"))
        elif kind == 1:
            out.append(AclBinding.new("TOPIC", f"team{i}-", "PREFIXED", f"User:u{i % 500}",
                                      "*", "READ", "ALLOW"))
        elif kind == 2:
            out.append(AclBinding.new("GROUP", f"g{i}", "LITERAL", f"User:u{i % 500}", "*",
                                      "READ", "ALLOW"))
        else:
            out.append(AclBinding.new("TOPIC", f"o{i % 97}", "PREFIXED", f"User:u{i % 500}",
                                      "*", "WRITE", "DENY"))
    return out[:n]


def _produce() -> Any:
    return pr.ProduceRequest(transactional_id=None, acks=-1, timeout=i32(30000), topic_data=(
        pr.TopicProduceData(name="orders", partition_data=(
            pr.PartitionProduceData(index=i32(0), records=b""),)),))


def _fetch() -> Any:
    parts = tuple(fr.FetchPartition(partition=i32(p), current_leader_epoch=i32(-1),
                                    fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                                    log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
                  for p in range(8))
    return fr.FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32(500), min_bytes=i32(1),
        max_bytes=i32(50 << 20), isolation_level=1, session_id=i32(0),
        session_epoch=i32(-1), topics=(fr.FetchTopic(topic="orders", partitions=parts),),
        forgotten_topics_data=(), rack_id="")


ANSWER: dict[str, Any] = {"throttle_time": 0, "responses": []}


async def _handler(body: Any) -> dict[str, Any]:
    return dict(ANSWER)


def _blank(path: tuple[str, ...], code: int) -> dict[str, Any]:
    return {"error_code": code}


async def _rate(make: Any, seconds: float) -> float:
    """Requests per second of ``make()`` (an awaitable factory), best of 3 slices."""
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds / 3:
            for _ in range(200):
                await make()
            n += 200
        best = max(best, n / elapsed)
    return best


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for api, key, body in (("produce", 0, _produce()), ("fetch 8 partitions", 1, _fetch())):
        base = await _rate(lambda b=body: _handler(b), args.seconds)
        rows.append({"api": api, "case": "off", "req_per_s": base, "us_per_req": 1e6 / base,
                     "ratio_to_off": 1.0})
        cases: list[tuple[str, Authorizer, Subject]] = [
            ("super", Authorizer([]), Subject("User:admin", "10.0.0.1", True))]
        for n in args.acls:
            az = Authorizer(_acls(n))
            cases.append((f"{n} acls, allowed", az, Subject("User:app", "10.0.0.1")))
            cases.append((f"{n} acls, refused", az, Subject("User:u7", "10.0.0.1")))
        import logging
        logging.getLogger("txnlog.audit").disabled = True  # measure the checks, not stderr
        for name, az, subject in cases:
            guard = kafka_authz.Guard(subject, az, _handler, _blank)

            def one(g: kafka_authz.Guard = guard, b: Any = body, k: int = key) -> Any:
                return kafka_authz.guard(k, 9 if k == 0 else 12, b, g)
            rate = await _rate(one, args.seconds)
            rows.append({"api": api, "case": name, "req_per_s": rate, "us_per_req": 1e6 / rate,
                         "ratio_to_off": base / rate})
    return rows


def gateway_bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    import statistics
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from coordinator_proc import CoordinatorProc
    from gateway_proc import GatewayProc
    from kafka_raw_client import RawKafkaConnection
    from kio.schema.list_offsets.v7 import request as lo
    from kio.schema.metadata.v12 import request as md
    from txnlog.coordinator.access.scram import ScramCredential
    from txnlog.coordinator.access.store import AccessStore
    from txnlog.log_format.storage import Storage

    n_acls = max(args.acls)
    root = "file://" + tempfile.mkdtemp(prefix="authz-bench-")
    store = AccessStore(Storage.for_url(root))
    store.add_acls(_acls(n_acls))
    store.alter_credentials({("app", "SCRAM-SHA-256"): ScramCredential.from_password(
        "SCRAM-SHA-256", "app-pw", 4096)}, set())
    meta = md.MetadataRequest(topics=(md.MetadataRequestTopic(topic_id=None, name="orders"),),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    offsets = lo.ListOffsetsRequest(replica_id=i32(-1), isolation_level=0, topics=(
        lo.ListOffsetsTopic(name="orders", partitions=(lo.ListOffsetsPartition(
            partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),))
    rows: list[dict[str, Any]] = []
    with CoordinatorProc(root) as coord:
        coord.wait_healthy()
        coord.client().create_topic("orders", 1)
        with GatewayProc(root) as off, GatewayProc(root, extra=["--sasl"]) as on:
            conns = {"off": RawKafkaConnection(off.port or 0, client_id="bench"),
                     "acls": RawKafkaConnection(on.port or 0, "app", "app-pw",
                                                client_id="bench")}
            for name, key, version, body in (("metadata", 3, 12, meta),
                                             ("list_offsets", 2, 7, offsets)):
                for c in conns.values():  # warm both
                    for _ in range(200):
                        c.send(key, version, body)
                per: dict[str, list[float]] = {"off": [], "acls": []}
                for r in range(args.rounds):
                    order = ("off", "acls") if r % 2 == 0 else ("acls", "off")
                    for side in order:
                        t0 = time.perf_counter()
                        for _ in range(args.requests):
                            resp = conns[side].send(key, version, body)
                        per[side].append((time.perf_counter() - t0) / args.requests * 1e6)
                        first = resp.topics[0]
                        code = first.error_code if key == 3 else first.partitions[0].error_code
                        assert code == 0, (side, code)
                ratios = [a / o for a, o in zip(per["acls"], per["off"], strict=True)]
                rows.append({"api": name, "acls": n_acls,
                             "us_off": statistics.median(per["off"]),
                             "us_acls": statistics.median(per["acls"]),
                             "ratio": statistics.median(ratios)})
            off.stop()
            on.stop()
    print(f"{'api':14} {'ACLs':>7} {'us/req off':>11} {'us/req ACLs':>12} {'ratio':>7}")
    for r in rows:
        print(f"{r['api']:14} {r['acls']:7,} {r['us_off']:11.1f} {r['us_acls']:12.1f} "
              f"{r['ratio']:7.3f}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--acls", type=int, nargs="+", default=[10, 10_000])
    p.add_argument("--seconds", type=float, default=1.0, help="per case")
    p.add_argument("--gateway", action="store_true", help="end to end, real processes")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.gateway:
        rows = gateway_bench(args)
        if args.json:
            print(json.dumps(rows))
        return
    t0 = time.perf_counter()
    rows = asyncio.run(main_async(args))
    print(f"{'api':20} {'case':22} {'req/s':>12} {'us/req':>8} {'x off':>7}")
    for r in rows:
        print(f"{r['api']:20} {r['case']:22} {r['req_per_s']:12,.0f} {r['us_per_req']:8.2f} "
              f"{r['ratio_to_off']:7.2f}")
    print(f"(building the 10,000-ACL index included; whole run {time.perf_counter() - t0:.1f} s)")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
