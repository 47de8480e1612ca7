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

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class TxnlogCommitMessage(WriterCommitMessage):
    """What a successful task attempt hands the driver: the member to commit."""

    member_id: int
    member_epoch: int
    task_partition: int
    attempt: int
    records: int = 0
    written: list[tuple[str, int, int, int]] = field(default_factory=list)  # t, p, base, n


@dataclass(frozen=True)
class Membership:
    """The transaction a task joins: (transactional id, producer id, epoch)."""

    transactional_id: str
    producer_id: int
    epoch: int


__all__ = ["Membership", "TxnlogCommitMessage"]
