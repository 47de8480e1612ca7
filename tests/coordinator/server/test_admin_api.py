"""``txnlog.AdminClient`` against a coordinator process: Kafka's AdminClient operations, what
they answer, that a deleted group stays deleted after a restart (the ``group_delete``
record replays), and the operations txnlog refuses for now."""

from __future__ import annotations

import time
from typing import Any

import pytest

# tests/ (the shared helpers) is on sys.path: tests/conftest.py puts it there
from coordinator_proc import CoordinatorProc
from txnlog import (
    AdminClient,
    CoordinatorError,
    InvalidTxnStateError,
    TopicPartition,
    TransactionalProducer,
)
from txnlog.coordinator.errors import InvalidConfigError

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def _produce(root: str, endpoint: str, tid: str, n: int, commit: bool = True,
             offsets: dict[TopicPartition, int] | None = None, group: str = "g"
             ) -> TransactionalProducer:
    p = TransactionalProducer(root, tid, coordinator=endpoint)
    p.init_transactions()
    p.begin_transaction()
    for i in range(n):
        p.send("orders", f"v{i}".encode(), key=f"k{i}".encode(), timestamp=1000 + i)
    if offsets:
        p.send_offsets_to_transaction(offsets, group)
    if commit:
        p.commit_transaction()
    else:
        p.flush()
    return p


