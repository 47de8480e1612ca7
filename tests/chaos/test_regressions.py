"""Product bugs the chaos harness found, reduced to deterministic reproductions."""

from __future__ import annotations

from pathlib import Path

from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format.consumer import Consumer

from .checker import check
from .history import tp_key


def test_committed_txn_behind_an_open_txn_is_not_torn(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as c:
        c.client().create_topic("t", 2)
        a = TransactionalProducer(root, "A", coordinator=c.endpoint)
        b = TransactionalProducer(root, "B", coordinator=c.endpoint)
        a.init_transactions()
        b.init_transactions()
        a.begin_transaction()
        a.send("t", b"1", partition=0)
        a.flush()  # A is open in t-0: the LSO of t-0 stops at A's first offset
        b.begin_transaction()
        b.send("t", b"2", partition=0)
        b.send("t", b"3", partition=1)
        b.commit_transaction()  # B is committed, in t-0 after A's records
        reads = {tp_key(tp.topic, tp.partition): [[r.offset, int(r.value)] for r in recs]
                 for tp, recs in Consumer(root, "t").poll().items()}
        a.abort_transaction()
    ops = [{"f": "send", "proc": "B", "txn": "B:0", "value": 2},
           {"f": "send", "proc": "B", "txn": "B:0", "value": 3},
           {"f": "commit", "proc": "B", "txn": "B:0", "outcome": "ok"},
           {"f": "send", "proc": "A", "txn": "A:0", "value": 1},
           {"f": "abort", "proc": "A", "txn": "A:0", "outcome": "ok"},
           {"f": "poll", "proc": "c", "mode": "scan", "isolation": "read_committed",
            "reads": reads, "outcome": "ok", "t1": 0}]
    res = check(ops)
    # Before the fix reads were {"t-1": [[0, 3]]}: B's record in t-1 without its t-0 record.
    assert reads == {}, reads
    assert res.valid, res.summary()


def test_aborted_txn_stays_hidden_while_hw_is_below_its_marker(tmp_path: Path) -> None:
    """Kafka keeps an aborted transaction "unreplicated" until the HW passes its marker.

    Found by the chaos harness (coordinator-kill): producer B reserved an offset after A's
    records and had not confirmed it, so the HW stopped below A's ABORT marker. A consumer
    lists a partition again only once the HW moves, so it had not seen the marker's
    .txnindex entry, and the LSO (already past A's records) let it read A's aborted record.
    """
    import pyarrow as pa
    from txnlog.log_format import layout
    from txnlog.log_format.arrow.arrow_codec import encode_arrow
    from txnlog.log_format.storage import Storage

    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as c:
        client = c.client()
        client.create_topic("t", 1)
        a = TransactionalProducer(root, "A", coordinator=c.endpoint)
        a.init_transactions()
        a.begin_transaction()
        a.send("t", b"committed", partition=0)
        a.commit_transaction()  # offset 0, COMMIT marker at 1
        a.begin_transaction()
        a.send("t", b"aborted", partition=0)
        a.flush()  # A's record at offset 2
        pid, epoch = client.init_producer_id(None)  # B: reserves offset 3, writes later
        (base,) = client.reserve(pid, epoch, {("t", 0): (0, 1)}).values()
        client.stable(publish=True)  # readers now see HW 3, LSO 2 (A is open)
        consumer = Consumer(root, "t")

        def values() -> list[bytes | None]:
            return [r.value for recs in consumer.poll().values() for r in recs]

        assert values() == [b"committed"]  # lists the partition while the HW is 3
        a.abort_transaction()  # ABORT marker and .txnindex at offset 4, above the HW (3)
        assert values() == []
        data = encode_arrow(pa.table({"value": [b"late"]}), producer_id=pid,
                            producer_epoch=epoch, base_sequence=0)
        storage = Storage.for_url(root)
        assert storage.put_if_absent(layout.segment_path("t", 0, base),
                                     data.with_base_offset(base))
        client.confirm(pid, epoch, [("t", 0, base)], wait_stable=True)
        assert values() == [b"late"]
