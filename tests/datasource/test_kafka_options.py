"""spark-sql-kafka's options on format("txnlog"): the integration guide's examples with the
format swapped, and every option of its tables mapped, accepted as a no-op, or refused by
name (the Spark runs of the same examples are in tests/spark/test_kafka_parity.py)."""

from __future__ import annotations

import logging

import pytest
from txnlog.datasource.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    InvalidOptionError,
    parse_read_options,
    parse_write_options,
)
from txnlog.log_format.codec.compression import Codec

ROOT = "file:///tmp/txnlog-guide"
SERVERS = {"kafka.bootstrap.servers": "host1:port1,host2:port2"}

# The option sets of the examples in Spark's "Structured Streaming + Kafka Integration
# Guide" (docs/streaming/structured-streaming-kafka-integration.md), as they are written.
GUIDE_STREAM_READS = [
    {**SERVERS, "subscribe": "topic1"},
    {**SERVERS, "subscribe": "topic1", "includeHeaders": "true"},
    {**SERVERS, "subscribe": "topic1,topic2"},
    {**SERVERS, "subscribePattern": "topic.*"},
]
GUIDE_BATCH_READS = [
    {**SERVERS, "subscribe": "topic1"},
    {**SERVERS, "subscribe": "topic1", "includeHeaders": "true"},
    {**SERVERS, "subscribe": "topic1,topic2",
     "startingOffsets": '{"topic1":{"0":23,"1":-2},"topic2":{"0":-2}}',
     "endingOffsets": '{"topic1":{"0":50,"1":-1},"topic2":{"0":-1}}'},
    {**SERVERS, "subscribePattern": "topic.*", "startingOffsets": "earliest",
     "endingOffsets": "latest"},
]
GUIDE_WRITES = [
    {**SERVERS, "topic": "topic1"},
    {**SERVERS},  # the topic comes from the data's 'topic' column
    {**SERVERS, "topic": "topic1", "includeHeaders": "true"},
]


def low(opts: dict[str, str]) -> dict[str, str]:
    """As PySpark's CaseInsensitiveDict hands them to the data source."""
    return {k.lower(): v for k, v in opts.items()}


def without_servers(opts: dict[str, str]) -> dict[str, str]:
    """The guide's one documented change: the brokers become the root given to load()."""
    out = {k: v for k, v in opts.items() if k != "kafka.bootstrap.servers"}
    return low({**out, "path": ROOT})


@pytest.mark.parametrize("opts", GUIDE_STREAM_READS + GUIDE_BATCH_READS + GUIDE_WRITES)
def test_guide_examples_name_the_root_for_the_brokers(opts: dict[str, str]) -> None:
    # As written (format swapped only): load() has no path, and the error says what to do.
    parse = parse_write_options if opts in GUIDE_WRITES else parse_read_options
    with pytest.raises(InvalidOptionError, match=r"no Kafka brokers: pass the log's root"):
        parse(low({**opts, "path": ROOT}))
    with pytest.raises(InvalidOptionError, match=r"load\(root\)"):
        parse(low(opts))


@pytest.mark.parametrize("opts", GUIDE_STREAM_READS)
def test_guide_stream_reads_work_with_the_root(opts: dict[str, str]) -> None:
    o = parse_read_options(without_servers(opts), streaming=True)
    assert o.root == ROOT
    assert o.starting.default == -1  # streams start at latest, as Spark's Kafka source
    assert o.include_headers == (opts.get("includeHeaders") == "true")


@pytest.mark.parametrize("opts", GUIDE_BATCH_READS)
def test_guide_batch_reads_work_with_the_root(opts: dict[str, str]) -> None:
    o = parse_read_options(without_servers(opts))
    if "startingOffsets" in opts and opts["startingOffsets"].startswith("{"):
        assert o.starting.offsets == {("topic1", 0): 23, ("topic1", 1): -2, ("topic2", 0): -2}
        assert o.ending.offsets == {("topic1", 0): 50, ("topic1", 1): -1, ("topic2", 0): -1}


@pytest.mark.parametrize("opts", GUIDE_WRITES)
def test_guide_writes_work_with_the_root(opts: dict[str, str]) -> None:
    o = parse_write_options(without_servers(opts))
    assert o.topic == opts.get("topic")


# Every option of the guide's tables that the examples do not use: what txnlog does.
def read(streaming: bool = True, **kw: str):  # type: ignore[no-untyped-def]
    return parse_read_options(low({"path": ROOT, "subscribe": "t", **kw}), streaming=streaming)


def write(**kw: str):  # type: ignore[no-untyped-def]
    return parse_write_options(low({"path": ROOT, **kw}))


