"""Kafka's transaction states and the transitions between them, in one table.

The ids are Kafka's (``TransactionState``), so ``TransactionStatus`` in our
``__transaction_state`` records means what it means in Kafka's. The table is Kafka's with
transaction version 2 (KIP-890): PrepareAbort may follow Empty/Complete*.

How the coordinator uses them:

- Empty: a producer id and epoch exist, no transaction is open.
- Ongoing: the first member registration or reservation opened a transaction; its timer runs.
- PrepareCommit / PrepareAbort: the outcome and every marker offset are durable; the
  coordinator only ever rolls these *forward* (never aborts after Prepare).
- CompleteCommit / CompleteAbort: every marker is written; the epoch has been bumped.
- Dead: the transactional id expired (``transactional.id.expiration.ms``); a tombstone.
- PrepareEpochFence: Kafka's transient state while an epoch bump fences an Ongoing
  transaction. We persist the fence and the PrepareAbort in one record (PrepareAbort with
  the bumped epoch), so this state is valid in the table but never stored.
"""

from __future__ import annotations

from enum import IntEnum

from ..errors import InvalidTxnStateError


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_idle(self) -> bool:
        """No transaction is open: a new one may start, the id may expire."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


S = TxnState
# state -> the states it may be entered from (Kafka's validPreviousStates, TV2).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY,
                                S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def can_transition(old: TxnState, new: TxnState) -> bool:
    return old in VALID_PREVIOUS[new]


def check_transition(transactional_id: str, old: TxnState, new: TxnState) -> None:
    """Raise InvalidTxnState for a transition Kafka does not allow."""
    if not can_transition(old, new):
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r}: cannot go from {old.kafka_name} to "
            f"{new.kafka_name}")
