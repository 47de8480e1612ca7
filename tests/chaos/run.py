"""The chaos harness: workload + faults + final read + checker, one fault class at a time.

    python -m tests.chaos.run --profile short --backend file,s3 --faults all
    python -m tests.chaos.run --profile long --backend s3 --faults coordinator-kill,mixed

Each (fault class, backend) scenario: a fresh root, a real coordinator process, producer
and consumer processes (chaos/workload.py) writing a history, a nemesis thread injecting
the fault, then healing (every process resumed, a coordinator running, storage back), a
wait until every partition's LSO reaches its HW (open transactions time out), a final read
of everything, and the checker (chaos/checker.py). Results go to ``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parents[1]
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from coordinator_proc import CoordinatorProc  # noqa: E402
from rgw_server import RgwServer  # noqa: E402
from s3_server import S3Server  # noqa: E402
from txnlog.coordinator.client.coordinator_client import CoordinatorClient  # noqa: E402
from txnlog.coordinator.errors import InvalidProducerIdMappingError  # noqa: E402
from txnlog.log_format.storage import Storage  # noqa: E402

from . import checker, workload  # noqa: E402
from . import retention as chaos_retention  # noqa: E402
from .acls import TOKEN_ENV, ChaosAccess  # noqa: E402
from .gateway_faults import GATEWAY_FAULTS, GatewaySide  # noqa: E402
from .history import HistoryWriter, read_history  # noqa: E402
from .intruder import STOP_FILE as INTRUDER_STOP  # noqa: E402
from .spark_workload import OUT_PARTITIONS, OUT_TOPIC  # noqa: E402

BUCKET = "txnlog-chaos"
# Spark classes: a Spark driver (batch writes, batch reads, a stream) beside the producers.
# spark-coordinator-kill: the coordinator killed while Spark writes (a stream's micro-batch
# whose lazy records die with it is redone by its driver from the tasks' objects)
SPARK_FAULTS = ("spark-driver-kill", "spark-driver-pause", "spark-worker-kill",
                "spark-coordinator-kill")
FILE_FAULTS = ("none", "coordinator-kill", "coordinator-pause", "coordinator-faultpoints",
               "zombie", "two-coordinators", "client-kill", "writer-kill-mid-flush",
               "disk-full", "mixed",
               *SPARK_FAULTS, *GATEWAY_FAULTS)
S3_FAULTS = ("none", "coordinator-kill", "coordinator-pause", "coordinator-faultpoints",
             "zombie", "two-coordinators", "client-kill", "writer-kill-mid-flush", "s3-pause",
             "s3-restart", "s3-proxy", "merge-worker", "mixed", *SPARK_FAULTS, *GATEWAY_FAULTS)
# Ceph RGW (tests/rgw_server.py), the second S3 implementation, where deletes, listings and
# conditional writes matter: the S3 classes but those that stop or restart SeaweedFS's own
# process (s3-pause, s3-restart); s3-proxy's faults stand in front of either
RGW_FAULTS = tuple(f for f in S3_FAULTS if f not in ("s3-pause", "s3-restart"))
# writer-kill-mid-flush: per flush, the chance a producer dies between put and confirm
KILL_AFTER_PUT_P = 0.04
MIXABLE = ("coordinator-kill", "coordinator-pause", "coordinator-faultpoints", "zombie",
           "two-coordinators", "client-kill", "disk-full", "s3-pause", "s3-restart",
           "s3-proxy", "merge-worker")
FAULT_POINTS = ("before_prepare", "after_prepare", "after_marker",
                "after_complete_before_reply", "mid_snapshot", "after_reserve", "before_confirm",
                "after_log_write", "after_merge_plan", "after_merge_output",
                "after_merge_manifest")

# Merging and cleanup run all the time: a run of 4 small objects below the LSO,
# 3 runs make the next level, partitions looked at every 0.1 s; segments close at 2 KiB
# (every ~15 commits to a partition) and merged-away objects are deleted 2 s later (the
# least file.delete.delay.ms allowed), so merges, segment closes, manifests and deletions
# happen many times a second, under every fault class.
MERGE_ARGS = ["--merge-min-objects", "4", "--merge-fanout", "3", "--merge-interval-s", "0.1",
              # a stopped merge worker (merge-worker faults) is replaced after this long
              "--merge-worker-timeout-s", "15"]
TOPIC_CONFIG = {"segment.bytes": 2048, "file.delete.delay.ms": 2000}
# Compacted topics (``--compact`` or TXNLOG_CHAOS_COMPACT=1): the same workload with 64 keys
# per partition (workload.key_space) into topics the log cleaner compacts whenever a tenth of
# their closed segments is dirty, with the compaction fault points armed too, checked by a
# checker that lets only superseded values vanish (chaos/compaction.py).
COMPACT_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
                  "delete.retention.ms": "1000"}
COMPACT_FAULT_POINTS = ("after_compact_plan", "after_compact_output", "after_compact_manifest")


def compacting() -> bool:
    return os.environ.get("TXNLOG_CHAOS_COMPACT") == "1"


def topic_config() -> dict[str, Any]:
    return {**TOPIC_CONFIG, **COMPACT_CONFIG} if compacting() else TOPIC_CONFIG


@dataclass
class Profile:
    producers: int
    txns_per_producer: int
    duration: float  # seconds of workload (each producer stops at its txn count or this)
    consumers: int = 1
    spark_duration: float = 45.0  # Spark classes run at least this long (JVM start ~15 s)
    # consumers end once every writer is done instead of at the duration: a long run whose
    # producers reach their transaction count early does not idle (the short profile, whose
    # self-checks of planted bugs rely on its reads to the end, reads to its duration)
    stop_readers_when_done: bool = False


# One-shot ids (a batch write's own) are dropped this long after their transaction ended:
# short, so drops happen during the faults; ONE_SHOT_P of the producers' transactions run
# under such an id and retry their EndTxn 0-2 retention periods later (checker: early-drop,
# retry-changed).
ONE_SHOT_RETENTION_MS = 1500
ONE_SHOT_P = 0.3

# Committed transactions that leave every partition enough objects to merge: a run that
# committed fewer (a 10 s short run on a loaded machine can commit 3) has nothing to merge,
# and that says nothing about merging; one that committed more and merged nothing is an error
MERGEABLE = 20

# Garbage is deleted by the coordinator's cleanup pass (every merge interval) once due: the
# check for objects missing from storage waits this long after the newest manifest's grace
# period, so what that manifest's predecessors named is gone (coalescing may move it ~1 s)
GARBAGE_MARGIN_MS = 2000

PROFILES = {
    "short": Profile(producers=3, txns_per_producer=40, duration=12.0),
    "long": Profile(producers=4, txns_per_producer=300, duration=240.0, consumers=2,
                    stop_readers_when_done=True),
}


@dataclass
class Outcome:
    fault: str
    backend: str
    txns: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    records: int = 0
    committed_records: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    torn_above_lso: int = 0  # torn transactions with the known LSO signature (see checker)
    spark_jobs: dict[str, int] = field(default_factory=dict)  # Spark write jobs by status
    stream_records: int = 0  # output records of the stream checked exactly-once
    one_shot_retries: int = 0  # retried EndTxns of one-shot ids (checker: early-drop)
    one_shot_retries_same: int = 0  # ... answered as the first time (the rest: unknown id)
    aborted_copies: int = 0  # values read in aborted data of another producer (checker)
    one_shot_dropped: int = 0  # one-shot ids the coordinators dropped (their logs)
    intruder_attempts: int = 0  # --acls: the intruder's write attempts (checker)
    intruder_refused: int = 0  # ... refused with an authorization error (the rest: unknown)
    merges: int = 0  # manifests published (the newest one's seq, summed over partitions)
    segments: int = 0  # closed Kafka segments (level 0) named by the newest manifests
    compacted: int = 0  # of which compacted by the log cleaner (compacted topics)
    runs: int = 0  # runs of open segments named by the newest manifests
    merged_share: float = 0.0  # of the offsets below the final LSOs: below the merged end
    deleted: int = 0  # small and shared objects the storage watcher saw gone at the end
    late_writes: int = 0  # zombie put-if-absents that landed in a freed (merged, deleted) name
    late_writes_tried: int = 0  # zombies resumed once their reserved names were freed
    held_scans: int = 0  # slow readers holding a listing (workload.held_scan_op)
    held_gone: int = 0  # objects deleted under them (each made the reader list again)
    deleted_by_retention: int = 0  # committed records below the final log start (--retention)
    delete_records: int = 0  # DeleteRecords that moved a log start (--retention)
    faults_injected: int = 0
    coordinators: int = 0  # coordinator processes started (each after the first replaced one)
    bugs: list[str] = field(default_factory=list)  # errors no fault explains (workload.BUG)
    seconds: float = 0.0
    history: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.anomalies and self.error is None


# ====================================================================== processes
def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _killpg(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Signal a worker's whole process group (a Spark driver: Python, JVM, Python workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _cmdline(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                .decode(errors="replace"))
    except OSError:
        return ""


def spark_processes(driver_pid: int) -> tuple[int | None, list[int], list[int]]:
    """(JVM, pyspark daemons, forked Python workers) under one Spark driver process."""
    kids = _children()
    jvm = next((k for k in kids.get(driver_pid, []) if "java" in _cmdline(k)), None)
    daemons: list[int] = []
    workers: list[int] = []
    todo = list(kids.get(jvm, [])) if jvm else []
    while todo:
        pid = todo.pop()
        cmd = _cmdline(pid)
        if "pyspark" in cmd:
            parent_is_daemon = any(pid in kids.get(d, []) for d in daemons)
            (workers if parent_is_daemon or "pyspark.daemon" not in cmd else daemons).append(pid)
        todo.extend(kids.get(pid, []))
    return jvm, daemons, workers


def _txn_open(client: CoordinatorClient, tid: str) -> bool:
    try:
        state = client.describe_txn(tid).get("state")
    except InvalidProducerIdMappingError:
        return False  # never initialized (a Spark driver killed before its first job)
    return state in ("Ongoing", "PrepareCommit", "PrepareAbort")


def _is_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


class Scenario:
    """One fault class on one backend; every process it starts is stopped in `cleanup`."""

    def __init__(self, fault: str, backend: str, profile: Profile, out: Path, seed: int,
                 s3: S3Server | RgwServer | None = None, unsafe: str = "", retention: bool = False,
                 acls: bool = False) -> None:
        self.fault = fault
        self.retention = retention  # retention.bytes + DeleteRecords (chaos/retention.py)
        self.backend = backend
        self.profile = profile
        self.seed = seed
        self.rng = random.Random(seed)
        self.s3 = s3
        self.unsafe = unsafe
        self.dir = out / f"{fault}-{backend}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.hist_dir = self.dir / "history"
        self.hist_dir.mkdir(parents=True)
        self.hist = HistoryWriter(self.hist_dir / "nemesis.jsonl", "nemesis")
        self.coords: list[CoordinatorProc] = []
        self.armed: dict[int, str | None] = {}  # coordinator pid -> its TXNLOG_FAULTS
        self.workers: list[subprocess.Popen[bytes]] = []
        self.producers: dict[int, subprocess.Popen[bytes]] = {}
        self.next_worker = 0
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_endpoint: str | None = None
        self.mount: Path | None = None
        self.tmpfs_mb = 0
        self.filler: Path | None = None
        self.stop_nemesis = threading.Event()
        self.seen_small: set[str] = set()  # small objects the storage watcher saw
        self.freed_waits: list[bool] = []  # per late-write zombie: was its name freed
        self.lock = threading.RLock()
        self.injected = 0
        self.env_extra: dict[str, str] = {}
        self.spark = fault.startswith("spark-")
        if self.spark and profile.duration < profile.spark_duration:
            self.profile = replace(profile, duration=profile.spark_duration)
        self.spark_drivers: dict[int, subprocess.Popen[bytes]] = {}
        self.ctl = self.dir / "spark-ctl"
        self.ctl.mkdir()
        if unsafe:
            self.env_extra["TXNLOG_UNSAFE"] = unsafe
        self.root = self._make_root()
        # --acls: coordinators with --principals, a principal per worker (chaos/acls.py);
        # the harness itself (and gateways, Spark drivers) hold the shared token
        self.access = ChaosAccess(self.root, self.dir, f"{fault}{seed}") if acls else None
        self.saved_token = os.environ.get(TOKEN_ENV)
        if self.access is not None:
            os.environ[TOKEN_ENV] = self.access.shared
        self.intruder: subprocess.Popen[bytes] | None = None
        # Kafka clients through a gateway instead of the harness's producers
        self.gateway = GatewaySide(self) if fault in GATEWAY_FAULTS else None

    # ---- storage ------------------------------------------------------------------
    def _make_root(self) -> str:
        if self.backend == "file":
            path = self.dir / "root"
            if self.fault in ("disk-full", "mixed"):
                path = self._mount_tmpfs(path)
            path.mkdir(parents=True, exist_ok=True)
            return path.as_uri()
        assert self.s3 is not None
        self.env_extra.update(self.s3.env())
        if self.fault in ("s3-proxy", "mixed"):
            self._start_proxy()
            self.env_extra["AWS_ENDPOINT_URL"] = self.proxy_endpoint  # type: ignore[assignment]
        os.environ.update(self.env_extra)
        Storage.clear_cache()
        return f"s3://{BUCKET}/{self.fault}-{uuid.uuid4().hex[:8]}"

    def _mount_tmpfs(self, path: Path) -> Path:
        """A small tmpfs, so the disk can really fill up (needs root; else a plain dir).

        Sized for the profile: every object takes at least a 4 KiB page there, and a long
        run writes ~10,000 of them (~40 MiB), which alone would fill 48 MiB for good.
        """
        path.mkdir(parents=True, exist_ok=True)
        p = self.profile
        self.tmpfs_mb = 48 if p.producers * p.txns_per_producer <= 400 else 256
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_mb}m", "tmpfs",
                            str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.note("no-mount", error=r.stderr.strip())
            return path
        self.mount = path
        return path

    def _start_proxy(self) -> None:
        assert self.s3 is not None
        port_file = self.dir / "proxy.port"
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "chaos.proxy", "--upstream", self.s3.endpoint,
             "--port-file", str(port_file), "--seed", str(self.seed)],
            env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "proxy.log", "wb"), start_new_session=True)  # noqa: SIM115
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if time.monotonic() > deadline or self.proxy.poll() is not None:
                raise RuntimeError("the chaos proxy did not start")
            time.sleep(0.05)
        port = json.loads(port_file.read_text())["port"]
        self.proxy_endpoint = f"http://127.0.0.1:{port}"

    def note(self, what: str, **kw: Any) -> None:
        self.hist.write("info", what=what, **kw)

    # ---- coordinator ----------------------------------------------------------------
    def start_coordinator(self, faults: str | None = None) -> CoordinatorProc:
        saved = {k: os.environ.get(k) for k in self.env_extra}
        os.environ.update(self.env_extra)
        try:
            n = len(self.coords)
            c = CoordinatorProc(self.root, faults=faults, log_path=self.dir / f"coord-{n}.log",
                                extra=["--log-level", "INFO", "--heartbeat-ms", "1000",
                                       "--one-shot-id-retention-ms",
                                       str(ONE_SHOT_RETENTION_MS), *MERGE_ARGS,
                                       *chaos_retention.COORDINATOR_ARGS,
                                       *(self.access.coordinator_args()
                                         if self.access is not None else [])])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        with self.lock:
            self.coords.append(c)
            self.armed[c.pid] = faults
        self.note("coordinator-start", pid=c.pid, faults=faults)
        return c

    def live_coordinators(self) -> list[CoordinatorProc]:
        return [c for c in self.coords if c.proc.poll() is None]

    def ensure_coordinator(self, timeout: float = 60.0) -> str:
        """A healthy registered coordinator (restarting one if none is alive)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.live_coordinators()
            for c in live:
                _signal(c.pid, signal.SIGCONT)
            if not live:
                c = self.start_coordinator()
                with contextlib.suppress(Exception):
                    return c.wait_healthy(min(30.0, max(1.0, deadline - time.monotonic())))
                continue
            with contextlib.suppress(Exception):
                return workload.discover(self.root, timeout=5.0)
        raise TimeoutError("no healthy coordinator")

    # ---- workers ---------------------------------------------------------------------
    def start_producer(self, zombie_p: float = 0.0, txns: int | None = None,
                       duration: float | None = None) -> int:
        w = self.next_worker
        self.next_worker += 1
        p = self.profile
        args = [sys.executable, "-m", "chaos.workload", "producer", "--root", self.root,
                "--history", str(self.hist_dir), "--worker", str(w), "--run",
                f"{self.fault}{self.seed}", "--seed", str(self.seed),
                "--txns", str(txns or p.txns_per_producer),
                "--duration", str(duration or p.duration), "--zombie-p", str(zombie_p),
                "--one-shot-p", str(ONE_SHOT_P),
                "--one-shot-retention-ms", str(ONE_SHOT_RETENTION_MS),
                "--kill-after-put-p",
                str(KILL_AFTER_PUT_P if self.fault == "writer-kill-mid-flush" else 0.0)]
        env = _env(self.env_extra)
        if self.access is not None:  # its own principal, exactly its transactional ids
            env.update(self.access.producer_env(w))
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=open(self.dir / f"w{w}.log", "wb"),  # noqa: SIM115
                                start_new_session=True)
        with self.lock:
            self.workers.append(proc)
            self.producers[w] = proc
        return w

    def start_consumer(self, duration: float) -> None:
        w = self.next_worker
        self.next_worker += 1
        args = [sys.executable, "-m", "chaos.workload", "consumer", "--root", self.root,
                "--history", str(self.hist_dir), "--worker", str(w),
                "--duration", str(duration)]
        env = _env(self.env_extra)
        if self.access is not None:
            env.pop(TOKEN_ENV, None)  # storage readers: no coordinator call, so no token
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=open(self.dir / f"c{w}.log", "wb"),  # noqa: SIM115
                                start_new_session=True)
        with self.lock:
            self.workers.append(proc)

    def start_intruder(self, duration: float, victims: int) -> None:
        """The ``--acls`` intruder (chaos/intruder.py): writes it must be refused, all run."""
        assert self.access is not None
        w = self.next_worker
        self.next_worker += 1
        args = [sys.executable, "-m", "chaos.intruder", "--root", self.root,
                "--history", str(self.hist_dir), "--worker", str(w), "--run",
                f"{self.fault}{self.seed}", "--seed", str(self.seed), "--victims",
                str(victims), "--duration", str(duration)]
        env = {**_env(self.env_extra), **self.access.intruder_env(w)}
        log = open(self.dir / f"x{w}.log", "wb")  # noqa: SIM115
        self.intruder = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=True)
        with self.lock:
            self.workers.append(self.intruder)
        self.intruder_tid = self.access.intruder_tid(w)
        self.note("intruder-start", worker=w, pid=self.intruder.pid)

    def spark_jobs_running(self) -> bool:
        return any(not (self.ctl / f"done-{w}").exists() for w, _ in self.live_spark())

    def producers_running(self) -> bool:
        return any(p.poll() is None for p in self.producers.values())

    # ---- faults ------------------------------------------------------------------------
    def nemesis(self) -> None:
        """Inject this scenario's fault class until told to stop (every wait is bounded)."""
        kinds = [self.fault] if self.fault != "mixed" else [
            f for f in MIXABLE if self._applies(f)]
        faults: dict[str, Callable[[], None]] = {
            "coordinator-kill": self.f_coordinator_kill,
            "coordinator-pause": self.f_coordinator_pause,
            "coordinator-faultpoints": self.f_faultpoints,
            "zombie": self.f_zombie,
            "two-coordinators": self.f_two_coordinators,
            "client-kill": self.f_client_kill,
            "writer-kill-mid-flush": self.f_writer_kill_mid_flush,
            "disk-full": self.f_disk_full,
            "s3-pause": self.f_s3_pause,
            "s3-restart": self.f_s3_restart,
            "s3-proxy": self.f_s3_proxy,
            "spark-driver-kill": self.f_spark_driver_kill,
            "spark-coordinator-kill": self.f_coordinator_kill,
            "spark-driver-pause": self.f_spark_driver_pause,
            "spark-worker-kill": self.f_spark_worker_kill,
            "merge-worker": self.f_merge_worker,
            **(self.gateway.faults() if self.gateway is not None else {}),
        }
        while not self.stop_nemesis.wait(self.rng.uniform(1.5, 4.0)):
            self.resume_zombies()
            self.supervise()
            self.supervise_spark()
            kind = self.rng.choice(kinds)
            if kind in faults:
                try:
                    if faults[kind]() is not False:  # False: nothing to hit yet
                        self.injected += 1
                except Exception as exc:
                    self.note("nemesis-error", kind=kind, error=repr(exc))

    def _applies(self, kind: str) -> bool:
        if kind == "disk-full":
            return self.mount is not None
        if kind == "merge-worker":
            return self.backend != "file"
        if kind == "s3-proxy":
            return self.proxy is not None
        if kind.startswith("s3-"):  # they signal SeaweedFS's process
            return self.backend == "s3"
        return True

    def supervise(self) -> None:
        """Restart the coordinator when none is alive (fault points, fencing, exit 4)."""
        if not self.live_coordinators():
            faults = None
            if self.fault in ("coordinator-faultpoints", "mixed") and self.rng.random() < 0.7:
                points = (FAULT_POINTS + (COMPACT_FAULT_POINTS if compacting() else ())
                          + (chaos_retention.FAULT_POINTS if self.retention else ()))
                faults = f"{self.rng.choice(points)}:{self.rng.randint(1, 15)}"
            self.start_coordinator(faults)

    def _sleep(self, lo: float, hi: float) -> None:
        self.stop_nemesis.wait(self.rng.uniform(lo, hi))

    def f_coordinator_kill(self) -> None:
        for c in self.live_coordinators():
            self.note("kill-coordinator", pid=c.pid)
            c.kill()
        self._sleep(0.1, 0.8)
        self.supervise()
        # The next kill comes 1.5-4 s after the new one serves: under load a start takes
        # seconds, and kills faster than that starve the workload (50 transactions in 4 min).
        for c in self.live_coordinators()[-1:]:
            with contextlib.suppress(Exception):
                c.wait_healthy(60)

    def f_coordinator_pause(self) -> None:
        live = self.live_coordinators()
        if not live:
            return
        c = live[-1]
        self.note("pause-coordinator", pid=c.pid)
        _signal(c.pid, signal.SIGSTOP)
        try:
            self._sleep(0.3, 4.0)
        finally:
            _signal(c.pid, signal.SIGCONT)
            self.note("resume-coordinator", pid=c.pid)

    def f_faultpoints(self) -> bool:
        live = self.live_coordinators()
        if any(self.armed.get(c.pid) for c in live):
            return False  # an armed coordinator is alive: let the workload reach its point
        for c in live:  # one started unarmed (the first, or a restart's 30%): arm anew
            self.note("kill-unarmed-coordinator", pid=c.pid)
            c.kill()
        self.supervise()
        return True

    def f_zombie(self) -> None:
        pass  # the producers pause themselves (--zombie-p); resume_zombies() wakes them

    def resume_zombies(self) -> None:
        """Resume self-paused producers only after their transaction was aborted."""
        if self.fault not in ("zombie", "mixed"):
            return
        for w, p in list(self.producers.items()):
            if p.poll() is None and _is_stopped(p.pid):
                tid = f"chaos-{self.fault}{self.seed}-w{w}"
                self._sleep(0.2, 0.5)
                if self.rng.random() < 0.5:
                    self.fence_with_new_instance(tid)  # a newer instance fences it at once
                else:
                    self._sleep(3.5, 4.5)  # past transaction.timeout.ms: aborted by timeout
                self.wait_freed(w)
                self.note("resume-zombie", worker=w, pid=p.pid)
                _signal(p.pid, signal.SIGCONT)

    def wait_freed(self, w: int, timeout: float = 20.0) -> None:
        """A zombie stopped between reserve and put-if-absent (workload.arm_late_write):
        once its transaction is aborted, wait until the offsets it reserved were fenced,
        merged below the merged end and deleted, so its put-if-absent lands in a freed name
        (bounded: a coordinator down for long leaves the fences, and the put then fails)."""
        marker = self.hist_dir / f"zombie-w{w}.json"
        try:
            info = json.loads(marker.read_text())
            bases, txn = info["bases"], info["txn"]
        except (OSError, ValueError, KeyError):
            return
        storage = Storage.for_url(self.root)
        deadline = time.monotonic() + timeout
        freed = False
        while not freed and time.monotonic() < deadline and not self.stop_nemesis.is_set():
            with contextlib.suppress(Exception):
                freed = all(self._freed(storage, t, p, base) for t, p, base in bases)
            if not freed:
                self.stop_nemesis.wait(0.3)
        self.freed_waits.append(freed)
        self.note("late-write-zombie", worker=w, txn=txn, bases=bases, freed=freed)
        if freed:
            # Only an abort fences a transactional reservation, and the merged end passed
            # it only because an object (the fence) was there: the transaction is aborted
            # for good (its commit was never asked for), whatever its late abort is told.
            self.hist.write("abort", proc=f"w{w}", txn=txn, outcome="ok",
                            why="its reserved offsets were fenced, merged and deleted")

    @staticmethod
    def _freed(storage: Storage, topic: str, p: int, base: int) -> bool:
        from txnlog.log_format import layout
        from txnlog.log_format.manifest import read_latest_manifest

        man = read_latest_manifest(storage, topic, p)
        return man is not None and man.end_offset > base and \
            not storage.exists(layout.segment_path(topic, p, base))

    def watch_storage(self) -> None:
        """List every partition's small objects and the shared objects every 0.5 s (what
        was deleted by the end)."""
        from txnlog.log_format import layout

        storage = Storage.for_url(self.root)
        while not self.stop_watch.wait(0.5):
            for d in [layout.partition_dir(topic, p) for topic, p in workload.partitions()] \
                    + [layout.SHARED_DIR]:
                with contextlib.suppress(Exception):
                    for obj in storage.list(d):
                        if obj.name.endswith((layout.LOG_SUFFIX, layout.SHARED_SUFFIX)):
                            self.seen_small.add(f"{d}/{obj.name}")

    def wait_cleaned(self, timeout: float = 30.0) -> None:
        """After the final read: the grace period of the last merges passes and cleanup
        deletes what they merged away (no small object left below any merged end), so every
        run ends with its deletions done (bounded; a coordinator is restarted if none)."""
        from txnlog.log_format import layout
        from txnlog.log_format.manifest import read_latest_manifest

        storage = Storage.for_url(self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = 0
            with contextlib.suppress(Exception):
                self.ensure_coordinator(10)
                for topic, p in workload.partitions():
                    man = read_latest_manifest(storage, topic, p)
                    end = man.end_offset if man is not None else 0
                    for obj in storage.list(layout.partition_dir(topic, p)):
                        parsed = layout.parse_segment_name(obj.name)
                        left += parsed is not None and parsed.base_offset < end
                if not left:
                    return
            time.sleep(0.5)
        self.note("not-cleaned", left=left)

    def missing_named_objects(self, timeout: float = 30.0) -> list[str]:
        """Objects the partitions' latest manifests name that are not on storage: none may
        be (readers trust a manifest). Checked once what the manifests no longer name
        (closed segments dropped by retention, replaced by compaction, runs merged) is
        deleted: the closed segments below each manifest's first object are gone and the
        newest manifest's grace period is over, so a deletion that took a named object with
        them shows (bounded: the grace period is 2 s; a leftover after ``timeout`` is
        noted, not an error)."""
        from txnlog.log_format import layout
        from txnlog.log_format.manifest import read_latest_manifest

        storage = Storage.for_url(self.root)
        deadline = time.monotonic() + timeout
        due_ms = 0
        while True:
            missing: list[str] = []
            left = 0
            for topic, p in workload.partitions():
                man = read_latest_manifest(storage, topic, p)
                if man is None:
                    continue
                # what the manifest before it named goes once its grace period is over
                due_ms = max(due_ms, man.written_ms + man.grace_ms + GARBAGE_MARGIN_MS)
                first = man.objects[0].base_offset if man.objects else man.start_offset
                for obj in storage.list(layout.merged_dir(topic, p, 0)):
                    parsed = layout.parse_segment_name(obj.name)
                    left += parsed is not None and parsed.base_offset < first
                missing += [path for o in man.objects for path in o.paths(topic, p)
                            if not storage.exists(path)]
            if missing or (not left and time.time() * 1000 > due_ms):
                return missing
            if time.monotonic() > deadline:
                self.note("dropped-segments-left", left=left)
                return missing
            time.sleep(0.5)

    def merge_stats(self, out: Outcome, ops: list[dict[str, Any]]) -> None:
        """What merging and cleanup did in this run (from storage and the history)."""
        from txnlog.log_format import layout
        from txnlog.log_format.manifest import read_latest_manifest
        from txnlog.log_format.stable import read_latest_stable

        storage = Storage.for_url(self.root)
        snap = read_latest_stable(storage)
        merged = stable = 0
        for topic, p in workload.partitions():
            man = read_latest_manifest(storage, topic, p)
            lso = snap.lso(topic, p) if snap is not None else 0
            stable += lso
            if man is None:
                continue
            out.merges += man.seq
            out.segments += sum(1 for o in man.objects if o.level == 0)
            out.compacted += sum(1 for o in man.objects if o.gen)
            out.runs += sum(1 for o in man.objects if o.level > 0)
            merged += min(man.end_offset, lso)
        out.merged_share = round(merged / stable, 3) if stable else 0.0
        present: set[str] = set()
        for d in [layout.partition_dir(topic, p) for topic, p in workload.partitions()] \
                + [layout.SHARED_DIR]:
            present.update(f"{d}/{o.name}" for o in storage.list(d))
        out.deleted = len(self.seen_small - present)
        out.late_writes_tried = sum(self.freed_waits)
        freed = {op["txn"] for op in ops if op["f"] == "info"
                 and op.get("what") == "late-write-zombie" and op.get("freed")}
        for op in ops:
            if op["f"] == "info" and op.get("what") == "zombie-late-write" and \
                    op.get("landed") and op["txn"] in freed:
                out.late_writes += 1
            if op["f"] == "poll" and "hold_s" in op:
                out.held_scans += 1
                out.held_gone += op.get("gone", 0)

    def fence_with_new_instance(self, tid: str) -> None:
        with contextlib.suppress(Exception):
            endpoint = workload.discover(self.root, timeout=10)
            c = CoordinatorClient(endpoint, timeout=10, retry_for=5)
            pid, epoch = c.init_producer_id(tid, 3000)
            self.note("fence-zombie", tid=tid, producer_id=pid, epoch=epoch)

    def f_two_coordinators(self) -> None:
        live = self.live_coordinators()
        old = live[-1] if live else None
        paused = old is not None and self.rng.random() < 0.5
        if paused:
            _signal(old.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        new = self.start_coordinator()
        self.note("second-coordinator", old=old.pid if old else None, new=new.pid,
                  old_paused=paused)
        with contextlib.suppress(Exception):
            new.wait_healthy(20)
        if old is not None:
            _signal(old.pid, signal.SIGCONT)  # a stale coordinator wakes up: must be fenced
        self._sleep(1.0, 3.0)
        for c in self.live_coordinators()[:-1]:
            if self.rng.random() < 0.5:
                c.kill()

    def f_merge_worker(self) -> bool:
        """SIGKILL a coordinator's merge worker process (S3: merges run in one), or stop it
        for 0.5-30 s: past the coordinator's 15 s worker timeout it is killed and replaced
        by the coordinator itself, with the merge in hand retried."""
        if self.rng.random() < 0.7:
            return False  # one tick in three or four (~10 s apart): merges must finish
            # between faults, or merging never progresses and the run tests nothing
        pids = [w for c in self.live_coordinators() for w in c.merge_workers()]
        if not pids:
            return False  # no merge yet since the coordinator started
        pid = self.rng.choice(pids)
        if self.rng.random() < 0.5:
            self.note("kill-merge-worker", pid=pid)
            _signal(pid, signal.SIGKILL)
            return True
        self.note("pause-merge-worker", pid=pid)
        _signal(pid, signal.SIGSTOP)
        try:
            self._sleep(0.5, 30.0)
        finally:
            _signal(pid, signal.SIGCONT)
            self.note("resume-merge-worker", pid=pid)
        return True

    def f_client_kill(self) -> None:
        running = [w for w, p in self.producers.items() if p.poll() is None]
        if not running:
            return
        w = self.rng.choice(running)
        self.note("kill-producer", worker=w, pid=self.producers[w].pid)
        _signal(self.producers[w].pid, signal.SIGKILL)
        self.producers[w].wait(10)
        self.start_producer(duration=max(2.0, self.remaining()))

    def f_writer_kill_mid_flush(self) -> None:
        """Producers of this class SIGKILL themselves between a flush's put and its confirm
        (``--kill-after-put-p``); start a new one in place of each that died so."""
        for w, proc in list(self.producers.items()):
            if proc.poll() == -signal.SIGKILL:
                self.note("producer-killed-after-put", worker=w, pid=proc.pid)
                del self.producers[w]
                if self.remaining() > 2.0:
                    self.start_producer(duration=self.remaining())

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def f_disk_full(self) -> None:
        if self.mount is None:
            return
        filler = self.mount / "zz-filler"
        self.note("disk-full")
        with contextlib.suppress(OSError), open(filler, "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(self.tmpfs_mb + 1):  # until ENOSPC
                f.write(chunk)
        self._sleep(0.5, 2.5)
        with contextlib.suppress(FileNotFoundError):
            filler.unlink()
        self.note("disk-freed")
        self.supervise()

    def f_s3_pause(self) -> None:
        assert isinstance(self.s3, S3Server)
        self.note("s3-pause")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.s3.process.pid, signal.SIGSTOP)
        try:
            self._sleep(0.5, 4.0)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.s3.process.pid, signal.SIGCONT)
            self.note("s3-resume")

    def f_s3_restart(self) -> None:
        assert isinstance(self.s3, S3Server)
        self.note("s3-kill")
        restart_s3(self.s3, down_s=self.rng.uniform(0.2, 2.0))
        self.note("s3-restarted")

    def f_s3_proxy(self) -> None:
        if self.proxy_endpoint is None:
            return
        from .proxy import set_faults

        cfg = {"p_delay": self.rng.uniform(0.05, 0.3), "p_503": self.rng.uniform(0.02, 0.15),
               "p_500": self.rng.uniform(0.01, 0.08), "max_delay": self.rng.uniform(0.1, 1.0)}
        set_faults(self.proxy_endpoint, **cfg)
        self.note("proxy-faults", **cfg)
        self._sleep(1.0, 4.0)
        set_faults(self.proxy_endpoint, off=1)
        self.note("proxy-calm")

    # ---- Spark ---------------------------------------------------------------------------
    def spark_tid(self) -> str:
        return f"chaos-{self.fault}{self.seed}-spark"

    def start_spark(self, drain: bool = False) -> int:
        """A Spark driver process (its own process group: Python, JVM, Python workers)."""
        w = self.next_worker
        self.next_worker += 1
        duration = max(5.0, self.remaining()) if not drain else 0.0
        args = [sys.executable, "-m", "chaos.spark_workload", "--root", self.root,
                "--history", str(self.hist_dir), "--worker", str(w), "--run",
                f"{self.fault}{self.seed}", "--seed", str(self.seed), "--duration",
                str(duration), "--checkpoint", str(self.dir / "stream-checkpoint"),
                "--ctl", str(self.ctl), "--stream"] + (["--drain"] if drain else [])
        proc = subprocess.Popen(args, env=_env(self.env_extra), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=open(self.dir / f"s{w}.log", "wb"),  # noqa: SIM115
                                start_new_session=True)
        with self.lock:
            self.spark_drivers[w] = proc
        self.note("spark-start", worker=w, pid=proc.pid, drain=drain)
        return w

    def live_spark(self) -> list[tuple[int, subprocess.Popen[bytes]]]:
        return [(w, p) for w, p in self.spark_drivers.items() if p.poll() is None]

    def supervise_spark(self) -> None:
        """Start a driver again (same checkpoint) when none runs and the workload goes on."""
        if self.spark and not self.live_spark() and self.remaining() > 20:
            self.start_spark()

    def spark_target(self) -> tuple[int, subprocess.Popen[bytes]] | None:
        """A driver that finished a job since it started (a kill during start-up proves
        little and starves the workload: a JVM start costs 10-30 s here), 0-10 s later."""
        for w, p in self.live_spark():
            progress = self.ctl / f"progress-{w}"
            if progress.exists() and not (self.ctl / f"done-{w}").exists() and \
                    time.time() - progress.stat().st_mtime < 30 and \
                    self.rng.random() < 0.5:
                return w, p
        return None

    def f_spark_driver_kill(self) -> bool:
        target = self.spark_target()
        if target is None:
            return False
        w, p = target
        jvm, _, _ = spark_processes(p.pid)
        victim = jvm if jvm is not None and self.rng.random() < 0.5 else p.pid
        self.note("kill-spark-driver", worker=w, pid=victim, jvm=victim == jvm)
        _signal(victim, signal.SIGKILL)
        self._sleep(0.3, 2.0)  # what is left of it may run on for a moment (zombie tasks)
        _killpg(p)
        p.wait(10)
        self.supervise_spark()
        return True

    def f_spark_driver_pause(self) -> bool:
        target = self.spark_target()
        if target is None:
            return False
        w, p = target
        jvm, _, _ = spark_processes(p.pid)
        whole = jvm is None or self.rng.random() < 0.5
        self.note("pause-spark-driver", worker=w, pid=p.pid, jvm=None if whole else jvm)
        if whole:
            _killpg(p, signal.SIGSTOP)
        else:
            _signal(jvm, signal.SIGSTOP)  # type: ignore[arg-type]
        try:
            self._sleep(0.5, 12.0)  # past the 10 s transaction timeout now and then
        finally:
            _killpg(p, signal.SIGCONT)
            self.note("resume-spark-driver", worker=w)
        return True

    def f_spark_worker_kill(self) -> bool:
        target = self.spark_target()
        if target is None:
            return False
        w, p = target
        _, daemons, workers = spark_processes(p.pid)
        pool = workers if workers and self.rng.random() < 0.8 else daemons + workers
        if not pool:
            return False
        victims = self.rng.sample(pool, min(len(pool), self.rng.randint(1, 2)))
        self.note("kill-spark-python-workers", worker=w, pids=victims,
                  cmds=[_cmdline(v)[-60:] for v in victims])
        for v in victims:
            _signal(v, signal.SIGKILL)
        return True

    def finish_spark(self) -> None:
        """After the final read: drain the stream from its checkpoint, read its output."""
        deadline = time.monotonic() + 900
        (self.ctl / "drain").write_text("1")
        drained = lambda: any(self.ctl.glob("drained-*"))  # noqa: E731
        attempts = 0
        while not drained() and time.monotonic() < deadline:
            live = self.live_spark()
            if live:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    live[0][1].wait(max(1.0, min(660.0, deadline - time.monotonic())))
                if live[0][1].poll() is None:
                    _killpg(live[0][1])
                    live[0][1].wait(10)
                continue
            if attempts >= 3:
                break
            attempts += 1
            self.start_spark(drain=True)
        if not drained():
            raise RuntimeError("the stream did not drain (see the s*.log files)")
        self.final_read(reread=False)
        reads: dict[str, list[list[Any]]] = {}
        from txnlog.log_format.consumer import Consumer

        c = Consumer(self.root, [OUT_TOPIC], isolation_level="read_committed")
        for tp, batch in c.iter_batches():
            rows = reads.setdefault(f"{tp.topic}-{tp.partition}", [])
            rows.extend([o, v.decode() if isinstance(v, bytes) else v]
                        for o, v in zip(batch.column("offset").to_pylist(),
                                        batch.column("value").to_pylist(), strict=True))
        with HistoryWriter(self.hist_dir / "final.jsonl", "final") as h:
            h.write("stream-final", topic=OUT_TOPIC, reads=reads)

    def heal(self) -> None:
        for p in [*self.workers, *self.spark_drivers.values()]:
            if p.poll() is None:
                _killpg(p, signal.SIGCONT)
        for c in self.coords:
            if c.proc.poll() is None:
                _signal(c.pid, signal.SIGCONT)
        if isinstance(self.s3, S3Server):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.s3.process.pid, signal.SIGCONT)
        if self.proxy_endpoint is not None:
            from .proxy import set_faults

            with contextlib.suppress(Exception):
                set_faults(self.proxy_endpoint, off=1)
        if self.mount is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.mount / "zz-filler").unlink()
        if self.gateway is not None:
            self.gateway.ensure()

    # ---- the run -----------------------------------------------------------------------
    def run(self) -> Outcome:
        t0 = time.monotonic()
        out = Outcome(self.fault, self.backend, history=str(self.hist_dir))
        try:
            self._run(out)
        except Exception as exc:
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.cleanup()
        out.seconds = round(time.monotonic() - t0, 1)
        out.faults_injected = self.injected
        out.coordinators = len(self.coords)
        return out

    def _run(self, out: Outcome) -> None:
        p = self.profile
        first = self.start_coordinator()
        endpoint = first.wait_healthy(60)
        client = CoordinatorClient(endpoint, timeout=30, retry_for=30)
        retention = chaos_retention.RETENTION_CONFIG if self.retention else {}
        for topic, n in workload.TOPICS.items():
            client.create_topic(topic, n, {**topic_config(), **retention}, exist_ok=True)
        if self.retention:
            threading.Thread(target=chaos_retention.delete_records_loop, daemon=True,
                             name="delete-records",
                             args=(self.root, self.note, self.stop_nemesis, self.seed)).start()
        if self.spark:
            client.create_topic(OUT_TOPIC, OUT_PARTITIONS, TOPIC_CONFIG, exist_ok=True)
        self.stop_watch = threading.Event()
        watcher = threading.Thread(target=self.watch_storage, name="watcher", daemon=True)
        watcher.start()
        self.deadline = time.monotonic() + p.duration
        if self.spark:
            self.start_spark()
        if self.gateway is not None:
            if self.fault == "gateway-kill-mid-flush":
                self.gateway.armed_start()
            else:
                self.gateway.start()
            self.gateway.start_workload()
        for _ in range(p.producers if self.gateway is None else 0):
            self.start_producer(zombie_p=0.15 if self.fault in ("zombie", "mixed") else 0.0)
        for _ in range(p.consumers):
            self.start_consumer(p.duration + 5)
        if self.access is not None:
            self.start_intruder(p.duration, victims=self.next_worker)
        nemesis = threading.Thread(target=self.nemesis, name="nemesis", daemon=True)
        if self.fault != "none":
            nemesis.start()
        # Producers stop at their transaction count or the duration; bounded wait.
        hard = time.monotonic() + p.duration + 60
        while (self.producers_running() or self.spark_jobs_running()) and \
                time.monotonic() < hard:
            time.sleep(0.2)
            if time.monotonic() > self.deadline + 5:
                self.stop_nemesis.set()
                self.heal()
        self.stop_nemesis.set()
        if self.intruder is not None:  # it tried all along the workload; the rest is reads
            (self.hist_dir / INTRUDER_STOP).write_text("1")
        if p.stop_readers_when_done:  # consumers end after one more round
            (self.hist_dir / workload.STOP_FILE).write_text("1")
        if nemesis.is_alive():
            nemesis.join(30)
        self.heal()
        for w in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.wait(max(0.1, hard - time.monotonic()))
            if w.poll() is None:
                self.note("worker-killed-at-end", pid=w.pid)
                _signal(w.pid, signal.SIGKILL)
                w.wait(10)
        self.wait_spark_jobs(hard + 120)
        self.final_read()
        if self.spark:
            self.finish_spark()
        self.wait_cleaned()
        missing = self.missing_named_objects()
        self.stop_watch.set()
        watcher.join(30)
        ops = list(read_history(self.hist_dir))
        self.merge_stats(out, ops)
        out.bugs = self.bugs(ops)
        res = checker.check(ops, compacted=compacting())
        (self.dir / "check.txt").write_text(res.summary() + "\n")
        out.anomalies = res.counts
        if not res.stats.get("committed"):
            out.error = "no transaction committed: the run proves nothing (see the worker logs)"
        out.examples = res.anomalies
        for k in ("txns", "committed", "aborted", "unknown", "records", "committed_records",
                  "torn_above_lso", "stream_records", "one_shot_retries",
                  "one_shot_retries_same", "aborted_copies", "intruder_attempts",
                  "intruder_refused"):
            setattr(out, k, res.stats.get(k, 0))
        if self.access is not None and not out.intruder_refused:
            out.error = "the intruder was never refused: the --acls run proves nothing"

        for log_file in self.dir.glob("coord-*.log"):
            out.one_shot_dropped += sum(
                int(n) for n in re.findall(r"dropping (\d+) one-shot",
                                           log_file.read_text(errors="replace")))
        for t in checker.build_txns(ops).values():
            if t.proc.startswith("s"):
                out.spark_jobs[t.status] = out.spark_jobs.get(t.status, 0) + 1
        if self.spark and not out.spark_jobs.get("committed"):
            out.error = "no Spark job committed: the Spark run proves nothing"
        if not out.merges and out.committed >= MERGEABLE:
            out.error = "nothing was merged: the run proves nothing about merging"
        if missing:
            out.error = (f"the latest manifests name {len(missing)} objects missing from "
                         f"storage, e.g. {missing[:2]}")
        if out.bugs:
            out.error = (f"{len(out.bugs)} errors no fault explains (a bug, not a fault), "
                         f"e.g. {out.bugs[0]}")
        if self.retention:
            out.deleted_by_retention = res.stats.get("deleted_by_retention", 0)
            out.delete_records = sum(1 for op in ops if op.get("what") == "delete-records")
            if not out.deleted_by_retention and out.committed >= 20:
                out.error = "retention deleted no committed record: the run proves nothing"

    def bugs(self, ops: list[dict[str, Any]]) -> list[str]:
        """Errors the workload recorded (or a worker died of) that are no fault's doing:
        a TypeError, an AttributeError... (``workload.BUG``). The workload records any
        exception it does not know as an unknown outcome, which the checker accepts; these
        fail the run instead."""
        out = [f"{op.get('proc')} {op['f']}: {text}" for op in ops
               for text in (op.get("error"), op.get("answer")) if workload.is_bug(text)]
        # the workers' logs (w<N>, c<N>), not the coordinators' (coord-<N>)
        for log_file in sorted([*self.dir.glob("w[0-9]*.log"), *self.dir.glob("c[0-9]*.log"),
                                *self.dir.glob("x[0-9]*.log")]):
            text = log_file.read_text(errors="replace")
            out += [f"{log_file.name}: {m.group(0)}"
                    for m in re.finditer(r"^.*\S.*$", text, re.MULTILINE)
                    if workload.BUG.match(m.group(0))]
        return out

    def wait_spark_jobs(self, until: float) -> None:
        """Every live driver's jobs are done (its last transaction decided) before the final
        read; a driver that does not get there in time is killed (its jobs stay unknown)."""
        while time.monotonic() < until:
            live = self.live_spark()
            if all((self.ctl / f"done-{w}").exists() for w, _ in live):
                return
            time.sleep(0.5)
        for w, p in self.live_spark():
            self.note("spark-killed-at-end", worker=w)
            _killpg(p)
            p.wait(10)

    def final_read(self, reread: bool = True) -> None:
        """Once every partition's LSO reached its HW, read everything (both levels)."""
        endpoint = self.ensure_coordinator()
        client = CoordinatorClient(endpoint, timeout=30, retry_for=30)
        deadline = time.monotonic() + 90
        while True:
            try:
                endpoint = self.ensure_coordinator(30)
                client = CoordinatorClient(endpoint, timeout=30, retry_for=30)
                snap = client.stable(publish=True)
                parts = snap["partitions"]
                if all(v["hw"] == v["lso"] for v in parts.values()) and \
                        not any(_txn_open(client, tid) for tid in self.txn_ids()):
                    break
            except Exception as exc:
                self.note("final-wait", error=repr(exc))
            if time.monotonic() > deadline:
                self.note("final-wait-timeout")
                break
            time.sleep(0.5)
        if not reread:
            return
        with HistoryWriter(self.hist_dir / "final.jsonl", "final") as h:
            for iso in ("read_committed", "read_uncommitted"):
                h.write("poll", mode="final", **workload.scan_op(
                    self.root, iso, producers=iso == "read_uncommitted"))

    def txn_ids(self) -> list[str]:
        ids = [f"chaos-{self.fault}{self.seed}-w{w}" for w in self.producers]
        if self.intruder is not None:
            ids.append(self.intruder_tid)
        return [*ids, self.spark_tid()] if self.spark else ids

    def cleanup(self) -> None:
        self.stop_nemesis.set()
        if getattr(self, "gateway", None) is not None:
            self.gateway.stop()  # type: ignore[union-attr]
        if hasattr(self, "stop_watch"):
            self.stop_watch.set()
        for p in self.spark_drivers.values():
            _killpg(p)
            _killpg(p, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        for w in self.workers:
            if w.poll() is None:
                _signal(w.pid, signal.SIGKILL)
                _signal(w.pid, signal.SIGCONT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.wait(10)
        for c in self.coords:
            with contextlib.suppress(Exception):
                _signal(c.pid, signal.SIGCONT)
                c.kill() if c.proc.poll() is None else None
                c.stop()
        if self.proxy is not None and self.proxy.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proxy.pid, signal.SIGKILL)
            self.proxy.wait(10)
        if isinstance(self.s3, S3Server):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.s3.process.pid, signal.SIGCONT)
        if self.mount is not None:
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)
        self.hist.close()
        for k in self.env_extra:
            os.environ.pop(k, None)
        if getattr(self, "access", None) is not None:
            if self.saved_token is None:
                os.environ.pop(TOKEN_ENV, None)
            else:
                os.environ[TOKEN_ENV] = self.saved_token
        if self.s3 is not None:
            os.environ.update(self.s3.env())
        Storage.clear_cache()


