"""SCRAM-SHA-256/512 credentials as Kafka derives and stores them (RFC 5802, no SASLprep).

Stored per (user, mechanism): salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count; never the password
nor the salted password. Kafka's AlterUserScramCredentials sends the salted password
(Hi(password, salt, i)), so ``from_salted`` derives the keys from it; the CLI, which has
the password, uses ``from_password``. A PLAIN login is checked against the same stored
keys (``check_password``): one credential serves every mechanism a user has.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODES = {v: k for k, v in MECHANISMS.items()}
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 8192
MAX_USER = 256


class CredentialError(ValueError):
    """A credential Kafka would refuse (UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM)."""


def check_user(user: object) -> str:
    if not isinstance(user, str) or not user or len(user) > MAX_USER or "\0" in user:
        raise CredentialError("a user name is 1 to 256 characters without NUL")
    return user


def check_iterations(n: object) -> int:
    if not isinstance(n, int) or not MIN_ITERATIONS <= n <= MAX_ITERATIONS:
        raise CredentialError(f"iterations must be between {MIN_ITERATIONS} and "
                              f"{MAX_ITERATIONS}")
    return n


def mechanism_name(code_or_name: object) -> str:
    if code_or_name in MECHANISMS:
        return MECHANISMS[code_or_name]  # type: ignore[index]
    if isinstance(code_or_name, str) and code_or_name.upper() in HASHES:
        return code_or_name.upper()
    raise CredentialError(f"unknown SCRAM mechanism {code_or_name!r}")


@dataclass(frozen=True)
class ScramCredential:
    """What the root keeps for one (user, mechanism). ``repr`` shows no key material."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"

    @classmethod
    def from_salted(cls, mechanism: str, salt: bytes, salted_password: bytes,
                    iterations: int) -> ScramCredential:
        name = mechanism_name(mechanism)
        check_iterations(iterations)
        if not salt or not salted_password:
            raise CredentialError("a SCRAM credential needs a salt and a salted password")
        h = HASHES[name]
        client_key = hmac.new(salted_password, b"Client Key", h).digest()
        return cls(name, bytes(salt), hashlib.new(h, client_key).digest(),
                   hmac.new(salted_password, b"Server Key", h).digest(), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str,
                      iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
                      ) -> ScramCredential:
        name = mechanism_name(mechanism)
        salt = salt or os.urandom(32)
        salted = hashlib.pbkdf2_hmac(HASHES[name], password.encode(), salt,
                                     check_iterations(iterations))
        return cls.from_salted(name, salt, salted, iterations)

    def check_password(self, password: bytes) -> bool:
        """Whether ``password`` derives this credential's StoredKey (constant-time)."""
        h = HASHES[self.mechanism]
        salted = hashlib.pbkdf2_hmac(h, password, self.salt, self.iterations)
        client_key = hmac.new(salted, b"Client Key", h).digest()
        return hmac.compare_digest(hashlib.new(h, client_key).digest(), self.stored_key)

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, mechanism: str, d: dict[str, Any]) -> ScramCredential:
        b = base64.b64decode
        return cls(mechanism_name(mechanism), b(d["salt"]), b(d["stored_key"]),
                   b(d["server_key"]), int(d["iterations"]))