def test_admin_client_operations(file_root: str) -> None:
    with CoordinatorProc(file_root) as coord:
        admin = AdminClient(file_root, coordinator=coord.endpoint)
        [created] = admin.create_topics([("orders", 2, {"cleanup.policy": "delete"})])
        assert created["partitions"] == 2
        _produce(file_root, coord.endpoint, "tx-a", 10, offsets={T0: 3, T1: 1})
        assert admin.list_topics() == ["orders"]
        assert "__consumer_offsets" in admin.list_topics(include_internal=True)
        [d] = admin.describe_topics(["orders"])
        ends = {TopicPartition("orders", o["partition"]): o["last_stable_offset"]
                for o in d["offsets"]}
        assert sum(ends.values()) == 12  # 10 records and a marker in each partition

        # offsets: earliest, latest, max-timestamp (the record with the largest timestamp),
        # by time
        found = admin.list_offsets({T0: "earliest", T1: "latest"})
        assert found[T0]["offset"] == 0 and found[T1]["offset"] == ends[T1]
        mx = admin.list_offsets({T0: -3, T1: -3})
        assert max(r["timestamp"] for r in mx.values()) == 1009
        by_time = admin.list_offsets({T0: 1005, T1: 99_999})
        assert by_time[T1] == {"offset": -1, "timestamp": 99_999}
        assert 0 <= by_time[T0]["offset"] < ends[T0]

        # groups
        assert [g["group_id"] for g in admin.list_consumer_groups()] == ["g"]
        assert admin.list_consumer_group_offsets("g") == {T0: 3, T1: 1}
        [g] = admin.describe_consumer_groups(["g"])
        assert [(r["partition"], r["current_offset"], r["lag"]) for r in g["offsets"]] == [
            (0, 3, ends[T0] - 3), (1, 1, ends[T1] - 1)]
        admin.alter_consumer_group_offsets("g2", {T0: 2})
        assert admin.list_consumer_group_offsets("g2") == {T0: 2}
        with pytest.raises(ValueError, match=">= 0"):
            admin.alter_consumer_group_offsets("g2", {T0: -1})

        # transactions: an open one, described, found hanging, aborted by start offset
        open_p = _produce(file_root, coord.endpoint, "tx-open", 3, commit=False)
        [row] = admin.list_transactions(states=["Ongoing"])
        assert row["transactional_id"] == "tx-open" and row["state"] == "Ongoing"
        assert {t["transactional_id"] for t in admin.list_transactions()} >= {
            "tx-a", "tx-open", "txnlog-admin-offsets-g2"}
        assert [t["transactional_id"] for t in
                admin.list_transactions(producer_ids=[row["producer_id"]])] == ["tx-open"]
        [desc] = admin.describe_transactions(["tx-open"])
        assert desc["partitions"] and desc["first_offsets"]
        with pytest.raises(CoordinatorError, match="unknown"):
            admin.describe_transactions(["no-such-id"])
        assert admin.find_hanging_transactions() == []  # younger than 15 minutes
        time.sleep(0.01)
        hanging = admin.find_hanging_transactions(max_transaction_timeout_ms=0)
        assert {h["transactional_id"] for h in hanging} == {"tx-open"}
        h = hanging[0]
        producers = admin.describe_producers([(h["topic"], h["partition"])])[0]["producers"]
        mine = [p for p in producers if p["producer_id"] == h["producer_id"]]
        assert mine and mine[0]["current_txn_start_offset"] == h["start_offset"]
        result = admin.abort_transaction(topic=h["topic"], partition=h["partition"],
                                         start_offset=h["start_offset"])
        assert result["transactional_id"] == "tx-open" and result["outcome"] == "abort"
        with pytest.raises(InvalidTxnStateError, match="only an Ongoing"):
            admin.abort_transaction("tx-open")
        with pytest.raises(CoordinatorError):
            open_p.commit_transaction()  # its producer was fenced by the abort
        with pytest.raises(ValueError, match="name the transaction"):
            admin.abort_transaction(topic="orders")

        # configs: what the topic sets and Kafka's defaults, and whether txnlog acts on them
        cfg = {c["name"]: c for c in admin.describe_configs("orders")}
        assert cfg["cleanup.policy"]["source"] == "TOPIC_CONFIG"
        assert cfg["retention.ms"] == {"name": "retention.ms", "value": "604800000",
                                       "source": "DEFAULT_CONFIG", "read_only": False,
                                       "honoured": True}
        # altering: validated (nothing changed when refused), then applied and described
        with pytest.raises(InvalidConfigError, match="unknown topic config"):
            admin.incremental_alter_configs("orders", {"retention.msec": "1"})
        with pytest.raises(InvalidConfigError, match="must be an integer"):
            admin.incremental_alter_configs("orders", {"retention.ms": "{\"a\": 1}"})
        assert admin.incremental_alter_configs("orders", {"retention.bytes": "1000000"}) == {
            **{c: cfg[c]["value"] for c in cfg if cfg[c]["source"] == "TOPIC_CONFIG"},
            "retention.bytes": "1000000"}
        after = {c["name"]: c for c in admin.describe_configs("orders")}
        assert after["retention.bytes"]["value"] == "1000000"
        assert after["retention.bytes"]["source"] == "TOPIC_CONFIG"

        # DeleteRecords: the low watermark moves, earliest follows
        assert admin.delete_records({T0: 2}) == {T0: 2}
        assert admin.list_offsets({T0: "earliest"})[T0]["offset"] == 2

        # partitions grow only
        with pytest.raises(CoordinatorError, match="already has 2 partitions"):
            admin.create_partitions("orders", 2)
        with pytest.raises(CoordinatorError, match="higher than the requested 1"):
            admin.create_partitions("orders", 1)

        # delete some of a group's offsets, then a group; both replay after a restart
        admin.alter_consumer_group_offsets("g3", {T0: 1, T1: 1})
        assert admin.delete_consumer_group_offsets("g3", [T1]) is True
        assert admin.delete_consumer_group_offsets("g3", [T1]) is False  # already gone
        assert admin.list_consumer_group_offsets("g3") == {T0: 1}
        assert admin.delete_consumer_groups(["g", "nope"]) == {"g": True, "nope": False}
    with CoordinatorProc(file_root) as coord:
        admin = AdminClient(file_root, coordinator=coord.endpoint)
        assert [g["group_id"] for g in admin.list_consumer_groups()] == ["g2", "g3"]
        assert admin.list_consumer_group_offsets("g") == {}
        assert admin.list_consumer_group_offsets("g3") == {T0: 1}
        assert admin.list_consumer_group_offsets("g2") == {T0: 2}


def test_deleting_a_group_with_offsets_in_an_open_transaction_is_refused(file_root: str
                                                                        ) -> None:
    with CoordinatorProc(file_root) as coord:
        admin = AdminClient(file_root, coordinator=coord.endpoint)
        admin.create_topics([("orders", 2, None)])
        p = _produce(file_root, coord.endpoint, "tx", 2, commit=False, offsets={T0: 1})
        with pytest.raises(InvalidTxnStateError, match="open transaction"):
            admin.delete_consumer_groups(["g"])
        p.commit_transaction()
        assert admin.delete_consumer_groups(["g"]) == {"g": True}
        with pytest.raises(CoordinatorError, match="at most"):
            admin.delete_consumer_groups(["x" * 40_000])


