"""``df.write.format("txnlog")``: one Kafka transaction per write, exactly once.

``writer()`` runs in a planner worker before any task (and before upstream stages): it fixes
the transaction's identity (InitProducerId), which travels to the tasks inside the pickled
writer. The coordinator starts the transaction's timer only when the first task joins, and
tasks heartbeat while they write, so a long shuffle before the write cannot time it out.
Each task attempt is a member producer; ``commit()`` commits exactly the members Spark
reports (the successful attempt of each partition) and aborts every other attempt's rows.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_call

from ..options import InvalidOptionError, WriteOptions
from ..schema import check_write_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient

    from .commit_messages import TxnlogCommitMessage

log = logging.getLogger(__name__)
# How long commit() keeps asking an unreachable or failing coordinator for the outcome.
COMMIT_RETRY_S = 120.0
# The project's one backoff (log_format.retry): 0.5 s doubling to 5 s until COMMIT_RETRY_S.
# No jitter: one driver asks, so there is no herd to spread out.
COMMIT_RETRY = RetryPolicy(max_attempts=None, base_delay_s=0.5, max_delay_s=5.0,
                           deadline_s=COMMIT_RETRY_S, jitter=False)


class _Decided(Exception):
    """Carries a refusal that decides the transaction past the retry loop (it retries every
    other CoordinatorError, and these are CoordinatorErrors too)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class UnknownWriteIdError(RuntimeError):
    """The coordinator no longer knows a batch write's transactional id when its driver
    asks for the outcome.

    A write's own id is one-shot: the coordinator drops it ``--one-shot-id-retention-ms``
    after its transaction ended (retried calls within that period get the same answer).
    ``first_attempt``: no earlier EndTxn of this call can have reached the coordinator, so
    the transaction ended without this commit — it was aborted (nothing else commits a
    write's own id); otherwise an earlier attempt may have committed it.
    """

    def __init__(self, transactional_id: str, *, first_attempt: bool,
                 cause: Exception) -> None:
        if first_attempt:
            what = ("its transaction had already ended before this commit asked, so it did "
                    "NOT commit: it was aborted — most likely transaction.timeout.ms passed "
                    "with no task heartbeating (a driver or cluster stalled between the "
                    "tasks and the commit). Rows of this write are not visible to "
                    "read_committed readers; run the write again")
        else:
            what = ("an earlier attempt of this commit may have committed it before the id "
                    "was dropped, so the outcome is unknown here: read the topic with "
                    "read_committed before running the write again, and give the "
                    "coordinator a --one-shot-id-retention-ms longer than the commit's retry "
                    f"window ({COMMIT_RETRY_S:.0f} s)")
        super().__init__(
            f"txnlog write {transactional_id!r}: the coordinator no longer knows this "
            "write's transactional id (a batch write's id is dropped "
            "--one-shot-id-retention-ms, default 10 min, after its transaction ends); "
            f"{what}. Check the coordinator's log for {transactional_id!r} to see how it "
            f"ended. (Coordinator: {cause})")
        self.transactional_id = transactional_id
        self.first_attempt = first_attempt


def coordinator_client(opts: WriteOptions) -> CoordinatorClient:
    """The driver's client: the ``coordinator`` option, or the root's registered coordinator
    (an embedded one is started when there is none — only ever on the driver)."""
    from txnlog.coordinator.client.embedded import coordinator_for_root

    endpoint = opts.coordinator or coordinator_for_root(
        opts.root, opts.storage_options, ca_file=opts.coordinator_credentials.ca_file)
    return task_client(opts, endpoint)


def task_client(opts: WriteOptions, endpoint: str) -> CoordinatorClient:
    """A client of ``endpoint`` (resolved by the driver) for any process: it follows the
    root's registration after a connection failure (failover) but never starts a
    coordinator; unreachable, it fails naming the endpoint and the fix."""
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient

    return CoordinatorClient(endpoint, credentials=opts.coordinator_credentials,
                             root=opts.root, storage_options=opts.storage_options)


def ensure_topic(client: CoordinatorClient, opts: WriteOptions) -> None:
    """Create the ``topic`` option's topic if absent; refuse a conflicting partition count."""
    if opts.topic is None:
        return
    meta = client.create_topic(opts.topic, opts.partitions or 1, exist_ok=True)
    if opts.partitions is not None and int(meta["partitions"]) != opts.partitions:
        raise InvalidOptionError(
            f"topic {opts.topic!r} already exists with {meta['partitions']} partitions, but "
            f"option 'partitions' asks for {opts.partitions}; drop the option or use another "
            "topic")


class TxnlogBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts.topic, frozenset(f.column for f in opts.framings))
        client = coordinator_client(opts)
        self.endpoint = client.endpoint
        if opts.framings:
            from .framing import plan

            opts = plan(opts, client.endpoint)  # the schema ids every task frames with
        self.opts = opts
        ensure_topic(client, opts)
        # The write's own id carries this one transaction only: declared one-shot, the
        # coordinator drops it a retention period after the transaction ends instead of
        # keeping it for transactional.id.expiration.ms. A ``transactional.id`` option is
        # the user's to reuse, so it stays an ordinary (reusable) id.
        one_shot = opts.transactional_id is None
        self.transactional_id = opts.transactional_id or f"txnlog-write-{uuid.uuid4().hex}"
        self.producer_id, self.epoch = client.init_producer_id(
            self.transactional_id, opts.transaction_timeout_ms, one_shot=one_shot)

    def _client(self) -> CoordinatorClient:
        """The driver's client for commit()/abort(). With the embedded default this finds
        the root's coordinator again, so a restarted one (on another port) is picked up."""
        if self.opts.coordinator is None:
            from txnlog.coordinator.client.embedded import coordinator_for_root

            self.endpoint = coordinator_for_root(
                self.opts.root, self.opts.storage_options,
                ca_file=self.opts.coordinator_credentials.ca_file)
        return task_client(self.opts, self.endpoint)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """A task (on an executor): uses the endpoint the driver shipped, never starts one."""
        from .task_writer import Membership, run_task

        return run_task(iterator, self.opts, task_client(self.opts, self.endpoint),
                        Membership(self.transactional_id, self.producer_id, self.epoch))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from .commit_messages import TxnlogCommitMessage

        tasks = [m for m in messages if isinstance(m, TxnlogCommitMessage)]
        members = [m.member_id for m in tasks]
        if len(members) != len(messages):
            raise RuntimeError("txnlog commit: a partition has no successful task attempt")
        if not members:  # a write of zero partitions: no member ever opened the transaction
            self._release()
            return
        result = self._end_txn(members, tasks)
        if result.get("outcome") != "commit":
            raise RuntimeError(f"txnlog commit of {self.transactional_id!r} ended as "
                               f"{result.get('outcome')!r}")

    def _end_txn(self, members: list[int], tasks: list[TxnlogCommitMessage]) -> dict:
        """EndTxn(commit) confirming the tasks' runs, retried until the coordinator answers
        with the outcome.

        Once the coordinator wrote PrepareCommit the write commits, whatever happens to this
        call; reporting a failure then would make the user retry and duplicate it. A repeat
        with the same (producer id, epoch) is answered with the decided outcome (a prepared
        transaction is rolled forward first), so transient failures are retried; only a
        refusal that decides the transaction (fenced, aborted, wrong state) fails at once.
        """
        from txnlog.coordinator.errors import (
            CoordinatorError,
            InvalidProducerEpochError,
            InvalidProducerIdMappingError,
            InvalidTxnStateError,
            ProducerFencedError,
        )

        from .commit_messages import runs_to_confirm

        attempts = 0

        def attempt() -> dict:
            nonlocal attempts
            attempts += 1
            # Spark calls commit() once; if it is called again on this writer, an earlier
            # call's EndTxn may have committed, so no attempt of this one counts as first.
            first = attempts == 1 and not getattr(self, "_commit_asked", False)
            self._commit_asked = True
            try:
                client = self._client()
                return client.end_txn(self.transactional_id, self.producer_id, self.epoch,
                                      commit=True, members=members,
                                      written=runs_to_confirm(client, tasks))
            except (InvalidTxnStateError, ProducerFencedError, InvalidProducerEpochError) as exc:
                raise _Decided(exc) from exc
            except InvalidProducerIdMappingError as exc:
                raise _Decided(UnknownWriteIdError(
                    self.transactional_id, first_attempt=first, cause=exc)) from exc

        def retrying(n: int, exc: BaseException, wait: float) -> None:
            log.warning("txnlog commit of %r: %s; retrying", self.transactional_id, exc)

        try:
            return retry_call(attempt, COMMIT_RETRY, CoordinatorError, retrying)
        except _Decided as decided:
            raise decided.error from None
        except RetriesExhausted as gave_up:
            raise RuntimeError(
                f"txnlog commit of {self.transactional_id!r}: no answer from the "
                f"coordinator for {COMMIT_RETRY_S:.0f}s ({gave_up.last}); the outcome is "
                "unknown until it is back: it finishes the transaction when it "
                "restarts (read with read_committed to see whether it committed) "
                "— do not simply rerun the write") from gave_up.last

    def _release(self) -> None:
        """A write of zero partitions: tell the coordinator this one-shot id is done (an
        abort of a transaction never opened), so it is dropped after the retention period
        rather than kept for transactional.id.expiration.ms. Nothing was written: a
        failure here only leaves the id to Kafka's expiration."""
        from txnlog.coordinator.errors import CoordinatorError

        try:
            self._client().end_txn(self.transactional_id, self.producer_id, self.epoch,
                                   commit=False)
        except CoordinatorError as exc:
            log.warning("txnlog write %r of zero partitions: releasing its id failed (%s); "
                        "the coordinator expires it later", self.transactional_id, exc)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abort whatever is not decided; after a commit that did land, this is a no-op."""
        from txnlog.coordinator.errors import CoordinatorError, InvalidProducerIdMappingError

        client = self._client()
        try:
            client.end_txn(self.transactional_id, self.producer_id, self.epoch, commit=False)
        except InvalidProducerIdMappingError as exc:
            log.warning("txnlog abort of %r: %s", self.transactional_id,
                        UnknownWriteIdError(self.transactional_id, first_attempt=True,
                                            cause=exc))
        except CoordinatorError as exc:
            try:
                state = client.describe_txn(self.transactional_id).get("state")
            except CoordinatorError as exc2:
                state = f"unknown ({exc2})"
            log.warning("txnlog abort of %r: %s (transaction state now %s)",
                        self.transactional_id, exc, state)
