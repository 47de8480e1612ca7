"""Who may talk to the coordinator: a shared-secret bearer token, and TLS for the wire.

Why so simple: the coordinator's clients are one cluster's drivers and executors, which
already share a secret channel (the job's options or environment), so one shared token,
compared in constant time, is the whole authentication; TLS (``ssl`` from the standard
library) keeps the token and the requests private on a network others share. The token is
never logged, never put in an error message and never in a ``repr``.

Server side: ``TokenCheck`` decides per request; ``/healthz`` is always open (load
balancers and supervisors probe it), ``/metrics`` is open unless ``protect_metrics``.
Client side: the token comes from the ``coordinator.token`` option or the
``TXNLOG_COORDINATOR_TOKEN`` environment variable, the CA to verify the server from
``coordinator.tls.ca`` or ``TXNLOG_COORDINATOR_CA``.
"""

from __future__ import annotations

import functools
import hmac
import os
import ssl
import stat
from dataclasses import dataclass, field

TOKEN_ENV = "TXNLOG_COORDINATOR_TOKEN"
CA_ENV = "TXNLOG_COORDINATOR_CA"
OPEN_PATHS = frozenset({"/healthz"})
MAX_TOKEN_BYTES = 4096


class TokenFileError(ValueError):
    """The token file is missing, empty or unusable."""


def read_token_file(path: str) -> bytes:
    """The token in ``path`` (surrounding whitespace removed). Refuses an empty file, and a
    file others can read (the token is the only thing guarding the log)."""
    try:
        mode = os.stat(path).st_mode
        with open(path, "rb") as f:
            token = f.read(MAX_TOKEN_BYTES + 1).strip()
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(f"the token file {path} is readable by others than its owner; "
                             f"chmod 600 {path}")
    if not token or len(token) > MAX_TOKEN_BYTES:
        raise TokenFileError(f"the token file {path} must hold 1 to {MAX_TOKEN_BYTES} bytes")
    return token


@dataclass(frozen=True)
class TokenCheck:
    """Whether a request may be served. ``token`` None: no authentication (loopback
    embedded coordinators)."""

    token: bytes | None = None
    protect_metrics: bool = False

    def __repr__(self) -> str:  # never the token
        return f"TokenCheck(enabled={self.token is not None}, " \
               f"protect_metrics={self.protect_metrics})"

    def refusal(self, path: str, authorization: str | None) -> str | None:
        """None when the request may go on, else why not (safe to log: no token in it)."""
        if self.token is None or path in OPEN_PATHS:
            return None
        if path == "/metrics" and not self.protect_metrics:
            return None
        if not authorization:
            return "no bearer token"
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return "not a bearer token"
        # compare_digest: the time taken says nothing about how much of the token matched
        if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), self.token):
            return "wrong token"
        return None


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """TLS for the coordinator's listener (TLS 1.2 at least)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


@functools.lru_cache(maxsize=16)
def client_ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """Verifies the coordinator's certificate: against ``ca_file`` when given (a private
    CA, a self-signed certificate), else the system's trust store. Hostname checked."""
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else \
        ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


@dataclass(frozen=True)
class Credentials:
    """What a client needs to be let in: the bearer token (never in a repr) and the CA file
    that verifies the coordinator's TLS certificate. Frozen and picklable: the driver
    resolves it once (options, else its environment) and it travels to the tasks inside
    the pickled reader/writer, as the endpoint does."""

    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    @classmethod
    def resolve(cls, token_option: str | None = None,
                ca_option: str | None = None) -> Credentials:
        return cls(client_token(token_option), client_ca(ca_option))


def client_token(option: str | None) -> str | None:
    """The token a client sends: the option if given, else the environment's."""
    return option or os.environ.get(TOKEN_ENV) or None


def client_ca(option: str | None) -> str | None:
    """The CA file a client verifies the coordinator against: option, else environment."""
    return option or os.environ.get(CA_ENV) or None
