"""Find the root's coordinator, or start one: the zero-set-up default (DESIGN 6.4).

``coordinator_for_root(root)`` returns the endpoint registered in ``<root>/_coordinator.json``
if it answers ``/healthz``; otherwise it starts ``txnlog coordinator`` for the root on
127.0.0.1 as a detached process (own session: it outlives the short-lived Spark worker that
started it, and exits by itself after ``idle_exit_s`` without requests). Starting happens
under a put-if-absent lock object (``_coordinator.lock``), so concurrent starters never
start two; the losers wait for the winner's registration. Even if two did start, the
coordinator log's put-if-absent would fence one of them.

Only a driver or a user's own process ever starts one (``start=True``). Spark tasks get the
endpoint the driver resolved inside the pickled writer and never come here; and a
registration that names a coordinator run as a service (``txnlog coordinator`` without the
embedded flag) is never replaced by an embedded one: when it does not answer, the caller
waits a little for a standby, then fails with the endpoint and the fix
(``CoordinatorUnreachableError``).
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

from ..errors import NotCoordinatorError
from .coordinator_client import CoordinatorClient, unreachable_hint

LOCK_FILE = "_coordinator.lock"
DEFAULT_IDLE_EXIT_S = 600.0
# How long a driver waits for a registered service coordinator (not an embedded one) that
# does not answer: a standby takes over within a few heartbeats.
DEFAULT_SERVICE_WAIT_S = 30.0
_cache: dict[tuple[int, str], str] = {}
_cache_lock = threading.Lock()


class CoordinatorStartError(NotCoordinatorError):
    """No coordinator could be found or started for the root."""


class CoordinatorUnreachableError(NotCoordinatorError):
    """The root's coordinator does not answer, and this process may not start one."""

    def __init__(self, root_url: str, registration: dict[str, Any] | None,
                 may_start: bool) -> None:
        endpoint = (registration or {}).get("endpoint")
        if endpoint is None:
            what = f"no coordinator is registered for {root_url}"
            fix = ("start one: `txnlog coordinator --root " + root_url + " --host 0.0.0.0 "
                   "--advertised-url URL --token-file FILE` (docs/deployment.md), or run the "
                   "job's driver on this root once (it starts an embedded one)")
        else:
            what = f"the coordinator {endpoint} registered for {root_url} does not answer"
            fix = unreachable_hint(str(endpoint))
        why = "" if may_start else " (this process may not start a coordinator)"
        super().__init__(f"{what}{why}; {fix}")
        self.endpoint = endpoint


def read_registration(storage: Storage) -> dict[str, Any] | None:
    """``_coordinator.json`` as a dict, or None when absent or unreadable."""
    try:
        info = json.loads(storage.get(layout.COORDINATOR_FILE))
    except (FileNotFoundError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def registered_endpoint(storage: Storage, ca_file: str | None = None) -> str | None:
    """The endpoint in ``_coordinator.json`` if it answers /healthz, else None."""
    info = read_registration(storage)
    endpoint = info.get("endpoint") if info else None
    if isinstance(endpoint, str) and CoordinatorClient(endpoint, ca_file=ca_file).healthy():
        return endpoint
    return None


def coordinator_for_root(root: str, storage_options: Mapping[str, Any] | None = None, *,
                         idle_exit_s: float = DEFAULT_IDLE_EXIT_S,
                         start_timeout_s: float = 60.0, start: bool = True,
                         ca_file: str | None = None,
                         service_wait_s: float = DEFAULT_SERVICE_WAIT_S) -> str:
    """The endpoint of the coordinator serving ``root``, started here if there is none.

    Only a driver (or a user's own process) passes ``start=True``; with ``start=False``
    (and always when the registration names a coordinator run as a service, not an
    embedded one) an unreachable coordinator is CoordinatorUnreachableError naming the
    endpoint and the fix — a takeover by a process its peers cannot reach would make a
    cluster thrash. A service that does not answer is waited for up to ``service_wait_s``
    (a standby may be taking over).
    """
    storage = Storage.for_url(root, storage_options)
    key = (os.getpid(), storage.url)
    cached = _cache.get(key)
    if cached is not None and CoordinatorClient(cached, ca_file=ca_file).healthy():
        return cached
    with _cache_lock:
        deadline = time.monotonic() + start_timeout_s
        service_deadline = time.monotonic() + service_wait_s
        while True:
            endpoint = registered_endpoint(storage, ca_file)
            if endpoint is not None:
                _cache[key] = endpoint
                return endpoint
            info = read_registration(storage)
            service = info is not None and info.get("embedded") is False
            if service or not start:
                if time.monotonic() < service_deadline:
                    time.sleep(0.5)
                    continue
                raise CoordinatorUnreachableError(storage.url, info, start)
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
            "--host", "127.0.0.1", "--port", "0", "--idle-exit-s", str(idle_exit_s),
            "--embedded"]
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
