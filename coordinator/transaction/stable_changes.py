"""Which partitions' HW/LSO a log record can change: what the stable publisher recomputes.

A commit must publish in proportion to the partitions it touches, not to the root,
so the publisher recomputes only the partitions that records changed since its
last head (``partition_state.visible_offsets(only=...)``) and writes those in a delta.
Every change of the state is one record applied by ``CoordinatorState.apply``, and a
partition's HW and LSO follow from its ``PartitionState`` alone (plus the held-back and
floor partitions, which ``visible_offsets`` adds itself), so the partitions a record can
change are a function of the record and the state just before it:

- ``topic``: every partition of the new topic;
- ``reserve``, ``confirm``, ``fence``: their rows;
- ``txn``: the transaction's partitions, and those of its plan (markers, verified
  reservations), as they were before it is applied (Complete clears them) and as the record
  carries them (Prepare's plan);
- ``takeover``, ``pid_block``, ``producer``, ``member``, ``batch``, ``offsets``, and the
  merge records (``merge``, ``merged``, ``cleaned``, ``swept``: merging moves no HW or
  LSO): none;
- any other kind (one added later): every partition, until the next full recompute.

What a missed partition would cost is bounded: a committed or aborted transaction holds its
partitions in ``unreplicated`` until it is whole below every LSO, and those partitions are
always recomputed, so atomic visibility does not rest on this list; a missed partition
would only publish a value late.

The journal is one of ``CoordinatorState.observers``, told of every record just before
``apply`` (the state's one mutation point) makes its change: the publisher observes what is
applied without the state knowing about publishing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import partition_key
from ..state.txn_log_records import LogRecord

NO_PARTITIONS = frozenset({"takeover", "pid_block", "producer", "member", "batch", "offsets",
                           "merge", "cleaned", "shared_cleaned", "swept", "group_delete",
                           "kafka_client", "compact", "compacted",
                           "log_start", "retain", "retained", "topic_config"})


def _plan_keys(plan: Any) -> Iterable[str]:
    """Partitions of a plan, given as the JSON the record carries or as a CompletionPlan."""
    if plan is None:
        return ()
    if not isinstance(plan, dict):
        plan = plan.to_json()
    rows = [*plan.get("markers", ()), *plan.get("verified", ()), *plan.get("fences", ())]
    return (partition_key(r[0], int(r[1])) for r in rows)


def touched(state: CoordinatorState, rec: LogRecord) -> set[str] | None:
    """The partitions ``rec`` can change, read before it is applied; None = any partition."""
    d = rec.data
    kind = rec.kind
    if kind in NO_PARTITIONS:
        return set()
    if kind == "topic":
        return {partition_key(d["name"], p) for p in range(int(d["partitions"]))}
    if kind == "merged":  # M moved: the runs below it leave the partition's tail
        return {str(d["id"])}
    if kind in ("reserve", "confirm", "fence"):
        return {partition_key(row[0], int(row[1])) for row in d["parts"]}
    if kind == "txn":
        out: set[str] = set()
        txn = state.txns.get(d["tid"])
        if txn is not None:
            out.update(txn.partitions)
            out.update(_plan_keys(txn.plan))
        out.update(_plan_keys((d.get("ext") or {}).get("plan")))
        return out
    return None


class ChangeJournal:
    """The partitions changed since the last ``drain``, collected as records are applied."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.everything = True  # until the first drain: the first head is a full recompute

    def attach(self, state: CoordinatorState) -> None:
        """Observe every record ``state`` applies from now on."""
        state.observers.append(self.observe)

    def observe(self, state: CoordinatorState, rec: LogRecord) -> None:
        """Note the partitions ``rec`` can change (called just before it is applied)."""
        keys = touched(state, rec)
        if keys is None:
            self.everything = True
        else:
            self.keys |= keys

    def mark_everything(self) -> None:
        """The next recompute covers every partition (a restore, a takeover)."""
        self.everything = True

    def drain(self) -> set[str] | None:
        """The partitions changed since the last drain (None: all of them), and forget them."""
        if self.everything:
            self.everything = False
            self.keys = set()
            return None
        keys, self.keys = self.keys, set()
        return keys
