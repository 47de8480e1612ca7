"""Per-partition producer state as pure tables: sequences, HW/LSO, what holds LSOs back.

These rules were only exercised by the chaos runs before; each case here is one of them,
stated on a hand-built state (no event loop, no storage).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from txnlog.coordinator.errors import DuplicateSequenceError, OutOfOrderSequenceError
from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.partition_state import (
    SEQ_HISTORY,
    PartitionState,
    ProducerState,
    SeqEntry,
    UnreplicatedRange,
    UnreplicatedTxn,
    check_sequence,
    partition_key,
    visible_offsets,
)
from txnlog.coordinator.state.runtime import Observer, StorageIO
from txnlog.coordinator.transaction.stable_publisher import StablePublisher
from txnlog.log_format.storage import Storage

KEY = "t-0"


def _producer(*batches: tuple[int, int, int, int]) -> ProducerState:
    ps = ProducerState(7, 0, None)
    for b in batches:
        ps.record_batch(KEY, SeqEntry(*b))
    return ps


# ------------------------------------------------------------------ sequences

def test_the_next_batch_in_sequence_is_new() -> None:
    assert check_sequence(_producer(), KEY, 0, 0, 5) is None
    ps = _producer((0, 0, 5, 100))
    assert ps.expected_sequence(KEY, 0) == 5
    assert check_sequence(ps, KEY, 0, 5, 1) is None


def test_a_retried_batch_gets_its_offsets_again() -> None:
    ps = _producer((0, 0, 5, 100), (0, 5, 2, 140))
    assert check_sequence(ps, KEY, 0, 0, 5) == 100
    assert check_sequence(ps, KEY, 0, 5, 2) == 140


def test_a_known_sequence_with_another_count_is_a_duplicate_sequence() -> None:
    ps = _producer((0, 0, 5, 100))
    with pytest.raises(DuplicateSequenceError):
        check_sequence(ps, KEY, 0, 0, 4)


def test_a_gap_is_out_of_order() -> None:
    ps = _producer((0, 0, 5, 100))
    with pytest.raises(OutOfOrderSequenceError):
        check_sequence(ps, KEY, 0, 6, 1)
    with pytest.raises(OutOfOrderSequenceError):  # nothing yet: must start at 0
        check_sequence(_producer(), KEY, 0, 3, 1)


def test_only_the_last_batches_are_remembered() -> None:
    ps = _producer(*[(0, i, 1, 10 + i) for i in range(SEQ_HISTORY + 2)])
    assert [h.base_seq for h in ps.seqs[KEY]] == list(range(2, SEQ_HISTORY + 2))
    assert check_sequence(ps, KEY, 0, 2, 1) == 12
    with pytest.raises(DuplicateSequenceError):  # older than the history
        check_sequence(ps, KEY, 0, 1, 1)


def test_a_new_epoch_starts_the_sequence_again() -> None:
    """A fenced (older) epoch's batches do not count for the new one (the epoch itself is
    checked first: Txn.check_epoch, test_txn_metadata)."""
    ps = _producer((0, 0, 5, 100))
    assert check_sequence(ps, KEY, 1, 0, 3) is None
    with pytest.raises(OutOfOrderSequenceError):
        check_sequence(ps, KEY, 1, 5, 1)
    ps.record_batch(KEY, SeqEntry(1, 0, 3, 200))
    assert ps.seqs[KEY] == [SeqEntry(1, 0, 3, 200)], "a new epoch clears the history"
    assert list(ps.seqs[KEY][0]) == [1, 0, 3, 200], "serialises as [epoch, seq, count, base]"


# ------------------------------------------------------------------ HW / LSO

def _topics(n: int) -> dict[str, dict[str, object]]:
    return {"t": {"partitions": n, "config": {}}}


def test_hw_is_the_first_unresolved_offset_and_lso_the_first_open_transaction() -> None:
    parts = {"t-0": PartitionState(10, {4: 6, 8: 9}, {}),
             "t-1": PartitionState(10, {}, {3: 2, 4: 7}),
             "t-2": PartitionState(10, {9: 10}, {3: 9})}
    vis = visible_offsets(_topics(4), parts, [], {})
    assert vis.offsets == {"t-0": (4, 4), "t-1": (10, 2), "t-2": (9, 9), "t-3": (0, 0)}


def test_a_commit_holds_every_partition_until_it_is_visible_in_all() -> None:
    """Committed in t-0 and t-1, but behind another producer's open transaction in t-1:
    t-0's LSO stays at its first offset there, or a reader would see half of it."""
    commit = UnreplicatedTxn(True, {"t-0": UnreplicatedRange(5, 6, 7),
                                    "t-1": UnreplicatedRange(6, 7, 8)})
    parts = {"t-0": PartitionState(10), "t-1": PartitionState(10, {}, {99: 2})}
    vis = visible_offsets(_topics(2), parts, [commit], {})
    assert vis.offsets == {"t-0": (10, 5), "t-1": (10, 2)}
    assert vis.unreplicated == [commit]
    del parts["t-1"].open_first[99]  # the other transaction completes
    vis = visible_offsets(_topics(2), parts, [commit], {})
    assert vis.offsets == {"t-0": (10, 10), "t-1": (10, 10)}
    assert vis.unreplicated == [], "released: nothing can hold it again"


