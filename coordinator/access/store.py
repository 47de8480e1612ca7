"""ACLs and SCRAM credentials kept in the root: a chain of put-if-absent snapshots.

``_security/state/<seq>.json`` holds the whole state (every ACL, every user's hashed
credentials) as of change ``seq``. A change reads the newest snapshot, applies itself and
writes ``seq + 1`` with put-if-absent; if another writer (another gateway, the CLI) took
that name first, it reads the winner and applies itself again. So concurrent changes never
lose one another, with no lock and no coordinator: the same primitive that makes the log
exactly-once. Readers list ``start_after`` the snapshot they hold, so a refresh costs one
short LIST; old snapshots are pruned, keeping the last ``KEEP``.

Why one object for ACLs and credentials: both are small (10,000 ACLs are ~2 MB of JSON),
change rarely, and a reader wants one consistent view.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from txnlog.log_format.storage import Storage

from .authorizer import Authorizer
from .model import AclBinding
from .scram import ScramCredential

log = logging.getLogger("txnlog.access")
DIR = "_security/state"
KEEP = 8
MAX_ATTEMPTS = 64
T = TypeVar("T")


class StoreError(RuntimeError):
    """The state in the root cannot be read or changed (the message says which object)."""


def _name(seq: int) -> str:
    return f"{seq:020d}.json"


@dataclass(frozen=True)
class AccessState:
    """One snapshot: ``seq`` 0 is the empty state before any change."""

    seq: int = 0
    acls: frozenset[AclBinding] = frozenset()
    users: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    # bearer tokens of the coordinator's HTTP API: SHA-256 (hex) of the token -> principal
    tokens: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps({
            "seq": self.seq,
            "acls": [b.to_json() for b in sorted(self.acls)],
            "users": {u: {m: c.to_json() for m, c in sorted(creds.items())}
                      for u, creds in sorted(self.users.items())},
            "tokens": dict(sorted(self.tokens.items()))},
            separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str) -> AccessState:
        try:
            d = json.loads(data)
            return cls(int(d["seq"]), frozenset(AclBinding.from_json(a) for a in d["acls"]),
                       {u: {m: ScramCredential.from_json(m, c) for m, c in creds.items()}
                        for u, creds in d["users"].items()},
                       {str(h): str(p) for h, p in d.get("tokens", {}).items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{source} is not a valid access state: {exc}") from None


class AccessStore:
    """The root's access state, cached; thread-safe."""

    def __init__(self, storage: Storage, refresh_s: float = 1.0) -> None:
        self.storage = storage
        self.refresh_s = refresh_s
        self._state = AccessState()
        self._read_at = -1e9
        self._read_once = False
        self._lock = threading.Lock()
        self._authorizers: dict[tuple[int, frozenset[str], bool], Authorizer] = {}

    def _newest(self) -> AccessState:
        """Read the newest snapshot after the one held (one LIST, at most one GET)."""
        for _ in range(MAX_ATTEMPTS):
            names = [o.name for o in self.storage.list(DIR, start_after=_name(self._state.seq))
                     if o.name.endswith(".json")]
            if not names:
                return self._state
            path = f"{DIR}/{max(names)}"
            try:
                return AccessState.from_json(self.storage.get(path), path)
            except FileNotFoundError:
                continue  # pruned under us by a writer further ahead: list again
        raise StoreError(f"cannot read the newest state under {DIR}")

    def state(self, max_age_s: float | None = None) -> AccessState:
        """The state, read again when older than ``max_age_s`` (default ``refresh_s``)."""
        age = self.refresh_s if max_age_s is None else max_age_s
        with self._lock:
            if time.monotonic() - self._read_at >= age:
                try:
                    newest = self._newest()
                except (StoreError, OSError) as exc:
                    if not self._read_once:
                        raise  # nothing known yet: refuse rather than guess (fail closed)
                    # storage trouble or a bad object: keep deciding with the last good
                    # state, and try again after refresh_s
                    log.warning("access state not refreshed, keeping seq %d: %s",
                                self._state.seq, exc)
                    self._read_at = time.monotonic()
                    return self._state
                if newest.seq >= self._state.seq:
                    self._state = newest
                self._read_at = time.monotonic()
                self._read_once = True
            return self._state

    def authorizer(self, super_users: frozenset[str], allow_everyone: bool,
                   max_age_s: float | None = None) -> Authorizer:
        """The authorizer of the current ACLs (built once per state)."""
        st = self.state(max_age_s)
        key = (st.seq, super_users, allow_everyone)
        with self._lock:
            found = self._authorizers.get(key)
            if found is None:
                found = Authorizer(st.acls, super_users, allow_everyone)
                self._authorizers = {key: found}
            return found

    def current_authorizer(self, super_users: frozenset[str], allow_everyone: bool
                           ) -> Authorizer | None:
        """The authorizer, when the state held is fresh enough and its authorizer built:
        no lock, no I/O (an event loop calls this for every request)."""
        if time.monotonic() - self._read_at >= self.refresh_s:
            return None
        return self._authorizers.get((self._state.seq, super_users, allow_everyone))

    def change(self, fn: Callable[[AccessState], tuple[AccessState, T]]) -> T:
        """Apply ``fn`` (state -> (new state, result)) to the newest state and write it;
        reapplied when another writer wins. ``fn`` returning the same object: no write."""
        for _ in range(MAX_ATTEMPTS):
            current = self.state(0.0)
            new, result = fn(current)
            if new is current:
                return result
            new = AccessState(current.seq + 1, new.acls, new.users, new.tokens)
            path = f"{DIR}/{_name(new.seq)}"
            if self.storage.put_if_absent(path, new.to_json()):
                with self._lock:
                    if new.seq > self._state.seq:
                        self._state, self._read_at = new, time.monotonic()
                self._prune(new.seq)
                return result
        raise StoreError(f"no change written under {DIR}: too many concurrent changes, or a "
                         "newer state object that cannot be read (the log names it; remove "
                         "it to go on from the last good state)")

    def _prune(self, seq: int) -> None:
        if seq <= KEEP or seq % KEEP:
            return
        old = [f"{DIR}/{o.name}" for o in self.storage.list(DIR)
               if o.name.endswith(".json") and o.name < _name(seq - KEEP)]
        with contextlib.suppress(OSError):  # the next prune tries again
            self.storage.delete_many(old)

    # ---- the changes ------------------------------------------------------------------
    def add_acls(self, bindings: list[AclBinding]) -> None:
        def fn(st: AccessState) -> tuple[AccessState, None]:
            if all(b in st.acls for b in bindings):
                return st, None
            return AccessState(st.seq, st.acls | frozenset(bindings), st.users,
                               st.tokens), None
        self.change(fn)

    def remove_acls(self, match: Callable[[AclBinding], bool]) -> list[AclBinding]:
        """Remove every binding ``match`` accepts; returns them."""
        def fn(st: AccessState) -> tuple[AccessState, list[AclBinding]]:
            gone = sorted(b for b in st.acls if match(b))
            if not gone:
                return st, []
            return AccessState(st.seq, st.acls - frozenset(gone), st.users, st.tokens), gone
        return self.change(fn)

    def alter_credentials(self, upserts: dict[tuple[str, str], ScramCredential],
                          deletions: set[tuple[str, str]]) -> None:
        """Set and delete (user, mechanism) credentials in one change."""
        def fn(st: AccessState) -> tuple[AccessState, None]:
            users = {u: dict(c) for u, c in st.users.items()}
            for user, mech in deletions:
                users.get(user, {}).pop(mech, None)
            for (user, mech), cred in upserts.items():
                users.setdefault(user, {})[mech] = cred
            users = {u: c for u, c in users.items() if c}
            return AccessState(st.seq, st.acls, users, st.tokens), None
        self.change(fn)

    def add_token(self, principal: str, token: bytes) -> None:
        """Bind a bearer token (kept as its SHA-256 only) to ``principal``."""
        digest = token_digest(token)

        def fn(st: AccessState) -> tuple[AccessState, None]:
            return AccessState(st.seq, st.acls, st.users, {**st.tokens, digest: principal}), None
        self.change(fn)

    def remove_tokens(self, principal: str) -> int:
        """Forget every token of ``principal``; returns how many."""
        def fn(st: AccessState) -> tuple[AccessState, int]:
            kept = {h: p for h, p in st.tokens.items() if p != principal}
            if len(kept) == len(st.tokens):
                return st, 0
            return AccessState(st.seq, st.acls, st.users, kept), len(st.tokens) - len(kept)
        return self.change(fn)


def token_digest(token: bytes) -> str:
    """How a token is kept: a random 32-byte token needs no salt or stretching."""
    return hashlib.sha256(token).hexdigest()
