"""A Spark batch write with a principal's token (``txnlog coordinator --principals``).

The job is given ``coordinator.token``: a token bound to ``User:spark`` with WRITE on one
topic and on its jobs' transactional ids (``txnlog-write-`` PREFIXED, the default ids).
Writing that topic commits; writing another fails with TopicAuthorizationFailed and
nothing of it becomes visible.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator.access.model import AclBinding
from txnlog.coordinator.access.store import AccessStore
from txnlog.coordinator.security import Credentials
from txnlog.log_format.storage import Storage

from tests.coordinator.server.test_coordinator_service import TOKEN, token_file

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _principals_coordinator(root: str, tmp_path: Path, principal: str, token: bytes,
                            acls: list[AclBinding]) -> Iterator[tuple[CoordinatorProc, Any]]:
    """A coordinator with ``--principals`` on ``root`` where ``token`` is ``principal``'s
    and ``acls`` are set, and a client of it as the super user (``TOKEN``)."""
    store = AccessStore(Storage.for_url(root))
    store.add_token(principal, token)
    store.add_acls(acls)
    with CoordinatorProc(root, extra=["--token-file", token_file(tmp_path),
                                      "--principals"]) as coord:
        yield coord, coord.client(credentials=Credentials(TOKEN))  # type: ignore[arg-type]


def test_spark_batch_write_with_a_principal(spark, file_root: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN", raising=False)
    acls = [
        AclBinding.new("TOPIC", "sp-out", "LITERAL", "User:spark", "*", "WRITE", "ALLOW"),
        AclBinding.new("TRANSACTIONAL_ID", "txnlog-write-", "PREFIXED", "User:spark", "*",
                       "WRITE", "ALLOW")]
    with _principals_coordinator(file_root, tmp_path, "User:spark", b"spark-principal-token",
                                 acls) as (_coord, admin):
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


def test_spark_stream_with_a_principal(spark, file_root: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """readStream txnlog -> writeStream txnlog as ``User:stream``, its token given as the
    ``coordinator.token`` option (a stream's writer is planned in Spark's Python workers,
    which see the environment the JVM started with: ``TXNLOG_COORDINATOR_TOKEN`` set in
    the driver's Python afterwards does not reach them). Allowed: READ on the input and
    the group, WRITE on the output and on the sink's transactional ids
    (``txnlog-sink-<query id>``): every record once, the group's offsets at the end.
    Refused WRITE on the output: the query fails with TopicAuthorizationFailed, nothing of
    the output and none of the group's offsets are committed. The token shows in no
    exception, plan, progress, checkpoint or log."""
    from stream_helpers import check_exactly_once, end_offsets, produce_keyed, read_values

    secret = "stream-principal-token-4b7e"
    acls = [
        AclBinding.new("TOPIC", "st-in", "LITERAL", "User:stream", "*", "READ", "ALLOW"),
        AclBinding.new("GROUP", "st-g", "PREFIXED", "User:stream", "*", "READ", "ALLOW"),
        AclBinding.new("TOPIC", "st-out", "LITERAL", "User:stream", "*", "WRITE", "ALLOW"),
        AclBinding.new("TOPIC", "st-denied", "LITERAL", "User:stream", "*", "ALL", "ALLOW"),
        AclBinding.new("TOPIC", "st-denied", "LITERAL", "User:stream", "*", "WRITE", "DENY"),
        AclBinding.new("TRANSACTIONAL_ID", "txnlog-sink-", "PREFIXED", "User:stream", "*",
                       "WRITE", "ALLOW")]
    with _principals_coordinator(file_root, tmp_path, "User:stream", secret.encode(),
                                 acls) as (coord, admin):
        for t, n in (("st-in", 3), ("st-out", 1), ("st-denied", 1)):
            admin.create_topic(t, n)
        monkeypatch.setenv("TXNLOG_COORDINATOR_TOKEN", TOKEN)  # the input: the super user's
        expected = produce_keyed(file_root, coord.endpoint, "st-in", keys=6, per_key=10,
                                 txns=3, aborted_every=2)
        ends = end_offsets(file_root, "st-in")

        def query(out: str, group: str, ckpt: Path, **token: str) -> object:
            reader = spark.readStream.format("txnlog")
            writer_opts = dict(token)
            for k, v in token.items():
                reader = reader.option(k, v)
            df = (reader.option("subscribe", "st-in").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "25").option("groupId", group)
                  .option("coordinator", coord.endpoint).load(file_root)
                  .selectExpr("key", "concat(CAST('out:' AS BINARY), value) AS value"))
            w = (df.writeStream.format("txnlog").option("topic", out)
                 .option("coordinator", coord.endpoint)
                 .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
            for k, v in writer_opts.items():
                w = w.option(k, v)
            return w.start(file_root)

        monkeypatch.delenv("TXNLOG_COORDINATOR_TOKEN")
        q = query("st-out", "st-g1", tmp_path / "ck1", **{"coordinator.token": secret})
        q.awaitTermination()  # type: ignore[attr-defined]
        assert check_exactly_once(file_root, "st-out", expected) == 60
        assert admin.committed_offsets("st-g1") == ends
        q.explain(True)  # type: ignore[attr-defined]
        shown = [str(q.recentProgress), capsys.readouterr().out]  # type: ignore[attr-defined]

        # refused WRITE on the output
        q = query("st-denied", "st-g2", tmp_path / "ck2", **{"coordinator.token": secret})
        with pytest.raises(Exception, match="TopicAuthorization") as exc:
            q.awaitTermination()  # type: ignore[attr-defined]
        assert read_values(file_root, "st-denied", "read_uncommitted") == []
        assert admin.committed_offsets("st-g2") == {}
        q.explain(True)  # type: ignore[attr-defined]
        shown += [str(exc.value), str(q.exception()), capsys.readouterr().out,  # type: ignore[attr-defined]
                  coord.log_text()]
        for ck in ("ck1", "ck2"):
            shown += [p.read_bytes().decode("utf-8", "replace")
                      for p in (tmp_path / ck).rglob("*") if p.is_file()]
        assert all(secret not in s for s in shown)
