"""CPU time of a Spark run's processes by role, sampled from /proc while the run goes on.

bench/spark_rw.py's counter reads /proc before and after an op and counts a process that
ended through the parent that reaped it: right for a total, blind to *which* process spent
it. Spark's Python processes are short-lived and look alike: the JVM starts a driver-side
planner (``python -m pyspark.daemon pyspark.sql.worker.write_into_data_source``), which
forks the planner worker, answers one call and exits; the executor's daemon forks the task
workers; the streaming source runs in ``python -m pyspark.sql.streaming.
python_streaming_source_runner``. To see what each role costs, a thread polls /proc every
``interval`` seconds and keeps, per process it saw, its role (from its command line and its
parent's), when it was first and last seen, and its own user+system CPU at each poll.

What a poll cannot see: the CPU a process spends after its last poll before it exits, and a
process that lives less than one interval. Both still reach its parent's reaped-children
counters (cutime/cstime), so :meth:`RoleSampler.window` reports, per parent role, the reaped
CPU that no seen child accounts for ("unseen: children of <role>"). The sampler's own CPU
(its thread's, read with ``time.thread_time``) is subtracted from the driver's.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK")
DAEMON_MODULES = ("pyspark.daemon", "txnlog.datasource.worker_daemon")


@dataclass
class Proc:
    """One process seen by the sampler: its identity, role and CPU at each poll."""
    pid: int
    ppid: int
    start_ticks: int
    argv: list[str]
    role: str = "?"
    first_seen: float = 0.0
    last_seen: float = 0.0
    # (monotonic time, own CPU s, reaped children's CPU s) at each poll
    samples: list[tuple[float, float, float]] = field(default_factory=list)

    def at(self, t: float) -> tuple[float, float]:
        """(own CPU, reaped children's CPU) as of time ``t``: the last poll at or before it
        (0 before the process was first seen)."""
        own = reaped = 0.0
        for ts, o, r in self.samples:
            if ts > t:
                break
            own, reaped = o, r
        return own, reaped


def _read_argv(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def _module_of(argv: list[str]) -> tuple[str, list[str]]:
    """(the module a ``python -m MODULE args`` runs, its args); ('', argv) otherwise."""
    if "-m" in argv:
        i = argv.index("-m")
        if i + 1 < len(argv):
            return argv[i + 1], argv[i + 2:]
    return "", argv


def role_of(proc: Proc, parent: Proc | None, root_pid: int, marker: str) -> str:
    """What a process is, by its command line and its parent's: the driver (the bench), the
    JVM, the coordinator, a Python daemon (by the worker module it serves), a worker the
    daemon forked (same command line as its parent), or a plain ``python -m`` runner."""
    if proc.pid == root_pid:
        return "driver (bench)"
    joined = " ".join(proc.argv)
    if (marker and marker in joined) or "txnlog.coordinator" in joined:
        return "coordinator"
    if proc.argv and proc.argv[0].endswith("java"):
        return "jvm"
    module, args = _module_of(proc.argv)
    if module in DAEMON_MODULES:
        served = args[0] if args else "pyspark.worker"
        served = served.replace("pyspark.sql.worker.", "").replace("pyspark.", "")
        forked = parent is not None and parent.argv == proc.argv
        return f"{'worker' if forked else 'daemon'}: {served}"
    if module:
        return "runner: " + module.rsplit(".", 1)[-1]
    return "other: " + os.path.basename(proc.argv[0]) if proc.argv else "other"


class RoleSampler:
    """Polls /proc for the processes descending from ``root_pid`` (plus those whose command
    line names ``marker``), in a daemon thread, until :meth:`stop`."""

    def __init__(self, root_pid: int | None = None, marker: str = "",
                 interval: float = 0.05) -> None:
        self.root_pid = root_pid or os.getpid()
        self.marker = marker
        self.interval = interval
        self.procs: dict[tuple[int, int], Proc] = {}
        self.own_cpu: list[tuple[float, float]] = []  # (time, sampler thread CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="role-sampler", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> RoleSampler:
        self.poll()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()
            self.own_cpu.append((time.monotonic(), time.thread_time()))

    def poll(self) -> float:
        """Read every process once; the time of the poll."""
        now = time.monotonic()
        seen: dict[int, tuple[int, int, float, float, bytes]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            seen[int(entry)] = (int(fields[1]), int(fields[19]),
                                (int(fields[11]) + int(fields[12])) / _TICK,
                                (int(fields[13]) + int(fields[14])) / _TICK, b"")
        ours: set[int] = set()
        for pid in seen:
            p = pid
            for _ in range(64):
                if p == self.root_pid or p in ours:
                    ours.add(pid)
                    break
                if p not in seen or p <= 1:
                    break
                p = seen[p][0]
        with self._lock:
            for pid, (ppid, start, own, reaped, _) in seen.items():
                key = (pid, start)
                proc = self.procs.get(key)
                if proc is None:
                    argv = _read_argv(pid)
                    if argv is None:
                        continue
                    if pid not in ours and not (self.marker and
                                                self.marker in " ".join(argv)):
                        continue
                    proc = Proc(pid, ppid, start, argv, first_seen=now)
                    parent = next((q for (qp, _), q in self.procs.items() if qp == ppid),
                                  None)
                    proc.role = role_of(proc, parent, self.root_pid, self.marker)
                    self.procs[key] = proc
                elif proc.role.startswith("other"):
                    # a launcher that exec'd since (spark-submit's bash becomes the JVM)
                    argv = _read_argv(pid) or proc.argv
                    if argv != proc.argv:
                        proc.argv = argv
                        parent = next((q for (qp, _), q in self.procs.items() if qp == ppid),
                                      None)
                        proc.role = role_of(proc, parent, self.root_pid, self.marker)
                proc.last_seen = now
                proc.samples.append((now, own, reaped))
        return now

    def _sampler_cpu(self, t0: float, t1: float) -> float:
        def at(t: float) -> float:
            v = 0.0
            for ts, c in self.own_cpu:
                if ts > t:
                    break
                v = c
            return v
        return at(t1) - at(t0)

    def window(self, t0: float, t1: float) -> dict[str, dict[str, float]]:
        """Per role, between polls ``t0`` and ``t1``: CPU seconds, how many processes of that
        role were alive in the window, and how many started in it. Reaped CPU no seen child
        accounts for goes to ``unseen: children of <role>``."""
        out: dict[str, dict[str, float]] = {}

        def add(role: str, cpu: float, alive: int, started: int) -> None:
            r = out.setdefault(role, {"cpu_s": 0.0, "procs": 0, "started": 0})
            r["cpu_s"] += cpu
            r["procs"] += alive
            r["started"] += started

        with self._lock:
            procs = list(self.procs.values())
        by_pid = {p.pid: p for p in procs}
        for p in procs:
            if p.last_seen < t0 or p.first_seen > t1:
                continue
            own0, reaped0 = p.at(t0)
            own1, reaped1 = p.at(t1)
            cpu = own1 - own0
            if p.pid == self.root_pid:
                cpu -= self._sampler_cpu(t0, t1)
            add(p.role, cpu, 1, int(p.first_seen > t0))
            # children this process reaped in the window vs what the sampler saw of them
            last = self._last_poll(procs)
            # a child reaped in the window adds its whole life's CPU (own + its reaped) to
            # the parent's reaped counters; what the polls saw of that is its last sample
            seen_children = sum(sum(c.samples[-1][1:]) for c in procs
                                if c.ppid == p.pid and t0 <= c.last_seen < t1
                                and c.last_seen < last)
            unseen = (reaped1 - reaped0) - seen_children
            if unseen > 0.05 and by_pid.get(p.pid) is p:
                add(f"unseen: children of {p.role}", unseen, 0, 0)
        return out

    @staticmethod
    def _last_poll(procs: list[Proc]) -> float:
        return max((p.last_seen for p in procs), default=0.0)