def test_mapped_kafka_options_take_their_txnlog_meaning() -> None:
    assert read(**{"kafka.isolation.level": "read_uncommitted"}).isolation_level == \
        "read_uncommitted"
    assert write(**{"kafka.compression.type": "zstd"}).compression is Codec.ZSTD
    assert write(**{"kafka.transactional.id": "job-7"}).transactional_id == "job-7"
    assert write(**{"kafka.transaction.timeout.ms": "90000"}).transaction_timeout_ms == 90000
    assert write(**{"kafka.compression.zstd.level": "9", "kafka.compression.type": "zstd"}
                 ).compression_level == 9
    # only the level of the codec in use counts, as in Kafka (a gzip level is not zstd's)
    assert write(**{"kafka.compression.gzip.level": "9", "kafka.compression.zstd.level": "3",
                    "compression": "zstd"}).compression_level == 3
    assert write(**{"kafka.compression.gzip.level": "9", "kafka.compression.type": "lz4"}
                 ).compression_level is None
    with pytest.raises(InvalidOptionError, match=r"gzip must be in \[1, 9\]"):
        write(**{"kafka.compression.gzip.level": "12", "kafka.compression.type": "gzip"})
    # ... and their values are checked by the txnlog option's own rules
    with pytest.raises(InvalidOptionError, match="read_committed or read_uncommitted"):
        read(**{"kafka.isolation.level": "serializable"})
    with pytest.raises(InvalidOptionError, match="compression"):
        write(**{"kafka.compression.type": "brotli"})
    with pytest.raises(InvalidOptionError, match="at least 1"):
        write(**{"kafka.transaction.timeout.ms": "0"})
    # a read option on a write (and the reverse) names where it belongs
    with pytest.raises(InvalidOptionError, match="applies to reads only"):
        write(**{"kafka.isolation.level": "read_committed"})
    with pytest.raises(InvalidOptionError, match=r"applies to writes only.*'compression'"):
        read(**{"kafka.compression.type": "gzip"})
    # the alias and the txnlog name disagreeing is an error, not a silent pick
    with pytest.raises(InvalidOptionError, match="alias"):
        read(**{"kafka.isolation.level": "read_uncommitted",
                "isolation.level": "read_committed"})


@pytest.mark.parametrize(("key", "value"), [
    ("kafkaConsumer.pollTimeoutMs", "512"), ("fetchOffset.numRetries", "3"),
    ("fetchOffset.retryIntervalMs", "10"), ("groupIdPrefix", "spark-kafka-source"),
    ("kafka.group.id", "my-group"), ("kafka.max.poll.records", "500"),
    ("kafka.fetch.max.bytes", "52428800"), ("kafka.request.timeout.ms", "30000"),
    ("kafka.session.timeout.ms", "45000"), ("kafka.client.id", "x"),
])
def test_tuning_options_are_accepted_with_a_warning(key: str, value: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="txnlog.datasource.kafka_options"):
        read(**{key: value})
    assert f"{key!r} does nothing here" in caplog.text


@pytest.mark.parametrize(("key", "value"), [
    ("kafkaConsumer.pollTimeoutMs", "soon"), ("kafka.max.poll.records", "many"),
    ("kafka.check.crcs", "yes"),
])
def test_tuning_option_values_are_still_validated(key: str, value: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"{key}.*must be"):
        read(**{key: value})


@pytest.mark.parametrize(("key", "names"), [
    ("kafka.security.protocol", "storage.*"), ("kafka.sasl.mechanism", "storage.*"),
    ("kafka.ssl.truststore.location", "storage.*"),
    ("kafka.auto.offset.reset", "startingOffsets"),
    ("kafka.enable.auto.commit", "groupId"), ("kafka.key.deserializer", "CAST"),
    ("kafka.value.deserializer", "CAST"), ("kafka.partitioner.class", "'partition' column"),
    ("kafka.interceptor.classes", "no Kafka client"),
    ("kafka.no.such.setting", "txnlog options:"),
])
def test_other_kafka_options_are_refused_naming_the_txnlog_way(key: str, names: str) -> None:
    with pytest.raises(InvalidOptionError, match=key.replace(".", r"\.")) as exc:
        read(**{key: "x"})
    assert names in str(exc.value)


def test_min_offsets_per_trigger_and_max_trigger_delay() -> None:
    o = read(minOffsetsPerTrigger="100", maxTriggerDelay="30s")
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 30_000)
    assert read(minOffsetsPerTrigger="5").max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    for text, ms in (("15m", 900_000), ("2h", 7_200_000), ("1d", 86_400_000),
                     ("500ms", 500), ("250", 250), ("3min", 180_000)):
        assert read(maxTriggerDelay=text).max_trigger_delay_ms == ms
    with pytest.raises(InvalidOptionError, match=r"maxtriggerdelay.*'banana'"):
        read(maxTriggerDelay="banana")
    with pytest.raises(InvalidOptionError, match="'maxtriggerdelay'"):
        read(maxTriggerDelay="-5s")
    with pytest.raises(InvalidOptionError, match="at least 1"):
        read(minOffsetsPerTrigger="0")
    with pytest.raises(InvalidOptionError, match="can't be greater than"):
        read(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")
    with pytest.raises(InvalidOptionError, match="streaming reads only"):
        read(streaming=False, minOffsetsPerTrigger="10")


def test_sink_include_headers_is_accepted_and_checked() -> None:
    write(includeHeaders="true")
    with pytest.raises(InvalidOptionError, match="true or false"):
        write(includeHeaders="maybe")


def test_every_value_is_checked() -> None:
    assert read(coordinator="http://127.0.0.1:9092").coordinator == "http://127.0.0.1:9092"
    assert write(coordinator="https://coord.example:8443").coordinator == \
        "https://coord.example:8443"
    for bad in ("127.0.0.1:9092", "ftp://x", "http://", "http://h:99999"):
        with pytest.raises(InvalidOptionError, match="coordinator's URL"):
            read(coordinator=bad)
    with pytest.raises(InvalidOptionError, match="'groupId' must be a non-empty"):
        read(groupId=" ")
    with pytest.raises(InvalidOptionError, match=r"'transactional\.id' must be"):
        write(**{"transactional.id": "x" * 40_000})
    assert write(compression="lz4", **{"compression.level": "17"}).compression_level == 17
    with pytest.raises(InvalidOptionError, match=r"gzip must be in \[1, 9\], not 10"):
        write(compression="gzip", **{"compression.level": "10"})
    with pytest.raises(InvalidOptionError, match="not snappy"):
        write(compression="snappy", **{"compression.level": "1"})
    with pytest.raises(InvalidOptionError, match="one upper limit"):
        read(maxOffsetsPerTrigger="10", maxBytesPerTrigger="1000")
