"""Group fsync of directories: one ``fsync(dir)`` covers every entry made before it began.

A put-if-absent on local files makes its name durable with an fsync of the directory after
the ``link``. Threads of one process that link into the same directory at the same time
(a writer's parallel puts, the coordinator's marker pool; with one partition every object
lands in one directory) need not each pay a journal commit: a caller whose link happened
before a running or a newly started fsync of that directory waits for it instead. Same
durability, fewer fsyncs; a caller never returns before an fsync that began after its link
has finished.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field


@dataclass
class _Dir:
    cond: threading.Condition = field(default_factory=threading.Condition)
    tickets: int = 0  # callers so far (each after its own link)
    synced: int = 0  # every ticket <= this is covered by a finished fsync
    running: bool = False


_dirs: dict[str, _Dir] = {}
_dirs_lock = threading.Lock()


def _fsync(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """Make every entry linked into ``directory`` before this call durable."""
    with _dirs_lock:
        d = _dirs.get(directory)
        if d is None:
            d = _dirs[directory] = _Dir()
    with d.cond:
        d.tickets += 1
        mine = d.tickets
        while d.synced < mine:
            if not d.running:
                d.running = True
                target = d.tickets  # this fsync starts after every ticket so far
                break
            d.cond.wait()
        else:
            return
    ok = False
    try:
        _fsync(directory)
        ok = True
    finally:
        with d.cond:
            d.running = False
            if ok:
                d.synced = max(d.synced, target)
            d.cond.notify_all()
