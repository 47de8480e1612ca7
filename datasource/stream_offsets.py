"""Streaming offsets of the txnlog source, and how the txnlog sink finds them.

An offset is a JSON object ``{"topic": {"partition": next_offset}}`` (Spark's Kafka source
shape), in a canonical order (topics by name, partitions by number) because Spark compares
offsets as JSON strings. With ``groupId`` the object also carries ``"@group": {"id": ...,
"root": ...}``; ``@`` cannot start a Kafka topic name, so the key never clashes.

That entry is how a txnlog sink commits the source's consumer-group offsets inside its own
transaction (Kafka's sendOffsetsToTransaction): Spark writes ``<checkpoint>/offsets/<batchId>``
(one line per source, our JSON verbatim) *before* it runs batch ``batchId``, and the sink's
``commit(messages, batchId)`` gets the ``checkpointLocation`` option, so it reads the batch's
end offsets from there — no side channel between source and sink, and a replayed batch sees
exactly the offsets it had the first time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from txnlog.log_format.layout import TopicPartition

GROUP_KEY = "@group"


def encode(offsets: Mapping[TopicPartition, int], group: Mapping[str, str] | None = None
           ) -> dict:
    """The canonical offset dict (what Spark stores and compares)."""
    out: dict = {}
    if group:
        out[GROUP_KEY] = dict(group)
    for topic, p in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def decode(offset: Mapping | str | None) -> dict[TopicPartition, int]:
    """Per-partition offsets from an offset dict (or its JSON); meta entries are skipped."""
    if offset is None:
        return {}
    if isinstance(offset, str):
        offset = json.loads(offset)
    out: dict[TopicPartition, int] = {}
    for topic, parts in offset.items():
        if topic.startswith("@"):
            continue
        for p, off in parts.items():
            out[(topic, int(p))] = int(off)
    return out


def same_root(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


@dataclass(frozen=True)
class GroupOffsets:
    """One txnlog source's group and the end offsets of a batch, from the checkpoint."""

    group_id: str
    root: str
    offsets: dict[TopicPartition, int]


def _fs_path(location: str) -> tuple[object, str]:
    import fsspec

    if location.startswith("file:") and not location.startswith("file://"):
        location = "file://" + location[len("file:"):]
    fs, path = fsspec.core.url_to_fs(location)
    return fs, path.rstrip("/")


def _local_path(location: str) -> str | None:
    """The local folder of a ``file:`` URL or a plain path; None for any other scheme."""
    if location.startswith("file:"):
        from urllib.parse import unquote, urlparse

        parsed = urlparse(location)
        if parsed.netloc not in ("", "localhost"):
            return None
        return unquote(parsed.path)
    return None if "://" in location else location


def read_checkpoint_file(location: str, name: str) -> str | None:
    """A file under a Spark checkpoint location, None if it does not exist.

    Local checkpoints are read with ``open`` (the sink's commit reads one every micro-batch,
    and fsspec's import alone costs a fresh commit process ~0.1 s); any other scheme through
    fsspec."""
    local = _local_path(location)
    if local is not None:
        try:
            with open(f"{local.rstrip('/')}/{name}", "rb") as f:
                return f.read().decode("utf-8")
        except FileNotFoundError:
            return None
    fs, base = _fs_path(location)
    try:
        with fs.open(f"{base}/{name}", "rb") as f:  # type: ignore[attr-defined]
            return f.read().decode("utf-8")
    except FileNotFoundError:
        return None


def batch_group_offsets(location: str, batch_id: int) -> list[GroupOffsets]:
    """The group offsets of every txnlog source with a ``groupId`` in batch ``batch_id``.

    Raises if the offsets file is missing: Spark writes it before running the batch, so its
    absence means the checkpoint location is not the one this query runs on.
    """
    text = read_checkpoint_file(location, f"offsets/{batch_id}")
    if text is None:
        raise FileNotFoundError(
            f"txnlog sink: {location}/offsets/{batch_id} does not exist, so the source offsets "
            "of this batch cannot be committed with it; is 'checkpointLocation' the query's?")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"{location}/offsets/{batch_id}: not a Spark offset log entry")
    out = []
    for line in lines[2:]:
        line = line.strip()
        if not line.startswith("{"):
            continue  # "-" (a source without an offset) or another source's format
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, str):  # some versions store the JSON as a JSON string
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                continue
        meta = value.get(GROUP_KEY) if isinstance(value, dict) else None
        if isinstance(meta, dict) and meta.get("id"):
            out.append(GroupOffsets(str(meta["id"]), str(meta.get("root", "")), decode(value)))
    return out


def checkpoint_query_id(location: str) -> str | None:
    """The query id Spark keeps in ``<checkpoint>/metadata`` (stable across restarts)."""
    text = read_checkpoint_file(location, "metadata")
    if not text:
        return None
    try:
        return str(json.loads(text.splitlines()[0])["id"])
    except (ValueError, KeyError, IndexError):
        return None
