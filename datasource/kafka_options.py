"""spark-sql-kafka's options on a txnlog query: mapped, accepted as no-ops, or refused by name.

A job moved from ``format("kafka")`` to ``format("txnlog")`` keeps its option set. Each
option Spark's Kafka connector takes is in one of three classes here:

- **mapped**: it means something in txnlog under another name (``kafka.isolation.level`` is
  ``isolation.level``, ``kafka.compression.type`` is ``compression``, ...): its value is
  validated by the txnlog option's own parser;
- **no-op**: client or broker tuning with nothing to tune here (``kafka.fetch.max.bytes``,
  ``kafkaConsumer.pollTimeoutMs``, ...): accepted with a warning saying it does nothing, its
  value still checked for the kind Kafka expects (a typo in a number fails as in Kafka);
- **refused**: it would change what the job does and txnlog cannot honour it
  (``kafka.bootstrap.servers``, ``kafka.ssl.*``, ``kafka.partitioner.class``, ...): the
  error names the txnlog way to get the same thing.

``translate`` returns the options with mapped ones renamed and no-ops dropped, for
``options.py`` to parse like any other.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Literal

from .errors import InvalidOptionError

log = logging.getLogger(__name__)

Kind = Literal["batch_read", "stream_read", "batch_write", "stream_write"]


class KafkaOptionError(InvalidOptionError):
    """A spark-sql-kafka option txnlog cannot honour; the message names what to use."""


# kafka.<client setting> -> (txnlog option, applies to reads, applies to writes)
MAPPED: dict[str, tuple[str, bool, bool]] = {
    "kafka.isolation.level": ("isolation.level", True, False),
    "kafka.compression.type": ("compression", False, True),
    "kafka.transactional.id": ("transactional.id", False, True),
    "kafka.transaction.timeout.ms": ("transaction.timeout.ms", False, True),
    "kafka.batch.size": ("batch.size", False, True),
}
# Kafka's per-codec levels (KIP-390): only the level of the codec in use means anything.
CODEC_LEVELS = {"kafka.compression.gzip.level": "gzip", "kafka.compression.lz4.level": "lz4",
                "kafka.compression.zstd.level": "zstd"}

# Tuning that has nothing to tune in txnlog (no brokers, no fetch protocol, no producer
# buffers: executors read and write storage directly). Value kinds are Kafka's.
INT, BOOL, ANY = "an integer", "true or false", None
NO_OPS: dict[str, str | None] = {
    # spark-sql-kafka's own
    "kafkaconsumer.polltimeoutms": INT, "fetchoffset.numretries": INT,
    "fetchoffset.retryintervalms": INT, "groupidprefix": ANY, "kafka.group.id": ANY,
    # consumer
    "kafka.max.poll.records": INT, "kafka.max.poll.interval.ms": INT,
    "kafka.fetch.min.bytes": INT, "kafka.fetch.max.bytes": INT,
    "kafka.fetch.max.wait.ms": INT, "kafka.max.partition.fetch.bytes": INT,
    "kafka.session.timeout.ms": INT, "kafka.heartbeat.interval.ms": INT,
    "kafka.check.crcs": BOOL, "kafka.client.rack": ANY, "kafka.allow.auto.create.topics": BOOL,
    "kafka.exclude.internal.topics": BOOL, "kafka.default.api.timeout.ms": INT,
    # producer
    "kafka.acks": ANY, "kafka.linger.ms": INT, "kafka.buffer.memory": INT,
    "kafka.max.block.ms": INT, "kafka.max.request.size": INT, "kafka.retries": INT,
    "kafka.delivery.timeout.ms": INT, "kafka.enable.idempotence": BOOL,
    "kafka.max.in.flight.requests.per.connection": INT,
    # both
    "kafka.client.id": ANY, "kafka.request.timeout.ms": INT, "kafka.retry.backoff.ms": INT,
    "kafka.retry.backoff.max.ms": INT, "kafka.reconnect.backoff.ms": INT,
    "kafka.reconnect.backoff.max.ms": INT, "kafka.metadata.max.age.ms": INT,
    "kafka.connections.max.idle.ms": INT, "kafka.receive.buffer.bytes": INT,
    "kafka.send.buffer.bytes": INT, "kafka.client.dns.lookup": ANY,
    "kafka.socket.connection.setup.timeout.ms": INT,
    "kafka.socket.connection.setup.timeout.max.ms": INT,
}

# Spark's spelling of the mixed-case names, for messages (PySpark lower-cases option keys).
CANONICAL = {"kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
             "fetchoffset.numretries": "fetchOffset.numRetries",
             "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
             "groupidprefix": "groupIdPrefix"}

# Refused, with what to do instead. Prefix entries end with ".".
REFUSED: dict[str, str] = {
    "kafka.bootstrap.servers": "txnlog has no Kafka brokers: pass the log's root URL to "
    "load(root) / save(root) / start(root) (or option('path', root)), e.g. "
    "'s3://bucket/prefix'",
    "kafka.security.protocol": "no brokers to secure: storage credentials go in storage.* "
    "options (fsspec), the coordinator in option 'coordinator'",
    "kafka.sasl.": "no brokers to authenticate to: storage credentials go in storage.* "
    "options (fsspec)",
    "kafka.ssl.": "no brokers to connect to: TLS to object storage is set in storage.* "
    "options (fsspec, e.g. storage.client_kwargs)",
    "kafka.auto.offset.reset": "use startingOffsets (earliest, latest or JSON), as Spark "
    "requires for its Kafka source too",
    "kafka.enable.auto.commit": "Spark never commits Kafka offsets; to commit a consumer "
    "group's offsets with txnlog use option 'groupId'",
    "kafka.key.deserializer": "keys are binary; cast them in the DataFrame "
    "(e.g. CAST(key AS STRING)), or decode Confluent-framed keys with option 'key.format'",
    "kafka.value.deserializer": "values are binary; cast them in the DataFrame "
    "(e.g. CAST(value AS STRING)), or decode Confluent-framed values with option "
    "'value.format'",
    "kafka.key.serializer": "write a binary or string 'key' column, or a struct with "
    "option 'key.format' (a registered schema)",
    "kafka.value.serializer": "write a binary or string 'value' column, or a struct with "
    "option 'value.format' (a registered schema)",
    "kafka.partitioner.class": "txnlog partitions as Kafka's default partitioner (murmur2 "
    "of the key); to choose partitions write a 'partition' column",
    "kafka.interceptor.classes": "txnlog runs no Kafka client to intercept",
    "kafka.group.instance.id": "txnlog sources have no group membership",
}
OWN = "; txnlog options: subscribe, subscribePattern, assign, startingOffsets, " \
    "endingOffsets, isolation.level, groupId, maxOffsetsPerTrigger, minOffsetsPerTrigger, " \
    "maxTriggerDelay (reads); topic, compression, transactional.id, " \
    "transaction.timeout.ms, batch.size (writes); storage.* and coordinator (both)"


def _refusal(key: str) -> str | None:
    if key in REFUSED:
        return REFUSED[key]
    for prefix, why in REFUSED.items():
        if prefix.endswith(".") and key.startswith(prefix):
            return why
    return None


def _check_kind(key: str, raw: str, kind: str | None) -> None:
    text = raw.strip().lower()
    ok = kind is None or (kind == INT and re.fullmatch(r"-?\d+", text) is not None) or \
        (kind == BOOL and text in ("true", "false"))
    if not ok:
        raise KafkaOptionError(f"option {key!r} must be {kind}, not {raw!r} (txnlog accepts "
                               "it for compatibility and ignores it)")


def translate(options: Mapping[str, str], kind: Kind) -> dict[str, str]:
    """The options with spark-sql-kafka names resolved: mapped ones renamed to their txnlog
    option, no-ops validated, warned about and dropped, the rest refused by name."""
    reading = kind in ("batch_read", "stream_read")
    out: dict[str, str] = {}
    renamed: dict[str, str] = {}
    levels: dict[str, tuple[str, str]] = {}  # codec -> (option, level)
    for key, raw in options.items():
        low = key.lower()
        if low in CODEC_LEVELS:
            if reading:
                raise KafkaOptionError(f"option {key!r} applies to writes only (its txnlog "
                                       "name is 'compression.level')")
            levels[CODEC_LEVELS[low]] = (key, raw)
            continue
        if low in MAPPED:
            target, for_reads, for_writes = MAPPED[low]
            if (reading and not for_reads) or (not reading and not for_writes):
                raise KafkaOptionError(
                    f"option {key!r} applies to {'writes' if for_writes else 'reads'} only "
                    f"(its txnlog name is {target!r})")
            if target in renamed and renamed[target] != raw:
                raise KafkaOptionError(f"options {key!r} and another kafka.* option both set "
                                       f"{target!r}, differently")
            renamed[target] = raw
            continue
        if low in NO_OPS:
            key = CANONICAL.get(low, key)
            _check_kind(key, raw, NO_OPS[low])
            log.warning("txnlog: option %r does nothing here (txnlog has no Kafka client or "
                        "broker to tune); accepted for compatibility", key)
            continue
        why = _refusal(low)
        if why is not None:
            raise KafkaOptionError(f"option {key!r} is not supported by txnlog: {why}")
        if low.startswith("kafka."):
            raise KafkaOptionError(
                f"option {key!r} has no meaning in txnlog (no Kafka client runs){OWN}")
        out[low] = raw
    codec = (out.get("compression") or renamed.get("compression") or "none").strip().lower()
    for level_codec, (key, raw) in levels.items():
        if level_codec == codec:
            renamed["compression.level"] = raw
        else:
            log.warning("txnlog: option %r does nothing here: the compression in use is %s "
                        "(Kafka ignores it too)", key, codec)
    for target, raw in renamed.items():
        if target in out and out[target].strip().lower() != raw.strip().lower():
            raise KafkaOptionError(
                f"option {target!r} is {out[target]!r} but its kafka.* alias says {raw!r}")
        out.setdefault(target, raw)
    return out
