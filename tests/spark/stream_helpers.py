"""Helpers for the streaming tests: keyed input with per-key sequence numbers, and the
exactly-once check of an output topic (every input record once, per-key order, no gaps)."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable

from coordinator_proc import free_port  # noqa: F401 - the streaming tests take it from here
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage
from txnlog.log_format.topics import read_topic


def produce_keyed(root: str, coordinator: str, topic: str, *, keys: int, per_key: int,
                  txns: int, start: dict[str, int] | None = None, aborted_every: int = 0,
                  tid: str = "input-gen") -> dict[str, int]:
    """Write ``keys * per_key`` records ``k<i>:<seq>`` in ``txns`` committed transactions
    (plus, with ``aborted_every``, an aborted transaction of ``ABORTED`` records after every
    that many); returns the next sequence number per key."""
    seq = dict(start or {})
    order = [f"k{i}" for i in range(keys)] * per_key
    chunk = max(1, len(order) // txns)
    with TransactionalProducer(root, tid, coordinator=coordinator) as prod:
        prod.init_transactions()
        for n, i in enumerate(range(0, len(order), chunk)):
            prod.begin_transaction()
            for key in order[i:i + chunk]:
                s = seq.get(key, 0)
                seq[key] = s + 1
                prod.send(topic, f"{key}:{s}".encode(), key=key.encode())
            prod.commit_transaction()
            if aborted_every and n % aborted_every == 0:
                prod.begin_transaction()
                for key in order[i:i + 5]:
                    prod.send(topic, b"ABORTED", key=key.encode())
                prod.flush()  # written to storage, then aborted by markers
                prod.abort_transaction()
    return seq


def read_values(root: str, topic: str, isolation_level: str = "read_committed"
                ) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of a topic, per partition in offset order."""
    storage = Storage.for_url(root)
    out = []
    for p in range(read_topic(storage, topic).partitions):
        table = PartitionReader(storage, topic, p, isolation_level=isolation_level).read_table()
        for off, key, value in zip(table.column("offset").to_pylist(),
                                   table.column("key").to_pylist(),
                                   table.column("value").to_pylist(), strict=True):
            out.append((p, off, key, value))
    return out


def check_exactly_once(root: str, topic: str, expected: dict[str, int],
                       prefix: bytes = b"out:") -> int:
    """Assert the topic holds ``prefix + k:<seq>`` for every key k and seq < expected[k],
    exactly once each, in sequence order per key; returns the record count."""
    per_key: dict[str, list[int]] = defaultdict(list)
    rows = read_values(root, topic)
    for _, _, key, value in rows:
        assert value.startswith(prefix), value
        k, _, s = value[len(prefix):].decode().partition(":")
        assert key is not None and key.decode() == k, (key, value)
        per_key[k].append(int(s))
    assert set(per_key) == set(expected), (sorted(per_key), sorted(expected))
    for k, n in expected.items():
        got = per_key[k]
        dups = len(got) - len(set(got))
        missing = sorted(set(range(n)) - set(got))
        assert not dups and not missing, f"key {k}: {dups} duplicates, missing {missing[:10]}"
        assert got == sorted(got), f"key {k}: out of order {got[:20]}"
    return len(rows)


def end_offsets(root: str, topic: str) -> dict[tuple[str, int], int]:
    """Each partition's LSO from the newest stable snapshot."""
    from txnlog.log_format.stable import read_latest_stable

    storage = Storage.for_url(root)
    snap = read_latest_stable(storage)
    assert snap is not None
    return {(topic, p): snap.lso(topic, p)
            for p in range(read_topic(storage, topic).partitions)}


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll ``cond`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def offsets_log(ckpt: str | os.PathLike[str]) -> list[dict]:
    """A txnlog source's end offsets of every batch, from Spark's offset log."""
    base = os.fspath(ckpt)
    out = []
    for name in sorted((n for n in os.listdir(f"{base}/offsets") if n.isdigit()), key=int):
        with open(f"{base}/offsets/{name}", encoding="utf-8") as f:
            out.append(json.loads(f.read().splitlines()[2]))
    return out
