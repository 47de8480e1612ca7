"""Option parsing: Spark-Kafka names and defaults, and a clear error for every bad option."""

from typing import Any

import pytest
from txnlog.datasource.options import (
    EARLIEST,
    LATEST,
    InvalidOptionError,
    parse_read_options,
    parse_write_options,
)
from txnlog.log_format.codec.compression import Codec
from txnlog.log_format.errors import InvalidTopicNameError

ROOT = {"path": "file:///tmp/x"}


def read(**kw: str):
    return parse_read_options({**ROOT, **{k.lower(): v for k, v in kw.items()}})


def test_defaults_match_sparks_kafka_source() -> None:
    o = read(subscribe="a,b")
    assert o.subscription.topics == ("a", "b")
    assert o.starting.default == EARLIEST and o.ending.default == LATEST
    assert o.read_committed and not o.include_headers and o.fail_on_data_loss
    s = parse_read_options({**ROOT, "subscribe": "a"}, streaming=True)
    assert s.starting.default == LATEST


def test_small_ranges_share_a_task_unless_asked_for_more_tasks() -> None:
    assert read(subscribe="a").min_records_per_partition == 50_000
    assert read(subscribe="a", minRecordsPerPartition="0").min_records_per_partition == 0
    assert read(subscribe="a", minPartitions="4").min_records_per_partition == 0
    assert read(subscribe="a", maxRecordsPerPartition="9").min_records_per_partition == 0
    assert read(subscribe="a", minPartitions="4",
                minRecordsPerPartition="50").min_records_per_partition == 50


def test_per_partition_offsets_and_timestamps() -> None:
    o = read(subscribe="a", startingOffsets='{"a":{"0":5,"1":-2}}',
             endingOffsets='{"a":{"0":-1,"1":9}}')
    assert o.starting.offsets == {("a", 0): 5, ("a", 1): EARLIEST}
    assert o.ending.offsets == {("a", 0): LATEST, ("a", 1): 9}
    t = read(subscribe="a", startingOffsetsByTimestamp='{"a":{"0":1000}}', endingTimestamp="5")
    assert t.starting.timestamps == {("a", 0): 1000} and t.ending.timestamp == 5


def test_assign_and_pattern() -> None:
    o = read(assign='{"t":[1,0]}')
    assert o.subscription.assign == (("t", 0), ("t", 1))
    assert read(subscribePattern="ord.*").subscription.matches("orders")


@pytest.mark.parametrize(("opts", "match"), [
    ({}, "exactly one of"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
    ({"subscribe": "a", "kafka.bootstrap.servers": "x:9092"}, "no Kafka brokers"),
    ({"subscribe": "a", "startingoffset": "earliest"}, "unknown option 'startingoffset'"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "not allowed for batch"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "not allowed"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "-2"),
    ({"subscribe": "a", "startingOffsets": "{not json"}, "not valid JSON"),
    ({"subscribe": "a", "isolation.level": "serializable"}, "read_committed or"),
    ({"subscribe": "a", "includeHeaders": "yes"}, "true or false"),
    ({"subscribe": "a", "minPartitions": "0"}, "at least 1"),
    ({"subscribe": "a", "minRecordsPerPartition": "-1"}, "at least 0"),
    ({"subscribe": "a", "minRecordsPerPartition": "many"}, "must be an integer"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "streaming reads only"),
    ({"assign": '{"a":"0"}'}, "list of partition numbers"),
    ({"subscribePattern": "("}, "not a valid regex"),
])
def test_bad_read_options_name_the_problem(opts: dict, match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        parse_read_options({**ROOT, **{k.lower(): v for k, v in opts.items()}})


def test_missing_root_and_bad_topic() -> None:
    with pytest.raises(InvalidOptionError, match="no txnlog root"):
        parse_read_options({"subscribe": "a"})
    with pytest.raises(InvalidTopicNameError):
        read(subscribe="../etc")


def test_write_options() -> None:
    o = parse_write_options({**ROOT, "topic": "t", "compression": "zstd", "partitions": "3"})
    assert o.topic == "t" and o.compression is Codec.ZSTD and o.partitions == 3
    assert o.transaction_timeout_ms == 60_000
    with pytest.raises(InvalidOptionError, match="compression"):
        parse_write_options({**ROOT, "compression": "brotli"})
    with pytest.raises(InvalidOptionError, match="unknown option 'subscribe'"):
        parse_write_options({**ROOT, "subscribe": "t"})
    with pytest.raises(InvalidTopicNameError):
        parse_write_options({**ROOT, "topic": "a/b"})
    assert parse_write_options({**ROOT, "storage.endpoint_url": "http://x"}).storage_options == {
        "storage.endpoint_url": "http://x"}


@pytest.mark.s3
def test_storage_options_alone_reach_s3_and_the_coordinator(
        s3_server: Any, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark user on MinIO or another S3 names the endpoint and keys as ``storage.*``
    options, with no AWS variables in the environment: the parsed options must reach the
    storage and the coordinator the query starts (they were stripped of their prefix, which
    ``Storage.for_url`` needs, and silently unused)."""
    import json
    import os
    import signal

    from txnlog.coordinator.client import embedded
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.log_format import layout
    from txnlog.log_format.storage import Storage

    for key in s3_server.env():
        monkeypatch.delenv(key, raising=False)
    Storage.clear_cache()
    embedded._cache.clear()
    opts = parse_write_options({"path": s3_root, "topic": "t", **s3_server.storage_options()})
    storage = Storage.for_url(opts.root, opts.storage_options)
    assert storage.put_if_absent("probe", b"x") and storage.get("probe") == b"x"
    endpoint = embedded.coordinator_for_root(opts.root, opts.storage_options, idle_exit_s=30)
    pid = json.loads(storage.get(layout.COORDINATOR_FILE))["pid"]
    try:
        CoordinatorClient(endpoint).create_topic("t", 2)
        assert [o.name for o in storage.list("_meta/topics")] == ["t.json"]
    finally:
        os.kill(pid, signal.SIGTERM)
        embedded._cache.clear()
