"""The history: one JSON object per line, appended by every workload process.

Each process writes its own file (no cross-process locking, nothing lost when a process is
SIGKILLed mid-run except the line being written); the checker reads them all.

Operations (``f``), each with ``proc``, ``t0``/``t1`` (wall-clock seconds) and ``outcome``
(``ok`` / ``fail`` = definitely did not happen / ``unknown``):

- ``send``: ``txn``, ``topic``, ``partition``, ``key``, ``value`` (int, unique in the run),
  ``offset`` (known once flushed, else null);
- ``commit`` / ``abort``: ``txn``, ``error``;
- ``poll``: ``isolation`` (read_committed / read_uncommitted), ``mode`` (``poll`` = the
  incremental consumer, ``scan`` = a read of every partition from its start up to one
  snapshot, ``final`` = the last such scan, after every fault healed; ``spark`` = a Spark
  batch read), ``snapshot`` ([epoch, seq] or null), ``bounds`` ({"t-p": [hw, lso]}),
  ``ranges`` ({"t-p": [from, to]}: offsets the read covered; null when unknown),
  ``reads`` ({"t-p": [[offset, value], ...]}); the final read_uncommitted scan also has
  ``producers`` ({"t-p": [[base offset, last offset, producer id], ...]}: the stored data
  batches it covered).
- ``intrude`` / ``intrude-end`` (the intruder of an ``--acls`` run, chaos/intruder.py):
  ``txn``, ``kind``, ``tid``, ``values`` (recorded before the attempt) / ``outcome``
  (``refused``, ``accepted`` or ``unknown``), ``error``;
- ``info``: free-form notes (fault injected, process restarted); ignored by the checker.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def split_tp(key: str) -> tuple[str, int]:
    topic, _, p = key.rpartition("-")
    return topic, int(p)


class HistoryWriter:
    """Append-only JSON-lines writer; each line is flushed so a SIGKILL loses at most one."""

    def __init__(self, path: str | os.PathLike[str], proc: str) -> None:
        self.path = Path(path)
        self.proc = proc
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, f: str, **fields: Any) -> dict[str, Any]:
        op = {"f": f, "proc": fields.pop("proc", self.proc), **fields}
        op.setdefault("t1", time.time())
        line = json.dumps(op, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        return op

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(paths: list[Path] | Path) -> Iterator[dict[str, Any]]:
    """Every operation of the given files (or every `*.jsonl` under a directory).

    A torn last line (its writer was killed mid-write) is skipped.
    """
    if isinstance(paths, Path) and paths.is_dir():
        paths = sorted(paths.glob("*.jsonl"))
    for path in paths if isinstance(paths, list) else [paths]:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
