"""Run a real ``txnlog schema-registry`` process for tests (HTTP on 127.0.0.1).

Started in its own session and stopped by its PID, like ``gateway_proc``; the bound port
comes from ``--port-file``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coordinator_proc import CoordinatorProc, ServerProcess
from gateway_proc import GatewayProc


class RegistryProc(ServerProcess):
    tail_lines = 40

    def __init__(self, root: str, *, extra: list[str] | None = None) -> None:
        self.root = root
        self.dir = Path(tempfile.mkdtemp(prefix="txnlog-sr-"))
        self.port_file = self.dir / "port"
        args = [sys.executable, "-m", "txnlog.coordinator.cli", "schema-registry", "--root",
                root, "--listen", "127.0.0.1:0", "--port-file", str(self.port_file),
                *(extra or [])]
        self._spawn(args, dict(os.environ), self.dir / "registry.log")
        self.port: int | None = None

    @property
    def url(self) -> str:
        assert self.port is not None
        return f"http://127.0.0.1:{self.port}"

    def wait_listening(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"schema registry exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if self.port_file.exists():
                self.port = int(self.port_file.read_text())
                return self.port
            time.sleep(0.05)
        raise TimeoutError(f"schema registry not listening after {timeout}s:\n"
                           f"{self.log_tail()}")

    def __enter__(self) -> RegistryProc:
        self.wait_listening()
        return self


@dataclass
class Served:
    """A root with its coordinator, a gateway and a schema registry."""

    root: str
    coord: CoordinatorProc
    gateway: GatewayProc
    registry: RegistryProc
