"""A stream's micro-batch with lazy task records, driven through the sink's own code (tasks'
``run_task``, the driver's ``commit``) against real coordinator processes, without a JVM.

Its tasks' memberships and reservations ride in the driver's append, so a micro-batch adds
no log object per task. A coordinator SIGKILLed before that append loses them: the driver's
EndTxn is refused, and the driver redoes the batch from the tasks' objects (their batches
copied under a member of its own) instead of failing the query. Every record is then read
exactly once, and a retried commit changes nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from coordinator_proc import CoordinatorProc, free_port
from txnlog.log_format.layout import TRANSACTION_STATE_DIR
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage

LINGER = ["--log-linger-ms", "600000"]  # lazy records wait for an eager append
PARTS = 2


def _writer(root: str, endpoint: str) -> Any:
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.datasource.source import TxnlogDataSource

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    ds = TxnlogDataSource(CaseInsensitiveDict({"path": root, "topic": "s",
                                               "coordinator": endpoint}))
    return ds.streamWriter(schema, False)


def _tasks(writer: Any, client: Any, tid: str, batch_id: int) -> list[Any]:
    """Two tasks of micro-batch ``batch_id``, each writing 20 keyed rows (both partitions)."""
    from txnlog.datasource.write.stream_writer import TxnlogStreamCommitMessage
    from txnlog.datasource.write.task_writer import Membership, run_task

    began = client.begin_batch(tid, batch_id)
    pid, epoch = int(began["producer_id"]), int(began["epoch"])
    out = []
    for t in range(2):
        rows = pa.record_batch({
            "key": pa.array([f"k{i}".encode() for i in range(20)], pa.binary()),
            "value": pa.array([f"b{batch_id}-t{t}-{i}".encode() for i in range(20)],
                              pa.binary())})
        task = run_task(iter([rows]), writer.opts, client, Membership(tid, pid, epoch),
                        member_key=f"b{batch_id}-t{t}")
        out.append(TxnlogStreamCommitMessage(tid, batch_id, pid, epoch, False, task))
    return out


def _committed(st: Storage) -> list[bytes]:
    snap = read_latest_stable(st)
    return sorted(v for p in range(PARTS) for v in PartitionReader(
        st, "s", p, snapshot=snap, isolation_level="read_committed").read_table()
        .column("value").to_pylist())


def _log_objects(st: Storage) -> int:
    return sum(o.name.endswith(".log") for o in st.list(TRANSACTION_STATE_DIR))


def _expected(batch_id: int) -> list[bytes]:
    return sorted(f"b{batch_id}-t{t}-{i}".encode() for t in range(2) for i in range(20))


def test_a_micro_batchs_tasks_add_no_log_objects(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    # no merging: its first tick logs a record of its own (``swept``), which a loaded
    # machine may bring inside the counted window
    with CoordinatorProc(root, extra=[*LINGER, "--no-merge"],
                         log_path=tmp_path / "c.log") as coord:
        coord.client().create_topic("s", PARTS)
        writer = _writer(root, coord.endpoint)
        client = writer._client()
        client.begin_batch("q", 0)  # the stream's id: its first InitProducerId is durable
        before = _log_objects(st)
        msgs = _tasks(writer, client, "q", 1)
        assert _log_objects(st) == before, "a task's calls wrote log objects of their own"
        writer.commit(msgs, 1)
        # the tasks' records, the confirms and the Prepare in one append; the Complete
        assert _log_objects(st) - before <= 2
        assert _committed(st) == _expected(1)


@pytest.mark.parametrize("chunk_bytes", [None, 1], ids=["one_chunk", "a_chunk_per_run"])
def test_a_coordinator_lost_mid_batch_the_driver_redoes_it(
        chunk_bytes: int | None, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The redo copies the batch a chunk at a time (``REDO_CHUNK_BYTES``, here also one
    run per chunk: a shared object each, a partition's sequences going on across them)."""
    from txnlog.datasource.write import stream_redo
    from txnlog.log_format.layout import SHARED_DIR

    if chunk_bytes is not None:
        monkeypatch.setattr(stream_redo, "REDO_CHUNK_BYTES", chunk_bytes)
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    port = ["--port", str(free_port())]
    first = CoordinatorProc(root, extra=LINGER + port, log_path=tmp_path / "c1.log")
    first.wait_healthy()
    endpoint = first.endpoint
    first.client().create_topic("s", PARTS)
    writer = _writer(root, endpoint)
    client = writer._client()
    client.begin_batch("q", 0)
    msgs = _tasks(writer, client, "q", 1)
    first.kill()  # the tasks' lazy records die with it
    objects_before = len(st.list(SHARED_DIR))
    with CoordinatorProc(root, extra=LINGER + port, log_path=tmp_path / "c2.log") as second:
        assert second.endpoint == endpoint
        with caplog.at_level(logging.WARNING, logger="txnlog"):
            writer.commit(msgs, 1)
        assert "redoing it" in caplog.text and "redone by the driver" in caplog.text
        runs = sum(len(m.task.runs) for m in msgs)
        # the redo's objects, and the commit's markers in one more
        assert len(st.list(SHARED_DIR)) - objects_before == (
            1 if chunk_bytes is None else runs) + 1
        assert _committed(st) == _expected(1)
        writer.commit(msgs, 1)  # Spark retrying the commit: already committed
        assert _committed(st) == _expected(1)
        # the stream goes on: the next micro-batch, on the new coordinator
        writer.commit(_tasks(writer, client, "q", 2), 2)
        assert _committed(st) == sorted(_expected(1) + _expected(2))
        assert second.client().describe_txn("q")["state"] == "CompleteCommit"


