"""Object names under a root (DESIGN.md section 3): one place that builds and parses them.

Everything that reaches storage is built here from validated parts, so a topic name can never
smuggle a path (`../x`, `a/b`) and every segment name sorts in offset order (20 digits, as
Kafka names its files).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import InvalidTopicNameError

MAX_TOPIC_LENGTH = 249
OFFSET_DIGITS = 20
EPOCH_DIGITS = 10
MAX_OFFSET = 2**63 - 1

META_DIR = "_meta"
TOPICS_DIR = "_meta/topics"
STABLE_DIR = "_stable"
SHARED_DIR = "_wal"  # shared objects: one writer's flush, every partition it wrote
SHARED_SUFFIX = ".wal"
COORDINATOR_FILE = "_coordinator.json"
TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_STATE_DIR = f"{TRANSACTION_STATE_TOPIC}-0"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

LOG_SUFFIX = ".log"
TXNINDEX_SUFFIX = ".txnindex"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".snapshot"
SEGMENT_SUFFIXES = (LOG_SUFFIX, TXNINDEX_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX,
                    SNAPSHOT_SUFFIX)

_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_RE = re.compile(r"(\d{20})(\.[a-z]+)")
_STABLE_RE = re.compile(r"(\d{10})-(\d{20})\.json")
_STABLE_BASE_RE = re.compile(r"(\d{10})-(\d{20})\.base\.json")
_PARTITION_DIR_RE = re.compile(r"(.+)-(0|[1-9]\d*)")
_MANIFEST_RE = re.compile(r"(\d{20})\.json")
# <producer id, 20 digits>-<epoch, 5 digits>-<16 hex chars of randomness>.wal
_SHARED_RE = re.compile(r"(\d{20})-(\d{5})-([0-9a-f]{16})\.wal")

# Merged objects (DESIGN.md 8): level 0 is the closed Kafka segments, levels >= 1 the runs
# that make up a partition's open segment; each directory is a Kafka log dir of its own.
SEGMENTS_DIR = "segments"
RUNS_DIR = "runs"
MANIFEST_DIR = "manifest"
MAX_MERGE_LEVEL = 64


class TopicPartition(NamedTuple):
    """One partition of one topic: Kafka's ``TopicPartition``, the project's only one.

    A named tuple, as in kafka-python and aiokafka, so ``TopicPartition("orders", 0) ==
    ("orders", 0)`` and both hash alike: the coordinator client and the streaming offsets
    build plain ``(topic, partition)`` keys, the consumer hands out named ones, and all of
    them are the same dict keys. It lives here, beside the topic and partition rules,
    because this module is cheap to import (no pyarrow, no storage).
    """

    topic: str
    partition: int


def validate_topic(name: object) -> str:
    """Return `name` if Kafka would accept it as a topic name, else raise InvalidTopicNameError."""
    if not isinstance(name, str):
        raise InvalidTopicNameError(f"topic name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidTopicNameError("topic name is empty; use 1-249 characters of [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopicNameError(f"topic name {name!r} is not allowed (it is a path component)")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicNameError(
            f"topic name is {len(name)} characters long; at most {MAX_TOPIC_LENGTH} allowed")
    if not _TOPIC_RE.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_RE.fullmatch(c)})
        raise InvalidTopicNameError(
            f"topic name {name!r} contains {''.join(bad)!r}; only ASCII letters, digits, "
            "'.', '_' and '-' are allowed")
    return name


def validate_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be an int >= 0, got {partition!r}")
    return partition


def _validate_offset(offset: object, what: str = "offset") -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"{what} must be an int in [0, 2**63), got {offset!r}")
    return offset


def partition_dir(topic: str, partition: int) -> str:
    """`<topic>-<partition>`, Kafka's log dir name."""
    return f"{validate_topic(topic)}-{validate_partition(partition)}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a `<topic>-<p>` dir name, or None if it is not one."""
    m = _PARTITION_DIR_RE.fullmatch(name)
    if m is None:
        return None
    try:
        return validate_topic(m.group(1)), int(m.group(2))
    except InvalidTopicNameError:
        return None


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """`<20-digit base offset><suffix>`, e.g. `00000000000000000042.log`."""
    if suffix not in SEGMENT_SUFFIXES:
        raise ValueError(f"unknown segment suffix {suffix!r}; one of {SEGMENT_SUFFIXES}")
    return f"{_validate_offset(base_offset, 'base offset'):0{OFFSET_DIGITS}d}{suffix}"


class SegmentName(NamedTuple):
    base_offset: int
    suffix: str


def parse_segment_name(name: str) -> SegmentName | None:
    """(base offset, suffix) of a segment object name, or None for anything else."""
    m = _SEGMENT_RE.fullmatch(name)
    if m is None or m.group(2) not in SEGMENT_SUFFIXES:
        return None
    return SegmentName(int(m.group(1)), m.group(2))


def segment_path(topic: str, partition: int, base_offset: int,
                 suffix: str = LOG_SUFFIX) -> str:
    return f"{partition_dir(topic, partition)}/{segment_name(base_offset, suffix)}"


def shared_object_name(producer_id: int, epoch: int, nonce: str) -> str:
    """The name of one flush's shared object: the writer's producer id and epoch (who wrote
    it, for ``txnlog dump`` and for sweeping an expired writer's leftovers) and 16 hex
    characters of randomness, so no two flushes, retried or not, ever race for one name."""
    name = f"{_validate_offset(producer_id, 'producer id'):020d}-{int(epoch):05d}-{nonce}"
    name += SHARED_SUFFIX
    if not _SHARED_RE.fullmatch(name):
        raise ValueError(f"not a valid shared object name: {name!r}")
    return name


