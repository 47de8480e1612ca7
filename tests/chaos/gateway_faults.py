"""The Kafka-gateway fault classes of the chaos harness: a `txnlog gateway`
serving Kafka clients (chaos/kafka_workload.py) that is SIGKILLed and restarted on the same
port, alone (``gateway-kill``) or with the coordinator killed too (``gateway-coordinator-
kill``: the gateway follows the new coordinator through ``_coordinator.json``), or dying at
its fault point between a flush window's shared-object put and its confirm
(``gateway-kill-mid-flush``: each gateway is started armed to die at its N-th put, N at
random, and a new armed one replaces it; the healing starts an unarmed one).

Kept apart from run.py (which calls in through a few hooks): ``GatewaySide`` starts the
gateway and the Kafka-client workers of one scenario, injects the faults and stops them.
The transactions are the Kafka producers' (the harness's own producers do not run in these
classes); the harness's own consumers and its final read run beside the Kafka consumers,
so the records Kafka clients wrote are checked by txnlog's readers too (torn transactions,
LSO bounds, lost writes) and the records Kafka clients read are checked against them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from gateway_proc import GatewayProc, free_port_block

if TYPE_CHECKING:
    from .run import Scenario

GATEWAY_FAULTS = ("gateway-kill", "gateway-coordinator-kill", "gateway-kill-mid-flush")
# gateway-kill-mid-flush: a gateway dies at its N-th put, N drawn from this range
PUTS_BEFORE_DEATH = (2, 25)


class GatewaySide:
    """One scenario's gateway (restarted on one port) and its Kafka-client processes."""

    def __init__(self, scn: Scenario) -> None:
        self.scn = scn
        self.port = free_port_block()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.gateways: list[GatewayProc] = []
        self.kills = 0

    # ---- the gateway -------------------------------------------------------------------
    def start(self, die_at_put: int | None = None) -> GatewayProc:
        """A gateway on the scenario's port; ``die_at_put``: armed to SIGKILL itself right
        after its N-th flush window's put (before the confirm)."""
        from .run import _env

        extra = {k: v for k, v in _env(self.scn.env_extra).items()}
        extra.pop("TXNLOG_FAULTS", None)
        if die_at_put is not None:
            extra["TXNLOG_FAULTS"] = f"gateway_after_put:{die_at_put}"
        access = self.scn.access  # --acls: clients authenticate as SCRAM users (acls.py)
        sasl = access.gateway_args() if access is not None else []
        gw = GatewayProc(self.scn.root, extra=["--listen", self.bootstrap, *sasl], env=extra)
        self.gateways.append(gw)
        try:
            gw.wait_listening(60)
        except Exception as exc:  # the old one's port not free yet: the nemesis tries again
            self.scn.note("gateway-start-failed", error=repr(exc)[:300])
            raise
        self.scn.note("gateway-start", pid=gw.proc.pid, port=self.port, die_at_put=die_at_put)
        return gw

    def live(self) -> list[GatewayProc]:
        return [g for g in self.gateways if g.alive()]

    def ensure(self, attempts: int = 5) -> None:
        """A gateway listening on the port (started again if none is alive)."""
        for _ in range(attempts):
            if self.live():
                return
            with contextlib.suppress(Exception):
                self.start()
                return
            time.sleep(0.5)

    def kill(self) -> None:
        for g in self.live():
            self.scn.note("kill-gateway", pid=g.proc.pid)
            g.kill()
            self.kills += 1

    # ---- faults --------------------------------------------------------------------------
    def f_gateway_kill(self) -> None:
        self.kill()
        self.scn._sleep(0.1, 1.0)
        self.ensure()

    def f_gateway_coordinator_kill(self) -> None:
        """Gateway alone, coordinator alone, or both (in either order), at random."""
        r = self.scn.rng.random()
        if r < 0.4:
            self.f_gateway_kill()
        elif r < 0.7:
            self.scn.f_coordinator_kill()
        else:
            gateway_first = self.scn.rng.random() < 0.5
            if gateway_first:
                self.kill()
            for c in self.scn.live_coordinators():
                self.scn.note("kill-coordinator", pid=c.pid)
                c.kill()
            if not gateway_first:
                self.kill()
            self.scn._sleep(0.1, 1.0)
            self.scn.supervise()
            self.ensure()
            for c in self.scn.live_coordinators()[-1:]:
                with contextlib.suppress(Exception):
                    c.wait_healthy(60)

    def armed_start(self) -> None:
        self.start(self.scn.rng.randint(*PUTS_BEFORE_DEATH))

    def f_gateway_kill_mid_flush(self) -> bool:
        """Replace a gateway that died at its point with a new armed one; while an armed one
        lives, let the Kafka clients' flushes reach its point."""
        if self.live():
            return False
        self.scn.note("gateway-died-at-point")
        self.kills += 1
        with contextlib.suppress(Exception):  # the port not free yet: next round
            self.armed_start()
        return True

    def deaths_at_point(self) -> int:
        """Gateways that SIGKILLed themselves between a put and its confirm (their logs)."""
        n = 0
        for g in self.gateways:
            with contextlib.suppress(OSError):
                n += "fault point gateway_after_put reached" in g.log_path.read_text(
                    errors="replace")
        return n

    def faults(self) -> dict[str, Any]:
        return {"gateway-kill": self.f_gateway_kill,
                "gateway-coordinator-kill": self.f_gateway_coordinator_kill,
                "gateway-kill-mid-flush": self.f_gateway_kill_mid_flush}

    # ---- Kafka-client workers ------------------------------------------------------------
    def _spawn(self, role: str, w: int, log: str, *extra: str) -> subprocess.Popen[bytes]:
        from .run import _env

        args = [sys.executable, "-m", "chaos.kafka_workload", role, "--bootstrap",
                self.bootstrap, "--history", str(self.scn.hist_dir), "--worker", str(w),
                "--run", f"{self.scn.fault}{self.scn.seed}", "--seed", str(self.scn.seed),
                *extra]
        env = _env(self.scn.env_extra)
        if self.scn.access is not None:  # --acls: this process's own SCRAM user
            env.update(self.scn.access.kafka_env(role, w))
        return subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=open(self.scn.dir / log, "wb"),
                                start_new_session=True)

    def start_producer(self) -> int:
        scn = self.scn
        w = scn.next_worker
        scn.next_worker += 1
        p = scn.profile
        proc = self._spawn("producer", w, f"w{w}.log", "--txns", str(p.txns_per_producer),
                           "--duration", str(p.duration))
        with scn.lock:
            scn.workers.append(proc)
            scn.producers[w] = proc
        return w

    def start_consumer(self, role: str, duration: float) -> None:
        scn = self.scn
        w = scn.next_worker
        scn.next_worker += 1
        proc = self._spawn(role, w, f"c{w}.log", "--duration", str(duration))
        with scn.lock:
            scn.workers.append(proc)

    def start_workload(self) -> None:
        """The Kafka producers (the scenario's transactions), librdkafka group consumers
        and one kafka-python consumer."""
        p = self.scn.profile
        for _ in range(p.producers):
            self.start_producer()
        for _ in range(p.consumers):
            self.start_consumer("consumer", p.duration + 10)
        self.start_consumer("kp-consumer", p.duration + 10)

    def stop(self) -> None:
        for g in self.gateways:
            with contextlib.suppress(Exception):
                g.stop()
            with contextlib.suppress(OSError):
                shutil.copy(g.log_path, self.scn.dir / f"gateway-{g.proc.pid}.log")
                shutil.rmtree(g.dir, ignore_errors=True)
