"""The embedded coordinator: found through _coordinator.json or started detached, once."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

from txnlog.coordinator.client import embedded
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage


def test_concurrent_starters_start_one_coordinator(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    results: list[str] = []

    def start() -> None:
        embedded._cache.clear()
        results.append(embedded.coordinator_for_root(root, idle_exit_s=30))

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    # a second process-level caller (fresh cache) finds the same one through the registration
    embedded._cache.clear()
    again = embedded.coordinator_for_root(root)
    pid = json.loads(st.get(layout.COORDINATOR_FILE))["pid"]
    try:
        assert len(set(results)) == 1 and results[0] == again
        assert not st.exists(embedded.LOCK_FILE)
        # the default path of the producer: no coordinator given
        CoordinatorClient(again).create_topic("t", 1)
        with TransactionalProducer(root, "emb") as prod:
            prod.init_transactions()
            prod.begin_transaction()
            prod.send("t", "hello")
            prod.commit_transaction()
        assert PartitionReader(st, "t", 0).read_table().column("value").to_pylist() == \
            [b"hello"]
    finally:
        os.kill(pid, signal.SIGTERM)


def test_idle_coordinator_exits(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    endpoint = embedded.coordinator_for_root(root, idle_exit_s=1)
    pid = json.loads(Storage.for_url(root).get(layout.COORDINATOR_FILE))["pid"]
    import time
    deadline = time.monotonic() + 30
    while CoordinatorClient(endpoint).healthy():
        assert time.monotonic() < deadline, "the idle coordinator did not exit"
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # a zombie (exited, not reaped by us since it is detached) also counts as gone
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split()[2] == "Z":
                break
        assert time.monotonic() < deadline
        time.sleep(0.2)
