"""The README's first command, ``python examples/quickstart.py``, runs and says the right
things (it starts its own Spark session, so it runs as a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_quickstart_runs(tmp_path: Path) -> None:
    folder = tmp_path / "quickstart"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    proc = subprocess.run([sys.executable, str(EXAMPLE), str(folder)], env=env,
                          capture_output=True, text=True, timeout=540)
    out = proc.stdout
    assert proc.returncode == 0, f"{out}\n{proc.stderr[-4000:]}"
    assert f"txnlog root: {folder.as_uri()}" in out
    assert "1. wrote 10 orders in one transaction" in out
    assert "order-7" in out and '{"id":7,"amount":17.5}' in out
    assert "2. read_committed: 10 rows" in out
    assert "3. a failing job was aborted" in out and "read_committed still: 10 rows" in out
    assert "4. aborted producer transaction: read_committed 10 rows, read_uncommitted 13 rows" \
        in out
    # the topic's metadata, and every write and transaction's markers in shared objects (one
    # per flush, none per partition: partition folders appear when merging writes Kafka
    # segments, after the partition has been idle for a while)
    assert (folder / "_meta" / "topics" / "orders.json").exists()
    assert list((folder / "_wal").glob("*.wal"))
