"""The typed completion plan keeps the JSON form Prepare records and snapshots always had."""

from __future__ import annotations

import json
from typing import Any

from txnlog.coordinator.state.completion_plan import (
    CompletionPlan,
    MarkerEntry,
    MarkerRow,
    TxnIndexRow,
    share_markers,
)
from txnlog.coordinator.state.partition_state import PartitionOffset
from txnlog.log_format.codec.control import ControlType, control_info
from txnlog.log_format.codec.records import decode_batches

# A plan as the untyped coordinator wrote it (key order included): commit markers for two
# producers in t-0, a member left out in t-1 (ABORT + .txnindex), a fence, a verified
# reservation and a shared marker object.
OLD_FORM: dict[str, Any] = {
    "outcome": "commit", "ts": 1_700_000_000_000, "cepoch": 4,
    "markers": [["t", 0, 10, [[5, 3, 1], [9, 0, 1]]], ["t", 1, 20, [[5, 3, 1], [11, 0, 0]]]],
    "txnindex": [["t", 1, 20, [[11, 17, 21, 19]]]],
    "fences": [["t", 1, 18]], "verified": [["t", 0, 7]], "reason": "client",
    "batch_id": None, "next_pid": 5, "next_epoch": 4,
    "shared": [["t", 0, 8]],
}


def test_json_round_trip_is_byte_identical() -> None:
    plan = CompletionPlan.from_json(json.loads(json.dumps(OLD_FORM)))
    assert json.dumps(plan.to_json(), separators=(",", ":")) == \
        json.dumps(OLD_FORM, separators=(",", ":"))
    assert plan.markers[1] == MarkerRow("t", 1, 20, [MarkerEntry(5, 3, 1), MarkerEntry(11, 0, 0)])
    assert plan.txnindex == [TxnIndexRow("t", 1, 20, [[11, 17, 21, 19]])]
    assert plan.fences == [PartitionOffset("t", 1, 18)] and plan.commit
    assert plan.coordinator_epoch == 4 and plan.shared == [PartitionOffset("t", 0, 8)]


def test_no_shared_key_unless_shared() -> None:
    old = {k: v for k, v in OLD_FORM.items() if k != "shared"}
    plan = CompletionPlan.from_json(old)
    assert plan.shared == [] and json.loads(json.dumps(plan.to_json())) == old
    assert list(plan.to_json()) == list(old), "keys in the old order"


def test_marker_bytes_are_the_control_batches_at_the_planned_offsets() -> None:
    plan = CompletionPlan.from_json(OLD_FORM)
    batches = decode_batches(plan.marker_bytes(plan.markers[1]))
    assert [b.header.base_offset for b in batches] == [20, 21]
    kinds = [control_info(b) for b in batches]
    assert [k.control_type if k else None for k in kinds] == [ControlType.COMMIT,
                                                              ControlType.ABORT]
    assert all(k is not None and k.coordinator_epoch == 4 for k in kinds)
    assert plan.marker_bytes(plan.markers[1]) == \
        CompletionPlan.from_json(json.loads(json.dumps(plan.to_json()))).marker_bytes(
            plan.markers[1]), "a restart rebuilds the same bytes"


def _plan(markers: list[list[Any]], txnindex: list[list[Any]] | None = None
          ) -> CompletionPlan:
    return CompletionPlan.from_json({**OLD_FORM, "markers": markers,
                                     "txnindex": txnindex or [], "shared": []})


def test_consecutive_commit_markers_share_one_object() -> None:
    a = _plan([["t", 0, 10, [[1, 0, 1]]], ["t", 1, 5, [[1, 0, 1]]]])
    b = _plan([["t", 0, 11, [[2, 0, 1]]], ["t", 1, 6, [[2, 0, 1], [3, 0, 0]]]],
              [["t", 1, 6, [[3, 4, 7, 7]]]])  # t-1 indexed: its own object
    c = _plan([["t", 0, 12, [[4, 0, 1]]], ["t", 1, 8, [[4, 0, 1]]]])
    alone = _plan([["u", 0, 3, [[5, 0, 1]]]])
    share_markers([a, b, c, alone])
    assert a.shared == [("t", 0, 10)]
    assert b.shared == [("t", 0, 10)]
    assert c.shared == [("t", 0, 10)], "t-1 at 8 follows b's indexed run: not shared"
    assert alone.shared == []
    assert json.loads(json.dumps(a.to_json()))["shared"] == [["t", 0, 10]]
