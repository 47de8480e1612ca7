"""Topic configs as Kafka defines them: known names, typed values, refused otherwise.

Why: a topic's config is written once, into ``_meta/topics/<topic>.json`` and the
coordinator's log, and readers and future features (retention, compaction, segments) will
act on it. A typo (``retention.msec``) or a wrong value (``cleanup.policy=forever``)
accepted today would silently mean nothing, or something else, later. So CreateTopic checks
every entry against Kafka's topic-level configs (names, types and valid ranges of
``org.apache.kafka.common.config.TopicConfig`` / ``LogConfig``) and answers InvalidConfig
naming the entry. Values are kept as the strings Kafka's CreateTopics carries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def _long(lo: int, hi: int = LONG_MAX) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        try:
            n = int(v)
        except ValueError:
            return "must be an integer"
        return None if lo <= n <= hi else f"must be in [{lo}, {hi}]"
    return check


def _int(lo: int) -> Callable[[str], str | None]:
    return _long(lo, INT_MAX)


def _ratio(v: str) -> str | None:
    try:
        x = float(v)
    except ValueError:
        return "must be a number"
    return None if 0.0 <= x <= 1.0 else "must be in [0, 1]"


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(allowed)}"
    return check


def _list_of(*allowed: str) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        items = [x.strip() for x in v.split(",")]
        bad = [x for x in items if x not in allowed]
        return None if items and not bad else f"must be a list of {', '.join(allowed)}"
    return check


_BOOL = _one_of("true", "false")


def _gzip_level(v: str) -> str | None:
    """Kafka's GzipCompression level: 1 to 9, or -1 (zlib's default, Kafka's default)."""
    return None if v.strip() == "-1" else \
        (None if _long(1, 9)(v) is None else "must be -1 or in [1, 9]")

# Configs whose value is a comma-separated list: IncrementalAlterConfigs' APPEND and
# SUBTRACT work on these only (Kafka's ConfigDef.Type.LIST)
LIST_CONFIGS = frozenset({"cleanup.policy"})

# Kafka's topic-level configs (Kafka 3.x/4.x TopicConfig) and what a valid value is.
TOPIC_CONFIGS: dict[str, Callable[[str], str | None]] = {
    "cleanup.policy": _list_of("delete", "compact"),
    "compression.type": _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "compression.gzip.level": _gzip_level,
    "compression.lz4.level": _long(1, 17),  # Kafka's Lz4Compression MIN_LEVEL..MAX_LEVEL
    "compression.zstd.level": _long(-131072, 22),
    "delete.retention.ms": _long(0),
    "file.delete.delay.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "index.interval.bytes": _int(0),
    "local.retention.bytes": _long(-2),
    "local.retention.ms": _long(-2),
    "max.compaction.lag.ms": _long(1),
    "max.message.bytes": _int(0),
    "message.timestamp.after.max.ms": _long(0),
    "message.timestamp.before.max.ms": _long(0),
    "message.timestamp.difference.max.ms": _long(0),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _long(0),
    "min.insync.replicas": _int(1),
    "preallocate": _BOOL,
    "remote.storage.enable": _BOOL,
    "retention.bytes": _long(-1),
    "retention.ms": _long(-1),
    "segment.bytes": _int(14),
    "segment.index.bytes": _int(4),
    "segment.jitter.ms": _long(0),
    "segment.ms": _long(1),
    "unclean.leader.election.enable": _BOOL,
}


# Kafka's defaults (LogConfig / the broker's log.* defaults) for the configs txnlog acts on:
# merging (segment.*), deleting merged-away objects (file.delete.delay.ms), retention
# (retention.*, cleanup.policy), compaction (cleanup.policy, *.compaction.*, delete.retention.ms).
DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(LONG_MAX),
}


def effective_config(config: Mapping[str, str]) -> dict[str, str]:
    """A topic's configs as the log acts on them: what it sets over Kafka's defaults. The
    one place merging, retention and compaction read a topic's configs from (through
    ``CoordinatorState.topic_config``), so an altered config applies to all of them."""
    return {**DEFAULTS, **{k: str(v) for k, v in config.items()}}


def validate_topic_config(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` if every entry is a Kafka topic config with a valid value; otherwise
    InvalidConfig naming the first bad entry."""
    out = {}
    for name, value in config.items():
        check = TOPIC_CONFIGS.get(name)
        if check is None:
            raise InvalidConfigError(
                f"unknown topic config {name[:100]!r}; known: {', '.join(sorted(TOPIC_CONFIGS))}")
        why = check(str(value).strip())
        if why is not None:
            raise InvalidConfigError(f"topic config {name!r}={str(value)[:100]!r} {why}")
        out[name] = str(value).strip()
    return out


def compacts(config: Mapping[str, object] | None) -> bool:
    """Whether a topic config keeps the latest record per key (``cleanup.policy`` holds
    ``compact``): what the log cleaner and the null-key check of producers read."""
    policy = str((config or {}).get("cleanup.policy", "delete"))
    return "compact" in {p.strip() for p in policy.split(",")}


def null_key_error(topic: str, partition: int | None = None, row: int | None = None
                   ) -> str:
    """Kafka's refusal of a record without a key for a compacted topic, and the way out."""
    where = f"{topic}-{partition}" if partition is not None else repr(topic)
    which = f" (row {row} of a batch being written)" if row is not None else ""
    return (f"Compacted topic cannot accept message without key in topic partition {where}"
            f"{which}: topic {topic!r} has cleanup.policy=compact, which keeps the latest "
            "record per key; give every record a key, or write to a topic with "
            "cleanup.policy=delete")


def check_values(config: dict[str, str]) -> None:
    """Kafka's LogConfig.validateValues: what single values cannot say."""
    eff = effective_config(config)
    if int(eff["min.compaction.lag.ms"]) > int(eff["max.compaction.lag.ms"]):
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms "
            f"({eff['min.compaction.lag.ms']}) > max.compaction.lag.ms "
            f"({eff['max.compaction.lag.ms']})")
