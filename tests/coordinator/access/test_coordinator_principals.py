"""The coordinator's HTTP API with principals (``txnlog coordinator --principals``).

A real coordinator with the shared token and principals; ``txnlog principal-tokens``
makes a token for ``User:etl`` (written to a file, never printed) and ``txnlog acls``
grants it WRITE on one topic and one transactional id. txnlog's Python producers, given
that token in the environment, write where allowed and get Kafka's authorization errors
elsewhere, with nothing committed; the shared token keeps every right.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client.producer import IdempotentProducer, TransactionalProducer
from txnlog.coordinator.errors import (
    AuthenticationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from txnlog.coordinator.security import Credentials

from tests.coordinator.server.test_coordinator_service import TOKEN, token_file


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "txnlog.coordinator.cli", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def test_principal_tokens_and_acls_guard_producers(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = f"file://{tmp_path / 'root'}"
    etl_token = tmp_path / "etl.token"
    out = _cli("principal-tokens", "--root", root, "--add", "--principal", "User:etl",
               "--token-file", str(etl_token))
    token = etl_token.read_text().strip()
    assert token not in out.stdout + out.stderr
    assert oct(etl_token.stat().st_mode & 0o777) == "0o600"
    _cli("acls", "--root", root, "--add", "--allow-principal", "User:etl", "--operation",
         "Write", "--topic", "etl-out", "--transactional-id", "etl-tx")
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    with CoordinatorProc(root, extra=["--token-file", token_file(tmp_path), "--principals"]
                         ) as coord:
        admin = coord.client(credentials=Credentials(TOKEN))  # type: ignore[arg-type]
        for t in ("etl-out", "other"):
            admin.create_topic(t, 1)
        monkeypatch.setenv("TXNLOG_COORDINATOR_TOKEN", token)
        p = IdempotentProducer(root)
        p.send("etl-out", b"ok")
        p.flush()
        p.send("other", b"no")
        with pytest.raises(TopicAuthorizationFailedError):
            p.flush()
        with pytest.raises(TopicAuthorizationFailedError):
            p.close()  # the refused record is still buffered, and refused again
        tp = TransactionalProducer(root, "etl-tx")
        tp.init_transactions()
        tp.begin_transaction()
        tp.send("etl-out", b"in-txn")
        tp.commit_transaction()
        tp.close()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            TransactionalProducer(root, "other-tx").init_transactions()
        monkeypatch.setenv("TXNLOG_COORDINATOR_TOKEN", "not-a-token")
        with pytest.raises(AuthenticationFailedError):
            IdempotentProducer(root)
        # what was committed: the allowed writes only
        stable = admin.stable(publish=True)["partitions"]
        assert stable["etl-out-0"]["hw"] == 3  # ok, in-txn, its commit marker
        assert stable.get("other-0", {"hw": 0})["hw"] == 0
        log = coord.log_text()
        assert token not in log and TOKEN not in log
    os.environ.pop("TXNLOG_COORDINATOR_TOKEN", None)


def test_fuzz_guarded_operations_never_5xx(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Random bodies for every operation, sent as a principal with a few ACLs: answered
    with 2xx, 4xx or a 403 refusal, never a 5xx, and the coordinator stays healthy."""
    import http.client
    import json
    from urllib.parse import urlparse

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from txnlog.coordinator.access.model import AclBinding
    from txnlog.coordinator.access.store import AccessStore
    from txnlog.coordinator.server.api import OPERATIONS
    from txnlog.log_format.storage import Storage

    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    root = f"file://{tmp_path / 'root'}"
    store = AccessStore(Storage.for_url(root))
    store.add_token("User:fz", b"fz-token")
    store.add_acls([AclBinding.new("TOPIC", "fz", "PREFIXED", "User:fz", "*", "ALL", "ALLOW"),
                    AclBinding.new("TRANSACTIONAL_ID", "*", "LITERAL", "User:fz", "*",
                                   "WRITE", "DENY")])
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 10**6), st.text(max_size=12),
                     st.sampled_from(["fz-a", "other", "g", "t"]))
    value = st.recursive(leaf, lambda c: st.one_of(st.lists(c, max_size=3),
                                                  st.dictionaries(st.sampled_from(
                                                      ["topic", "partition", "name",
                                                       "group_id", "transactional_id"]), c,
                                                      max_size=3)), max_leaves=6)
    keys = st.sampled_from(["transactional_id", "partitions", "topic", "name", "group_id",
                            "offsets", "producer_id", "epoch", "exist_ok", "partitions"])
    body = st.dictionaries(keys, value, max_size=5)
    with CoordinatorProc(root, extra=["--token-file", token_file(tmp_path), "--principals"]
                         ) as coord:
        url = urlparse(coord.client().endpoint)  # type: ignore[attr-defined]

        @settings(max_examples=80, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.sampled_from(sorted(OPERATIONS)), body)
        def one(op: str, b: dict[str, object]) -> None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            conn.request("POST", f"/v1/{op}", json.dumps(b).encode(),
                         {"Authorization": "Bearer fz-token",
                          "Content-Type": "application/json"})
            status = conn.getresponse().status
            conn.close()
            assert status < 500, (op, b, status)

        one()
        assert coord.client().healthy()  # type: ignore[attr-defined]
        assert "Traceback" not in coord.log_text()
