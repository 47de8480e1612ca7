"""The admin commands' paths that need no Spark (the full tour against a live streaming
query is tests/spark/test_admin_cli.py): topic regexes, reset modes, errors as messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# tests/ (the shared helpers) is on sys.path: tests/conftest.py puts it there
from coordinator_proc import CoordinatorProc
from txnlog import AdminClient, TopicPartition, TransactionalProducer


def _run(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txnlog.coordinator.cli", *args,
                           "--root", root], capture_output=True, text=True, timeout=120)


def test_admin_cli_paths(file_root: str) -> None:
    with CoordinatorProc(file_root) as coord:
        admin = AdminClient(file_root, coordinator=coord.endpoint)
        admin.create_topics([("orders", 2, None), ("orders-eu", 1, None), ("audit", 1, None)])
        with TransactionalProducer(file_root, "p", coordinator=coord.endpoint) as p:
            p.init_transactions()
            p.begin_transaction()
            for i in range(8):
                p.send("orders", b"v", key=f"k{i}".encode())
            p.commit_transaction()
        admin.alter_consumer_group_offsets("g", {TopicPartition("orders", 0): 1})

        r = _run(file_root, "topics", "describe", "--topic", "orders.*", "--json")
        assert r.returncode == 0, r.stderr
        assert [t["name"] for t in json.loads(r.stdout)] == ["orders", "orders-eu"]
        r = _run(file_root, "topics", "describe", "--topic", "audit", "--topic", "nope")
        assert r.returncode == 1 and r.stderr.startswith("Error: ") and "'nope'" in r.stderr

        base = ["groups", "reset-offsets", "--group", "g", "--all-topics", "--json"]
        r = _run(file_root, *base, "--to-current")
        assert json.loads(r.stdout)["offsets"][0]["new_offset"] == 1
        r = _run(file_root, *base, "--by-duration", "P1D")  # a day back: the earliest record
        assert json.loads(r.stdout)["offsets"][0]["new_offset"] == 0
        assert _run(file_root, *base, "--by-duration", "1 day").returncode == 2
        assert _run(file_root, *base[:-1]).returncode == 2  # no --to-*
        r = _run(file_root, "groups", "reset-offsets", "--group", "nobody", "--all-topics",
                 "--to-latest")
        assert r.returncode == 1 and "no committed offsets" in r.stderr

        # --export writes Kafka's CSV, --from-file reads it back
        r = _run(file_root, "groups", "reset-offsets", "--group", "g", "--topic", "orders",
                 "--to-latest", "--export")
        assert r.returncode == 0 and "dry run" in r.stderr
        lines = r.stdout.split()
        assert [x.split(",")[:2] for x in lines] == [["orders", "0"], ["orders", "1"]]
        csv = os.path.join(os.path.dirname(file_root[len("file://"):]), "offsets.csv")
        with open(csv, "w", encoding="utf-8") as f:
            f.write("orders,1,2\nother-group,orders,0,5\n")
        r = _run(file_root, "groups", "reset-offsets", "--group", "g", "--from-file", csv,
                 "--execute")
        assert r.returncode == 0, r.stderr
        assert admin.list_consumer_group_offsets("g") == {TopicPartition("orders", 0): 1,
                                                          TopicPartition("orders", 1): 2}
        r = _run(file_root, "groups", "reset-offsets", "--group", "g", "--to-latest")
        assert r.returncode == 2 and "--all-topics" in r.stderr
        r = _run(file_root, "groups", "delete-offsets", "--group", "g", "--topic", "orders:1")
        assert r.returncode == 0 and "Successful" in r.stdout, r.stderr
        assert admin.list_consumer_group_offsets("g") == {TopicPartition("orders", 0): 1}
        r = _run(file_root, "groups", "delete-offsets", "--group", "g", "--topic", "orders:1")
        assert r.returncode == 1 and r.stderr.startswith("Error: ")

        r = _run(file_root, "transactions", "describe", "--transactional-id", "no-such")
        assert r.returncode == 1 and "InvalidProducerIdMapping" in r.stderr
        assert "Traceback" not in r.stderr
        r = _run(file_root, "transactions", "abort")
        assert r.returncode == 1 and "name the transaction" in r.stderr

        r = _run(file_root, "get-offsets", "--topic", "orders", "--partitions", "0,1",
                 "--isolation", "read_uncommitted", "--json")
        assert [x["partition"] for x in json.loads(r.stdout)] == [0, 1]
        r = _run(file_root, "delete-records", "--offset-json-file", "/nonexistent.json")
        assert r.returncode == 1 and "offset-json-file" in r.stderr
