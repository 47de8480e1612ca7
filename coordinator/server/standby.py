"""``txnlog coordinator --standby``: wait until the serving coordinator is gone, then serve.

Why no election protocol: the coordinator's log already decides who serves. Whoever appends
the next object of ``__transaction_state-0`` put-if-absent is the coordinator; the other is
fenced (DESIGN 5.1). So a standby only has to decide *when* to try: it watches the root's
``_coordinator.json`` (the serving coordinator rewrites it every ``heartbeat_ms``) and
probes the registered ``/healthz``; once the probe has failed for ``misses`` heartbeats in a
row **and** the registration has not been refreshed in that time, it recovers the log and
appends its takeover record like any starting coordinator. If it was wrong (the serving one
was only cut off from the standby), the old one is fenced at its next log write, and stops
refreshing the registration as soon as it sees a newer epoch there (``server.py``); clients
re-resolve from ``_coordinator.json`` (``client.py``).

A registration that names this standby itself means nobody serves: take over at once; a
missing one gets the same patience as a silent coordinator (one may be starting: it
registers only after recovery). A standby that still loses the race for the log is fenced
at start-up and exits with status 3 like any fenced coordinator; its supervisor restarts it
as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

log = logging.getLogger("txnlog.coordinator.server.standby")


@dataclass
class Watch:
    """What the standby has seen of the serving coordinator so far."""

    registration: bytes | None = None
    changed_at: float = 0.0
    failing_since: float | None = None


def read_registration(storage: Storage) -> bytes | None:
    try:
        return storage.get(layout.COORDINATOR_FILE)
    except FileNotFoundError:
        return None


async def wait_for_takeover(storage: Storage, own_endpoint: str, heartbeat_ms: int,
                            misses: int, probe: Callable[[str], bool],
                            stopping: asyncio.Event) -> bool:
    """Return True when this standby should take the log over, False if asked to stop
    first. ``probe(endpoint)`` is a blocking /healthz check (run in a thread)."""
    grace_s = misses * heartbeat_ms / 1000
    poll_s = max(0.05, min(heartbeat_ms / 4000, 1.0))
    watch = Watch(changed_at=time.monotonic())
    log.info("standby for %s: taking over once the serving coordinator misses %d heartbeats "
             "(%.1f s)", storage.url, misses, grace_s)
    while not stopping.is_set():
        raw = await asyncio.to_thread(read_registration, storage)
        now = time.monotonic()
        if raw is None:
            # A coordinator may be starting (it registers after recovery): give it the
            # same patience as a silent one.
            if watch.failing_since is None:
                watch.failing_since = now
                log.warning("standby: no coordinator is registered for %s", storage.url)
            if now - watch.failing_since >= grace_s:
                log.warning("standby: still no coordinator registered for %s after %.1f s; "
                            "taking over", storage.url, now - watch.failing_since)
                return True
            watch.registration = None
            await _pause(stopping, poll_s)
            continue
        if raw != watch.registration:
            watch.registration, watch.changed_at = raw, now
        try:
            endpoint = str(json.loads(raw).get("endpoint", ""))
        except ValueError:
            endpoint = ""
        if endpoint == own_endpoint:
            log.warning("standby: %s names this standby; taking over", layout.COORDINATOR_FILE)
            return True
        healthy = bool(endpoint) and await asyncio.to_thread(probe, endpoint)
        if healthy:
            watch.failing_since = None
        elif watch.failing_since is None:
            watch.failing_since = now
            log.warning("standby: the serving coordinator %s does not answer /healthz",
                        endpoint)
        if watch.failing_since is not None and now - watch.failing_since >= grace_s \
                and now - watch.changed_at >= grace_s:
            log.warning("standby: %s silent for %.1f s and its registration not refreshed; "
                        "taking over %s", endpoint, now - watch.failing_since, storage.url)
            return True
        await _pause(stopping, poll_s)
    return False


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
