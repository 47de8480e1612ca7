"""The Kafka-style admin commands, typed as a user types them (the ``txnlog`` console
script, in a subprocess), against a root a streaming query is reading and writing: exit
codes, ``--json`` answers checked against the log, human tables readable, errors without a
traceback, and what txnlog cannot do yet refused with exit code 3."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.dirname(__file__))

from stream_helpers import end_offsets, produce_keyed, wait_for
from txnlog import TopicPartition, TransactionalProducer

TXNLOG = shutil.which("txnlog", path=os.path.dirname(sys.executable))


class Cli:
    """Runs ``txnlog <args> --root <root>`` and keeps the last result."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cmd = [TXNLOG] if TXNLOG else [sys.executable, "-m", "txnlog.coordinator.cli"]

    def __call__(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*self.cmd, *args, "--root", self.root], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == code, (args, r.returncode, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        if code not in (0, 2):
            assert r.stderr.startswith("Error: "), r.stderr
        return r

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


def test_admin_commands_against_a_live_streaming_query(spark, file_root: str, coord,
                                                       tmp_path) -> None:
    client = coord.client()
    client.create_topic("in", 2)
    produce_keyed(file_root, coord.endpoint, "in", keys=6, per_key=5, txns=3)
    q = (spark.readStream.format("txnlog").option("subscribe", "in")
         .option("startingOffsets", "earliest").option("groupId", "g-live")
         .option("coordinator", coord.endpoint).load(file_root)
         .selectExpr("key", "value").writeStream.format("txnlog").option("topic", "out")
         .option("coordinator", coord.endpoint)
         .option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(processingTime="300 milliseconds").start(file_root))
    cli = Cli(file_root)
    try:
        wait_for(lambda: client.committed_offsets("g-live") == end_offsets(file_root, "in"),
              "the query to commit its group's offsets")
        ends = end_offsets(file_root, "in")

        # ---- topics
        assert cli.json("topics", "list") == ["__consumer_offsets", "in", "out"]
        assert cli("topics", "list", "--exclude-internal").stdout.split() == ["in", "out"]
        [desc] = cli.json("topics", "describe", "--topic", "in")
        assert desc["partitions"] == 2
        assert {("in", o["partition"]): o["last_stable_offset"] for o in desc["offsets"]} == ends
        human = cli("topics", "describe", "--topic", "in").stdout
        assert "Topic: in\tPartitionCount: 2" in human and "LastStableOffset:" in human
        cli("topics", "create", "--topic", "fresh", "--partitions", "3",
            "--config", "cleanup.policy=delete")
        err = cli("topics", "create", "--topic", "fresh", "--partitions", "4", code=1).stderr
        assert "TopicAlreadyExists" in err
        cli("topics", "create", "--topic", "fresh", "--partitions", "4", "--if-not-exists")
        # topic delete and adding partitions change the root (not an "unsupported" exit 3)
        cli("topics", "alter", "--topic", "fresh", "--partitions", "5")
        cli("topics", "create", "--topic", "doomed", "--partitions", "1")
        assert "Topic doomed deleted." in cli("topics", "delete", "--topic", "doomed").stdout
        assert "does not exist" in cli("topics", "delete", "--topic", "doomed",
                                       code=1).stderr
        assert "does not exist" in cli("topics", "describe", "--topic", "nosuch",
                                       code=1).stderr

        # ---- groups: the live query's group, lag per partition
        groups = cli.json("groups", "list")
        assert "g-live" in [g["group_id"] for g in groups]
        [g] = cli.json("groups", "describe", "--group", "g-live")
        rows = {(r["topic"], r["partition"]): r for r in g["offsets"]}
        assert set(rows) == set(ends)
        for tp, r in rows.items():
            assert r["log_end_offset"] >= ends[tp] and r["lag"] == \
                r["log_end_offset"] - r["current_offset"] >= 0
        table = cli("groups", "describe", "--all-groups").stdout
        assert table.splitlines()[0].split()[:6] == [
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        # reset: a dry run by default changes nothing
        before = client.committed_offsets("g-live")
        dry = cli.json("groups", "reset-offsets", "--group", "g-live", "--all-topics",
                       "--to-earliest")
        assert not dry["executed"] and {r["new_offset"] for r in dry["offsets"]} == {0}
        assert "--execute" in cli("groups", "reset-offsets", "--group", "g-live",
                                  "--all-topics", "--to-earliest").stdout
        assert client.committed_offsets("g-live") == before
        # --execute on an admin group: offsets clamped to [earliest, latest] as Kafka's
        cli("groups", "reset-offsets", "--group", "g-admin", "--topic", "in:0",
            "--to-offset", "3", "--execute")
        assert client.committed_offsets("g-admin") == {TopicPartition("in", 0): 3}
        cli("groups", "reset-offsets", "--group", "g-admin", "--topic", "in", "--shift-by",
            "-10", "--execute")
        assert client.committed_offsets("g-admin") == {TopicPartition("in", 0): 0,
                                                       TopicPartition("in", 1): 0}
        cli("groups", "reset-offsets", "--group", "g-admin", "--topic", "in",
            "--to-datetime", "2999-01-01T00:00:00Z", "--execute")
        assert client.committed_offsets("g-admin") == ends
        cli("groups", "reset-offsets", "--group", "g-admin", "--all-topics", "--to-latest",
            "--dry-run", "--execute", code=2)  # argparse: one or the other
        assert "successful" in cli("groups", "delete", "--group", "g-admin").stdout
        assert "g-admin" not in [g["group_id"] for g in cli.json("groups", "list")]
        cli("groups", "delete", "--group", "g-admin", code=1)

        # ---- transactions: the sink's, and a hanging one that holds the query back
        txns = cli.json("transactions", "list")
        sink = [t for t in txns if t["transactional_id"].startswith("txnlog-sink-")]
        assert len(sink) == 1
        tid = sink[0]["transactional_id"]
        [d] = [cli.json("transactions", "describe", "--transactional-id", tid)]
        assert d["transactional_id"] == tid and d["producer_id"] == sink[0]["producer_id"]
        assert "TransactionState" in cli("transactions", "list").stdout
        prod = cli.json("transactions", "describe-producers", "--topic", "out",
                        "--partition", "0")
        assert prod["topic"] == "out" and isinstance(prod["producers"], list)

        hanging = TransactionalProducer(file_root, "stuck", coordinator=coord.endpoint)
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send("in", b"never", key=b"k0")
        hanging.flush()
        stuck = cli.json("transactions", "find-hanging", "--max-transaction-timeout", "0")
        [h] = [x for x in stuck if x["transactional_id"] == "stuck"]
        assert cli.json("transactions", "list", "--state", "Ongoing") != []
        produce_keyed(file_root, coord.endpoint, "in", keys=6, per_key=1, txns=1,
                      start={f"k{i}": 5 for i in range(6)}, tid="after")
        lso_held = end_offsets(file_root, "in")[("in", h["partition"])]
        assert lso_held == h["start_offset"]  # the open transaction holds the LSO
        out = cli("transactions", "abort", "--topic", "in", "--partition",
                  str(h["partition"]), "--start-offset", str(h["start_offset"])).stdout
        assert "Aborted" in out and "'stuck'" in out
        cli("transactions", "abort", "--transactional-id", "stuck", code=1)  # not Ongoing
        wait_for(lambda: client.committed_offsets("g-live") == end_offsets(file_root, "in")
              and end_offsets(file_root, "in")[("in", h["partition"])] > lso_held,
              "the query to move past the aborted transaction")

        # ---- configs
        cfg = {c["name"]: c for c in cli.json("configs", "describe", "--entity-type",
                                              "topics", "--entity-name", "fresh")}
        assert cfg["cleanup.policy"]["value"] == "delete"
        assert cfg["cleanup.policy"]["source"] == "TOPIC_CONFIG"
        assert cfg["retention.ms"]["source"] == "DEFAULT_CONFIG"
        assert "All configs for topic in are:" in cli("configs", "describe", "--topic",
                                                      "in").stdout
        # a real change; a value that deletes nothing under the live query
        cli("configs", "alter", "--topic", "in", "--add-config", "retention.ms=604800001")
        cfg = {c["name"]: c for c in cli.json("configs", "describe", "--entity-type",
                                              "topics", "--entity-name", "in")}
        assert cfg["retention.ms"]["value"] == "604800001"

        # ---- get-offsets: latest (the LSO), earliest, max-timestamp, by time
        now = end_offsets(file_root, "in")
        lines = cli("get-offsets", "--topic", "in").stdout.split()
        assert lines == [f"in:{p}:{now[('in', p)]}" for p in (0, 1)]
        assert cli("get-offsets", "--topic", "in", "--time", "-2").stdout.split() == \
            ["in:0:0", "in:1:0"]
        maxts = cli.json("get-offsets", "--topic", "in", "--time", "max-timestamp")
        assert all(0 <= r["offset"] < now[("in", r["partition"])] and r["timestamp"] > 0
                   for r in maxts)
        assert cli("get-offsets", "--topic", "in", "--partitions", "1", "--time",
                   str(int(time.time() * 1000) + 3_600_000)).stdout == ""
        assert cli.json("get-offsets", "--topic", "in", "--partitions", "1", "--time",
                        "0")[0]["offset"] == 0
        cli("get-offsets", "--time", "banana", code=2)

        # ---- delete-records on another topic: the live query's
        # input keeps its log start
        spec = tmp_path / "delete.json"
        spec.write_text(json.dumps({"partitions": [{"topic": "fresh", "partition": 0,
                                                    "offset": 0}], "version": 1}))
        cli("delete-records", "--offset-json-file", str(spec))
        assert cli("get-offsets", "--topic", "in", "--partitions", "0", "--time",
                   "earliest").stdout.split() == ["in:0:0"]
    finally:
        q.stop()