def restart_s3(server: S3Server, down_s: float = 0.5) -> None:
    """SIGKILL the S3 server and start it again on the same ports and data directory."""
    args, cwd = server.process.args, server.workdir
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(10)
    time.sleep(down_s)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(cwd)
    with open(server.log_path, "ab") as log:
        server.process = subprocess.Popen(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                          env=env, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
    server._wait_ready()


# ====================================================================== CLI
def run_all(faults: list[str], backends: list[str], profile: Profile, out: Path, seed: int,
            unsafe: str = "", log: Callable[[str], None] = print,
            retention: bool = False, acls: bool = False) -> list[Outcome]:
    from txnlog.log_format.arrow.warmup import warm_up

    warm_up()  # compile the codec once here, not in every worker inside the fault clock
    # Scenarios point AWS_* (and the token, TXNLOG_UNSAFE) at their own servers; a test
    # process that calls this goes on with other tests, whose session S3 server the
    # variables named before, so the environment is put back exactly as it was.
    saved_environ = dict(os.environ)
    try:
        return _run_backends(faults, backends, profile, out, seed, unsafe, log, retention,
                             acls)
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        Storage.clear_cache()


def _run_backends(faults: list[str], backends: list[str], profile: Profile, out: Path,
                  seed: int, unsafe: str, log: Callable[[str], None], retention: bool,
                  acls: bool) -> list[Outcome]:
    results: list[Outcome] = []
    for backend in backends:
        s3: S3Server | RgwServer | None = None
        try:
            if backend == "s3":
                s3 = S3Server.start(Path(tempfile.mkdtemp(prefix="txnlog-chaos-weed-")))
            elif backend == "rgw":
                s3 = RgwServer.start(Path(tempfile.mkdtemp(prefix="txnlog-chaos-rgw-")))
            elif backend != "file":
                raise ValueError(f"unknown backend {backend!r}: file, s3 or rgw")
            if s3 is not None:
                s3.create_bucket(BUCKET)
                os.environ.update(s3.env())
            allowed = {"file": FILE_FAULTS, "s3": S3_FAULTS, "rgw": RGW_FAULTS}[backend]
            for fault in faults:
                if fault not in allowed:
                    continue
                res = Scenario(fault, backend, profile, out, seed, s3, unsafe,
                               retention, acls).run()
                results.append(res)
                log(f"{fault:24s} {backend:4s} txns={res.txns} committed={res.committed} "
                    f"unknown={res.unknown} records={res.records} faults={res.faults_injected}"
                    f" merges={res.merges} segments={res.segments} deleted={res.deleted}"
                    f" compacted={res.compacted}"
                    f" merged={res.merged_share} late_writes={res.late_writes}/"
                    f"{res.late_writes_tried} held={res.held_scans}/gone={res.held_gone}"
                    + (f" intruder={res.intruder_refused}/{res.intruder_attempts} refused"
                       if acls else "")
                    + f" anomalies={res.anomalies or 0} error={res.error} {res.seconds}s")
        finally:
            if s3 is not None:
                s3.stop()
                for k in s3.env():
                    os.environ.pop(k, None)
    return results


def markdown_table(results: list[dict[str, Any]]) -> str:
    """The docs/reliability.md table from results.json entries."""
    lines = ["| fault class | backend | transactions (committed / aborted / unknown) | records "
             "| of them Spark jobs (c / a / u) | stream records | faults injected "
             "| merges (segments) / deleted | late writes in freed names | anomalies | time |",
             "|---|---|---|---:|---|---:|---:|---|---:|---|---:|"]
    for r in results:
        jobs = r.get("spark_jobs") or {}
        spark = (f"{sum(jobs.values())} ({jobs.get('committed', 0)} / {jobs.get('aborted', 0)}"
                 f" / {jobs.get('unknown', 0)})" if jobs else "-")
        stream = f"{r['stream_records']:,}" if r.get("stream_records") else "-"
        anomalies = ", ".join(f"{k} {n}" for k, n in sorted(r["anomalies"].items())) or "0"
        if r.get("torn_above_lso"):
            anomalies += f" (torn held back by the LSO: {r['torn_above_lso']})"
        if r.get("error"):
            anomalies += f"; error: {r['error']}"
        lines.append(f"| {r['fault']} | {r['backend']} | {r['txns']:,} ({r['committed']:,} / "
                     f"{r['aborted']} / {r['unknown']}) | {r['records']:,} | {spark} | {stream} "
                     f"| {r['faults_injected']} | {r.get('merges', 0):,} ({r.get('segments', 0)})"
                     f" / {r.get('deleted', 0):,} | {r.get('late_writes', 0)} "
                     f"| {anomalies} | {r['seconds']:.0f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="short")
    ap.add_argument("--long", action="store_true", help="same as --profile long")
    ap.add_argument("--backend", default="file",
                    help="file, s3 (SeaweedFS), rgw (Ceph RGW), or several: file,s3")
    ap.add_argument("--faults", default="all",
                    help=f"comma-separated, or 'all': {', '.join((*S3_FAULTS, 'disk-full'))}")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--txns", type=int, default=None, help="override txns per producer")
    ap.add_argument("--duration", type=float, default=None, help="override seconds")
    ap.add_argument("--producers", type=int, default=None, help="override producer count")
    ap.add_argument("--unsafe", default="",
                    help="planted bugs (TXNLOG_UNSAFE names) for the processes: the run must "
                         "then report the matching anomaly")
    ap.add_argument("--compact", action="store_true",
                    help="topics with cleanup.policy=compact, compacted all the time")
    ap.add_argument("--retention", action="store_true",
                    help="retention.bytes on the chaos topics and DeleteRecords all along "
                         "(chaos/retention.py); the checker knows each read's log start")
    ap.add_argument("--acls", action="store_true",
                    help="coordinators with --principals: every producer its own principal "
                         "and ACLs, plus an intruder whose writes must all be refused "
                         "(chaos/acls.py, chaos/intruder.py)")
    ap.add_argument("--table", type=Path, nargs="+", default=None,
                    help="print the markdown table of results.json file(s) and exit")
    args = ap.parse_args(argv)
    if args.table is not None:
        print(markdown_table([r for path in args.table for r in json.loads(path.read_text())]))
        return 0
    if args.compact:
        os.environ["TXNLOG_CHAOS_COMPACT"] = "1"
    profile = PROFILES["long" if args.long else args.profile]
    if args.txns or args.duration or args.producers:
        profile = replace(profile, producers=args.producers or profile.producers,
                          txns_per_producer=args.txns or profile.txns_per_producer,
                          duration=args.duration or profile.duration)
    faults = (list(dict.fromkeys(FILE_FAULTS + S3_FAULTS)) if args.faults == "all"
              else args.faults.split(","))
    out = args.out or Path(tempfile.mkdtemp(prefix="txnlog-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"chaos run: profile={profile} out={out}")
    results = run_all(faults, args.backend.split(","), profile, out, args.seed,
                      unsafe=args.unsafe, retention=args.retention, acls=args.acls)
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    bad = [r for r in results if not r.ok]
    print(f"{len(results)} scenarios, {len(bad)} with anomalies or errors; results in {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
