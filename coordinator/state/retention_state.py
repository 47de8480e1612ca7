"""What the coordinator's log says about a partition's log start offset.

Retention and DeleteRecords (``maintenance/log_retention``) move a partition's log start
offset in three logged steps, like a merge: ``log_start`` (DeleteRecords asked for an
offset), ``retain`` (the plan: manifest seq, how many leading objects go, the new log
start) and ``retained`` (the manifest is durable; what it dropped is garbage after the
grace period). This module holds what those records do to the state, so that the state
never imports the job that writes them.

Pure and synchronous, like ``coordinator_state``: ``apply_*`` are called by
``CoordinatorState.apply`` with the state's own containers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txnlog.log_format import layout, planted_bugs
from txnlog.log_format.manifest import new_manifest

from .merge_state import GARBAGE_COALESCE_MS, Garbage, PartitionMerges


@dataclass(frozen=True)
class RetainPlan:
    """A change of a partition's log start offset, as its ``retain`` record carries it:
    the next manifest ``seq`` drops the first ``drop`` merged objects and carries
    ``log_start``."""

    topic: str
    partition: int
    seq: int
    drop: int
    log_start: int
    reason: str
    grace_ms: int
    ms: int

    def to_record(self) -> dict[str, Any]:
        return {"id": layout.partition_dir(self.topic, self.partition), "topic": self.topic,
                "p": self.partition, "seq": self.seq, "drop": self.drop,
                "log_start": self.log_start, "reason": self.reason,
                "grace_ms": self.grace_ms, "ms": self.ms}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> RetainPlan:
        return cls(str(d["topic"]), int(d["p"]), int(d["seq"]), int(d["drop"]),
                   int(d["log_start"]), str(d["reason"]), int(d["grace_ms"]), int(d["ms"]))

    def manifest(self, pm: PartitionMerges) -> Any:
        """The manifest this plan leads to (deterministic in the plan and ``pm``)."""
        kept = pm.objects[self.drop:]
        start = kept[0].base_offset if kept else pm.merged_end
        return new_manifest(self.topic, self.partition, self.seq, list(kept), start,
                            pm.open_since_ms, max(pm.grace_ms, self.grace_ms), self.ms,
                            self.log_start)


def apply_log_start(log_start_wanted: dict[str, int], d: dict[str, Any]) -> None:
    """DeleteRecords: the partition's log start offset must reach ``offset`` (the
    retention role publishes it)."""
    key = d["id"]
    log_start_wanted[key] = max(log_start_wanted.get(key, 0), int(d["offset"]))


def apply_retain(retain_planned: dict[str, RetainPlan], d: dict[str, Any]) -> None:
    retain_planned[d["id"]] = RetainPlan.from_record(d)


def apply_retained(retain_planned: dict[str, RetainPlan], merges: dict[str, PartitionMerges],
                   d: dict[str, Any]) -> None:
    """Manifest ``seq`` is durable: readers see the new log start; the dropped segments and
    the previous manifest are garbage after the grace period."""
    key = d["id"]
    plan = retain_planned.pop(key, None)
    if plan is None or plan.seq != int(d["seq"]):
        raise ValueError(f"retained record for {key} #{d['seq']} without its plan")
    pm = merges.setdefault(key, PartitionMerges())
    man = plan.manifest(pm)
    dropped = pm.objects[:plan.drop]
    if plan.drop and planted_bugs.enabled("retention_deletes_kept_segment"):
        # planted bug (chaos self-test): the first kept object is deleted with the dropped
        # ones while the new manifest still names it
        dropped = pm.objects[:plan.drop + 1]
    due = int(d["ms"]) + max(plan.grace_ms, pm.grace_ms)
    last = pm.garbage[-1] if pm.garbage else None
    old_hi = pm.seq + 1 if pm.seq else 0
    if last is not None and due - last.due_ms < GARBAGE_COALESCE_MS:
        last.due_ms = max(last.due_ms, due)
        last.manifest_hi = max(last.manifest_hi, old_hi)
        last.merged.extend(dropped)
    else:
        lo = last.manifest_hi if last else (pm.seq if pm.seq else 0)
        pm.garbage.append(Garbage(due, last.small_below if last else 0, lo,
                                  old_hi if pm.seq else lo, list(dropped)))
    pm.seq, pm.start_offset, pm.objects = plan.seq, man.start_offset, list(man.objects)
    pm.grace_ms = man.grace_ms
    pm.log_start = man.log_start_offset


def retention_snapshot(log_start_wanted: dict[str, int],
                       retain_planned: dict[str, RetainPlan],
                       topics_deleting: dict[str, int]) -> dict[str, Any]:
    """What a snapshot holds of retention (only when something is pending)."""
    out: dict[str, Any] = {}
    if log_start_wanted:
        out["log_start_wanted"] = dict(log_start_wanted)
    if retain_planned:
        out["retain_planned"] = {k: p.to_record() for k, p in retain_planned.items()}
    if topics_deleting:
        out["topics_deleting"] = dict(topics_deleting)
    return out


def restore_retention(s: dict[str, Any]) -> tuple[dict[str, int], dict[str, RetainPlan],
                                                   dict[str, int]]:
    """``log_start_wanted``, ``retain_planned`` and ``topics_deleting`` from a snapshot."""
    return ({k: int(v) for k, v in s.get("log_start_wanted", {}).items()},
            {k: RetainPlan.from_record(v) for k, v in s.get("retain_planned", {}).items()},
            {k: int(v) for k, v in s.get("topics_deleting", {}).items()})