def test_holding_is_transitive() -> None:
    """A held commit lowers an LSO, which holds another commit sharing that partition."""
    a = UnreplicatedTxn(True, {"t-0": UnreplicatedRange(5, 6, 7),
                               "t-1": UnreplicatedRange(6, 7, 8)})
    b = UnreplicatedTxn(True, {"t-0": UnreplicatedRange(7, 8, 9),  # visible without a
                               "t-2": UnreplicatedRange(4, 5, 6)})
    parts = {"t-0": PartitionState(10), "t-1": PartitionState(10, {}, {99: 1}),
             "t-2": PartitionState(10)}
    vis = visible_offsets(_topics(3), parts, [b], {})
    assert vis.offsets == {"t-0": (10, 10), "t-1": (10, 1), "t-2": (10, 10)}
    vis = visible_offsets(_topics(3), parts, [a, b], {})
    assert vis.offsets == {"t-0": (10, 5), "t-1": (10, 1), "t-2": (10, 4)}
    assert vis.unreplicated == [a, b]


def test_an_abort_holds_until_the_hw_passes_its_marker() -> None:
    """Its records at 2, another producer's reservation at 3, its ABORT marker at 4: until
    offset 3 is resolved readers cannot see the marker, so the LSO stays at 2."""
    abort = UnreplicatedTxn(False, {KEY: UnreplicatedRange(2, 3, 5)})
    part = PartitionState(5, {3: 4}, {})
    vis = visible_offsets(_topics(1), {KEY: part}, [abort], {})
    assert vis.offsets == {KEY: (3, 2)} and vis.unreplicated == [abort]
    part.unresolved.clear()
    vis = visible_offsets(_topics(1), {KEY: part}, [abort], {})
    assert vis.offsets == {KEY: (5, 5)} and vis.unreplicated == []


def test_a_commit_leaving_members_out_holds_until_their_markers_are_visible() -> None:
    commit = UnreplicatedTxn(True, {KEY: UnreplicatedRange(2, 4, 6)})
    part = PartitionState(6, {4: 5}, {})
    assert visible_offsets(_topics(1), {KEY: part}, [commit], {}).offsets == {KEY: (4, 2)}


def test_the_predecessor_floor_is_republished_until_caught_up() -> None:
    parts = {"t-0": PartitionState(10), "t-1": PartitionState(30)}
    floor = {"t-0": (20, 18), "t-1": (25, 25), "gone-0": (5, 5)}
    vis = visible_offsets(_topics(2), parts, [], floor)
    assert vis.offsets == {"t-0": (20, 18), "t-1": (30, 30)}
    assert vis.predecessor_floor == {"t-0": (20, 18), "gone-0": (5, 5)}
    parts["t-0"] = PartitionState(21, {}, {4: 19})
    vis = visible_offsets(_topics(2), parts, [], vis.predecessor_floor)
    assert vis.offsets["t-0"] == (21, 19) and "t-0" not in vis.predecessor_floor


def test_the_floor_applies_after_holding_back() -> None:
    commit = UnreplicatedTxn(True, {"t-0": UnreplicatedRange(5, 6, 7),
                                    "t-1": UnreplicatedRange(6, 7, 8)})
    parts = {"t-0": PartitionState(10), "t-1": PartitionState(10, {}, {99: 2})}
    vis = visible_offsets(_topics(2), parts, [commit], {"t-0": (10, 8)})
    assert vis.offsets["t-0"] == (10, 8)
    assert vis.unreplicated == [commit], "what still holds is judged before the floor"


def test_computing_the_view_changes_nothing() -> None:
    commit = UnreplicatedTxn(True, {"t-0": UnreplicatedRange(1, 2, 3)})
    parts = {"t-0": PartitionState(10)}
    unreplicated, floor = [commit], {"t-0": (4, 4)}
    before = copy.deepcopy((parts, unreplicated, floor))
    vis = visible_offsets(_topics(1), parts, unreplicated, floor)
    assert vis.unreplicated == [] and vis.predecessor_floor == {}
    assert (parts, unreplicated, floor) == before


def test_describing_does_not_prune_and_publishing_does(tmp_path: Path) -> None:
    """``view()`` (describe_topic, the stable endpoint) leaves the state alone; only the
    publisher, as it publishes, releases what no longer holds — with the same view."""
    state = CoordinatorState(topics=_topics(1), partitions={KEY: PartitionState(10)})
    state.unreplicated = [UnreplicatedTxn(True, {KEY: UnreplicatedRange(1, 2, 3)})]
    io = StorageIO(Storage.for_url(tmp_path.as_uri()), Observer(), threads=1)
    pub = StablePublisher(io, state, Observer())
    pub.predecessor_floor = {KEY: (4, 4), "other-0": (1, 1)}
    try:
        view = pub.view()
        assert len(state.unreplicated) == 1 and len(pub.predecessor_floor) == 2
        assert pub.view() == view
        assert pub.publishable() == view
        assert state.unreplicated == [] and pub.predecessor_floor == {"other-0": (1, 1)}
        assert pub.view() == view
    finally:
        io.shutdown()


def test_partition_keys_are_layout_dir_names() -> None:
    assert partition_key("orders", 3) == "orders-3"
    with pytest.raises(ValueError):
        partition_key("../x", 0)
