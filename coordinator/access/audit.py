"""The audit log: every refusal, and every ACL or credential change, on one logger.

Why a logger of its own (``txnlog.audit``): operators route it to its own file or sink
with the standard ``logging`` configuration, apart from the process's operational log.
Each line names the principal, the client's host, the operation and the resource, and
never a secret: credentials are reported by user and mechanism only.
"""

from __future__ import annotations

import logging

log = logging.getLogger("txnlog.audit")


def refused(principal: str, host: str, operation: str, resource: str, why: str = "") -> None:
    """A request (or one of its items) refused for ``principal``."""
    log.warning("DENIED principal=%s host=%s operation=%s resource=%s%s", principal, host,
                operation, resource, f" reason={why}" if why else "")


def changed(principal: str, host: str, action: str, what: str) -> None:
    """An ACL or credential change made by ``principal`` (``what`` holds no secret)."""
    log.warning("CHANGE principal=%s host=%s action=%s %s", principal, host, action, what)


def failed_login(host: str, mechanism: str, user: str) -> None:
    """A failed SASL authentication (the user name as given, never the password)."""
    log.warning("AUTH-FAILED host=%s mechanism=%s user=%s", host, mechanism, user[:256])
