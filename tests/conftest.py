"""Shared fixtures: storage roots on local files and on a real S3 server.

- `file_root`: a fresh `file://` root (str) in the test's tmp_path.
- `s3_server`: one SeaweedFS `weed mini` for the session (see tests/s3_server.py); it also
  exports the standard AWS variables so subprocesses and code without options reach it.
- `s3_root`: a fresh `s3://<bucket>/<unique prefix>` root (str) on that server.
- `any_root`: parametrized over both (ids "file" and "s3").
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from s3_server import S3Server

BUCKET = "txnlog-tests"


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """Compile (or load) the codec's numba kernels once, before any test starts a clock.

    On a clean clone the first encode compiles for seconds; several worker processes of a
    chaos run racing to do it at once starved a 10-second workload in CI (0 commits). The
    compiled code is cached on disk, so the subprocesses the tests start load it instantly.
    """
    from txnlog.log_format.warmup import warm_up

    warm_up()


@pytest.fixture
def file_root(tmp_path: Path) -> str:
    root = tmp_path / "root"
    root.mkdir()
    return root.as_uri()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server.start(tmp_path_factory.mktemp("seaweedfs"))
    server.create_bucket(BUCKET)
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture
def s3_root(s3_server: S3Server) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["file", "s3"], ids=["file", "s3"])
def any_root(request: pytest.FixtureRequest) -> str:
    if request.param == "file":
        return request.getfixturevalue("file_root")
    return request.getfixturevalue("s3_root")
