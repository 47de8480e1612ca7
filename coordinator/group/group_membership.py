"""Consumer-group membership: Kafka's GroupCoordinator (classic protocol), in memory.

Gateways are stateless, so one place must decide who is in a group, which generation it is
in and who leads it: the coordinator, like Kafka's group coordinator broker. The state is in
memory, as Kafka's generation state is between its log writes: a restarted coordinator
knows no members, so every member's next Heartbeat/SyncGroup/OffsetCommit is
UNKNOWN_MEMBER_ID and the members join again (a rebalance), which Kafka's clients do on
their own. Nothing that must survive lives here: committed offsets go through the group
offsets path every other commit uses (``GroupOffsets``: ``__consumer_offsets`` records in a
transaction, the same path Spark's ``groupId`` commits take), so OffsetFetch, ``txnlog
groups`` and Spark read the same offsets.

The state machine is Kafka's: Empty → PreparingRebalance (a member joins, leaves, or its
session expires) → CompletingRebalance (every known member has rejoined, or the rebalance
timeout removed those that did not; the generation moves on; the leader gets every
member's subscription) → Stable (the leader's SyncGroup hands out the assignments). A
JoinGroup or SyncGroup that must wait for the others is answered when the step completes,
so the HTTP call is held (the gateway calls with a timeout above the rebalance timeout).

Static membership (KIP-345): a member joining with a ``group_instance_id`` is the same
member across restarts. It joins without MEMBER_ID_REQUIRED; joining again with no member
id (a restarted instance) replaces its old member id with a new one, without a rebalance
when the group is Stable and its protocols are unchanged (the answer names the old
leader, so a restarted leader does not assign again; it gets its old assignment from
SyncGroup); a request whose member id is not the instance's current one is
FENCED_INSTANCE_ID (an older copy of the instance); LeaveGroup may name a member by its
instance id alone. Static members leave by their session timing out, as in Kafka.

Answers carry a Kafka ``error_code`` rather than an HTTP error, because some of them carry
data with the error (MEMBER_ID_REQUIRED hands out the member id to join with).
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequestError

if TYPE_CHECKING:
    from ..transaction.transaction_coordinator import TransactionCoordinator

NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

MIN_SESSION_TIMEOUT_MS = 1_000      # Kafka's group.min.session.timeout.ms is 6 s; tests use less
MAX_SESSION_TIMEOUT_MS = 1_800_000  # group.max.session.timeout.ms
EXPIRY_TICK_S = 0.25
OFFSETS_TID_PREFIX = "txnlog-group-offsets-"  # the id consumer commits are written under

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", \
    "CompletingRebalance", "Stable"


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, str]]  # (name, metadata base64), the member's preference order
    last_seen: float = field(default_factory=time.monotonic)
    assignment: str = ""
    client_host: str = ""  # the address the member's gateway saw (DescribeGroups)
    instance_id: str | None = None  # group.instance.id of a static member (KIP-345)
    join: asyncio.Future[dict[str, Any]] | None = None
    sync: asyncio.Future[dict[str, Any]] | None = None


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # ids handed out, not joined yet
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_deadline: float = 0.0
    # group.initial.rebalance.delay.ms: while a group's first rebalance waits for more
    # members (monotonic time it completes at; 0: no such wait)
    initial_until: float = 0.0


# Kafka's group.initial.rebalance.delay.ms default: the first rebalance of an empty group
# waits this long for more members (again after each one joins, up to the rebalance
# timeout), so consumers starting together get one rebalance, not one each
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000


class GroupMembership:
    """Every group's members and generation, and the timers that expire members."""

    def __init__(self, coordinator: TransactionCoordinator,
                 initial_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS) -> None:
        self.coordinator = coordinator
        self.initial_delay_ms = initial_delay_ms
        self.groups: dict[str, Group] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._commit_locks: dict[str, asyncio.Lock] = {}

    def _group(self, group_id: str) -> Group:
        if not group_id:
            raise InvalidRequestError("group_id must be a non-empty string")
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        if self._expiry is None or self._expiry.done():
            self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())
        return g

    # ------------------------------------------------------------------ JoinGroup
    async def join(self, b: dict[str, Any]) -> dict[str, Any]:
        g = self._group(b["group_id"])
        member_id: str = b["member_id"]
        session = b["session_timeout_ms"]
        rebalance = b["rebalance_timeout_ms"]
        protocols = [(p["name"], p["metadata"]) for p in b["protocols"]]
        if not MIN_SESSION_TIMEOUT_MS <= session <= MAX_SESSION_TIMEOUT_MS:
            return _join_error(INVALID_SESSION_TIMEOUT, member_id)
        instance = b.get("group_instance_id") or None
        known = g.static.get(instance) if instance else None
        if not protocols or (g.members and b["protocol_type"] != g.protocol_type) or \
                not self._common_protocol(g, protocols, known or member_id):
            return _join_error(INCONSISTENT_GROUP_PROTOCOL, member_id)
        if instance and member_id and known is not None and member_id != known:
            return _join_error(FENCED_INSTANCE_ID, member_id)
        if not member_id:
            if known is not None and known in g.members:
                return await self._rejoin_static(g, g.members[known], b, protocols)
            member_id = f"{b.get('client_id') or 'member'}-{uuid.uuid4()}"
            if b.get("require_known_member_id") and not instance:
                g.pending[member_id] = time.monotonic() + session / 1000
                return _join_error(MEMBER_ID_REQUIRED, member_id)
        elif member_id not in g.members and member_id not in g.pending:
            return _join_error(UNKNOWN_MEMBER_ID, member_id)
        g.pending.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = Member(member_id, b.get("client_id") or "", session,
                                              rebalance, b["protocol_type"], protocols,
                                              client_host=b.get("client_host") or "",
                                              instance_id=instance)
            if instance:
                g.static[instance] = member_id
        else:
            m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance
            m.protocols = protocols
            if g.state == STABLE and member_id != g.leader and \
                    self._same_metadata(g, m, protocols):
                # a follower rejoining with nothing changed (Kafka: answer the current
                # generation, no rebalance)
                m.last_seen = time.monotonic()
                return self._join_answer(g, m)
        m.last_seen = time.monotonic()
        if m.join is not None and not m.join.done():
            m.join.set_result(_join_error(UNKNOWN_MEMBER_ID, member_id))
        m.join = asyncio.get_running_loop().create_future()
        g.protocol_type = b["protocol_type"]
        if g.initial_until:  # a member joined during the initial delay: wait again
            g.initial_until = min(time.monotonic() + self.initial_delay_ms / 1000,
                                  g.rebalance_deadline)
        self._prepare(g)
        self._maybe_complete_join(g)
        return await m.join

    async def _rejoin_static(self, g: Group, old: Member, b: dict[str, Any],
                             protocols: list[tuple[str, str]]) -> dict[str, Any]:
        """A static member joining again without a member id (its instance restarted):
        Kafka's ``updateStaticMemberAndRebalance``. The member gets a new id (its old id's
        waiting calls and later requests are FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID), keeps
        its assignment, and a Stable group whose protocol it does not change does not
        rebalance."""
        new_id = f"{b.get('client_id') or 'member'}-{uuid.uuid4()}"
        for fut in (old.join, old.sync):
            if fut is not None and not fut.done():
                fut.set_result({**_join_error(FENCED_INSTANCE_ID, old.member_id),
                                "assignment": ""})
        leader = g.leader
        members = {(new_id if k == old.member_id else k): v for k, v in g.members.items()}
        g.members = members
        old.member_id, old.join, old.sync = new_id, None, None
        old.session_timeout_ms = b["session_timeout_ms"]
        old.rebalance_timeout_ms = b["rebalance_timeout_ms"]
        old.client_id, old.client_host = b.get("client_id") or "", b.get("client_host") or ""
        old.last_seen = time.monotonic()
        assert old.instance_id is not None
        g.static[old.instance_id] = new_id
        if leader is not None and leader not in members:
            g.leader = new_id  # the restarted member led the group, and still does
        same = self._same_metadata(g, old, protocols)
        old.protocols = protocols
        if g.state == STABLE and same:
            return {**self._join_answer(g, old), "members": [], "leader": leader or ""}
        old.join = asyncio.get_running_loop().create_future()
        self._prepare(g)
        self._maybe_complete_join(g)
        return await old.join

    def _fenced(self, g: Group, b: dict[str, Any]) -> int:
        """FENCED_INSTANCE_ID where a request names a static member's instance with a
        member id that is not the instance's current one; else 0."""
        instance = b.get("group_instance_id") or None
        if instance is None:
            return NONE
        known = g.static.get(instance)
        if known is None:
            return UNKNOWN_MEMBER_ID
        return FENCED_INSTANCE_ID if known != b.get("member_id") else NONE

    def _common_protocol(self, g: Group, protocols: list[tuple[str, str]],
                         member_id: str) -> bool:
        names = {n for n, _ in protocols}
        for other in g.members.values():
            if other.member_id != member_id:
                names &= {n for n, _ in other.protocols}
        return bool(names)

    def _same_metadata(self, g: Group, m: Member, protocols: list[tuple[str, str]]) -> bool:
        return dict(protocols).get(g.protocol_name or "") is not None and \
            m.protocols == protocols

    def _prepare(self, g: Group) -> None:
        """Begin a rebalance (a sync waiting in CompletingRebalance is told to rejoin)."""
        if g.state == PREPARING:
            return
        if g.state == COMPLETING:
            for m in g.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result({"error_code": REBALANCE_IN_PROGRESS, "assignment": ""})
        first = g.state == EMPTY
        g.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        now = time.monotonic()
        g.rebalance_deadline = now + timeout / 1000
        if first and self.initial_delay_ms > 0:  # Kafka's InitialDelayedJoin
            g.initial_until = min(now + self.initial_delay_ms / 1000, g.rebalance_deadline)

    def _maybe_complete_join(self, g: Group, deadline_passed: bool = False) -> None:
        if g.state != PREPARING:
            return
        if g.initial_until and not deadline_passed:
            if time.monotonic() < g.initial_until:
                return  # the initial delay: more members may come
            g.initial_until = 0.0
        waiting = [m for m in g.members.values() if m.join is not None and not m.join.done()]
        if len(waiting) < len(g.members) and not deadline_passed:
            return
        for m in list(g.members.values()):  # those that did not rejoin in time are out
            if m.join is None or m.join.done():
                del g.members[m.member_id]
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            return
        names = [n for n, _ in next(iter(g.members.values())).protocols]
        common = set(names)
        for m in g.members.values():
            common &= {n for n, _ in m.protocols}
        # Kafka's vote: each member votes for its most preferred common protocol
        votes: dict[str, int] = {}
        for m in g.members.values():
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        g.protocol_name = max(sorted(votes), key=lambda n: votes[n])
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        for m in g.members.values():
            m.assignment = ""
            assert m.join is not None
            m.join.set_result(self._join_answer(g, m))

    def _join_answer(self, g: Group, m: Member) -> dict[str, Any]:
        members = []
        if m.member_id == g.leader:
            members = [{"member_id": x.member_id, "group_instance_id": x.instance_id,
                        "metadata": dict(x.protocols)[g.protocol_name or ""]}
                       for x in g.members.values()]
        return {"error_code": NONE, "generation_id": g.generation,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                "leader": g.leader or "", "member_id": m.member_id, "members": members}

    # ------------------------------------------------------------------ SyncGroup
    async def sync(self, b: dict[str, Any]) -> dict[str, Any]:
        g = self._group(b["group_id"])
        fenced = self._fenced(g, b)
        if fenced:
            return {"error_code": fenced, "assignment": ""}
        m = g.members.get(b["member_id"])
        if m is None:
            return {"error_code": UNKNOWN_MEMBER_ID, "assignment": ""}
        if b["generation_id"] != g.generation:
            return {"error_code": ILLEGAL_GENERATION, "assignment": ""}
        m.last_seen = time.monotonic()
        answer = {"protocol_type": g.protocol_type, "protocol_name": g.protocol_name}
        if g.state == PREPARING:
            return {"error_code": REBALANCE_IN_PROGRESS, "assignment": "", **answer}
        if g.state == STABLE:
            return {"error_code": NONE, "assignment": m.assignment, **answer}
        if m.sync is None or m.sync.done():
            m.sync = asyncio.get_running_loop().create_future()
        fut = m.sync
        if m.member_id == g.leader:
            given = {a["member_id"]: a["assignment"] for a in b.get("assignments") or []}
            for x in g.members.values():
                x.assignment = given.get(x.member_id, "")
            g.state = STABLE
            for x in g.members.values():
                if x.sync is not None and not x.sync.done():
                    x.sync.set_result({"error_code": NONE, "assignment": x.assignment,
                                       **answer})
        result = await fut
        return {**answer, **result}

    # ------------------------------------------------------------------ Heartbeat
    async def heartbeat(self, b: dict[str, Any]) -> dict[str, Any]:
        g = self._group(b["group_id"])
        fenced = self._fenced(g, b)
        if fenced:
            return {"error_code": fenced}
        m = g.members.get(b["member_id"])
        if m is None:
            return {"error_code": UNKNOWN_MEMBER_ID}
        if b["generation_id"] != g.generation:
            return {"error_code": ILLEGAL_GENERATION}
        m.last_seen = time.monotonic()
        return {"error_code": REBALANCE_IN_PROGRESS if g.state == PREPARING else NONE}

    # ----------------------------------------------------------------- LeaveGroup
    async def leave(self, b: dict[str, Any]) -> dict[str, Any]:
        """LeaveGroup: ``member_ids``, or ``members`` with a ``group_instance_id`` each
        (a static member may be named by its instance id alone, member id "")."""
        g = self._group(b["group_id"])
        wanted = [{"member_id": x, "group_instance_id": None} for x in b.get("member_ids") or []]
        wanted += list(b.get("members") or [])
        out = []
        for w in wanted:
            member_id, instance = w.get("member_id") or "", w.get("group_instance_id")
            code = NONE
            if instance:
                known = g.static.get(instance)
                if known is None:
                    code = UNKNOWN_MEMBER_ID
                elif member_id and member_id != known:
                    code = FENCED_INSTANCE_ID
                else:
                    member_id = known
            m = g.members.pop(member_id, None) if code == NONE else None
            if code == NONE and m is None:
                code = UNKNOWN_MEMBER_ID
            out.append({"member_id": member_id, "group_instance_id": instance,
                        "error_code": code})
            if m is not None:
                self._removed(g, m)
        return {"error_code": NONE, "members": out}

    def _removed(self, g: Group, m: Member) -> None:
        if m.instance_id and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        for fut in (m.join, m.sync):
            if fut is not None and not fut.done():
                fut.set_result({"error_code": UNKNOWN_MEMBER_ID, "assignment": ""})
        if g.members:
            self._prepare(g)
            self._maybe_complete_join(g)
        else:
            g.state, g.leader, g.protocol_name = EMPTY, None, None

    async def _expire_loop(self) -> None:
        """Members whose session ran out are removed; rebalances past their timeout end."""
        while any(g.members or g.pending for g in self.groups.values()):
            await asyncio.sleep(EXPIRY_TICK_S)
            now = time.monotonic()
            for g in list(self.groups.values()):
                g.pending = {k: v for k, v in g.pending.items() if v > now}
                for m in list(g.members.values()):
                    waiting = any(f is not None and not f.done() for f in (m.join, m.sync))
                    if not waiting and now - m.last_seen > m.session_timeout_ms / 1000:
                        del g.members[m.member_id]
                        self._removed(g, m)
                if g.state == PREPARING and now >= g.rebalance_deadline:
                    self._maybe_complete_join(g, deadline_passed=True)
                elif g.state == PREPARING and g.initial_until and now >= g.initial_until:
                    self._maybe_complete_join(g)
                if g.state == EMPTY and not g.members and not g.pending:
                    del self.groups[g.group_id]

    # -------------------------------------------------------------- OffsetCommit
    async def commit(self, b: dict[str, Any]) -> dict[str, Any]:
        """A consumer's OffsetCommit, checked against its generation, then written through
        the group offsets path as a transaction of the group's own id."""
        group_id, generation, member_id = b["group_id"], b["generation_id"], b["member_id"]
        g = self.groups.get(group_id)
        fenced = self._fenced(g, b) if g is not None else NONE
        if fenced:
            return {"error_code": fenced}
        if generation >= 0 or member_id:
            if g is None or member_id not in g.members:
                return {"error_code": UNKNOWN_MEMBER_ID}
            if generation != g.generation:
                return {"error_code": ILLEGAL_GENERATION}
            if g.state == COMPLETING:
                return {"error_code": REBALANCE_IN_PROGRESS}
            g.members[member_id].last_seen = time.monotonic()
        elif g is not None and g.members:
            return {"error_code": ILLEGAL_GENERATION}  # a simple commit into a live group
        e = self.coordinator
        tid = OFFSETS_TID_PREFIX + group_id
        lock = self._commit_locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            r = await e.init_producer_id(tid)
            pid, epoch = r["producer_id"], r["epoch"]
            try:
                await e.offsets.add_offsets(tid, pid, epoch, group_id, b["offsets"],
                                            g.protocol_type if g is not None else None)
            except BaseException:
                await e.end_txn(tid, pid, epoch, False)
                raise
            await e.end_txn(tid, pid, epoch, True)
        return {"error_code": NONE}

    def describe(self, group_id: str) -> dict[str, Any]:
        """A group's membership as Kafka's DescribeGroups shows it: members, and once the
        group is Stable the chosen protocol with each member's metadata for it (base64)
        and its assignment; in other states the members without them, as Kafka does."""
        g = self.groups.get(group_id)
        if g is None:
            return {"group_id": group_id, "state": EMPTY, "members": []}
        stable = g.state == STABLE
        return {"group_id": group_id, "state": g.state, "generation": g.generation,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                "leader": g.leader, "members": [
                    {"member_id": m.member_id, "group_instance_id": m.instance_id,
                     "client_id": m.client_id,
                     "client_host": m.client_host, "assignment": m.assignment,
                     "metadata": dict(m.protocols).get(g.protocol_name or "", "")
                     if stable else ""} for m in g.members.values()]}

    def live(self) -> dict[str, Group]:
        """The groups that have members (or members joining), by id."""
        return {k: g for k, g in self.groups.items() if g.members or g.pending}


