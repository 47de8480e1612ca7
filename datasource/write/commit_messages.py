"""What a write task hands the driver, in a module the driver can import cheaply.

Spark unpickles the tasks' commit messages in a driver-side planner process (a fresh one in
every restarted application) before it calls the sink's ``commit``. Unpickling a class
imports its module: when ``TxnlogCommitMessage`` lived in ``task_writer`` - which encodes,
so it imports pyarrow, numba and the codec's kernel modules - every fresh commit planner
paid ~0.47 s of CPU for code it never runs (part of a first query's extra). These
classes import nothing of that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class TxnlogCommitMessage(WriterCommitMessage):
    """What a successful task attempt hands the driver: the member to commit, and its runs
    (topic, partition, base, object, position, size), which the driver's EndTxn confirms."""

    member_id: int
    member_epoch: int
    task_partition: int
    attempt: int
    records: int = 0
    written: list[tuple[str, int, int, int]] = field(default_factory=list)  # t, p, base, n
    runs: list[tuple[str, int, int, str | None, int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Membership:
    """The transaction a task joins: (transactional id, producer id, epoch)."""

    transactional_id: str
    producer_id: int
    epoch: int


# EndTxn carries at most this many runs (a request holds at most 100,000 list items and
# 16 MiB); a write with more has them confirmed first, member by member, in calls this big.
RUNS_IN_END_TXN = 20_000


def runs_to_confirm(client: Any, messages: list[TxnlogCommitMessage]
                    ) -> list[tuple[str, int, int, str | None, int, int]]:
    """The runs the driver's EndTxn confirms: every successful attempt's. Past
    ``RUNS_IN_END_TXN`` they are confirmed here instead (``client``: the coordinator
    client; a confirm is idempotent, so a retried commit repeats it harmlessly) and EndTxn
    carries none."""
    runs = [run for m in messages for run in m.runs]
    if len(runs) <= RUNS_IN_END_TXN:
        return runs
    for m in messages:
        for i in range(0, len(m.runs), RUNS_IN_END_TXN):
            client.confirm(m.member_id, m.member_epoch, m.runs[i:i + RUNS_IN_END_TXN])
    return []


__all__ = ["RUNS_IN_END_TXN", "Membership", "TxnlogCommitMessage", "runs_to_confirm"]
