"""Topic metadata, `_meta/topics/<topic>.json`, created put-if-absent.

Put-if-absent makes topic creation idempotent and race-free without a coordinator round
trip: the first creator fixes the partition count for good, later creators get its metadata.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import TxnlogError
from .layout import TOPICS_DIR, topic_meta_path, validate_topic
from .storage import Storage

MAX_PARTITIONS = 1_000_000


class UnknownTopicError(TxnlogError, LookupError):
    """The topic has no metadata under this root."""


class TopicMetadataError(TxnlogError, ValueError):
    """A topic metadata object that cannot be parsed."""


@dataclass(frozen=True)
class TopicMeta:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0
    # Kafka's topic id: a random UUID given at creation, so two creations of one name are
    # told apart (by put-if-absent: their bytes differ) and a topic deleted and created
    # again is another topic. "" in roots written before it (Kafka's zero UUID).
    topic_id: str = ""

    def to_json(self) -> bytes:
        obj: dict[str, Any] = {"name": self.name, "partitions": self.partitions,
                               "config": dict(self.config), "created_ms": self.created_ms}
        if self.topic_id:
            obj["topic_id"] = self.topic_id
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str = "topic metadata") -> TopicMeta:
        try:
            obj: Any = json.loads(data)
            meta = cls(name=validate_topic(obj["name"]), partitions=int(obj["partitions"]),
                       config={str(k): str(v) for k, v in (obj.get("config") or {}).items()},
                       created_ms=int(obj.get("created_ms", 0)),
                       topic_id=str(uuid.UUID(obj["topic_id"])) if obj.get("topic_id") else "")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TopicMetadataError(f"{source}: not valid topic metadata: {exc}") from exc
        if meta.partitions < 1:
            raise TopicMetadataError(f"{source}: partitions must be >= 1")
        return meta


def create_topic(storage: Storage, name: str, partitions: int,
                 config: Mapping[str, Any] | None = None,
                 now_ms: int | None = None) -> TopicMeta:
    """Create the topic if absent; return its metadata (the existing one if it was there).

    Callers compare `partitions` of the result when the count matters to them.
    """
    return create_topic_if_absent(storage, name, partitions, config, now_ms)[0]


def create_topic_if_absent(storage: Storage, name: str, partitions: int,
                           config: Mapping[str, Any] | None = None,
                           now_ms: int | None = None) -> tuple[TopicMeta, bool]:
    """(the topic's metadata, whether this call created it): of two creations of one name
    at the same instant, exactly one is told it created the topic (put-if-absent)."""
    validate_topic(name)
    if isinstance(partitions, bool) or not isinstance(partitions, int) \
            or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be an int in [1, {MAX_PARTITIONS}], "
                         f"got {partitions!r}")
    meta = TopicMeta(name, partitions, {str(k): str(v) for k, v in (config or {}).items()},
                     int(time.time() * 1000) if now_ms is None else now_ms,
                     str(uuid.uuid4()))
    if storage.put_if_absent(topic_meta_path(name), meta.to_json()):
        return meta, True
    return read_topic(storage, name), False


def read_topic(storage: Storage, name: str) -> TopicMeta:
    path = topic_meta_path(name)
    try:
        data = storage.get(path)
    except FileNotFoundError:
        raise UnknownTopicError(
            f"topic {name!r} does not exist under {storage.url} (no {path})") from None
    return TopicMeta.from_json(data, f"{storage.url}/{path}")


def list_topics(storage: Storage) -> list[str]:
    """Names of all topics under the root, sorted."""
    out = []
    for obj in storage.list(TOPICS_DIR):
        if obj.name.endswith(".json"):
            name = obj.name[: -len(".json")]
            try:
                out.append(validate_topic(name))
            except TxnlogError:
                continue
    return sorted(out)  # listed by object name, where "a-b.json" sorts before "a.json"
