"""One transaction's metadata: the transition table, epoch checks, late EndTxn answers."""

from __future__ import annotations

import itertools

import pytest
from txnlog.coordinator.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from txnlog.coordinator.state.states import VALID_PREVIOUS, TxnState, can_transition
from txnlog.coordinator.state.txn_metadata import MAX_EPOCH, Txn

S = TxnState

# Kafka's TransactionState.validPreviousStates with transaction version 2, spelled out.
ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


def _txn(state: TxnState = S.EMPTY, pid: int = 5, epoch: int = 3) -> Txn:
    txn = Txn("tx", pid, epoch, 60_000, state)
    txn.partitions = {"t-1": ["t", 1], "t-0": ["t", 0], "u-2": ["u", 2]}
    return txn


@pytest.mark.parametrize("old,new", list(itertools.product(S, S)))
def test_transitions_follow_kafkas_table(old: TxnState, new: TxnState) -> None:
    assert can_transition(old, new) == ((old, new) in ALLOWED)
    txn = _txn(old)
    if (old, new) in ALLOWED:
        rec = txn.transition_record(new)
        assert rec.kind == "txn" and rec.data["state"] == int(new)
        assert txn.state is old, "building the record changes nothing"
    else:
        with pytest.raises(InvalidTxnStateError):
            txn.transition_record(new)


def test_the_table_covers_every_state() -> None:
    assert set(VALID_PREVIOUS) == set(S)


def test_the_record_is_kafkas_transaction_log_value() -> None:
    txn = _txn(S.ONGOING)
    txn.start_ms = 1234
    d = txn.transition_record(S.PREPARE_COMMIT, plan={"x": 1}).data
    assert d["partitions"] == [["t", [0, 1]], ["u", [2]]]
    assert (d["pid"], d["epoch"], d["timeout_ms"], d["start_ms"]) == (5, 3, 60_000, 1234)
    assert d["ext"] == {"plan": {"x": 1}}
    assert txn.transition_record(S.ONGOING).data["start_ms"] == 1234, "already open"
    assert _txn(S.EMPTY).transition_record(S.EMPTY).data["partitions"] is None
    assert _txn(S.EMPTY).transition_record(S.EMPTY).data["start_ms"] == -1
    assert _txn(S.EMPTY).transition_record(S.ONGOING).data["start_ms"] > 0
    assert _txn(S.PREPARE_ABORT).transition_record(S.COMPLETE_ABORT).data["partitions"] == []
    bumped = _txn(S.COMPLETE_COMMIT).transition_record(S.EMPTY, pid=9, epoch=0,
                                                       timeout_ms=5)
    assert (bumped.data["pid"], bumped.data["epoch"], bumped.data["timeout_ms"]) == (9, 0, 5)
    assert bumped.data["ext"] == {}


def test_epoch_checks() -> None:
    txn = _txn(pid=5, epoch=3)
    txn.check_epoch(5, 3)
    with pytest.raises(ProducerFencedError):
        txn.check_epoch(6, 3)  # another producer id took over
    with pytest.raises(ProducerFencedError):
        txn.check_epoch(5, 2)  # an older instance
    with pytest.raises(InvalidProducerEpochError):
        txn.check_epoch(5, 4)  # ahead of the coordinator


def test_epoch_exhaustion() -> None:
    assert not _txn(epoch=MAX_EPOCH - 2).epoch_exhausted()
    assert _txn(epoch=MAX_EPOCH - 1).epoch_exhausted()


@pytest.mark.parametrize("last,want,error", [
    ({"outcome": "commit", "reason": "client"}, "commit", None),
    ({"outcome": "abort", "reason": "client"}, "abort", None),
    ({"outcome": "abort", "reason": "client"}, "commit", InvalidTxnStateError),
    ({"outcome": "abort", "reason": "timeout"}, "abort", InvalidProducerEpochError),
    ({"outcome": "abort", "reason": "fenced"}, "commit", ProducerFencedError),
])
def test_a_late_end_txn_gets_the_answer_of_how_it_ended(last: dict[str, object], want: str,
                                                        error: type[Exception] | None) -> None:
    txn = _txn()
    last = {"pid": 5, "epoch": 2, **last}
    if error is None:
        txn.late_end(want, last)
    else:
        with pytest.raises(error):
            txn.late_end(want, last)


def test_completing_covers_prepared_and_waiting_commits() -> None:
    assert _txn(S.PREPARE_COMMIT).completing and _txn(S.PREPARE_ABORT).completing
    assert not _txn(S.ONGOING).completing
