"""``worker_daemon.prefer_compiled_pyspark``: a Spark Python process imports
pyspark from ``$SPARK_HOME/python/lib/pyspark.zip``, which holds no bytecode, so every fresh
daemon compiles pyspark's modules again. The daemon swaps the zip for the installed pyspark
only when the two hold the same source; a zip that differs in one module is kept.

Each case runs in a fresh interpreter with the zip first on ``PYTHONPATH``, as Spark starts
its daemons (no Spark needed: only the import path is under test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

SPARK_ZIP = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
INSTALLED = Path(pyspark.__file__).parent

PROBE = """
import json, sys, time
t = time.process_time()
from txnlog.datasource.worker_daemon import prefer_compiled_pyspark
swapped = prefer_compiled_pyspark()
import pyspark.serializers
extra = {}
try:
    import pyspark.zip_only_probe as z
    extra["zip_only"] = z.__file__
except ImportError as exc:
    extra["zip_only"] = "ImportError: " + str(exc)
print(json.dumps({"swapped": swapped, "pyspark": pyspark.__file__,
                  "serializers": pyspark.serializers.__file__,
                  "zip_on_path": any(p.endswith(".zip") and "pyspark" in p for p in sys.path),
                  **extra}))
"""


def _run(zip_path: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(zip_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _copy_zip(dst: Path, *, change: str | None = None, add_only_in_zip: bool = False) -> Path:
    """A copy of Spark's pyspark.zip; ``change`` names a member whose bytes are altered."""
    with zipfile.ZipFile(SPARK_ZIP) as src, zipfile.ZipFile(dst, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == change:
                data += b"\n# changed\n"
            out.writestr(info, data)
        if add_only_in_zip:
            out.writestr("pyspark/zip_only_probe.py", "ZIP_ONLY = True\n")
    return dst


@pytest.mark.skipif(not SPARK_ZIP.is_file(), reason="pyspark without python/lib/pyspark.zip")
def test_an_identical_zip_gives_way_to_the_installed_compiled_pyspark(tmp_path: Path) -> None:
    zip_path = _copy_zip(tmp_path / "pyspark.zip", add_only_in_zip=True)
    got = _run(zip_path)
    assert got["swapped"] == str(INSTALLED)
    assert got["pyspark"] == str(INSTALLED / "__init__.py")
    assert got["serializers"] == str(INSTALLED / "serializers.py")
    assert got["zip_on_path"] is False
    # a module only the zip has (as its tests are) is still imported, from the zip
    assert str(got["zip_only"]).startswith(str(zip_path)), got


@pytest.mark.skipif(not SPARK_ZIP.is_file(), reason="pyspark without python/lib/pyspark.zip")
def test_a_zip_that_differs_in_one_module_is_kept(tmp_path: Path) -> None:
    zip_path = _copy_zip(tmp_path / "pyspark.zip", change="pyspark/serializers.py")
    got = _run(zip_path)
    assert got["swapped"] is None
    assert str(got["pyspark"]).startswith(str(zip_path))
    assert str(got["serializers"]).startswith(str(zip_path))
    assert got["zip_on_path"] is True


def test_without_a_zip_the_path_is_left_alone(tmp_path: Path) -> None:
    got = _run(tmp_path / "absent" / "pyspark.zip")  # not a file: nothing to swap
    assert got["swapped"] is None
    assert got["pyspark"] == str(INSTALLED / "__init__.py")
