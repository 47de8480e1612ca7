"""clear_abandoned_first_batch: what a driver killed inside Spark's write of offsets/0 leaves
behind is removed, and nothing else (see tests/spark/test_streaming.py for Spark itself)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

from txnlog.datasource.read.stream_checkpoint import clear_abandoned_first_batch


def _killed_in_offsets_0(ckpt: Path, age_s: float = 3600.0) -> list[Path]:
    """The checkpoint as a driver killed between creating and renaming offsets/0 leaves it
    (names as Spark's CheckpointFileManager makes them on a local file system)."""
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    u = uuid.uuid4()
    files = [ckpt / "offsets" / f".0.{u}.tmp", ckpt / "offsets" / f"..0.{u}.tmp.crc"]
    for f in files:
        f.write_bytes(b"")
        os.utime(f, (time.time() - age_s,) * 2)
    return files


def test_removes_only_the_abandoned_temporary_files(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    temps = _killed_in_offsets_0(ckpt)
    (ckpt / "commits").mkdir()
    (ckpt / "sources" / "0").mkdir(parents=True)
    removed = clear_abandoned_first_batch(ckpt.as_uri())
    assert sorted(Path(p).name for p in removed) == sorted(f.name for f in temps)
    assert os.listdir(ckpt / "offsets") == [] and os.listdir(ckpt / "commits") == []
    assert (ckpt / "metadata").exists() and (ckpt / "sources" / "0").exists()
    assert clear_abandoned_first_batch(str(ckpt)) == []  # idempotent, plain paths too


def test_leaves_a_checkpoint_with_batches_or_other_files_alone(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    temps = _killed_in_offsets_0(ckpt)
    (ckpt / "offsets" / "0").write_text("v1\n{}\n{}\n")  # the log has a batch: not batch 0
    assert clear_abandoned_first_batch(str(ckpt)) == []
    assert all(f.exists() for f in temps)

    other = tmp_path / "other"
    (other / "offsets").mkdir(parents=True)
    (other / "offsets" / "notes.txt").write_text("x")  # not Spark's: the check must see it
    (other / "state" / "0").mkdir(parents=True)
    assert clear_abandoned_first_batch(str(other)) == []
    assert (other / "offsets" / "notes.txt").exists()
    assert clear_abandoned_first_batch(str(tmp_path / "missing")) == []


def test_a_temporary_file_being_written_now_is_not_taken(tmp_path: Path) -> None:
    """A young temporary file may be a live run's (another copy of the query) about to be
    renamed: the call waits for the grace period and then sees the batch, so removes
    nothing."""
    ckpt = tmp_path / "ckpt"
    temps = _killed_in_offsets_0(ckpt, age_s=0.0)
    renamed = threading.Event()

    def live_writer() -> None:
        time.sleep(0.2)
        temps[0].rename(ckpt / "offsets" / "0")
        renamed.set()

    t = threading.Thread(target=live_writer)
    t.start()
    try:
        assert clear_abandoned_first_batch(str(ckpt), grace_s=2.0) == []
    finally:
        t.join()
    assert renamed.is_set() and (ckpt / "offsets" / "0").exists() and temps[1].exists()
