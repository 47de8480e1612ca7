"""Crash points for tests: the process SIGKILLs itself where ``TXNLOG_FAULTS`` says.

``TXNLOG_FAULTS`` is a comma-separated list of ``point`` or ``point:N`` (die at the N-th time
the point is reached, default 1), e.g. ``after_prepare`` or ``after_marker:2``;
``point:N:hang`` blocks the thread there for an hour instead (a wedged process, for the tests
that SIGTERM must still end). Unset (the
production default) every check is a dictionary lookup on an empty dict.

Points: before_prepare, after_prepare, after_marker, after_complete_before_reply,
mid_snapshot, after_reserve, after_log_write, after_merge_plan (a merge is logged, its output
not written), after_merge_output (output written, manifest not), after_merge_manifest
(manifest written, ``merged`` not logged), after_compact_plan / after_compact_output /
after_compact_manifest (the same three steps of a compaction, log_cleaner.py),
after_retain_plan / after_retain_manifest (a retention or DeleteRecords change: ``retain``
logged, its manifest not written / written, ``retained`` not logged), after_topic_delete_data
(a deleted topic's objects gone, ``topic_delete`` done not logged; log_retention.py),
before_confirm (a Confirm or ConfirmMany received and nothing of it logged: a flush's shared
object is on storage and its reservation durable, its confirm lost with the coordinator),
gateway_after_put (in ``txnlog gateway``: a flush window's shared object put, its confirm
not sent).

Shared by the coordinator and the gateway, so it lives beside ``errors``, outside both.
"""

from __future__ import annotations

import logging
import os
import signal
import time

POINTS = frozenset({"before_prepare", "after_prepare", "after_marker",
                    "after_complete_before_reply", "mid_snapshot", "after_reserve",
                    "after_log_write", "after_merge_plan", "after_merge_output",
                    "after_merge_manifest", "after_compact_plan", "after_compact_output",
                    "after_compact_manifest", "after_retain_plan", "after_retain_manifest",
                    "after_topic_delete_data", "before_confirm", "gateway_after_put"})

log = logging.getLogger("txnlog.coordinator.faults")


def _parse(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, rest = item.partition(":")
        count, _, action = rest.partition(":")
        if action == "hang":
            _hang.add(name)
        if name not in POINTS:
            raise ValueError(f"unknown fault point {name!r} in TXNLOG_FAULTS; "
                             f"known: {sorted(POINTS)}")
        out[name] = int(count) if count else 1
    return out


_hang: set[str] = set()
_armed: dict[str, int] = _parse(os.environ.get("TXNLOG_FAULTS", ""))
_hits: dict[str, int] = {}


def reload(spec: str | None = None) -> None:
    """Re-read the fault spec (tests in-process); None re-reads the environment."""
    global _armed
    _armed = _parse(os.environ.get("TXNLOG_FAULTS", "") if spec is None else spec)
    _hits.clear()


def point(name: str) -> None:
    """Die here (SIGKILL, no cleanup, like a power cut) if this point is armed and due."""
    if not _armed:
        return
    target = _armed.get(name)
    if target is None:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= target and name in _hang:
        log.warning("fault point %s reached (hit %d): hanging", name, _hits[name])
        time.sleep(3600)
    elif _hits[name] >= target:
        log.warning("fault point %s reached (hit %d): SIGKILL", name, _hits[name])
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
