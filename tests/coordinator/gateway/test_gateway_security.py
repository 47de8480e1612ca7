"""The gateway with the coordinator's token (SASL/PLAIN) and TLS.

A coordinator that requires its bearer token, a gateway given the same token file: Kafka
clients must authenticate with SASL/PLAIN (password = the token) over TLS; a wrong password
or no SASL at all gets nothing, and the gateway itself reaches the coordinator with the
token (producing needs it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTP
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from txnlog.coordinator.security import Credentials

from tests.coordinator.server.test_coordinator_service import TOKEN, make_cert, token_file


def _client_conf(gw: GatewayProc, cert: str, password: str | None) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": gw.bootstrap, "ssl.ca.location": cert,
                               "security.protocol": "SSL"}
    if password is not None:
        conf.update({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                     "sasl.username": "app", "sasl.password": password})
    return conf


def test_sasl_plain_over_tls_with_the_coordinators_token(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    root = f"file://{tmp_path / 'root'}"
    cert, key = make_cert(tmp_path)
    tok = token_file(tmp_path)
    with CoordinatorProc(root, extra=["--token-file", tok]) as coord:
        coord.client(credentials=Credentials(TOKEN)).create_topic("sec", 1)  # type: ignore[arg-type]
        with GatewayProc(root, extra=["--token-file", tok, "--tls-cert", cert,
                                      "--tls-key", key]) as gw:
            p = CKProducer({**_client_conf(gw, cert, TOKEN), "enable.idempotence": True})
            errors: list[object] = []
            for i in range(20):
                p.produce("sec", f"s{i}".encode(),
                          on_delivery=lambda err, msg: errors.append(err) if err else None)
            assert p.flush(120) == 0 and errors == []
            c = CKConsumer({**_client_conf(gw, cert, TOKEN), "group.id": "sec",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
            c.assign([CKTP("sec", 0, 0)])
            got: list[str] = []
            deadline = time.monotonic() + 60
            while len(got) < 20 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value().decode())
            c.close()
            assert sorted(got) == sorted(f"s{i}" for i in range(20))

            for password in ("wrong-" + TOKEN, None):  # wrong password, or no SASL at all
                bad = CKConsumer({**_client_conf(gw, cert, password), "group.id": "bad",
                                  "auto.offset.reset": "earliest"})
                bad.assign([CKTP("sec", 0, 0)])
                deadline = time.monotonic() + 8
                leaked = []
                while time.monotonic() < deadline:
                    m = bad.poll(0.5)
                    if m is not None and m.error() is None:
                        leaked.append(m.value())
                bad.close()
                assert leaked == []
            assert gw.alive()
