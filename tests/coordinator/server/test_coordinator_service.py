"""The coordinator as a service: token, TLS, who may start one, stopping.

- every operation needs the bearer token (401 without or with a wrong one, logged without
  the token); /healthz is open, /metrics only behind --protect-metrics;
- TLS: clients verify the certificate against the CA they are given;
- a process that cannot reach the coordinator fails naming the endpoint and the fix, and
  starts none (no takeover: the coordinator epoch never moves);
- a failure inside the log writer or a background loop ends the process non-zero at once,
  and SIGTERM ends even a wedged process;
- topic configs are Kafka's, validated.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import signal
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client import coordinator_client as client_module
from txnlog.coordinator.client.coordinator_client import (
    CoordinatorClient,
    CoordinatorUnavailableError,
)
from txnlog.coordinator.client.embedded import CoordinatorUnreachableError, coordinator_for_root
from txnlog.coordinator.errors import AuthenticationFailedError, InvalidConfigError
from txnlog.coordinator.security import Credentials
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

TOKEN = "s3cr3t-token-6f1d2a9b"


def token_file(tmp_path: Path, token: str = TOKEN) -> str:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


def raw(endpoint: str, method: str, path: str, headers: dict[str, str] | None = None,
        body: bytes = b"{}") -> tuple[int, bytes]:
    u = urlparse(endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request(method, path, body if method == "POST" else None, headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def make_cert(tmp_path: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost (its own CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txnlog-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return str(cert_path), str(key_path)


# ------------------------------------------------------------------------------ token
def test_every_operation_needs_the_token(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    root = f"file://{tmp_path / 'root'}"
    with CoordinatorProc(root, extra=["--token-file", token_file(tmp_path)]) as proc:
        ep = proc.endpoint
        status, body = raw(ep, "POST", "/v1/list_topics")
        assert status == 401 and b"AuthenticationFailed" in body
        status, _ = raw(ep, "POST", "/v1/init_producer_id",
                        {"Authorization": "Bearer wrong-" + TOKEN})
        assert status == 401
        status, _ = raw(ep, "POST", "/v1/list_topics", {"Authorization": f"Basic {TOKEN}"})
        assert status == 401
        status, _ = raw(ep, "POST", "/v1/list_topics", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200
        assert raw(ep, "GET", "/healthz")[0] == 200  # open: supervisors probe it
        assert raw(ep, "GET", "/metrics")[0] == 200  # open unless --protect-metrics
        with pytest.raises(AuthenticationFailedError):
            CoordinatorClient(ep, credentials=Credentials(token="nope")).list_topics()
        assert CoordinatorClient(ep, credentials=Credentials(token=TOKEN)).list_topics() == []
        monkeypatch.setenv("TXNLOG_COORDINATOR_TOKEN", TOKEN)  # the clients' default
        CoordinatorClient(ep).create_topic("t", 1)
        metrics = raw(ep, "GET", "/metrics")[1].decode()
        assert "txnlog_coordinator_requests_unauthenticated_total 4.0" in metrics
        assert TOKEN not in repr(CoordinatorClient(ep))
        assert TOKEN not in repr(Credentials(token=TOKEN))
    log = proc.log_text()
    assert log.count("refused POST /v1/") == 4, log
    assert "wrong token" in log and "no bearer token" in log
    assert TOKEN not in log


def test_metrics_behind_the_token(tmp_path: Path) -> None:
    with CoordinatorProc(f"file://{tmp_path / 'root'}",
                         extra=["--token-file", token_file(tmp_path), "--protect-metrics"]
                         ) as proc:
        assert raw(proc.endpoint, "GET", "/metrics")[0] == 401
        assert raw(proc.endpoint, "GET", "/metrics",
                   {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert raw(proc.endpoint, "GET", "/healthz")[0] == 200


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    os.chmod(path, 0o644)
    proc = CoordinatorProc(f"file://{tmp_path / 'root'}", extra=["--token-file", path])
    assert proc.wait(60) != 0
    assert "chmod 600" in proc.log_text()
    proc.stop()


# -------------------------------------------------------------------------------- TLS
def test_tls_with_a_verified_certificate(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    # CoordinatorProc's health check has no CA: wait for the registration instead
    proc = CoordinatorProc(f"file://{tmp_path / 'root2'}",
                           extra=["--tls-cert", cert, "--tls-key", key,
                                  "--token-file", token_file(tmp_path)])
    try:
        info = _wait_registered(f"file://{tmp_path / 'root2'}", proc)
        ep = info["endpoint"]
        assert ep.startswith("https://127.0.0.1:") and info["tls"] and info["token"]
        good = CoordinatorClient(ep, credentials=Credentials(token=TOKEN, ca_file=cert))
        assert good.healthy()
        good.create_topic("secure", 2)
        assert good.list_topics() == ["secure"]
        unverified = CoordinatorClient(ep, credentials=Credentials(token=TOKEN), retry_for=5)
        with pytest.raises(CoordinatorUnavailableError, match=r"coordinator\.tls\.ca"):
            unverified.list_topics()
        plain = "http://" + ep[len("https://"):]
        with pytest.raises(CoordinatorUnavailableError):
            CoordinatorClient(plain, credentials=Credentials(token=TOKEN),
                              retry_for=1).list_topics()
    finally:
        proc.stop()


def _wait_registered(root: str, proc: CoordinatorProc, timeout: float = 60) -> dict:
    storage = Storage.for_url(root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.proc.poll() is None, proc.log_tail()
        try:
            info = json.loads(storage.get(layout.COORDINATOR_FILE))
            if info.get("pid") == proc.pid:
                return info
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise TimeoutError(proc.log_tail())


# -------------------------------------------------------------- who starts a coordinator
def test_unreachable_service_is_an_error_never_a_takeover(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered service coordinator that is gone: the driver waits briefly (for a
    standby), then fails naming the endpoint and the fix, and starts none."""
    root = f"file://{tmp_path / 'root'}"
    proc = CoordinatorProc(root, extra=["--advertised-url", "http://127.0.0.1:9"])
    info = _wait_registered(root, proc)
    assert info["embedded"] is False
    proc.kill()
    storage = Storage.for_url(root)
    before = storage.get(layout.COORDINATOR_FILE)
    with pytest.raises(CoordinatorUnreachableError) as err:
        coordinator_for_root(root, service_wait_s=1.0)
    message = str(err.value)
    assert "http://127.0.0.1:9" in message and "txnlog coordinator" in message
    assert storage.get(layout.COORDINATOR_FILE) == before  # nobody registered anew
    assert not storage.exists("_coordinator.lock")
    # a task-side client of the same endpoint fails the same way, also starting nothing
    monkeypatch.setattr(client_module, "DEFAULT_RETRY_S", 1.0)
    with pytest.raises(CoordinatorUnavailableError, match=r"127\.0\.0\.1:9 .*loopback"):
        CoordinatorClient("http://127.0.0.1:9", root=root).list_topics()
    assert storage.get(layout.COORDINATOR_FILE) == before


