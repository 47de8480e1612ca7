"""A Spark home whose ``python/lib/pyspark.zip`` holds bytecode, for the test session.

Every Python process Spark starts (planner daemons and workers, the streaming source and
sink runners, task workers on Spark's own daemon) imports pyspark from
``$SPARK_HOME/python/lib/pyspark.zip``, which holds no bytecode: each one compiles the
pyspark modules it imports from source. docs/deployment.md recommends shipping the zip
compiled; the tests do the same without touching the installed pyspark: a directory of
symlinks to the installed Spark home, except for that zip, which is the same members plus
their ``.pyc`` (unchecked hash-based, compiled from exactly those sources). Measured on a
stream driver's start and first micro-batches (tests/spark/stream_driver.py, 2 cores): ~19
s of CPU with Spark's zip, ~15 s with this one.

Built once per pyspark and Python version into a cache directory and reused; a build lands
by rename, so concurrent sessions never see half a home.
"""

from __future__ import annotations

import contextlib
import os
import py_compile
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path


def installed_spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def compiled_spark_home(cache: Path) -> Path | None:
    """The cached Spark home with a compiled ``pyspark.zip`` (built if missing), or None
    when the installed home has no ``python/lib/pyspark.zip`` to compile."""
    home = installed_spark_home()
    src_zip = home / "python" / "lib" / "pyspark.zip"
    if not src_zip.is_file():
        return None
    st = src_zip.stat()
    key = f"{sys.implementation.cache_tag}-{st.st_size}-{st.st_mtime_ns}"
    target = cache / key
    if (target / "python" / "lib" / "pyspark.zip").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
    try:
        _build(home, src_zip, work)
        try:
            os.rename(work, target)
        except OSError:  # another session built it first
            if not (target / "python" / "lib" / "pyspark.zip").is_file():
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(work)
    return target


def _build(home: Path, src_zip: Path, out: Path) -> None:
    for entry in home.iterdir():
        if entry.name != "python":
            (out / entry.name).symlink_to(entry)
    (out / "python").mkdir()
    for entry in (home / "python").iterdir():
        if entry.name != "lib":
            (out / "python" / entry.name).symlink_to(entry)
    lib = out / "python" / "lib"
    lib.mkdir()
    for entry in (home / "python" / "lib").iterdir():
        if entry.name != "pyspark.zip":
            (lib / entry.name).symlink_to(entry)
    src = out / ".src"
    with zipfile.ZipFile(src_zip) as zin, \
            zipfile.ZipFile(lib / "pyspark.zip", "w", zipfile.ZIP_DEFLATED) as zout:
        zin.extractall(src)
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
            if not info.filename.endswith(".py"):
                continue
            pyc = src / (info.filename + "c")  # the legacy name next to the source
            try:  # a module that does not compile stays source only, as Spark ships it
                py_compile.compile(str(src / info.filename), cfile=str(pyc), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode
                                   .UNCHECKED_HASH, quiet=2)
            except py_compile.PyCompileError:
                continue
            zout.write(pyc, info.filename + "c")
    shutil.rmtree(src)