def _join_error(code: int, member_id: str) -> dict[str, Any]:
    return {"error_code": code, "generation_id": -1, "protocol_type": None,
            "protocol_name": None, "leader": "", "member_id": member_id, "members": []}


_MEMBERSHIP: weakref.WeakKeyDictionary[Any, GroupMembership] = weakref.WeakKeyDictionary()


def membership(coordinator: TransactionCoordinator) -> GroupMembership:
    """The coordinator's group membership role (made on first use)."""
    got = _MEMBERSHIP.get(coordinator)
    if got is None:
        got = _MEMBERSHIP[coordinator] = GroupMembership(
            coordinator, getattr(coordinator, "group_initial_rebalance_delay_ms",
                                 DEFAULT_INITIAL_REBALANCE_DELAY_MS))
    return got


# ------------------------------------------------------------- the HTTP operations
async def _join(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await membership(e).join(b)


async def _sync(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await membership(e).sync(b)


async def _heartbeat(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await membership(e).heartbeat(b)


async def _leave(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await membership(e).leave(b)


async def _commit(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await membership(e).commit(b)


async def _describe(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return membership(e).describe(b["group_id"])


GROUP_OPERATIONS = {
    "join_group": _join, "sync_group": _sync, "group_heartbeat": _heartbeat,
    "leave_group": _leave, "commit_offsets": _commit, "describe_group": _describe,
}

__all__ = ["GROUP_OPERATIONS", "GroupMembership", "membership"]
