"""Parsing and validation of the ``txnlog`` data source options.

Option names follow Spark's Kafka connector where the meaning is the same, so a user can
move a job over by changing ``format("kafka")`` to ``format("txnlog")``; spark-sql-kafka's
``kafka.*`` and tuning options are mapped, accepted as no-ops or refused by name in
``kafka_options.py``. Unknown or contradictory options are refused up front with a message
that names the option: a typo must not silently read the wrong data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from txnlog.coordinator.security import Credentials
from txnlog.log_format.codec.compression import Codec

from .errors import InvalidOptionError

EARLIEST = -2
LATEST = -1

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

# Options Spark itself adds (lower-case, as PySpark's CaseInsensitiveDict stores them).
SPARK_OPTIONS = {"path", "paths", "checkpointlocation", "queryname"}

COMMON = {"coordinator", "coordinator.token", "coordinator.tls.ca"}
READ = {
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "endingoffsetsbytimestamp",
    "isolation.level", "includeheaders", "minpartitions", "maxrecordsperpartition",
    "minrecordsperpartition",
    "failondataloss", "pushfilters",
    # Confluent-framed keys and values decoded into typed columns (read/value_decoding.py)
    "value.format", "value.subject", "value.schemaid", "value.message",
    "key.format", "key.subject", "key.schemaid", "key.message",
}
STREAM_READ = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxbytespertrigger", "groupid",
               "maxtriggerdelay"}
WRITE = {
    "topic", "partitions", "compression", "compression.level", "transactional.id",
    "transaction.timeout.ms", "batch.size", "includeheaders",
    # struct key/value columns encoded with a registered schema and framed (write/framing.py)
    "value.format", "value.subject", "value.schemaid", "value.message", "value.schema",
    "key.format", "key.subject", "key.schemaid", "key.message", "key.schema",
}
# Spark's Kafka source: maxTriggerDelay defaults to 15 minutes (DEFAULT_MAX_TRIGGER_DELAY).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
# Ranges of fewer records are read together in one Spark task (option minRecordsPerPartition:
# a task costs ~25-50 ms whatever it reads; Spark's file sources pack small files likewise).
# Measured (bench/streaming.py, 4 partitions, local[2]): txnlog -> txnlog at 50,000 records
# per trigger did 1.04x parquet -> parquet's throughput as one task, 0.72x as four; at
# 1,000 per trigger one task's micro-batch took 0.90x parquet's; at 500,000 packing into
# one or two tasks changed nothing (0.79-0.81x vs 0.75-0.82x as four).
DEFAULT_MIN_RECORDS_PER_PARTITION = 50_000
# Spark's time strings (JavaUtils.timeStringAs): a number and an optional unit, ms if none.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}

Kind = Literal["batch_read", "stream_read", "batch_write", "stream_write"]


@dataclass(frozen=True)
class Subscription:
    """Which topics/partitions to read: exactly one of Spark's three ways."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "assign":
            return any(t == topic for t, _ in self.assign)
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: earliest, latest, per-partition offsets or timestamps.

    ``offsets`` maps (topic, partition) to an offset (-2 earliest, -1 latest);
    ``timestamps`` maps (topic, partition) to a timestamp in ms; ``timestamp`` applies one
    timestamp to every partition. Partitions not named fall back to ``default``.
    """

    default: int = EARLIEST
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamps: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    root: str
    storage_options: dict[str, str]
    coordinator: str | None
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: Literal["error", "latest"]
    isolation_level: str
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    push_filters: bool
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    group_id: str | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    coordinator_credentials: Credentials = field(default_factory=Credentials)
    # Ranges with fewer records share a Spark task (planning.pack_ranges); 0: never.
    min_records_per_partition: int = DEFAULT_MIN_RECORDS_PER_PARTITION
    # value.format/key.format: decode Confluent-framed values/keys with the root's _schemas
    value_format: str | None = None
    value_subject: str | None = None
    value_schema_id: int | None = None
    framings: tuple[Framing, ...] = ()

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    def framing(self, column: str) -> Framing | None:
        return next((f for f in self.framings if f.column == column), None)


@dataclass(frozen=True)
class Framing:
    """``<column>.format`` and its schema choice: a Confluent-framed key or value column
    (``avro``, ``protobuf`` or ``json``), read from or written with the root's schemas."""

    column: str  # "key" or "value"
    format: str
    subject: str | None = None
    schema_id: int | None = None
    message: str | None = None  # protobuf: the message's full name (default: the first)
    schema: str | None = None  # writes: a schema to register under the subject first