def test_a_process_that_may_not_start_one_never_does(tmp_path: Path) -> None:
    root = f"file://{tmp_path / 'root'}"
    with pytest.raises(CoordinatorUnreachableError, match="no coordinator is registered"):
        coordinator_for_root(root, start=False, service_wait_s=0.5)
    assert not Storage.for_url(root).exists(layout.COORDINATOR_FILE)


def test_a_spark_task_never_starts_a_coordinator(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch writer built on the driver carries the endpoint; its task (``write``) with
    the coordinator gone fails with the clear error and starts none (a writer that started
    one of its own would take the log over)."""
    import pickle

    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.datasource.options import parse_write_options
    from txnlog.datasource.write.batch_writer import TxnlogBatchWriter

    root = f"file://{tmp_path / 'root'}"
    proc = CoordinatorProc(root)
    endpoint = proc.wait_healthy()
    opts = parse_write_options({"path": root, "topic": "t"})
    schema = StructType([StructField("value", BinaryType())])
    writer = pickle.loads(pickle.dumps(TxnlogBatchWriter(opts, schema)))
    epoch = CoordinatorClient(endpoint).stable()["coordinator_epoch"]
    proc.kill()
    monkeypatch.setattr(client_module, "DEFAULT_RETRY_S", 1.0)
    import pyarrow as pa

    batch = pa.record_batch({"value": pa.array([b"x"], pa.binary())})
    with pytest.raises(CoordinatorUnavailableError, match=endpoint):
        writer.write(iter([batch]))
    info = json.loads(Storage.for_url(root).get(layout.COORDINATOR_FILE))
    assert info["pid"] == proc.pid and info["epoch"] == epoch  # nobody took over


# ---------------------------------------------------------------------- stopping
def test_sigterm_ends_even_a_wedged_coordinator(tmp_path: Path) -> None:
    root = f"file://{tmp_path / 'root'}"
    proc = CoordinatorProc(root, faults="before_prepare:1:hang",
                           extra=["--stop-timeout-s", "1"])
    endpoint = proc.wait_healthy()
    c = CoordinatorClient(endpoint, timeout=2, retry_for=0.5)
    c.create_topic("t", 1)
    pid, epoch = c.init_producer_id("wedge")
    c.add_member("wedge", pid, epoch, "m")
    with pytest.raises(CoordinatorUnavailableError):
        c.end_txn("wedge", pid, epoch, commit=True)  # hangs the event loop
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(120) != 0
    assert "exiting with" in proc.log_text()
    proc.stop()


def test_a_log_record_that_cannot_be_encoded_stops_the_process(tmp_path: Path) -> None:
    """Defence in depth behind request_limits: the log writer failing (here: a record
    past Kafka's STRING limit, fed in-process) fails its waiters and calls on_fatal."""
    import asyncio

    from txnlog.coordinator.errors import NotCoordinatorError
    from txnlog.coordinator.state.txn_log import TxnLog
    from txnlog.coordinator.state.txn_log_records import LogRecord

    fatal: list[BaseException] = []

    async def scenario() -> None:
        log = TxnLog(Storage.for_url(f"file://{tmp_path / 'root'}"), 0,
                     snapshot_fn=dict, protected_fn=list, on_fatal=fatal.append)
        log.start()
        fut = log.append([LogRecord("txn", {"tid": "x" * 40_000, "pid": 1, "epoch": 0})])
        with pytest.raises(NotCoordinatorError):
            await asyncio.wait_for(fut, 30)
        with pytest.raises(NotCoordinatorError):
            log.append([LogRecord("topic", {"id": "t", "name": "t", "partitions": 1})])
        await log.halt()

    asyncio.run(scenario())
    assert len(fatal) == 1


# ---------------------------------------------------------------------- topic configs
def test_topic_configs_are_kafkas(tmp_path: Path) -> None:
    with CoordinatorProc(f"file://{tmp_path / 'root'}") as proc:
        c = proc.client()
        meta = c.create_topic("ok", 1, {"retention.ms": 604800000, "cleanup.policy":
                                        "compact,delete", "preallocate": False})
        assert meta["config"] == {"retention.ms": "604800000",
                                  "cleanup.policy": "compact,delete", "preallocate": "false"}
        with pytest.raises(InvalidConfigError, match=r"retention\.msec"):
            c.create_topic("typo", 1, {"retention.msec": "1"})
        with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
            c.create_topic("bad", 1, {"cleanup.policy": "forever"})
        with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
            c.create_topic("bad", 1, {"segment.bytes": "10"})
        assert c.list_topics() == ["ok"]
