"""Shared fixtures: storage roots on local files and on a real S3 server.

- `file_root`: a fresh `file://` root (str) in the test's tmp_path.
- `s3_server`: one SeaweedFS `weed mini` for the session (see tests/s3_server.py); it also
  exports the standard AWS variables so subprocesses and code without options reach it.
- `s3_root`: a fresh `s3://<bucket>/<unique prefix>` root (str) on that server.
- `any_root`: parametrized over both (ids "file" and "s3").
- `rgw_server`: the second S3 implementation, a Ceph RGW cluster for the session (see
  tests/rgw_server.py); skipped, naming what is missing, where its Debian packages are absent
  and cannot be installed (TXNLOG_REQUIRE_RGW=1, set by .ci/run, makes that a failure).
- `rgw_root`: a fresh root on it; for that test the AWS variables point at RGW.
- `s3_impl_server` / `s3_impl_root`: parametrized over both S3 servers (ids "seaweedfs",
  "rgw"), and `every_root` over file, SeaweedFS and RGW (ids "file", "s3", "rgw"): for tests
  whose correctness rests on deletes, listings or conditional writes.
- (autouse) every librdkafka client closed by the end of the test that made it (a test
  leaving one fails: tests/kafka_client_guard.py says why).
- (autouse) the numba kernels compiled before any test, and ``SPARK_HOME`` set to a Spark
  home whose pyspark.zip holds bytecode (tests/spark_home.py) for every Spark process.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# Spark binds its driver to this host's first non-loopback address unless told otherwise;
# tests talk to 127.0.0.0/8 only (test_multi_host sets its own addresses per process).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import kafka_client_guard
from rgw_server import RgwServer, RgwUnavailable
from s3_server import S3Server

kafka_client_guard.install()  # before test modules take confluent_kafka's names

BUCKET = "txnlog-tests"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The units ``-n 2 --dist loadgroup`` (pyproject's addopts) hands to a worker: each
    test file (its module-scoped servers start once), except that every test using the
    shared Spark session goes to one worker (one session JVM, as run serially) and every
    test on Ceph RGW to one worker (one RGW cluster). Without xdist the marks do nothing."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "spark" in names:
            group = "spark-session"
        elif "rgw_server" in names or "rgw_root" in names or "rgw" in (
                params.get("every_root"), params.get("s3_impl_server")):
            group = "rgw"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _kafka_clients_closed() -> Iterator[None]:
    yield
    left = kafka_client_guard.shut_leftovers()
    assert not left, f"the test left librdkafka clients running (close them): {left}"


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """Compile (or load) the codec's numba kernels once, before any test starts a clock.

    On a clean clone the first encode compiles for seconds; several worker processes of a
    chaos run racing to do it at once starved a 10-second workload in CI (0 commits). The
    compiled code is cached on disk, so the subprocesses the tests start load it instantly.
    """
    from txnlog.log_format.arrow.warmup import warm_up

    warm_up()


@pytest.fixture(scope="session", autouse=True)
def _compiled_pyspark_zip(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every Spark process of the session (the shared session's, the stream drivers' the
    tests start and kill, and their Python workers) runs on a Spark home whose pyspark.zip
    holds bytecode (tests/spark_home.py, as docs/deployment.md ships it): each of the many
    fresh Spark Python processes then loads pyspark instead of compiling it (~4 s of CPU
    less per stream driver start). Built once into pytest's cache directory."""
    import warnings

    from spark_home import compiled_spark_home

    cache = getattr(request.config, "cache", None)
    where = (cache.mkdir("compiled-spark-home") if cache is not None
             else tmp_path_factory.mktemp("compiled-spark-home"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's own sources' SyntaxWarnings
        home = compiled_spark_home(Path(where))
    if home is not None:
        os.environ["SPARK_HOME"] = str(home)


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


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RgwServer]:
    try:
        server = RgwServer.start(tmp_path_factory.mktemp("rgw"))
    except RgwUnavailable as exc:
        if os.environ.get("TXNLOG_REQUIRE_RGW") == "1":
            pytest.fail(f"{exc} (TXNLOG_REQUIRE_RGW=1)")
        pytest.skip(str(exc))
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def rgw_root(s3_server: S3Server, rgw_server: RgwServer, monkeypatch: pytest.MonkeyPatch
             ) -> str:
    """A fresh root on RGW. The session's AWS variables name SeaweedFS (s3_server, set up
    first so it cannot overwrite these); for this test they name RGW, so roots opened without
    options and coordinator subprocesses reach it (Storage.for_url keys its cache on them)."""
    for key, value in rgw_server.env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["seaweedfs", "rgw"], ids=["seaweedfs", "rgw"])
def s3_impl_server(request: pytest.FixtureRequest) -> S3Server | RgwServer:
    """Each S3 implementation, with the AWS variables naming it for the test."""
    if request.param == "seaweedfs":
        return request.getfixturevalue("s3_server")
    request.getfixturevalue("rgw_root")
    return request.getfixturevalue("rgw_server")


@pytest.fixture
def s3_impl_root(s3_impl_server: S3Server | RgwServer) -> str:
    """A fresh root on each S3 implementation (ids "seaweedfs", "rgw")."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["file", "s3", "rgw"], ids=["file", "s3", "rgw"])
def every_root(request: pytest.FixtureRequest) -> str:
    """`any_root` plus RGW: file, SeaweedFS ("s3", as in any_root) and RGW."""
    if request.param == "file":
        return request.getfixturevalue("file_root")
    if request.param == "s3":
        return request.getfixturevalue("s3_root")
    return request.getfixturevalue("rgw_root")