@dataclass(frozen=True)
class WriteOptions:
    root: str
    storage_options: dict[str, str]
    coordinator: str | None
    topic: str | None
    partitions: int | None  # for auto-created topics; None = not given (Kafka's 1)
    compression: Codec
    compression_level: int | None
    transactional_id: str | None
    transaction_timeout_ms: int
    batch_size: int
    checkpoint_location: str | None = None
    coordinator_credentials: Credentials = field(default_factory=Credentials)
    framings: tuple[Framing, ...] = ()  # struct key/value columns encoded and framed

    def framing(self, column: str) -> Framing | None:
        return next((f for f in self.framings if f.column == column), None)


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """``storage.*`` options as ``Storage.for_url`` (and the coordinator it starts) takes
    them: prefixed ``storage.``, which they strip before fsspec sees them. (Stripping the
    prefix here made every ``storage.*`` option of a Spark query silently unused.)"""
    return {f"storage.{k[len('storage.'):]}": v for k, v in options.items()
            if k.lower().startswith("storage.")}


def check_known(options: Mapping[str, str], kind: Kind) -> None:
    """Refuse any option this kind of query does not understand, naming it."""
    allowed = SPARK_OPTIONS | COMMON
    if kind in ("batch_read", "stream_read"):
        allowed |= READ
    if kind == "stream_read":
        allowed |= STREAM_READ
    if kind in ("batch_write", "stream_write"):
        allowed |= WRITE
    for key in options:
        low = key.lower()
        if low in allowed or low.startswith("storage."):
            continue
        if kind == "batch_read" and low in STREAM_READ:
            raise InvalidOptionError(f"option {key!r} applies to streaming reads only")
        raise InvalidOptionError(
            f"unknown option {key!r} for a txnlog {kind.replace('_', ' ')}; known options: "
            f"{', '.join(sorted(allowed - SPARK_OPTIONS))}, storage.*")


