"""The coordinator's administrative operations: what Kafka's admin tools ask a broker.

Kafka's ``kafka-consumer-groups``, ``kafka-transactions`` and AdminClient ask the group and
transaction coordinators for lists and descriptions the producer protocol never needs:
ListGroups, DeleteGroups, ListTransactions, DescribeProducers, and an operator's abort of a
transaction that holds a partition's LSO back. This module answers them from the
coordinator's state (``CoordinatorState``), apart from the request path of producers, so
the transaction coordinator itself stays about producers.

Reads change nothing and answer once what is logged is durable (``commits.sync``), so an
answer never shows a change a crash could still undo. The two writes go through the same
roles as any request: deleting a group is a ``group_delete`` record (replayed like every
other), aborting a transaction is the Completer's abort with an epoch bump, as a timeout's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import (
    InvalidRequestError,
    InvalidTxnStateError,
    NonEmptyGroupError,
    validate_topic_name,
)
from ..group.group_membership import membership
from ..state.partition_state import partition_key
from ..state.states import TxnState
from ..state.txn_log_records import LogRecord
from ..state.txn_metadata import now_ms

if TYPE_CHECKING:
    from ..state.txn_metadata import Txn
    from ..transaction.transaction_coordinator import TransactionCoordinator

Reply = dict[str, Any]
MAX_FILTER_ITEMS = 10_000
MAX_NAME_BYTES = 32_767  # a Kafka STRING: what a group or transactional id can be in the log


def _name(value: Any, what: str) -> str:
    """A group or transactional id: a non-empty string a Kafka STRING can hold."""
    if not isinstance(value, str) or not value or len(value.encode()) > MAX_NAME_BYTES:
        raise InvalidRequestError(f"{what} must be a non-empty string of at most "
                                  f"{MAX_NAME_BYTES} bytes")
    return value


def _str_list(body: dict[str, Any], key: str) -> list[str]:
    raw = body.get(key) or []
    if not isinstance(raw, list) or len(raw) > MAX_FILTER_ITEMS:
        raise InvalidRequestError(f"{key} must be a list of strings")
    return [_name(x, f"each of {key}") for x in raw]


def _int_list(body: dict[str, Any], key: str) -> list[int]:
    raw = body.get(key) or []
    if not isinstance(raw, list) or len(raw) > MAX_FILTER_ITEMS \
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        raise InvalidRequestError(f"{key} must be a list of integers")
    return raw


def _txn_row(e: TransactionCoordinator, txn: Txn) -> Reply:
    """One transactional id as ListTransactions and DescribeTransactions show it."""
    duration = now_ms() - txn.start_ms if txn.start_ms >= 0 else -1
    first: dict[str, int] = {}
    for key in txn.partitions:
        st = e.state.partition(key)
        offs = [st.open_first[pid] for pid in txn.producer_pids() if pid in st.open_first]
        if offs:
            first[key] = min(offs)
    return {"transactional_id": txn.tid, "producer_id": txn.pid, "epoch": txn.epoch,
            "state": txn.state.kafka_name, "timeout_ms": txn.timeout_ms,
            "start_ms": txn.start_ms, "duration_ms": duration,
            "last_update_ms": txn.last_update_ms,
            "partitions": sorted(txn.partitions), "first_offsets": first,
            "members": len(txn.members), "one_shot": txn.one_shot,
            "last_committed_batch": txn.last_committed_batch,
            "coordinator_epoch": e.coordinator_epoch}


async def list_groups(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """ListGroups: every group with live members (its state and protocol type are the
    group membership role's: Stable, PreparingRebalance, ...), with committed offsets, or
    with offsets in an open transaction (``Empty`` in Kafka's words: a group without
    members that keeps its offsets, and the protocol type its members had, ``""`` for a
    group only used for standalone commits, as in Kafka)."""
    await e.commits.sync()
    live = membership(e).live()
    names = set(e.state.group_offsets) | set(live)
    pending = {o["group"] for t in e.state.txns.values() for o in t.offsets}
    rows = []
    for g in sorted(names | pending):
        group = live.get(g)
        rows.append({"group_id": g, "state": group.state if group is not None else "Empty",
                     "protocol_type": (group.protocol_type or "") if group is not None
                     else e.state.group_protocols.get(g, ""),
                     "members": len(group.members) if group is not None else 0,
                     "committed_partitions": len(e.state.group_offsets.get(g, {})),
                     "pending_transaction": g in pending})
    return {"groups": rows}


async def delete_group(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """DeleteGroups, or with ``partitions`` OffsetDelete: forget a group's committed offsets
    (all, or those partitions'). Refused (Kafka's GroupNotEmpty, answered here as
    InvalidTxnState) while an open transaction carries offsets of it; a whole group with
    live members is NonEmptyGroup, as in Kafka."""
    group = _name(b["group_id"], "group_id")
    raw = b.get("partitions")
    parts = None
    if raw is not None:
        if not isinstance(raw, list) or len(raw) > MAX_FILTER_ITEMS:
            raise InvalidRequestError("partitions must be a list of {topic, partition}")
        parts = [[validate_topic_name(x["topic"]), int(x["partition"])] for x in raw]
    await e.commits.sync()
    live = membership(e).live().get(group)
    if parts is None and live is not None and live.members:
        raise NonEmptyGroupError(f"group {group!r} has {len(live.members)} live member(s) "
                                 f"(state {live.state}); it can be deleted once they leave")
    busy = sorted(t.tid for t in e.state.txns.values()
                  if any(o["group"] == group for o in t.offsets))
    if busy:
        raise InvalidTxnStateError(
            f"group {group!r} has offsets in the open transaction(s) {busy}; try again when "
            "they end (Kafka: GROUP_NOT_EMPTY)")
    held = e.state.group_offsets.get(group, {})
    if not held or (parts is not None
                    and not any(partition_key(t, p) in held for t, p in parts)):
        return {"group_id": group, "deleted": False}
    record: dict[str, Any] = {"id": group, "group": group}
    if parts is not None:
        record["partitions"] = parts
    await e.commits.commit([LogRecord("group_delete", record)])
    return {"group_id": group, "deleted": True}


async def list_transactions(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """ListTransactions with Kafka's filters: states, producer ids, and (KIP-994) a
    minimum duration of the open transaction."""
    states = {s.lower() for s in _str_list(b, "states")}
    pids = set(_int_list(b, "producer_ids"))
    min_ms = b.get("duration_ms")
    if min_ms is not None and (not isinstance(min_ms, int) or isinstance(min_ms, bool)):
        raise InvalidRequestError("duration_ms must be an integer")
    await e.commits.sync()
    rows = []
    for txn in sorted(e.state.txns.values(), key=lambda t: t.tid):
        row = _txn_row(e, txn)
        if states and row["state"].lower() not in states:
            continue
        if pids and txn.pid not in pids:
            continue
        if min_ms is not None and row["duration_ms"] < min_ms:
            continue
        rows.append(row)
    return {"transactions": rows}


async def describe_transactions(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """DescribeTransactions for several ids at once (unknown ids: InvalidProducerIdMapping)."""
    tids = _str_list(b, "transactional_ids")
    await e.commits.sync()
    return {"transactions": [_txn_row(e, e.state.txn(t)) for t in tids]}


async def describe_producers(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """DescribeProducers: the producers active in each partition — their epoch, last
    sequence, and the first offset of their open transaction there (-1: none)."""
    parts = b["partitions"]
    if not isinstance(parts, list) or len(parts) > MAX_FILTER_ITEMS:
        raise InvalidRequestError("partitions must be a list of {topic, partition}")
    await e.commits.sync()
    out = []
    for item in parts:
        topic, p = validate_topic_name(item["topic"]), int(item["partition"])
        if p < 0:
            raise InvalidRequestError(f"partition {p} of {topic!r} is negative")
        key = partition_key(topic, p)
        st = e.state.partition(key)
        producers = []
        for ps in sorted(e.state.producers.values(), key=lambda x: x.pid):
            hist = ps.seqs.get(key)
            open_first = st.open_first.get(ps.pid, -1)
            if not hist and open_first < 0:
                continue
            last = hist[-1] if hist else None
            producers.append({
                "producer_id": ps.pid, "producer_epoch": ps.epoch,
                "transactional_id": ps.tid, "member": ps.member,
                "last_sequence": last.next_seq - 1 if last else -1,
                "last_offset": last.base_offset + last.count - 1 if last else -1,
                "coordinator_epoch": e.coordinator_epoch,
                "current_txn_start_offset": open_first})
        out.append({"topic": topic, "partition": p, "producers": producers})
    return {"partitions": out}


async def abort_transaction(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """An operator's abort of an Ongoing transaction, named by its transactional id or by
    the partition and first offset that hold the LSO back (``kafka-transactions abort
    --topic --partition --start-offset``). Aborted with an epoch bump, as a timeout does:
    its producer is fenced. A transaction in Prepare* has a decided outcome and is never
    aborted (InvalidTxnState); its completion is already under way."""
    tid = b.get("transactional_id")
    if tid is None:
        topic = validate_topic_name(b["topic"])
        p, start = int(b["partition"]), int(b["start_offset"])
        st = e.state.partition(partition_key(topic, p))
        owners = {pid for pid, off in st.open_first.items() if off == start}
        found = [t for t in e.state.txns.values() if owners & t.producer_pids()]
        if not found:
            raise InvalidRequestError(
                f"no open transaction starts at offset {start} of {topic}-{p}")
        tid = found[0].tid
    txn = e.state.txn(_name(tid, "transactional_id"))
    if txn.state is not TxnState.ONGOING or txn.completing or e.completer.busy(tid):
        raise InvalidTxnStateError(
            f"the transaction of {tid!r} is {txn.state.kafka_name}: only an Ongoing "
            "transaction can be aborted (a prepared one completes by itself)")
    await e.completer.end(txn, commit=False, committed=set(), reason="fenced")
    return {"transactional_id": tid, "outcome": "abort", "producer_id": txn.pid,
            "epoch": txn.epoch}


Handler = Callable[["TransactionCoordinator", dict[str, Any]], Awaitable[Any]]

ADMIN_OPERATIONS: dict[str, Handler] = {
    "list_groups": list_groups, "delete_group": delete_group,
    "list_transactions": list_transactions, "describe_transactions": describe_transactions,
    "describe_producers": describe_producers, "abort_transaction": abort_transaction,
}
