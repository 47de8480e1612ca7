"""ACLs on in a chaos run (``python -m tests.chaos.run --acls``): principals for the workers.

The coordinators run with ``--principals`` and a shared token (``--token-file``, mode 600,
in the scenario's directory) that only the harness itself, the gateways and the Spark
drivers hold (super users, as in a deployment). Every producer worker ``w<N>`` gets a
token of its own bound to ``User:w<N>`` before it starts, in its environment
(``TXNLOG_COORDINATOR_TOKEN``, never printed or written to the history), with ACLs that
allow exactly its transactional ids (``chaos-<run>-w<N>`` and its one-shot ids
``chaos-<run>-w<N>-1s<n>``) and WRITE on the chaos topics. Consumers read storage only,
so they get no token at all: a coordinator call of theirs would fail, and show as failed
polls. The intruder (``chaos/intruder.py``, ``User:intruder``) may READ the topics and
WRITE its own transactional id, nothing else; its attempts to write must all be refused
and none of its values ever read (checker: ``unauthorized-accepted``,
``unauthorized-visible``).

Why tokens through the store and not the CLI: ``AccessStore`` is what ``txnlog
principal-tokens`` and ``txnlog acls`` write; calling it spares a process start per worker
inside the fault clock (workers are restarted mid-run by client-kill).

In the gateway classes the gateway runs with ``--sasl`` and every Kafka client is a SCRAM
user of its own (``kafka_env``): a producer ``kw<N>`` allowed WRITE on its transactional
id ``chaos-<run>-w<N>`` and on the chaos topics, a consumer ``kc<N>`` READ on the topics
(and on the librdkafka consumers' group); the user name and password reach the process
in its environment (``TXNLOG_CHAOS_SASL_USER`` / ``_PASSWORD``), never a flag.

``TXNLOG_CHAOS_INTRUDER_SUPER=1`` is the harness's planted bug: the intruder is given the
shared token, so its writes commit, which the checker must report.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from txnlog.coordinator.access.model import AclBinding
from txnlog.coordinator.access.scram import ScramCredential
from txnlog.coordinator.access.store import AccessStore
from txnlog.coordinator.security import TOKEN_ENV
from txnlog.log_format.storage import Storage

from . import workload

INTRUDER = "User:intruder"
INTRUDER_SUPER_ENV = "TXNLOG_CHAOS_INTRUDER_SUPER"
SASL_USER_ENV = "TXNLOG_CHAOS_SASL_USER"
SASL_PASSWORD_ENV = "TXNLOG_CHAOS_SASL_PASSWORD"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def intruder_is_super() -> bool:
    return os.environ.get(INTRUDER_SUPER_ENV) == "1"


def _acl(rtype: str, name: str, pattern: str, principal: str, op: str) -> AclBinding:
    return AclBinding.new(rtype, name, pattern, principal, "*", op, "ALLOW")


class ChaosAccess:
    """The shared token, and a principal with its ACLs per worker, for one scenario."""

    def __init__(self, root: str, directory: Path, run: str) -> None:
        self.root, self.run = root, run
        self.shared = secrets.token_urlsafe(32)
        self.token_file = directory / "coordinator.token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.shared)
        self.principals: list[str] = []

    def coordinator_args(self) -> list[str]:
        return ["--token-file", str(self.token_file), "--principals"]

    def _grant(self, principal: str, token: str | None, acls: list[AclBinding],
               password: str | None = None, timeout: float = 60.0) -> None:
        """Bind ``token`` to ``principal`` (or give the user a SCRAM ``password``) and add
        its ACLs (retried: the store is the root, which the faults hit too — a full disk,
        a paused S3)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                store = AccessStore(Storage.for_url(self.root))
                store.add_acls(acls)
                if token is not None:
                    store.add_token(principal, token.encode())
                if password is not None:
                    user = principal.removeprefix("User:")
                    store.alter_credentials(
                        {(user, m): ScramCredential.from_password(m, password, 4096)
                         for m in SCRAM_MECHANISMS}, set())
                self.principals.append(principal)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def producer_env(self, worker: int) -> dict[str, str]:
        """A new principal ``User:w<N>`` allowed exactly worker N's transactional ids and
        WRITE on the chaos topics; the environment its process gets."""
        principal = f"User:w{worker}"
        tid = f"chaos-{self.run}-w{worker}"
        acls = [_acl("TRANSACTIONAL_ID", tid, "LITERAL", principal, "WRITE"),
                # one-shot ids: "<tid>-1s<n>" (a PREFIXED "<tid>" would also match w<N>0...)
                _acl("TRANSACTIONAL_ID", f"{tid}-1s", "PREFIXED", principal, "WRITE"),
                *(_acl("TOPIC", topic, "LITERAL", principal, op)
                  for topic in workload.TOPICS for op in ("WRITE", "DESCRIBE"))]
        token = secrets.token_urlsafe(32)
        self._grant(principal, token, acls)
        return {TOKEN_ENV: token}

    def intruder_env(self, worker: int) -> dict[str, str]:
        """``User:intruder``: READ (and so DESCRIBE) on the chaos topics and WRITE on its own
        transactional id, no WRITE on any topic (planted: the shared token instead)."""
        if intruder_is_super():
            return {TOKEN_ENV: self.shared}
        acls = [_acl("TRANSACTIONAL_ID", self.intruder_tid(worker), "LITERAL", INTRUDER,
                     "WRITE"),
                *(_acl("TOPIC", topic, "LITERAL", INTRUDER, "READ")
                  for topic in workload.TOPICS)]
        token = secrets.token_urlsafe(32)
        self._grant(INTRUDER, token, acls)
        return {TOKEN_ENV: token}

    def intruder_tid(self, worker: int) -> str:
        return f"chaos-{self.run}-x{worker}"

    # ---- the gateway classes: Kafka clients as SCRAM users -----------------------------
    def gateway_args(self) -> list[str]:
        return ["--sasl"]

    def kafka_env(self, role: str, worker: int) -> dict[str, str]:
        """A SCRAM user for one Kafka-client process (``role`` as kafka_workload's): a
        producer may write its transactional id and the chaos topics, a consumer read the
        topics (and its group); the environment that process gets."""
        if role == "producer":
            principal = f"User:kw{worker}"
            acls = [_acl("TRANSACTIONAL_ID", f"chaos-{self.run}-w{worker}", "LITERAL",
                         principal, "WRITE"),
                    *(_acl("TOPIC", topic, "LITERAL", principal, "WRITE")
                      for topic in workload.TOPICS)]
        else:
            principal = f"User:kc{worker}"
            acls = [*(_acl("TOPIC", topic, "LITERAL", principal, "READ")
                      for topic in workload.TOPICS),
                    _acl("GROUP", f"chaos-{self.run}-kc", "LITERAL", principal, "READ")]
        password = secrets.token_urlsafe(24)
        self._grant(principal, None, acls, password=password)
        return {SASL_USER_ENV: principal.removeprefix("User:"), SASL_PASSWORD_ENV: password}