def _root(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if options.get("paths"):
        paths = json.loads(options["paths"])
        if len(paths) > 1 or (path and paths and paths[0] != path):
            raise InvalidOptionError("txnlog reads one root at a time; pass a single path")
        path = path or (paths[0] if paths else None)
    if not path:
        raise InvalidOptionError(
            "no txnlog root given: pass it as load(root) / save(root) / start(root) or "
            "option('path', root), e.g. 'file:///data/txnlog' or 's3://bucket/prefix'")
    return path


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise InvalidOptionError(f"option {key!r} must be true or false, not {raw!r}")


def _int(options: Mapping[str, str], key: str, default: int | None, *,
         minimum: int | None = None) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"option {key!r} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidOptionError(f"option {key!r} must be at least {minimum}, not {value}")
    return value


def _time_ms(options: Mapping[str, str], key: str, default: int) -> int:
    """A Spark time string ('15m', '30s', '500ms', '2h', '1d'; a bare number is ms)."""
    raw = options.get(key)
    if raw is None:
        return default
    m = re.fullmatch(r"(\d+)\s*([a-z]+)?", raw.strip().lower())
    if m is None or (m.group(2) or "ms") not in _TIME_UNITS_MS:
        raise InvalidOptionError(
            f"option {key!r} must be a duration such as 15m, 30s, 500ms, 2h or 1d "
            f"(units: {', '.join(_TIME_UNITS_MS)}), not {raw!r}")
    return int(int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"])


MAX_ID_BYTES = 32_767  # a Kafka STRING: the longest group or transactional id


def _coordinator(options: Mapping[str, str]) -> str | None:
    """The ``coordinator`` option: an http(s)://host[:port] URL, or absent."""
    from urllib.parse import urlparse

    raw = options.get("coordinator")
    if raw is None:
        return None
    try:
        url = urlparse(raw.strip())
        url.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        url = None  # type: ignore[assignment]
    if url is None or url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidOptionError(
            f"option 'coordinator' must be the coordinator's URL, e.g. http://10.0.0.5:9092, "
            f"not {raw!r} (leave it out to use the one registered for the root)")
    return raw.strip()


def _id(options: Mapping[str, str], key: str, name: str) -> str | None:
    """A group or transactional id option: absent, or a non-empty string a Kafka STRING
    can hold."""
    raw = options.get(key)
    if raw is None:
        return None
    if not raw.strip() or len(raw.encode()) > MAX_ID_BYTES:
        raise InvalidOptionError(
            f"option {name!r} must be a non-empty string of at most {MAX_ID_BYTES} bytes")
    return raw


# Kafka's compression.<codec>.level ranges (KIP-390).
LEVEL_RANGES = {Codec.GZIP: (1, 9), Codec.LZ4: (1, 17), Codec.ZSTD: (-131072, 22)}


def _compression_level(options: Mapping[str, str], codec: Codec) -> int | None:
    """``compression.level``, checked against the codec's range as Kafka checks it."""
    level = _int(options, "compression.level", None)
    if level is None:
        return None
    if codec not in LEVEL_RANGES:
        raise InvalidOptionError(
            f"option 'compression.level' applies to gzip, lz4 and zstd, not "
            f"{codec.kafka_name}")
    low, high = LEVEL_RANGES[codec]
    if not low <= level <= high:
        raise InvalidOptionError(f"option 'compression.level' for {codec.kafka_name} must be "
                                 f"in [{low}, {high}], not {level}")
    return level


def _json_obj(key: str, raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(
            f"option {key!r} is not valid JSON ({exc.msg}): expected e.g. "
            '{"topicA":{"0":23,"1":-1}}') from None
    if not isinstance(value, dict):
        raise InvalidOptionError(f"option {key!r} must be a JSON object, e.g. "
                                 '{"topicA":{"0":23,"1":-1}}')
    return value


def _per_partition(key: str, raw: str) -> dict[tuple[str, int], int]:
    """Spark's ``{"topic": {"partition": value}}`` JSON."""
    out: dict[tuple[str, int], int] = {}
    for topic, parts in _json_obj(key, raw).items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(
                f"option {key!r}: the value for topic {topic!r} must map partitions to numbers")
        for part, value in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise InvalidOptionError(
                    f"option {key!r}: partition {part!r} of topic {topic!r} is not a "
                    "number") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidOptionError(
                    f"option {key!r}: value for {topic}-{p} must be an integer, not {value!r}")
            out[(topic, p)] = value
    return out


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        names = "', '".join(given) if given else "none"
        raise InvalidOptionError(
            "give exactly one of the options 'subscribe' (comma-separated topics), "
            f"'subscribePattern' (a regex) or 'assign' (JSON); got: '{names}'")
    key = given[0]
    raw = options[key]
    if key == "subscribe":
        from txnlog.log_format.layout import validate_topic

        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidOptionError("option 'subscribe' names no topic")
        for t in topics:
            validate_topic(t)
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidOptionError(
                f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=raw)
    assigned: list[tuple[str, int]] = []
    for topic, parts in _json_obj("assign", raw).items():
        if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise InvalidOptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers, "
                'e.g. {"topicA":[0,1]}')
        assigned.extend((topic, p) for p in parts)
    if not assigned:
        raise InvalidOptionError("option 'assign' names no partition")
    return Subscription("assign", assign=tuple(sorted(set(assigned))))


def _offset_spec(options: Mapping[str, str], *, starting: bool, streaming: bool) -> OffsetSpec:
    prefix = "starting" if starting else "ending"
    ts_one = options.get(f"{prefix}timestamp")
    ts_json = options.get(f"{prefix}offsetsbytimestamp")
    offsets_raw = options.get(f"{prefix}offsets")
    if not starting and streaming and (ts_one or ts_json or offsets_raw):
        raise InvalidOptionError(
            "ending offsets/timestamps apply to batch reads only; a stream has no end")
    # Spark's defaults: batch reads start at earliest, streams at latest; batch reads end at
    # the latest stable offset.
    default = (LATEST if streaming else EARLIEST) if starting else LATEST
    if ts_one is not None:
        ts = _int(options, f"{prefix}timestamp", None)
        return OffsetSpec(default=default, timestamp=ts)
    if ts_json is not None:
        return OffsetSpec(default=default,
                          timestamps=_per_partition(f"{prefix}OffsetsByTimestamp", ts_json))
    if offsets_raw is None:
        return OffsetSpec(default=default)
    low = offsets_raw.strip().lower()
    name = f"{prefix}Offsets"
    if low in ("earliest", "latest"):
        value = EARLIEST if low == "earliest" else LATEST
        if starting and not streaming and value == LATEST:
            raise InvalidOptionError(
                "startingOffsets='latest' is not allowed for batch reads (it would read "
                "nothing); use 'earliest' or per-partition offsets")
        if not starting and value == EARLIEST:
            raise InvalidOptionError(
                "endingOffsets='earliest' is not allowed; use 'latest' or per-partition offsets")
        return OffsetSpec(default=value)
    offsets = _per_partition(name, offsets_raw)
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise InvalidOptionError(f"option {name!r}: offset {off} for {tp[0]}-{tp[1]} is "
                                     "invalid (use >= 0, -2 for earliest or -1 for latest)")
        if starting and not streaming and off == LATEST:
            raise InvalidOptionError(
                f"option {name!r}: -1 (latest) is not allowed as a batch starting offset "
                f"({tp[0]}-{tp[1]})")
        if not starting and off == EARLIEST:
            raise InvalidOptionError(
                f"option {name!r}: -2 (earliest) is not allowed as an ending offset "
                f"({tp[0]}-{tp[1]})")
    return OffsetSpec(default=default, offsets=offsets)


def _trigger_limits(options: Mapping[str, str]) -> tuple[int | None, int | None, int]:
    """maxOffsetsPerTrigger, minOffsetsPerTrigger and maxTriggerDelay, checked together as
    Spark's KafkaSourceProvider does (both positive, min not above max)."""
    most = _int(options, "maxoffsetspertrigger", None, minimum=1)
    least = _int(options, "minoffsetspertrigger", None, minimum=1)
    delay = _time_ms(options, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_MS)
    if most is not None and least is not None and least > most:
        raise InvalidOptionError(
            f"option 'minOffsetsPerTrigger' ({least}) can't be greater than "
            f"'maxOffsetsPerTrigger' ({most})")
    return most, least, delay


def parse_read_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    from .kafka_options import translate

    options = translate(options, "stream_read" if streaming else "batch_read")
    check_known(options, "stream_read" if streaming else "batch_read")
    isolation = (options.get("isolation.level") or READ_COMMITTED).strip().lower()
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise InvalidOptionError(
            f"option 'isolation.level' must be read_committed or read_uncommitted, "
            f"not {options.get('isolation.level')!r}")
    strategy = (options.get("startingoffsetsbytimestampstrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
    max_offsets, min_offsets, max_delay = _trigger_limits(options)
    if max_offsets is not None and options.get("maxbytespertrigger") is not None:
        raise InvalidOptionError(
            "give one of 'maxOffsetsPerTrigger' and 'maxBytesPerTrigger': a trigger has one "
            "upper limit")
    framings = _framings(options)
    return ReadOptions(
        root=_root(options),
        storage_options=storage_options(options),
        coordinator=_coordinator(options),
        subscription=_subscription(options),
        starting=_offset_spec(options, starting=True, streaming=streaming),
        ending=_offset_spec(options, starting=False, streaming=streaming),
        timestamp_strategy=strategy,  # type: ignore[arg-type]
        isolation_level=isolation,
        include_headers=_bool(options, "includeheaders", False),
        min_partitions=_int(options, "minpartitions", None, minimum=1),
        max_records_per_partition=_int(options, "maxrecordsperpartition", None, minimum=1),
        fail_on_data_loss=_bool(options, "failondataloss", True),
        push_filters=_bool(options, "pushfilters", False),
        max_offsets_per_trigger=max_offsets,
        max_bytes_per_trigger=_int(options, "maxbytespertrigger", None, minimum=1),
        group_id=_id(options, "groupid", "groupId"),
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_delay,
        coordinator_credentials=_credentials(options),
        # minPartitions and maxRecordsPerPartition ask for more, smaller tasks: then small
        # ranges keep a task each unless minRecordsPerPartition is given too.
        min_records_per_partition=_int(
            options, "minrecordsperpartition",
            0 if options.get("minpartitions") is not None
            or options.get("maxrecordsperpartition") is not None
            else DEFAULT_MIN_RECORDS_PER_PARTITION, minimum=0) or 0,
        value_format=next((f.format for f in framings if f.column == "value"), None),
        value_subject=options.get("value.subject") or None,
        value_schema_id=_int(options, "value.schemaid", None, minimum=1),
        framings=framings,
    )


VALUE_FORMATS = ("avro", "protobuf", "json")


def _framings(options: Mapping[str, str]) -> tuple[Framing, ...]:
    """``key.format``/``value.format`` with their subject, schema id and message options
    (key first), checked: a format named, the others only with a format."""
    out = []
    for column in ("key", "value"):
        fmt = (options.get(f"{column}.format") or "").strip().lower() or None
        if fmt is None:
            if any(options.get(f"{column}.{o}")
                   for o in ("subject", "schemaid", "message", "schema")):
                raise InvalidOptionError(
                    f"options '{column}.subject', '{column}.schemaId' and '{column}.message' "
                    f"need '{column}.format' ({', '.join(VALUE_FORMATS)})")
            continue
        if fmt not in VALUE_FORMATS:
            raise InvalidOptionError(f"option '{column}.format' must be one of "
                                     f"{', '.join(VALUE_FORMATS)}, not {fmt!r}")
        message = options.get(f"{column}.message") or None
        if message is not None and fmt != "protobuf":
            raise InvalidOptionError(f"option '{column}.message' applies to "
                                     f"{column}.format=protobuf only")
        schema = options.get(f"{column}.schema") or None
        schema_id = _int(options, f"{column}.schemaid", None, minimum=1)
        if schema is not None and schema_id is not None:
            raise InvalidOptionError(f"give one of '{column}.schema' and '{column}.schemaId'")
        out.append(Framing(column, fmt, options.get(f"{column}.subject") or None,
                           schema_id, message, schema))
    return tuple(out)


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
    from .kafka_options import translate

    options = translate(options, "stream_write" if streaming else "batch_write")
    check_known(options, "stream_write" if streaming else "batch_write")
    # Spark's Kafka sink option: headers are written whenever a 'headers' column is given.
    _bool(options, "includeheaders", False)
    topic = options.get("topic") or None
    if topic is not None:
        from txnlog.log_format.layout import validate_topic

        validate_topic(topic)
    try:
        codec = Codec.parse(options.get("compression") or "none")
    except ValueError as exc:
        raise InvalidOptionError(f"option 'compression': {exc}") from None
    timeout = _int(options, "transaction.timeout.ms", 60_000, minimum=1)
    assert timeout is not None
    return WriteOptions(
        root=_root(options),
        storage_options=storage_options(options),
        coordinator=_coordinator(options),
        topic=topic,
        partitions=_int(options, "partitions", None, minimum=1),
        compression=codec,
        compression_level=_compression_level(options, codec),
        transactional_id=_id(options, "transactional.id", "transactional.id"),
        transaction_timeout_ms=timeout,
        batch_size=_int(options, "batch.size", 1 << 20, minimum=1024) or (1 << 20),
        checkpoint_location=options.get("checkpointlocation"),
        coordinator_credentials=_credentials(options),
        framings=_framings(options),
    )


def _credentials(options: Mapping[str, str]) -> Credentials:
    """The coordinator's token and CA, resolved on the driver (options, else the driver's
    environment) so they travel to the tasks with the pickled reader/writer."""
    return Credentials.resolve(options.get("coordinator.token") or None,
                               options.get("coordinator.tls.ca") or None)
