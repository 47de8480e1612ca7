"""A Spark batch write with a principal's token (``txnlog coordinator --principals``).

The job is given ``coordinator.token``: a token bound to ``User:spark`` with WRITE on one
topic and on its jobs' transactional ids (``txnlog-write-`` PREFIXED, the default ids).
Writing that topic commits; writing another fails with TopicAuthorizationFailed and
nothing of it becomes visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator.access.model import AclBinding
from txnlog.coordinator.access.store import AccessStore
from txnlog.coordinator.security import Credentials
from txnlog.log_format.storage import Storage

from tests.coordinator.server.test_coordinator_service import TOKEN, token_file

pytestmark = pytest.mark.slow


def test_spark_batch_write_with_a_principal(spark, file_root: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    store = AccessStore(Storage.for_url(file_root))
    store.add_token("User:spark", b"spark-principal-token")
    store.add_acls([
        AclBinding.new("TOPIC", "sp-out", "LITERAL", "User:spark", "*", "WRITE", "ALLOW"),
        AclBinding.new("TRANSACTIONAL_ID", "txnlog-write-", "PREFIXED", "User:spark", "*",
                       "WRITE", "ALLOW")])
    with CoordinatorProc(file_root, extra=["--token-file", token_file(tmp_path),
                                           "--principals"]) as coord:
        admin = coord.client(credentials=Credentials(TOKEN))  # type: ignore[arg-type]
        for t in ("sp-out", "sp-other"):
            admin.create_topic(t, 1)
        df = spark.createDataFrame([(b"k", b"v%d" % i) for i in range(10)],
                                   "key binary, value binary")
        (df.write.format("txnlog").option("topic", "sp-out")
           .option("coordinator.token", "spark-principal-token").mode("append").save(file_root))
        with pytest.raises(Exception, match="TopicAuthorization"):
            (df.write.format("txnlog").option("topic", "sp-other")
               .option("coordinator.token", "spark-principal-token").mode("append")
               .save(file_root))
        parts = admin.stable(publish=True)["partitions"]
        assert parts["sp-out-0"]["lso"] >= 10
        assert parts.get("sp-other-0", {"lso": 0})["lso"] == 0
        got = spark.read.format("txnlog").option("subscribe", "sp-out").load(file_root).count()
        assert got == 10