def test_one_of_concurrent_creations_of_a_topic_succeeds(every_root: str) -> None:
    """Eight clients create one new topic with the same shape at once: exactly one is told
    it created it, the others TopicAlreadyExists (Kafka's answer; before, every call of an
    identical shape succeeded). ``exist_ok`` still answers the existing topic. On files
    and both S3 servers: the decision is storage's put-if-absent."""
    from concurrent.futures import ThreadPoolExecutor

    with CoordinatorProc(every_root) as coord:
        for name in ("race0",):
            with ThreadPoolExecutor(8) as pool:
                got = list(pool.map(lambda _, n=name: _create(coord, n), range(8)))
            assert sorted(got) == ["created"] + ["exists"] * 7, got
            meta = coord.client().create_topic(name, 3, {"retention.ms": "60000"},
                                               exist_ok=True)
            assert meta["partitions"] == 3
        assert _create(coord, "race3") == "created" and _create(coord, "race3") == "exists"
    with CoordinatorProc(every_root) as again:  # every creation is in the log
        assert {"race0", "race3"} <= set(again.client().list_topics())


def _create(coord: CoordinatorProc, name: str) -> str:
    from txnlog.coordinator.errors import TopicAlreadyExistsError

    try:
        coord.client().create_topic(name, 3, {"retention.ms": "60000"})
        return "created"
    except TopicAlreadyExistsError:
        return "exists"


def test_concurrent_config_alterations_all_land(file_root: str) -> None:
    """Eight clients alter eight different configs of one topic at once, one of them an
    APPEND to ``cleanup.policy``: every change is there afterwards, in the coordinator's
    answer, in storage and after a restart: each alteration is applied to what the one
    before left. (The gateway computed APPEND from a config it read first, so an APPEND
    could overwrite a change made in between; the coordinator computes it now.)"""
    from concurrent.futures import ThreadPoolExecutor

    changes: list[dict[str, Any]] = [
        {"set_configs": {"retention.ms": "61000"}}, {"set_configs": {"segment.ms": "62000"}},
        {"set_configs": {"segment.bytes": "630000"}}, {"set_configs": {"flush.ms": "64000"}},
        {"set_configs": {"delete.retention.ms": "65000"}},
        {"set_configs": {"min.compaction.lag.ms": "66"}},
        {"set_configs": {"max.message.bytes": "67000"}},
        {"append": {"cleanup.policy": "compact"}}]
    want = {"retention.ms": "61000", "segment.ms": "62000", "segment.bytes": "630000",
            "flush.ms": "64000", "delete.retention.ms": "65000",
            "min.compaction.lag.ms": "66", "max.message.bytes": "67000",
            "cleanup.policy": "delete,compact"}
    with CoordinatorProc(file_root) as coord:
        for round_ in range(2):
            name = f"cfg{round_}"
            coord.client().create_topic(name, 1)
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda kw, n=name: coord.client().alter_configs(n, **kw),
                              changes))
            assert coord.client().describe_topic(name)["config"] == want
            stored = {c["name"]: c["value"] for c in AdminClient(file_root).describe_configs(name)
                      if c["source"] == "TOPIC_CONFIG"}
            assert stored == want  # _meta/topics, as tools read it
        # SUBTRACT of the last item, and APPEND to a config that is not a list: refused
        with pytest.raises(InvalidConfigError, match="empty list"):
            coord.client().alter_configs("cfg0", subtract={"cleanup.policy": "delete,compact"})
        with pytest.raises(CoordinatorError, match=r"not allowed for config key: retention\.ms"):
            coord.client().alter_configs("cfg0", append={"retention.ms": "5"})
        # AlterConfigs (replace): what it does not set goes back to the default
        coord.client().alter_configs("cfg0", {"retention.ms": "70000"}, replace=True)
        assert coord.client().describe_topic("cfg0")["config"] == {"retention.ms": "70000"}
    with CoordinatorProc(file_root) as again:
        assert again.client().describe_topic("cfg1")["config"] == want
        assert again.client().describe_topic("cfg0")["config"] == {"retention.ms": "70000"}
