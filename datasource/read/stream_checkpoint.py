"""Restarting a streaming query whose driver died while Spark wrote its first offset-log entry.

Spark writes every ``<checkpoint>/offsets/<batchId>`` atomically: to a temporary file
``offsets/.<batchId>.<uuid>.tmp`` in the same folder, renamed into place when complete. A
driver killed between the two leaves the temporary file behind. For any later batch that is
harmless (the offset log ignores such names). For batch 0 it is not, since Spark 4.1: with
no batch in the offset log the query counts as new, and a new query first checks
(``spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart``, on by default) that
``offsets/``, ``commits/`` and ``state/`` are empty — hidden files included. The abandoned
temporary file fails that check, so every restart fails with
``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` ("... offsets should be empty on batch 0"),
whatever the source and sink. Spark runs the check before any data source sees the
checkpoint location, so neither the txnlog source nor its sink can repair it: the program
that starts the query calls :func:`clear_abandoned_first_batch` before ``start()``.

Removing the file is safe: Spark writes ``offsets/0`` before it plans batch 0, so no task
ran and no sink committed anything for the dead run; the checkpoint's ``metadata`` (the
query id, hence the txnlog sink's transactional id) stays as it is.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime

from ..stream_offsets import _fs_path

log = logging.getLogger(__name__)

#: Spark's temporary names (CheckpointFileManager): ``.<name>.<uuid>.tmp``, and on a
#: checksummed file system the checksum of that, ``..<name>.<uuid>.tmp.crc``.
_TEMP = re.compile(r"^\.\.?\d+\.[0-9a-fA-F-]{36}\.tmp(\.crc)?$")
_BATCH = re.compile(r"^\d+$")
#: A live writer renames its temporary file within milliseconds; one this old is abandoned.
DEFAULT_GRACE_S = 15.0


def _names(fs: object, folder: str) -> list[tuple[str, object]]:
    try:
        entries = fs.ls(folder, detail=True)  # type: ignore[attr-defined]
    except FileNotFoundError:
        return []
    return [(e["name"].rstrip("/").rsplit("/", 1)[-1], e) for e in entries]


def _age_s(entry: object, now: float) -> float:
    """Seconds since the entry was modified; 0 when the file system does not say."""
    mtime = entry.get("mtime") or entry.get("LastModified")  # type: ignore[attr-defined]
    if isinstance(mtime, datetime):
        if mtime.tzinfo is None:
            mtime = mtime.replace(tzinfo=UTC)
        mtime = mtime.timestamp()
    if not isinstance(mtime, int | float):
        return 0.0
    return max(0.0, now - float(mtime))


def clear_abandoned_first_batch(checkpoint_location: str,
                                grace_s: float = DEFAULT_GRACE_S) -> list[str]:
    """Remove the temporary files a driver killed while writing ``offsets/0`` left behind,
    so that Spark (>= 4.1) restarts the query instead of failing with
    ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``; returns the removed paths.

    Only acts when the offset log holds no batch at all, and only on Spark's temporary
    names in ``offsets/`` and ``commits/``: a real batch file or any ``state/`` data still
    fails Spark's check, which guards against two different queries sharing a checkpoint.
    A temporary file younger than ``grace_s`` may belong to a run that is writing it right
    now (another copy of the query): the call waits until it is that old and looks again.
    No-op on a checkpoint that does not exist yet. Call it before ``writeStream...start()``.
    """
    fs, base = _fs_path(checkpoint_location)
    folders = [f"{base}/offsets", f"{base}/commits"]
    born: dict[str, float] = {}  # path -> when it was written, on the monotonic clock
    while True:
        offsets = _names(fs, folders[0])
        if any(_BATCH.match(name) for name, _ in offsets):
            return []
        temps = []
        for folder in folders:
            for name, entry in offsets if folder == folders[0] else _names(fs, folder):
                if _TEMP.match(name):
                    path = f"{folder}/{name}"
                    temps.append(path)
                    born.setdefault(path, time.monotonic() - _age_s(entry, time.time()))
        if not temps:
            return []
        wait = max(born[p] for p in temps) + grace_s - time.monotonic()
        if wait <= 0:
            break
        time.sleep(wait)
    removed = []
    for path in temps:
        try:
            fs.rm(path)  # type: ignore[attr-defined]
        except FileNotFoundError:
            continue
        removed.append(path)
    if removed:
        log.warning("checkpoint %s: removed %d temporary file(s) of an offset-log write that "
                    "a dead driver never finished: %s", checkpoint_location, len(removed),
                    ", ".join(p.rsplit("/", 1)[-1] for p in removed))
    return removed
