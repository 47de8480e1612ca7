"""Several hosts: a Spark standalone cluster whose workers live in network
namespaces of their own, and a coordinator in a third, reachable only at its advertised
address and only with the token.

Made by the test, removed after (``tests/netns.py``): a bridge with 169.254.<n>.1 (the
test, the Spark master, the driver), and namespaces ``w1``, ``w2`` (one Spark worker each,
started with pyspark's ``spark-class``) and ``c`` (``txnlog coordinator --host <its address>
--advertised-url ... --token-file ...``). The driver (cluster_driver.py, its own process)
gets the token from its environment and no ``coordinator`` option; executors get neither,
so the endpoint and the token must travel with the job. While tasks write, the test
SIGKILLs the executor in ``w1`` (batch write) and then the one in ``w2`` (exactly-once
stream). Then: every row once, the stream's output exactly once and in order, and the
coordinator epoch never moved (executors that cannot reach a 127.0.0.1 coordinator must
not start their own: that took epochs 0, 1, 2 in three commits).

Where namespaces are unavailable the test says so and runs ``local-cluster[2,1,1024]``
with the coordinator on 127.0.0.1 instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.dirname(__file__))

from netns import Hosts, namespaces_available
from stream_helpers import check_exactly_once, free_port
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = Path(__file__).with_name("cluster_driver.py")
TOKEN = "multi-host-7c1e0f3b2a"
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parent_of(pid)
    return False


def executor_pids(within: list[int]) -> list[int]:
    return [p for p in within if EXECUTOR_CLASS in cmdline(p)]


class Cluster:
    """The processes of one test, each in its own session, stopped by their ids."""

    def __init__(self, tmp: Path, hosts: Hosts | None) -> None:
        self.tmp, self.hosts = tmp, hosts
        self.procs: list[subprocess.Popen] = []
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYSPARK_", "SPARK_", "TXNLOG_COORDINATOR"))}
        self.env["PYSPARK_PYTHON"] = sys.executable
        self.env["PATH"] = f"{os.path.dirname(sys.executable)}:{self.env.get('PATH', '')}"

    def start(self, name: str, args: list[str], host: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        prefix = self.hosts.exec_prefix(host) if (self.hosts and host) else []
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        proc = subprocess.Popen([*prefix, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**self.env, **(env or {})},
                                start_new_session=True, cwd=self.tmp)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_log(self, name: str, text: str, count: int = 1, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while self.log(name).count(text) < count:
            assert time.monotonic() < deadline, f"{name}: no {text!r}:\n{self.log(name)[-3000:]}"
            time.sleep(0.3)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self.hosts is not None:  # anything left inside the test's own namespaces
            for host in self.hosts.hosts:
                for pid in self.hosts.pids_in(host):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def hosts() -> Iterator[Hosts | None]:
    why = namespaces_available()
    if why is not None:
        print(f"network namespaces unavailable ({why}): running local-cluster instead")
        yield None
        return
    # 169.254.100-159.x: never 169.254.169.x, where clouds serve instance metadata
    made = Hosts(f"tx{os.getpid() % 1000}", 100 + os.getpid() % 60).create(["w1", "w2", "c"])
    try:
        yield made
    finally:
        made.remove()


def wait_markers(work: Path, phase: str, n: int, driver: subprocess.Popen,
                 timeout: float = 300) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(p.name for p in work.iterdir() if p.name.startswith(f"{phase}-"))
        if len(found) >= n:
            return found
        assert driver.poll() is None, "the driver ended before its tasks started"
        assert time.monotonic() < deadline, f"no {phase} tasks started"
        time.sleep(0.2)


def kill_executor(hosts: Hosts | None, host: str, driver: subprocess.Popen) -> list[int]:
    """SIGKILL the executor JVM(s) running in ``host`` (without namespaces: one of the
    local-cluster's, which are the driver's descendants — never anyone else's)."""
    deadline = time.monotonic() + 60
    while True:
        if hosts is not None:
            pids = executor_pids(hosts.pids_in(host))
        else:
            mine = [int(p) for p in os.listdir("/proc") if p.isdigit()]
            pids = [p for p in executor_pids(mine) if descends_from(p, driver.pid)][:1]
        if pids:
            break
        assert time.monotonic() < deadline, f"no executor in {host}"
        time.sleep(0.2)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def healthz(endpoint: str) -> dict:
    with urllib.request.urlopen(f"{endpoint}/healthz", timeout=10) as r:
        return json.loads(r.read())


def test_cluster_of_hosts_exactly_once_and_the_epoch_never_moves(
        hosts: Hosts | None, tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    work = tmp_path / "markers"
    work.mkdir()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    cluster = Cluster(tmp_path, hosts)
    try:
        port = free_port()
        if hosts is not None:
            bind = hosts.hosts["c"]
            master_url = f"spark://{hosts.gateway}:{free_port()}"
        else:
            bind, master_url = "127.0.0.1", "local-cluster[2,1,1024]"
        endpoint = f"http://{bind}:{port}"
        coord = cluster.start("coordinator", [
            sys.executable, "-m", "txnlog.coordinator.cli", "coordinator", "--root", root,
            "--host", bind, "--port", str(port), "--advertised-url", endpoint,
            "--token-file", str(token_file)], host="c")
        cluster.wait_log("coordinator", "serving")
        first = healthz(endpoint)
        # reachable only at its advertised address, and only with the token
        req = urllib.request.Request(f"{endpoint}/v1/list_topics", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401
        if hosts is not None:
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=3).close()

        if hosts is not None:
            gw, master_port = hosts.gateway, master_url.rsplit(":", 1)[1]
            cluster.start("master", [spark_class(), "org.apache.spark.deploy.master.Master",
                                     "--host", gw, "--port", master_port,
                                     "--webui-port", str(free_port())],
                          env={"SPARK_LOCAL_IP": gw})
            cluster.wait_log("master", "I have been elected leader")
            for w in ("w1", "w2"):
                addr = hosts.hosts[w]
                (tmp_path / w).mkdir()
                cluster.start(w, [spark_class(), "org.apache.spark.deploy.worker.Worker",
                                  "--host", addr, "--cores", "1", "--memory", "1g",
                                  "--webui-port", "18081", "--work-dir", str(tmp_path / w),
                                  master_url], host=w,
                              env={"SPARK_LOCAL_IP": addr,
                                   "SPARK_LOCAL_DIRS": str(tmp_path / w)})
            cluster.wait_log("master", "Registering worker", count=2)
        driver = cluster.start("driver", [sys.executable, str(DRIVER), master_url,
                                          hosts.gateway if hosts else "", root,
                                          str(tmp_path / "ckpt"), str(work)],
                               env={"TXNLOG_COORDINATOR_TOKEN": TOKEN,
                                    **({"SPARK_LOCAL_IP": hosts.gateway} if hosts else {})})
        wait_markers(work, "batch", 2, driver)
        time.sleep(1.5)  # the tasks have written some batches (flushBytes=1)
        killed_batch = kill_executor(hosts, "w1", driver)
        wait_markers(work, "stream", 2, driver)
        time.sleep(1.5)
        killed_stream = kill_executor(hosts, "w2", driver)
        assert driver.wait(900) == 0, cluster.log("driver")[-6000:]
        out = cluster.log("driver")
        assert f"OK resolved {endpoint}" in out
        assert "OK batch_read 4000" in out and "OK stream" in out, out[-3000:]
        assert killed_batch and killed_stream

        expected = eval((work / "expected.txt").read_text())  # a dict repr we wrote
        assert check_exactly_once(root, "out", expected) == sum(expected.values())
        # the killed executors' tasks ran again (a second attempt or another executor)
        markers = sorted(p.name for p in work.iterdir())
        assert len([m for m in markers if m.startswith("batch-")]) > 4, markers
        # one coordinator, one epoch, from the first commit to the last
        last = healthz(endpoint)
        assert (last["epoch"], last["pid"]) == (first["epoch"], first["pid"])
        info = json.loads(Storage.for_url(root).get(layout.COORDINATOR_FILE))
        assert (info["endpoint"], info["epoch"]) == (endpoint, first["epoch"])
        assert coord.poll() is None
        assert cluster.log("coordinator").count("serving") == 1
        assert TOKEN not in cluster.log("coordinator")
    finally:
        cluster.stop()
