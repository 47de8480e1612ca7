"""Find the root's coordinator, or start one: the zero-set-up default (DESIGN 6.4).

``coordinator_for_root(root)`` returns the endpoint registered in ``<root>/_coordinator.json``
if it answers ``/healthz``; otherwise it starts ``txnlog coordinator`` for the root on
127.0.0.1 as a detached process (own session: it outlives the short-lived Spark worker that
started it, and exits by itself after ``idle_exit_s`` without requests). Starting happens
under a put-if-absent lock object (``_coordinator.lock``), so concurrent starters never
start two; the losers wait for the winner's registration. Even if two did start, the
coordinator log's put-if-absent would fence one of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.storage import OPTION_PREFIX, Storage

from .client import CoordinatorClient
from .errors import NotCoordinatorError

LOCK_FILE = "_coordinator.lock"
DEFAULT_IDLE_EXIT_S = 600.0
_cache: dict[tuple[int, str], str] = {}
_cache_lock = threading.Lock()


class CoordinatorStartError(NotCoordinatorError):
    """No coordinator could be found or started for the root."""


def registered_endpoint(storage: Storage) -> str | None:
    """The endpoint in ``_coordinator.json`` if it answers /healthz, else None."""
    try:
        info = json.loads(storage.get(layout.COORDINATOR_FILE))
    except (FileNotFoundError, ValueError):
        return None
    endpoint = info.get("endpoint")
    if isinstance(endpoint, str) and CoordinatorClient(endpoint).healthy():
        return endpoint
    return None


def coordinator_for_root(root: str, storage_options: Mapping[str, Any] | None = None, *,
                         idle_exit_s: float = DEFAULT_IDLE_EXIT_S,
                         start_timeout_s: float = 60.0) -> str:
    """The endpoint of the coordinator serving ``root``, started here if there is none."""
    storage = Storage.for_url(root, storage_options)
    key = (os.getpid(), storage.url)
    cached = _cache.get(key)
    if cached is not None and CoordinatorClient(cached).healthy():
        return cached
    with _cache_lock:
        deadline = time.monotonic() + start_timeout_s
        while True:
            endpoint = registered_endpoint(storage)
            if endpoint is not None:
                _cache[key] = endpoint
                return endpoint
            if time.monotonic() > deadline:
                raise CoordinatorStartError(
                    f"no healthy coordinator for {storage.url} after {start_timeout_s:.0f}s "
                    f"(see {log_file(storage.url)})")
            token = json.dumps({"pid": os.getpid(), "nonce": uuid.uuid4().hex,
                                "ms": int(time.time() * 1000)}).encode()
            if storage.put_if_absent(LOCK_FILE, token):
                try:
                    endpoint = _start(root, storage, storage_options, idle_exit_s, deadline)
                finally:
                    with contextlib.suppress(Exception):
                        storage.delete(LOCK_FILE)
                _cache[key] = endpoint
                return endpoint
            _maybe_break_stale_lock(storage, start_timeout_s)
            time.sleep(0.2)


def log_file(storage_url: str) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in storage_url)[-80:]
    return os.path.join(tempfile.gettempdir(), f"txnlog-coordinator-{safe}.log")


def _start(root: str, storage: Storage, storage_options: Mapping[str, Any] | None,
           idle_exit_s: float, deadline: float) -> str:
    args = [sys.executable, "-m", "txnlog.coordinator.cli", "coordinator", "--root", root,
            "--host", "127.0.0.1", "--port", "0", "--idle-exit-s", str(idle_exit_s)]
    for k, v in (storage_options or {}).items():
        if k.startswith(OPTION_PREFIX):
            args += ["--storage-option", f"{k[len(OPTION_PREFIX):]}={v}"]
    with open(log_file(storage.url), "ab") as out:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CoordinatorStartError(
                f"the coordinator for {storage.url} exited with {proc.returncode} at start-up;"
                f" see {log_file(storage.url)}")
        try:
            info = json.loads(storage.get(layout.COORDINATOR_FILE))
        except (FileNotFoundError, ValueError):
            info = {}
        if info.get("pid") == proc.pid and CoordinatorClient(info["endpoint"]).healthy():
            return str(info["endpoint"])
        time.sleep(0.05)
    raise CoordinatorStartError(f"the coordinator for {storage.url} did not become healthy")


def _maybe_break_stale_lock(storage: Storage, start_timeout_s: float) -> None:
    """A starter that died leaves its lock: remove it once it is clearly too old."""
    try:
        info = json.loads(storage.get(LOCK_FILE))
    except (FileNotFoundError, ValueError):
        return
    age_s = time.time() - info.get("ms", 0) / 1000
    if age_s > start_timeout_s * 2:
        storage.delete(LOCK_FILE)
