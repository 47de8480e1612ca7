"""Run real coordinator processes for tests (``python -m txnlog.coordinator.cli coordinator``).

Each process is started in its own session and stopped by its PID; ``wait_healthy`` reads
the endpoint from ``_coordinator.json`` (written only after recovery) and polls ``/healthz``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a process that must be started again on the
    same port (a coordinator's ``--port`` across a kill, a Spark master's)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A txnlog server process of a test (coordinator, gateway): its own session, its
    output in ``log_path``, stopped by its PID (SIGTERM, then SIGKILL after 30 s)."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: Any
    tail_lines = 30

    def _spawn(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int | None = None) -> str:
        return "\n".join(self.log_text().splitlines()[-(n or self.tail_lines):])

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.proc.returncode

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CoordinatorProc(ServerProcess):
    def __init__(self, root: str, *, faults: str | None = None, log_path: Path | None = None,
                 extra: list[str] | None = None, register: bool = True) -> None:
        self.root = root
        env = dict(os.environ)
        env.pop("TXNLOG_FAULTS", None)
        if faults:
            env["TXNLOG_FAULTS"] = faults
        args = [sys.executable, "-m", "txnlog.coordinator.cli", "coordinator", "--root", root,
                "--port", "0", "--log-level", "DEBUG", *(extra or [])]
        if not register:
            args.append("--no-register")
        self._spawn(args, env, log_path
                    or Path(f"/tmp/txnlog-coord-test-{os.getpid()}-{id(self)}.log"))
        self.endpoint: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def merge_workers(self) -> list[int]:
        """Pids of its spawned merge worker processes (coordinator/merge_worker.py)."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = stat.read_text().rsplit(")", 1)[1].split()[1]
                cmdline = (stat.parent / "cmdline").read_bytes()
            except (OSError, IndexError):
                continue
            if ppid == str(self.pid) and b"spawn_main" in cmdline:
                found.append(int(stat.parent.name))
        return found

    def wait_merge_worker_ready(self, timeout: float = 60.0) -> list[int]:
        """Wait for the line the merge worker logs once started and warmed up (it is
        spawned as the coordinator starts serving, on remote storage); its pids."""
        deadline = time.monotonic() + timeout
        while "reads merge inputs with" not in self.log_text():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no merge worker started with the coordinator in "
                                   f"{timeout:g} s")
            time.sleep(0.1)
        return self.merge_workers()

    def wait_healthy(self, timeout: float = 60.0) -> str:
        storage = Storage.for_url(self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"coordinator exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                info = json.loads(storage.get(layout.COORDINATOR_FILE))
            except (FileNotFoundError, ValueError):
                info = {}
            if info.get("pid") == self.proc.pid and CoordinatorClient(info["endpoint"]).healthy():
                self.endpoint = info["endpoint"]
                return self.endpoint
            time.sleep(0.05)
        raise TimeoutError(f"coordinator not healthy after {timeout}s:\n{self.log_tail()}")

    def client(self, **kw: float) -> CoordinatorClient:
        assert self.endpoint is not None
        return CoordinatorClient(self.endpoint, **kw)

    def end_offset(self, topic: str, partition: int = 0) -> int:
        """The partition's log end offset (read_uncommitted) once this coordinator has
        published what it confirmed: what a test compares before and after a request
        that must (or must not) have written."""
        from txnlog import AdminClient
        from txnlog.log_format.layout import TopicPartition

        self.client().stable(publish=True)
        tp = TopicPartition(topic, partition)
        got = AdminClient(self.root).list_offsets({tp: "latest"}, "read_uncommitted")
        return int(got[tp]["offset"])

    def __enter__(self) -> CoordinatorProc:
        self.wait_healthy()
        return self
