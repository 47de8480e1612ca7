"""Kafka's topic configs as DescribeConfigs shows them: defaults, types, broker synonyms.

Why a table here: ``topic_config`` knows which names and values are valid and the defaults
txnlog acts on; a Kafka tool describing a topic expects every topic config with its value,
where that value comes from (the topic, or the broker's default) and its type, and with
``include_synonyms`` the broker-level name of the default (``retention.ms`` <-
``log.retention.ms``). The defaults are Kafka 3.x's (``LogConfig`` and the broker's
``log.*`` settings); the ones txnlog acts on are ``topic_config.DEFAULTS`` (they agree).
"""

from __future__ import annotations

from .. import topic_config
from ..topic_config import DEFAULTS, LONG_MAX, TOPIC_CONFIGS

# Kafka's ConfigSource and ConfigType (DescribeConfigs v1+ / v3+)
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_MAX = str(LONG_MAX)

# topic config -> (Kafka's default, type, the broker config it defaults to)
TOPIC_CONFIG_INFO: dict[str, tuple[str, int, str | None]] = {
    "cleanup.policy": ("delete", LIST, "log.cleanup.policy"),
    "compression.type": ("producer", STRING, "compression.type"),
    "compression.gzip.level": ("-1", INT, "compression.gzip.level"),
    "compression.lz4.level": ("9", INT, "compression.lz4.level"),
    "compression.zstd.level": ("3", INT, "compression.zstd.level"),
    "delete.retention.ms": ("86400000", LONG, "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": ("60000", LONG, "log.segment.delete.delay.ms"),
    "flush.messages": (_MAX, LONG, "log.flush.interval.messages"),
    "flush.ms": (_MAX, LONG, "log.flush.interval.ms"),
    "index.interval.bytes": ("4096", INT, "log.index.interval.bytes"),
    "local.retention.bytes": ("-2", LONG, "log.local.retention.bytes"),
    "local.retention.ms": ("-2", LONG, "log.local.retention.ms"),
    "max.compaction.lag.ms": (_MAX, LONG, "log.cleaner.max.compaction.lag.ms"),
    "max.message.bytes": ("1048588", INT, "message.max.bytes"),
    "message.timestamp.after.max.ms": (_MAX, LONG, "log.message.timestamp.after.max.ms"),
    "message.timestamp.before.max.ms": (_MAX, LONG, "log.message.timestamp.before.max.ms"),
    "message.timestamp.difference.max.ms": (_MAX, LONG,
                                            "log.message.timestamp.difference.max.ms"),
    "message.timestamp.type": ("CreateTime", STRING, "log.message.timestamp.type"),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE, "log.cleaner.min.cleanable.ratio"),
    "min.compaction.lag.ms": ("0", LONG, "log.cleaner.min.compaction.lag.ms"),
    "min.insync.replicas": ("1", INT, "min.insync.replicas"),
    "preallocate": ("false", BOOLEAN, "log.preallocate"),
    "remote.storage.enable": ("false", BOOLEAN, None),
    "retention.bytes": ("-1", LONG, "log.retention.bytes"),
    "retention.ms": ("604800000", LONG, "log.retention.ms"),
    "segment.bytes": ("1073741824", INT, "log.segment.bytes"),
    "segment.index.bytes": ("10485760", INT, "log.index.size.max.bytes"),
    "segment.jitter.ms": ("0", LONG, "log.roll.jitter.ms"),
    "segment.ms": ("604800000", LONG, "log.roll.ms"),
    "unclean.leader.election.enable": ("false", BOOLEAN, "unclean.leader.election.enable"),
}
assert set(TOPIC_CONFIG_INFO) == set(TOPIC_CONFIGS)
assert all(TOPIC_CONFIG_INFO[k][0] == v for k, v in DEFAULTS.items())
LIST_CONFIGS = frozenset(k for k, (_, t, _) in TOPIC_CONFIG_INFO.items() if t == LIST)
assert LIST_CONFIGS == topic_config.LIST_CONFIGS


def topic_entries(config: dict[str, str], keys: list[str] | None, synonyms: bool
                  ) -> list[dict[str, object]]:
    """DescribeConfigs' entries of a topic: every topic config (or those of ``keys``;
    unknown keys are left out, as Kafka does), its value, source, type and synonyms."""
    names = sorted(TOPIC_CONFIG_INFO) if keys is None else \
        [k for k in dict.fromkeys(keys) if k in TOPIC_CONFIG_INFO]
    out: list[dict[str, object]] = []
    for name in names:
        default, kind, broker = TOPIC_CONFIG_INFO[name]
        given = config.get(name)
        chain = []
        if given is not None:
            chain.append({"name": name, "value": given, "source": SOURCE_TOPIC})
        if broker is not None:
            chain.append({"name": broker, "value": default, "source": SOURCE_DEFAULT})
        out.append({"name": name, "value": default if given is None else given,
                    "read_only": False, "is_sensitive": False,
                    "config_source": SOURCE_TOPIC if given is not None else SOURCE_DEFAULT,
                    "config_type": kind, "documentation": None,
                    "synonyms": chain if synonyms else []})
    return out


def broker_entries(node_id: int, advertised: str, keys: list[str] | None,
                   auto_create: bool = True, num_partitions: int | None = None
                   ) -> list[dict[str, object]]:
    """DescribeConfigs' entries of a gateway as a broker: what it answers as (read-only:
    a gateway has no dynamic broker configs) and the broker defaults topics fall back to.
    ``auto_create``/``num_partitions``: the gateway's own flags (None: the coordinator's
    num.partitions, 1 unless it was started with another)."""
    values: dict[str, tuple[str, int, int]] = {
        "node.id": (str(node_id), INT, SOURCE_STATIC_BROKER),
        "broker.id": (str(node_id), INT, SOURCE_STATIC_BROKER),
        "advertised.listeners": (advertised, LIST, SOURCE_STATIC_BROKER),
        "num.partitions": ("1", INT, SOURCE_DEFAULT) if num_partitions is None else
        (str(num_partitions), INT, SOURCE_STATIC_BROKER),
        "default.replication.factor": ("1", INT, SOURCE_DEFAULT),
        "auto.create.topics.enable": ("true", BOOLEAN, SOURCE_DEFAULT) if auto_create else
        ("false", BOOLEAN, SOURCE_STATIC_BROKER),
        "delete.topic.enable": ("true", BOOLEAN, SOURCE_DEFAULT),
    }
    for default, kind, broker in TOPIC_CONFIG_INFO.values():
        if broker is not None:
            values[broker] = (default, kind, SOURCE_DEFAULT)
    names = sorted(values) if keys is None else [k for k in dict.fromkeys(keys) if k in values]
    return [{"name": n, "value": values[n][0], "read_only": True, "is_sensitive": False,
             "config_source": values[n][2], "config_type": values[n][1],
             "documentation": None, "synonyms": []} for n in names]


__all__ = ["LIST_CONFIGS", "TOPIC_CONFIG_INFO", "broker_entries", "topic_entries"]
