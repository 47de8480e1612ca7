"""The intruder of an ``--acls`` chaos run: a principal that tries to write all along.

Run as ``python -m chaos.intruder ...`` by the harness (run.py, ``--acls``) with the token
of ``User:intruder`` in its environment (chaos/acls.py: READ on the chaos topics, WRITE on
its own transactional id, no WRITE on any topic). Each attempt is one transaction of 1-3
records in 1-2 random partitions, under

- its own transactional id: InitProducerId is allowed, the write must be refused
  (TopicAuthorizationFailed, nothing reserved or committed);
- a producer worker's transactional id, or one of its one-shot ids: InitProducerId must be
  refused (TransactionalIdAuthorizationFailed), so the intruder can neither fence the
  worker nor write in its name.

Its values (``worker * 10**7 + n``, unique in the run) are recorded before each attempt
(``intrude`` op) and the answer after it (``intrude-end``: ``refused`` with Kafka's
authorization error, ``accepted`` if the commit returned, ``unknown`` for anything else,
a fault's timeout or an unreachable coordinator). The checker reports any of its values
read (``unauthorized-visible``) and any attempt accepted (``unauthorized-accepted``).
It stops at its duration, or once the harness writes ``intruder.stop`` beside the history
(the producers are done).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from pathlib import Path

from txnlog.coordinator import errors as cerr
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer

from .history import HistoryWriter
from .workload import discover, err, partitions

STOP_FILE = "intruder.stop"
# The coordinator's 403 answers (Kafka's authorization errors)
REFUSED = (cerr.TopicAuthorizationFailedError, cerr.TransactionalIdAuthorizationFailedError,
           cerr.ClusterAuthorizationFailedError, cerr.GroupAuthorizationFailedError)


def attempt(args: argparse.Namespace, hist: HistoryWriter, rng: random.Random, n: int,
            counter: list[int]) -> None:
    kind = rng.choice(("own", "victim", "victim-one-shot"))
    own = f"chaos-{args.run}-x{args.worker}"
    victim = f"chaos-{args.run}-w{rng.randrange(max(1, args.victims))}"
    tid = {"own": own, "victim": victim,
           "victim-one-shot": f"{victim}-1s{rng.randrange(args.txns)}"}[kind]
    rows = []
    for topic, p in rng.sample(partitions(), rng.randint(1, 2)):
        for _ in range(rng.randint(1, 3)):
            counter[0] += 1
            rows.append((topic, p, args.worker * 10**7 + counter[0]))
    txn = f"x{args.worker}:{n}"
    t0 = time.time()
    hist.write("intrude", txn=txn, kind=kind, tid=tid, values=[v for _, _, v in rows],
               at=[[t, p] for t, p, _ in rows], t0=t0)
    producer: TransactionalProducer | None = None
    try:
        endpoint = discover(args.root)
        producer = TransactionalProducer(args.root, tid, coordinator=endpoint,
                                         transaction_timeout_ms=args.txn_timeout_ms)
        producer.client = CoordinatorClient(endpoint, timeout=args.rpc_timeout,
                                            retry_for=args.rpc_retry)
        producer.init_transactions()
        producer.begin_transaction()
        for topic, p, value in rows:
            producer.send(topic, str(value).encode(), key=f"k{rng.randrange(4)}".encode(),
                          partition=p)
        producer.commit_transaction()
        outcome, error = "accepted", None
    except REFUSED as exc:
        outcome, error = "refused", err(exc)
    except Exception as exc:
        outcome, error = "unknown", err(exc)
    if producer is not None and outcome != "accepted":
        with contextlib.suppress(Exception):
            producer.abort_transaction()  # its own id: end what InitProducerId allowed
    hist.write("intrude-end", txn=txn, kind=kind, tid=tid, outcome=outcome, error=error,
               t0=t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="chaos.intruder")
    ap.add_argument("--root", required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--run", default="run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--victims", type=int, default=1, help="producer workers w0..w<N-1>")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--txns", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--txn-timeout-ms", type=int, default=3000)
    ap.add_argument("--rpc-timeout", type=float, default=10.0)
    ap.add_argument("--rpc-retry", type=float, default=2.0)
    args = ap.parse_args(argv)
    proc = f"x{args.worker}"
    rng = random.Random(args.seed * 1000 + args.worker)
    deadline = time.monotonic() + args.duration
    counter = [0]
    with HistoryWriter(Path(args.history) / f"{proc}.jsonl", proc) as hist:
        n = 0
        stop = Path(args.history) / STOP_FILE  # the producers are done (run.py)
        while n < args.txns and time.monotonic() < deadline and not stop.exists():
            attempt(args, hist, rng, n, counter)
            n += 1
            time.sleep(rng.uniform(0.5, 1.5) * args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
