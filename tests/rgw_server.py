"""The suite's second real S3 server: Ceph RGW (Debian `radosgw`) on 127.0.0.1.

Why a second implementation: SeaweedFS (tests/s3_server.py) is the default, but a suite that
passes on one server may lean on its quirks. RGW is what many deployed S3-compatible stores
run; its Pacific (16.2) behaviour differs where a transaction log cares: its 412 bodies
carry no ``Condition``, If-Match on PUT wants an unquoted ETag, conditions on
CompleteMultipartUpload are ignored, and it answers listings and bulk deletes with its own
code. Tests where deletes, listings or conditional writes matter run on both (the
``s3_impl_root`` and ``every_root`` fixtures in tests/conftest.py).

tests/ceph_s3.sh does the work: a throw-away single-node cluster (1 mon, 1 memstore OSD,
radosgw with the beast frontend) in a private directory, every port free, stopped by PID.
This wrapper gives it tests/s3_server.py's interface. The packages (`radosgw ceph-mon
ceph-osd`, about 30 s of apt-get) are installed by .ci/run; on a machine without them and
without root, `start` raises RgwUnavailable naming what is missing (the fixture skips).
Usable without pytest: `with RgwServer.start() as server: ...`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Endpoint, S3ServerError

SCRIPT = Path(__file__).with_name("ceph_s3.sh")
PACKAGES = ("radosgw", "ceph-mon", "ceph-osd")
# what ceph_s3.sh runs (ceph, radosgw-admin, monmaptool come with the packages above)
BINARIES = ("radosgw", "ceph-mon", "ceph-osd", "ceph", "radosgw-admin", "monmaptool")
START_TIMEOUT_S = 300.0  # includes an apt-get install when the packages are missing
INSTALL_TIMEOUT_S = 600.0


class RgwUnavailable(S3ServerError):
    """Ceph RGW cannot run here: its packages are missing and cannot be installed."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def ensure_installed() -> None:
    """Install the Debian packages if a binary is missing (root only), else RgwUnavailable."""
    missing = missing_binaries()
    if not missing:
        return
    need = f"{', '.join(missing)} missing (Debian packages: {' '.join(PACKAGES)})"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RgwUnavailable(
            f"Ceph RGW unavailable: {need}; installing them needs root and apt-get:"
            f" apt-get install -y --no-install-recommends {' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RgwUnavailable(f"Ceph RGW unavailable: {need}; {' '.join(cmd)} timed out"
                                 ) from exc
        if done.returncode != 0:
            raise RgwUnavailable(f"Ceph RGW unavailable: {need}; {' '.join(cmd)} failed:"
                                 f" {(done.stderr or done.stdout).strip()[-500:]}")
    if missing_binaries():
        raise RgwUnavailable(f"Ceph RGW unavailable: {', '.join(missing_binaries())} still"
                             f" missing after apt-get install {' '.join(PACKAGES)}")


@dataclass
class RgwServer(S3Endpoint):
    """A running single-node Ceph cluster serving S3; `endpoint` is its URL."""

    workdir: Path
    endpoint: str
    pids: list[int]
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    @classmethod
    def start(cls, workdir: str | os.PathLike[str] | None = None) -> RgwServer:
        """Start the cluster in a fresh private directory and wait until S3 answers."""
        ensure_installed()
        parent = Path(workdir) if workdir is not None else Path(
            tempfile.mkdtemp(prefix="txnlog-rgw-"))
        base = parent / "ceph"  # ceph_s3.sh wipes and owns this directory
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CEPH_"))}
        env.update(S3_ACCESS_KEY=ACCESS_KEY, S3_SECRET_KEY=SECRET_KEY)
        try:
            done = subprocess.run(["bash", str(SCRIPT), "start", str(base)], env=env,
                                  capture_output=True, text=True, timeout=START_TIMEOUT_S,
                                  check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            subprocess.run(["bash", str(SCRIPT), "stop", str(base)], env=env,
                           capture_output=True, timeout=60, check=False)
            raise S3ServerError(f"ceph_s3.sh start timed out after {START_TIMEOUT_S:.0f}s"
                                ) from exc
        if done.returncode != 0:
            raise S3ServerError(f"ceph_s3.sh start failed ({done.returncode}):\n"
                                f"{done.stderr[-4000:]}")
        out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        pids = [int(p) for p in out.get("CEPH_S3_PIDS", "").strip('"').split()]
        return cls(base, out["S3_ENDPOINT"], pids)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.workdir / "log" / "client.rgw.a.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, remove: bool = True) -> None:
        """Stop the daemons by their PIDs (ceph_s3.sh stop) and remove the cluster's files."""
        # memstore: nothing to keep, so no 4-5 s wait for radosgw's clean exit
        env = dict(os.environ, KEEP_DIR="0" if remove else "1", CEPH_S3_STOP_WAIT="0.5")
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.workdir)], env=env,
                       capture_output=True, timeout=120, check=False,
                       stdin=subprocess.DEVNULL)