def shared_object_path(name: str) -> str:
    """``_wal/<name>``, for a name ``shared_object_name`` made (anything else is refused:
    a confirm names its object, and no client may point readers at another key)."""
    if not isinstance(name, str) or not _SHARED_RE.fullmatch(name):
        raise ValueError(f"not a valid shared object name: {name!r}")
    return f"{SHARED_DIR}/{name}"


def shared_object_writer(path: str) -> tuple[int, int]:
    """(producer id, epoch) a shared object's name carries."""
    m = _SHARED_RE.fullmatch(check_shared_path(path)[len(SHARED_DIR) + 1:])
    assert m is not None
    return int(m.group(1)), int(m.group(2))


def check_shared_path(path: object) -> str:
    """``path`` if it is ``_wal/<valid name>``; ValueError otherwise."""
    if not isinstance(path, str) or not path.startswith(SHARED_DIR + "/"):
        raise ValueError(f"not a shared object path: {path!r}")
    return shared_object_path(path[len(SHARED_DIR) + 1:])


def topic_meta_path(topic: str) -> str:
    return f"{TOPICS_DIR}/{validate_topic(topic)}.json"


def stable_name(coordinator_epoch: int, seq: int) -> str:
    """`<epoch 10 digits>-<seq 20 digits>.json`: names sort as (epoch, seq)."""
    if isinstance(coordinator_epoch, bool) or not isinstance(coordinator_epoch, int) \
            or not 0 <= coordinator_epoch < 2**31:
        raise ValueError(f"coordinator epoch must be an int32 >= 0, got {coordinator_epoch!r}")
    return f"{coordinator_epoch:0{EPOCH_DIGITS}d}-{_validate_offset(seq, 'seq'):020d}.json"


def parse_stable_name(name: str) -> tuple[int, int] | None:
    """(coordinator epoch, seq) of a stable-snapshot name, or None."""
    m = _STABLE_RE.fullmatch(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def stable_path(coordinator_epoch: int, seq: int) -> str:
    return f"{STABLE_DIR}/{stable_name(coordinator_epoch, seq)}"


def stable_base_name(coordinator_epoch: int, seq: int) -> str:
    """`<epoch>-<seq>.base.json`: a stable base (every partition, as head `<epoch>-<seq>`
    published them). Not a head name, so it never competes for "highest head", and readers
    written before bases existed ignore it."""
    return stable_name(coordinator_epoch, seq)[:-len(".json")] + ".base.json"


def parse_stable_base_name(name: str) -> tuple[int, int] | None:
    """(coordinator epoch, seq) of a stable-base name, or None."""
    m = _STABLE_BASE_RE.fullmatch(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def stable_base_path(coordinator_epoch: int, seq: int) -> str:
    return f"{STABLE_DIR}/{stable_base_name(coordinator_epoch, seq)}"


def txn_state_log_path(base_offset: int) -> str:
    return f"{TRANSACTION_STATE_DIR}/{segment_name(base_offset, LOG_SUFFIX)}"


def txn_state_snapshot_path(offset: int) -> str:
    return f"{TRANSACTION_STATE_DIR}/{segment_name(offset, SNAPSHOT_SUFFIX)}"


def consumer_offsets_dir(partition: int) -> str:
    return partition_dir(CONSUMER_OFFSETS_TOPIC, partition)


def merged_dir(topic: str, partition: int, level: int) -> str:
    """Where a partition's merged objects of ``level`` live: ``<t>-<p>/segments`` (level 0,
    closed segments) or ``<t>-<p>/runs/<level>`` (the open segment's runs)."""
    if not isinstance(level, int) or isinstance(level, bool) \
            or not 0 <= level <= MAX_MERGE_LEVEL:
        raise ValueError(f"merge level must be an int in [0, {MAX_MERGE_LEVEL}], got {level!r}")
    sub = SEGMENTS_DIR if level == 0 else f"{RUNS_DIR}/{level}"
    return f"{partition_dir(topic, partition)}/{sub}"


def cleaned_dir(topic: str, partition: int, gen: int) -> str:
    """Where the compacted segments of the cleaning that led to manifest ``gen`` live:
    ``<t>-<p>/cleaned/<gen, 20 digits>`` (new names: put-if-absent never rewrites one)."""
    return f"{partition_dir(topic, partition)}/cleaned/{_validate_offset(gen, 'gen'):020d}"


def manifest_dir(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/{MANIFEST_DIR}"


def manifest_name(seq: int) -> str:
    """A manifest's name sorts *newest first*: 20 digits of ``MAX_OFFSET - seq``, so one
    LIST with MaxKeys=1 finds the newest, however many older ones wait for deletion."""
    seq = _validate_offset(seq, "manifest seq")
    return f"{MAX_OFFSET - seq:0{OFFSET_DIGITS}d}.json"


def parse_manifest_name(name: str) -> int | None:
    """The seq of a manifest name, or None for anything else."""
    m = _MANIFEST_RE.fullmatch(name)
    if m is None or int(m.group(1)) > MAX_OFFSET:
        return None
    return MAX_OFFSET - int(m.group(1))


def manifest_path(topic: str, partition: int, seq: int) -> str:
    return f"{manifest_dir(topic, partition)}/{manifest_name(seq)}"
