"""One connection's SASL exchange, server side: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

Kafka's order: SaslHandshake names a mechanism, then SaslAuthenticate carries the tokens
(one for PLAIN; client-first then client-final for SCRAM, answered with server-first and
server-final). SCRAM is RFC 5802 as ``scramp`` implements it, against the StoredKey and
ServerKey the root keeps; PLAIN's password is checked against the same keys. The shared
coordinator token, given as a PLAIN password, makes its holder a super user (the token
guarded everything before principals existed, and still does).

The principal is ``User:<name>``. Nothing here logs or returns a password; a failure says
only that the name or password was wrong.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

import scramp

from . import audit
from .scram import HASHES, ScramCredential

PLAIN = "PLAIN"
SCRAM_MECHANISMS = tuple(HASHES)
MAX_TOKEN = 8192


class SaslFailed(Exception):
    """Authentication failed; the message is safe to send to the client."""


@dataclass(frozen=True)
class Subject:
    """Who a connection is: the principal, the client's host, and whether it is a super
    user (listed in ``super_users`` or holding the shared token)."""

    principal: str
    host: str
    super_user: bool = False


Lookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential


class SaslExchange:
    """The server's side of one authentication."""

    def __init__(self, mechanism: str, lookup: Lookup, token: bytes | None, host: str,
                 super_users: frozenset[str] = frozenset(), users_enabled: bool = True
                 ) -> None:
        self.mechanism = mechanism
        self.lookup, self.token, self.host = lookup, token, host
        self.super_users = super_users
        self.users_enabled = users_enabled
        self.subject: Subject | None = None
        self._user = ""
        self._scram: scramp.core.ScramServer | None = None

    @staticmethod
    def mechanisms(users_enabled: bool) -> tuple[str, ...]:
        return (PLAIN, *SCRAM_MECHANISMS) if users_enabled else (PLAIN,)

    def _subject(self, user: str, by_token: bool = False) -> Subject:
        principal = f"User:{user}"
        return Subject(principal, self.host, by_token or principal in self.super_users)

    def step(self, token: bytes) -> bytes:
        """The answer to one SaslAuthenticate; ``subject`` is set once done."""
        if len(token) > MAX_TOKEN:
            raise self._fail("token too long")
        if self.mechanism == PLAIN:
            return self._plain(token)
        return self._scram_step(token)

    def _fail(self, why: str) -> SaslFailed:
        audit.failed_login(self.host, self.mechanism, self._user)
        return SaslFailed(f"authentication failed: {why}")

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise self._fail("malformed PLAIN token")
        authzid, user_b, password = parts
        try:
            user = user_b.decode()
        except UnicodeDecodeError:
            raise self._fail("user name is not UTF-8") from None
        self._user = user
        if authzid and authzid != user_b:
            raise self._fail("authorization id must be empty or the user")
        if self.token is None and not self.users_enabled:
            self.subject = self._subject(user, by_token=True)  # nothing guards this server
            return b""
        if self.token is not None and hmac.compare_digest(password, self.token):
            self.subject = self._subject(user or "admin", by_token=True)
            return b""
        if self.users_enabled and user:
            for mech in SCRAM_MECHANISMS:
                cred = self.lookup(user, mech)
                if cred is not None:
                    if cred.check_password(password):
                        self.subject = self._subject(user)
                        return b""
                    break
        raise self._fail("wrong user name or password")

    def _scram_step(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise self._fail("SCRAM message is not UTF-8") from None
        try:
            if self._scram is None:
                mech = self.mechanism

                def auth(user: str) -> tuple[bytes, bytes, bytes, int]:
                    self._user = user
                    cred = self.lookup(user, mech)
                    if cred is None:
                        raise scramp.ScramException("unknown user")
                    return cred.salt, cred.stored_key, cred.server_key, cred.iterations

                self._scram = scramp.ScramMechanism(mech).make_server(auth)
                self._scram.set_client_first(text)
                return self._scram.get_server_first().encode()
            self._scram.set_client_final(text)
            final = self._scram.get_server_final().encode()
        except scramp.ScramException:
            raise self._fail("wrong user name or password") from None
        except Exception:
            raise self._fail("malformed SCRAM message") from None
        self.subject = self._subject(self._user)
        return final
