"""Failover to a standby coordinator, on file and S3 roots.

A standby (``txnlog coordinator --standby``) watches ``_coordinator.json``; when the serving
coordinator is SIGKILLed it takes the log over (coordinator epoch + 1) and registers, and
clients that know the root follow the registration after a connection failure and retry —
here with a transaction open across the kill, which then commits through the standby,
exactly once. A standby never takes over from a coordinator that still heartbeats; a
serving coordinator that was taken over (it was paused) stops instead of serving on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage

HEARTBEAT = ["--heartbeat-ms", "300"]


def registration(root: str) -> dict:
    return json.loads(Storage.for_url(root).get(layout.COORDINATOR_FILE))


def listening_endpoint(proc: CoordinatorProc, timeout: float = 60) -> str:
    """The address a (standby) process bound, from its log (it is not registered yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"listening on ([\d.]+):(\d+)", proc.log_text())
        if m:
            return f"http://{m.group(1)}:{m.group(2)}"
        assert proc.proc.poll() is None, proc.log_tail()
        time.sleep(0.05)
    raise TimeoutError(proc.log_tail())


def committed(root: str, topic: str) -> list[bytes]:
    st = Storage.for_url(root)
    return PartitionReader(st, topic, 0, snapshot=read_latest_stable(st)).read_table() \
        .column("value").to_pylist()


def test_standby_takes_over_after_kill_9(any_root: str, tmp_path: Path) -> None:
    primary = CoordinatorProc(any_root, extra=HEARTBEAT, log_path=tmp_path / "primary.log")
    first = primary.wait_healthy()
    standby = CoordinatorProc(any_root, extra=[*HEARTBEAT, "--standby"],
                              log_path=tmp_path / "standby.log")
    try:
        standby_ep = listening_endpoint(standby)
        epoch = registration(any_root)["epoch"]
        CoordinatorClient(first).create_topic("t", 1)
        with TransactionalProducer(any_root, "fo", coordinator=first) as prod:
            prod.init_transactions()
            prod.begin_transaction()
            prod.send("t", b"before")
            prod.commit_transaction()
            # the standby stays a standby while the serving one heartbeats
            time.sleep(2.0)
            assert registration(any_root)["pid"] == primary.pid
            assert not CoordinatorClient(standby_ep).healthy()
            assert b"standby" in _get(standby_ep)
            # a transaction open across the kill commits through the standby
            prod.begin_transaction()
            prod.send("t", b"across")
            prod.flush()
            primary.kill()
            prod.commit_transaction()
            prod.begin_transaction()
            prod.send("t", b"after")
            prod.commit_transaction()
        info = registration(any_root)
        assert info["pid"] == standby.pid and info["endpoint"] == standby_ep
        assert info["epoch"] == epoch + 1
        assert committed(any_root, "t") == [b"before", b"across", b"after"]
        assert "taking over" in standby.log_text()
    finally:
        primary.stop()
        standby.stop()


def test_a_coordinator_taken_over_stops_serving(file_root: str, tmp_path: Path) -> None:
    """Paused (not dead) past the standby's patience: when it wakes up it finds a newer
    epoch registered (or its log fenced) and exits with status 3, never serving on."""
    primary = CoordinatorProc(file_root, extra=HEARTBEAT, log_path=tmp_path / "primary.log")
    primary.wait_healthy()
    standby = CoordinatorProc(file_root, extra=[*HEARTBEAT, "--standby"],
                              log_path=tmp_path / "standby.log")
    try:
        epoch = registration(file_root)["epoch"]
        os.kill(primary.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 60
        while registration(file_root)["pid"] != standby.pid:
            assert time.monotonic() < deadline, standby.log_tail()
            time.sleep(0.1)
        os.kill(primary.pid, signal.SIGCONT)
        assert primary.wait(60) == 3
        assert registration(file_root)["epoch"] == epoch + 1
        assert "took the log over" in primary.log_text() or "fenced" in primary.log_text()
    finally:
        primary.stop()
        standby.stop()


def test_standby_of_a_root_nobody_serves_serves_at_once(file_root: str) -> None:
    with CoordinatorProc(file_root, extra=[*HEARTBEAT, "--standby"]) as proc:
        assert proc.client().list_topics() == []


def _get(endpoint: str) -> bytes:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{endpoint}/healthz", timeout=5) as r:
            return r.read()
    except urllib.error.HTTPError as err:
        return err.read()


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
