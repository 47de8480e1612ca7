"""Run a real ``txnlog gateway`` process for tests (Kafka's protocol on 127.0.0.1).

Started in its own session and stopped by its PID, like ``coordinator_proc``. The bound
port comes from ``--port-file`` (written once it listens), so tests never race for ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class GatewayProc:
    def __init__(self, root: str, *, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.dir = Path(tempfile.mkdtemp(prefix="txnlog-gw-"))
        self.port_file = self.dir / "port"
        self.log_path = self.dir / "gateway.log"
        args = [sys.executable, "-m", "txnlog.coordinator.cli", "gateway", "--root", root,
                "--listen", "127.0.0.1:0", "--port-file", str(self.port_file), *(extra or [])]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                     start_new_session=True)
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

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

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

    def __enter__(self) -> GatewayProc:
        self.wait_listening()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
