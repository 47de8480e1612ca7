"""Run a real ``txnlog gateway`` process for tests (Kafka's protocol on 127.0.0.1).

Started in its own session and stopped by its PID, like ``coordinator_proc``. The bound
port comes from ``--port-file`` (written once it listens), so tests never race for ports.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from coordinator_proc import CoordinatorProc, ServerProcess


def free_port_block(n: int = 8) -> int:
    """A port P with P..P+n-1 all free now: a gateway restarted on a fixed ``--listen``
    port listens as ``--virtual-brokers`` brokers (8 by default), one port each."""
    import random
    import socket

    for _ in range(200):
        base = random.randint(20_000, 60_000 - n)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports found")


class GatewayProc(ServerProcess):
    tail_lines = 40

    def __init__(self, root: str, *, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.dir = Path(tempfile.mkdtemp(prefix="txnlog-gw-"))
        self.port_file = self.dir / "port"
        args = [sys.executable, "-m", "txnlog.coordinator.cli", "gateway", "--root", root,
                "--listen", "127.0.0.1:0", "--port-file", str(self.port_file), *(extra or [])]
        self._spawn(args, {**os.environ, **(env or {})}, self.dir / "gateway.log")
        self.port: int | None = None

    @property
    def bootstrap(self) -> str:
        assert self.port is not None
        return f"127.0.0.1:{self.port}"

    def wait_listening(self, timeout: float = 180.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if self.port_file.exists():
                self.port = int(self.port_file.read_text())
                return self.port
            time.sleep(0.05)
        raise TimeoutError(f"gateway not listening after {timeout}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def __enter__(self) -> GatewayProc:
        self.wait_listening()
        return self



@contextlib.contextmanager
def coordinator_and_gateway(root: str, *, extra: list[str] | None = None
                            ) -> Iterator[tuple[CoordinatorProc, GatewayProc]]:
    """A healthy coordinator process on ``root`` and a gateway process (``extra``: its
    options) started beside it, both stopped afterwards. The caller waits for the gateway
    (``wait_listening``) when it needs it: a fixture seeding the root first overlaps that
    with the gateway's start."""
    coord = CoordinatorProc(root)
    try:
        coord.wait_healthy()
        gateway = GatewayProc(root, extra=extra)
        try:
            yield coord, gateway
        finally:
            gateway.stop()
    finally:
        coord.stop()