@pytest.mark.parametrize("first_call", ["confirms", "group_offsets"])
def test_a_coordinator_lost_before_any_of_the_commits_calls_the_driver_redoes_it(
        first_call: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The driver's first call after the loss may come before its EndTxn: the confirms of
    a micro-batch with more runs than one EndTxn carries (``RUNS_IN_END_TXN``, here 1), or
    the source's group offsets (AddOffsetsToTxn, a txnlog source with a ``groupId``). The
    new coordinator never heard of the batch's members: the batch is redone either way,
    the group's offsets committed with it."""
    from txnlog.datasource.stream_offsets import GroupOffsets
    from txnlog.datasource.write import commit_messages

    if first_call == "confirms":
        monkeypatch.setattr(commit_messages, "RUNS_IN_END_TXN", 1)
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    port = ["--port", str(free_port())]
    first = CoordinatorProc(root, extra=LINGER + port, log_path=tmp_path / "c1.log")
    first.wait_healthy()
    first.client().create_topic("s", PARTS)
    writer = _writer(root, first.endpoint)
    if first_call == "group_offsets":
        monkeypatch.setattr(writer, "_group_offsets", lambda batch_id: [
            GroupOffsets("g", root, {("src", 0): 10 * batch_id})])
    client = writer._client()
    client.begin_batch("q", 0)
    msgs = _tasks(writer, client, "q", 1)
    assert sum(len(m.task.runs) for m in msgs) > 1
    first.kill()
    with CoordinatorProc(root, extra=LINGER + port, log_path=tmp_path / "c2.log") as second:
        with caplog.at_level(logging.WARNING, logger="txnlog"):
            writer.commit(msgs, 1)
        assert "redoing it" in caplog.text
        assert _committed(st) == _expected(1)
        writer.commit(_tasks(writer, client, "q", 2), 2)
        assert _committed(st) == sorted(_expected(1) + _expected(2))
        assert second.client().describe_txn("q")["state"] == "CompleteCommit"
        if first_call == "group_offsets":
            assert second.client().committed_offsets("g") == {("src", 0): 20}
