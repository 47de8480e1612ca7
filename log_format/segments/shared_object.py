"""A shared object's bytes: one writer's flush, the batches of every partition it wrote.

Object storage bills per request, not per byte, so a flush that wrote one object per
partition paid for the partition count (2,237 objects per MB over 64 partitions through the
gateway). A shared object holds every partition's batches of one flush, as Kafka's diskless
topics (KIP-1150's shared log segments) and WarpStream's agent files do:

    [partition A's batches][partition B's batches]...[footer][footer length: 4][magic: 8]

- The batches are Kafka v2 batches, byte for byte, already stamped with their base offsets
  (offsets are reserved before the write), each partition's as one contiguous run, so a
  reader or the merger takes a partition's run with one ranged GET and uses it as it would
  a small object.
- The footer (JSON) names each run: topic, partition, first and end offset, byte position
  and size. Readers never need it: the coordinator's published state carries the same
  (object, position, size) per partition once the flush is confirmed, and only what is
  confirmed is ever read. It is there for ``txnlog dump`` and for anyone inspecting a root.

Pure bytes: no storage here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import LogFormatError

MAGIC = b"TXNLWAL\x01"
FORMAT = 1
_TRAILER = 4 + len(MAGIC)


class SharedObjectError(LogFormatError):
    """Bytes that are not a shared object (no magic, a truncated or corrupt footer)."""


class SharedEntry(NamedTuple):
    """One partition's run of batches in a shared object: offsets ``[base, end)`` in bytes
    ``[position, position + size)``."""

    topic: str
    partition: int
    base: int
    end: int
    position: int
    size: int


class SharedFooter(NamedTuple):
    """What a shared object's footer says: who wrote it and where each partition's run is."""

    producer_id: int
    epoch: int
    entries: list[SharedEntry]


class RunToWrite(NamedTuple):
    """One partition's stamped batches for ``build``: offsets ``[base, end)``."""

    topic: str
    partition: int
    base: int
    end: int
    data: bytes | bytearray | memoryview


def build(runs: Sequence[RunToWrite], producer_id: int, epoch: int,
          alloc: Callable[[int], np.ndarray] | None = None
          ) -> tuple[bytes | memoryview, list[SharedEntry]]:
    """The object's bytes and where each run landed (in the order given).

    ``alloc`` (a size -> uint8 array): the bytes are copied into the array it returns
    instead of a new ``bytes``, e.g. one aligned for direct I/O, so that a local root
    writes the object straight from it rather than through the page cache (one copy
    either way)."""
    entries: list[SharedEntry] = []
    chunks: list[bytes | bytearray | memoryview] = []
    pos = 0
    for r in runs:
        size = len(r.data)
        entries.append(SharedEntry(r.topic, r.partition, r.base, r.end, pos, size))
        chunks.append(r.data)
        pos += size
    footer = json.dumps({"format": FORMAT, "producer_id": producer_id, "epoch": epoch,
                         "entries": [list(e) for e in entries]},
                        separators=(",", ":")).encode()
    chunks += [footer, len(footer).to_bytes(4, "big"), MAGIC]
    if alloc is None:
        return b"".join(chunks), entries
    out = alloc(pos + len(footer) + _TRAILER)
    at = 0
    for c in chunks:
        b = np.frombuffer(c, np.uint8)
        out[at:at + b.size] = b
        at += b.size
    return memoryview(out[:at]), entries


def read_footer(data: bytes | memoryview, source: str = "shared object") -> SharedFooter:
    """Parse the footer of a whole shared object's bytes."""
    n = len(data)
    if n < _TRAILER or bytes(data[n - len(MAGIC):]) != MAGIC:
        raise SharedObjectError(f"{source}: not a shared object (no {MAGIC!r} at its end)")
    flen = int.from_bytes(data[n - _TRAILER:n - len(MAGIC)], "big")
    start = n - _TRAILER - flen
    if start < 0:
        raise SharedObjectError(f"{source}: footer of {flen} bytes does not fit in {n}")
    try:
        obj: Any = json.loads(bytes(data[start:n - _TRAILER]))
        if obj.get("format") != FORMAT:
            raise ValueError(f"unknown format {obj.get('format')!r}")
        entries = [SharedEntry(str(t), int(p), int(b), int(e), int(pos), int(sz))
                   for t, p, b, e, pos, sz in obj["entries"]]
        footer = SharedFooter(int(obj["producer_id"]), int(obj["epoch"]), entries)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SharedObjectError(f"{source}: corrupt footer: {exc}") from exc
    for e in entries:
        if e.position < 0 or e.size < 0 or e.position + e.size > start or e.end < e.base:
            raise SharedObjectError(f"{source}: entry {list(e)} lies outside its batches")
    return footer


__all__ = ["MAGIC", "RunToWrite", "SharedEntry", "SharedFooter", "SharedObjectError",
           "build", "read_footer"]
