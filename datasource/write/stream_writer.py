"""``writeStream.format("txnlog")``: one Kafka transaction per micro-batch, exactly once.

The transactional id is stable per query, ``txnlog-sink-<queryId>`` (``transactional.id``
overrides it), and the coordinator keeps per id the running and the last committed batch id
(DESIGN 6.3). So, with nothing kept in memory between batches (``streamWriter()`` is rebuilt
for every batch and for every commit):

- every task calls ``begin_batch(tid, batchId)``: the first one begins the batch's
  transaction, later ones get the same (pid, epoch) and join it as member producers; a batch
  that already committed (Spark replays it when it died before writing ``commits/<id>``)
  answers "committed" and the task writes nothing;
- an older batch still open when a newer one begins is aborted (epoch bump), and a task of
  an older batch than the running one is fenced: a second running copy of the query can
  never commit over the first;
- ``commit(messages, batchId)`` ends the transaction with exactly the members Spark reports,
  plus — with a txnlog source on the same root that has a ``groupId`` — the source's end
  offsets of the batch, read from ``<checkpointLocation>/offsets/<batchId>``
  (``stream_offsets``), so the group's progress commits atomically with the output;
- a replayed ``commit`` of a committed batch answers success from the coordinator.

Test hook: with ``TXNLOG_STREAM_TEST_DIR`` set, ``commit`` touches ``reached-<step>-<batch>``
there at each step and, if ``TXNLOG_STREAM_TEST_PAUSE`` names the step, sleeps, so a test can
SIGKILL the driver at exactly that point.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..options import WriteOptions
from ..schema import check_write_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient

    from .commit_messages import TxnlogCommitMessage

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
TEST_DIR_ENV = "TXNLOG_STREAM_TEST_DIR"
TEST_PAUSE_ENV = "TXNLOG_STREAM_TEST_PAUSE"
# (root, topic, partitions option) whose topic this process found or created.
_TOPICS_CHECKED: set[tuple[str, str | None, int | None]] = set()


def sink_transactional_id(opts: WriteOptions, query_id: str) -> str:
    return opts.transactional_id or f"txnlog-sink-{query_id}"


def _test_point(step: str, batch_id: int) -> None:
    """Mark (and maybe pause at) a step of commit() for the kill tests; no-op unset."""
    folder = os.environ.get(TEST_DIR_ENV)
    if not folder:
        return
    with open(os.path.join(folder, f"reached-{step}-{batch_id}"), "w") as f:
        f.write(str(os.getpid()))
    if step in os.environ.get(TEST_PAUSE_ENV, "").split(","):
        time.sleep(600)  # the test kills the driver here


@dataclass
class TxnlogStreamCommitMessage(WriterCommitMessage):
    """A task's report: which transaction it joined, or that its batch had committed."""

    transactional_id: str
    batch_id: int
    producer_id: int
    epoch: int
    already_committed: bool
    task: TxnlogCommitMessage | None = None


class TxnlogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        from txnlog.log_format.storage import Storage
        from txnlog.log_format.topics import UnknownTopicError, read_topic

        from .batch_writer import coordinator_client, ensure_topic

        check_write_schema(schema, opts.topic, frozenset(f.column for f in opts.framings))
        client = coordinator_client(opts)
        self.endpoint = client.endpoint
        if opts.framings:
            from .framing import plan

            opts = plan(opts, client.endpoint)  # the schema ids every task frames with
        self.opts = opts
        key = (opts.root, opts.topic, opts.partitions)
        if opts.topic is not None and key not in _TOPICS_CHECKED:
            # Rebuilt twice every batch (for the tasks and for the commit), in reused planner
            # processes: read the topic once per process, go to the coordinator only when
            # it is missing. (A topic deleted later fails the batch's tasks.)
            try:
                meta = read_topic(Storage.for_url(opts.root, opts.storage_options), opts.topic)
                if opts.partitions is not None and meta.partitions != opts.partitions:
                    ensure_topic(client, opts)  # raises the clear mismatch error
            except UnknownTopicError:
                ensure_topic(client, opts)
            _TOPICS_CHECKED.add(key)

    def _client(self) -> CoordinatorClient:
        """Tasks and commit() alike use the endpoint resolved when the writer was built on
        the driver (following a failover, never starting a coordinator)."""
        from .batch_writer import task_client

        return task_client(self.opts, self.endpoint)

    # ---- executors -----------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from .task_writer import Membership, run_task

        ctx = TaskContext.get()
        raw_batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        if raw_batch is None or (query_id is None and self.opts.transactional_id is None):
            raise RuntimeError("txnlog stream sink: the task has no streaming batch id / query "
                               "id local property (is this a streaming query?)")
        batch_id = int(raw_batch)
        tid = sink_transactional_id(self.opts, str(query_id))
        client = self._client()
        began = client.begin_batch(tid, batch_id, self.opts.transaction_timeout_ms)
        if began.get("state") == "committed":
            log.info("txnlog sink %s: batch %d already committed; writing nothing", tid,
                     batch_id)
            for _ in iterator:  # drain: the worker protocol expects the input consumed
                pass
            return TxnlogStreamCommitMessage(tid, batch_id, -1, -1, True)
        pid, epoch = int(began["producer_id"]), int(began["epoch"])
        task = run_task(iterator, self.opts, client, Membership(tid, pid, epoch),
                        member_key=f"b{batch_id}-{uuid.uuid4().hex}")
        return TxnlogStreamCommitMessage(tid, batch_id, pid, epoch, False, task)

    # ---- driver --------------------------------------------------------------------------
    def _transactional_id(self, msgs: list[TxnlogStreamCommitMessage]) -> str | None:
        if msgs:
            return msgs[0].transactional_id
        if self.opts.transactional_id:
            return self.opts.transactional_id
        if self.opts.checkpoint_location:
            from ..stream_offsets import checkpoint_query_id

            qid = checkpoint_query_id(self.opts.checkpoint_location)
            if qid:
                return sink_transactional_id(self.opts, qid)
        return None

    def _group_offsets(self, batch_id: int) -> list:
        """The batch's end offsets of txnlog sources with a groupId on this root."""
        from ..stream_offsets import batch_group_offsets, same_root

        if not self.opts.checkpoint_location:
            return []
        groups = batch_group_offsets(self.opts.checkpoint_location, batch_id)
        return [g for g in groups if same_root(g.root, self.opts.root)]

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        msgs = [m for m in messages if isinstance(m, TxnlogStreamCommitMessage)]
        if len(msgs) != len(messages):
            raise RuntimeError(f"txnlog sink commit of batch {batchId}: a partition has no "
                               "successful task attempt")
        tid = self._transactional_id(msgs)
        client = self._client()
        _test_point("before_commit", batchId)
        groups = self._group_offsets(batchId)
        writers = [m for m in msgs if not m.already_committed]
        if tid is None:
            if groups:
                raise RuntimeError(f"txnlog sink: batch {batchId} ran no task and the query id "
                                   "is unknown (no checkpointLocation metadata)")
            return
        if len(writers) != len(msgs) or not writers:
            # A replay of a committed batch (tasks said so), or a batch with no task: ask
            # the coordinator; a batch with only group offsets gets a transaction here.
            began = client.begin_batch(tid, batchId, self.opts.transaction_timeout_ms)
            if began.get("state") == "committed":
                log.info("txnlog sink %s: batch %d was already committed", tid, batchId)
                _test_point("after_commit", batchId)
                return
            if writers:
                raise RuntimeError(
                    f"txnlog sink {tid}: batch {batchId} is not committed, yet some of its "
                    "tasks found it committed (another copy of this query?)")
            if not groups:
                return  # nothing written, nothing to commit
            pid, epoch = int(began["producer_id"]), int(began["epoch"])
        else:
            pid, epoch = writers[0].producer_id, writers[0].epoch
            if any((m.producer_id, m.epoch, m.batch_id) != (pid, epoch, batchId)
                   for m in writers):
                raise RuntimeError(f"txnlog sink {tid}: tasks of batch {batchId} joined "
                                   "different transactions; failing the batch so it is redone")
        for g in groups:
            client.add_offsets(tid, pid, epoch, g.group_id, g.offsets)
        _test_point("after_offsets", batchId)
        from txnlog.coordinator.errors import InvalidTxnStateError

        from .commit_messages import runs_to_confirm

        tasks = [m.task for m in writers if m.task is not None]
        try:
            result = client.end_txn(tid, pid, epoch, commit=True,
                                    members=[t.member_id for t in tasks], batch_id=batchId,
                                    written=runs_to_confirm(client, tasks))
        except InvalidTxnStateError as exc:
            # the tasks' lazy records were lost with a coordinator: redo from their objects
            from txnlog.log_format.storage import Storage

            from .stream_redo import redo_batch

            log.warning("txnlog sink %s: batch %d refused (%s); redoing it", tid, batchId, exc)
            result = redo_batch(client, Storage.for_url(self.opts.root,
                                                        self.opts.storage_options),
                                tid, batchId, self.opts.transaction_timeout_ms, tasks, groups)
        _test_point("after_commit", batchId)
        if result.get("outcome") != "commit":
            raise RuntimeError(f"txnlog sink {tid}: batch {batchId} ended as "
                               f"{result.get('outcome')!r}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort the batch's transaction unless it is decided (abort also follows a commit
        that raised late); a replay will begin the batch again."""
        from txnlog.coordinator.errors import CoordinatorError

        msgs = [m for m in messages if isinstance(m, TxnlogStreamCommitMessage)
                and not m.already_committed]
        if not msgs:
            return
        m = msgs[0]
        try:
            self._client().end_txn(m.transactional_id, m.producer_id, m.epoch, commit=False,
                                   batch_id=batchId)
        except CoordinatorError as exc:
            log.warning("txnlog sink abort of %r batch %d: %s", m.transactional_id, batchId,
                        exc)
