"""The Spark batch writer's side of one-shot ids, driven through its own code (the data
source's ``writer()``, the task's ``write()``, the driver's ``commit()``) against real
coordinator processes, without a JVM (pyspark's TaskContext is absent outside a task, which
run_task reads as partition 0, attempt 0).

The retention period is switched by restarting the coordinator on the same root (an hour,
then 0), so nothing depends on how fast this machine is.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator import errors
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

HOUR_MS = str(3600 * 1000)


def _writer(root: str) -> Any:
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.datasource.source import TxnlogDataSource

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    ds = TxnlogDataSource(CaseInsensitiveDict({"path": root, "topic": "w"}))
    return ds.writer(schema, False)  # the embedded default finds the registered coordinator


def _batch(tag: str) -> pa.RecordBatch:
    return pa.record_batch({"key": pa.array([b"k"], pa.binary()),
                            "value": pa.array([tag.encode()], pa.binary())})


def _committed(root: str) -> list[bytes]:
    return PartitionReader(Storage.for_url(root), "w", 0,
                           isolation_level="read_committed").read_table() \
        .column("value").to_pylist()


def _wait_dropped(proc: CoordinatorProc, tid: str) -> None:
    """Until the coordinator's timer has dropped ``tid`` (a condition, not a duration)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            proc.client().describe_txn(tid)
        except errors.InvalidProducerIdMappingError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{tid} was not dropped:\n{proc.log_tail()}")


def test_writer_ids_are_one_shot_and_a_late_commit_gets_a_clear_error(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c1.log",
                         extra=["--one-shot-id-retention-ms", HOUR_MS]) as proc:
        proc.wait_healthy()
        committed = _writer(root)
        msg = committed.write(iter([_batch("a")]))
        committed.commit([msg])
        committed.commit([msg])  # a retried commit() within the retention period: same answer
        aborted = _writer(root)  # decided without its driver (as a timeout or fence would)
        msg2 = aborted.write(iter([_batch("b")]))
        proc.client().end_txn(aborted.transactional_id, aborted.producer_id, aborted.epoch,
                              commit=False)
        assert committed.transactional_id.startswith("txnlog-write-")
    created = f"init_producer_id '{committed.transactional_id}' -> pid"
    line = next(x for x in proc.log_text().splitlines() if created in x)
    assert "(one-shot)" in line  # declared when the writer created it

    with CoordinatorProc(root, log_path=tmp_path / "c2.log",
                         extra=["--one-shot-id-retention-ms", "0"]) as proc:
        proc.wait_healthy()
        _wait_dropped(proc, committed.transactional_id)
        _wait_dropped(proc, aborted.transactional_id)
        with pytest.raises(RuntimeError) as late:
            committed.commit([msg])  # asked before: it may have committed -> outcome unknown
        assert "no longer knows this write's transactional id" in str(late.value)
        assert "outcome is unknown" in str(late.value)
        assert "--one-shot-id-retention-ms" in str(late.value)
        with pytest.raises(RuntimeError) as never:
            aborted.commit([msg2])  # its first commit: the transaction ended without it
        assert "did NOT commit" in str(never.value)
        assert aborted.transactional_id in str(never.value)
        aborted.abort([msg2])  # Spark's abort after the failed commit: a warning, no error
    assert _committed(root) == [b"a"]  # the error's claims hold in storage


def test_a_transactional_id_option_stays_reusable(tmp_path: Path) -> None:
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.datasource.source import TxnlogDataSource

    root = (tmp_path / "root").as_uri()
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    with CoordinatorProc(root, log_path=tmp_path / "c.log",
                         extra=["--one-shot-id-retention-ms", "0"]) as proc:
        proc.wait_healthy()
        for tag in ("x", "y"):  # the same id twice: reused, never dropped in between
            ds = TxnlogDataSource(CaseInsensitiveDict(
                {"path": root, "topic": "w", "transactional.id": "nightly-load"}))
            w = ds.writer(schema, False)
            w.commit([w.write(iter([_batch(tag)]))])
        assert proc.client().describe_txn("nightly-load")["state"] == "CompleteCommit"
    assert "(one-shot)" not in proc.log_text()
    assert _committed(root) == [b"x", b"y"]
