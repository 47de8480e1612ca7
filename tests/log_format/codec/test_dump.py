"""``txnlog dump`` prints kafka-dump-log's lines, token for token."""

import io

import pytest
from txnlog.coordinator.cli.main import main as cli_main
from txnlog.log_format.codec.control import ControlType, encode_control_batch
from txnlog.log_format.codec.dump import DumpOptions, dump_files
from txnlog.log_format.codec.indexes import (
    AbortedTxn,
    build_indexes,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from txnlog.log_format.codec.records import encode_batch

# kafka-format.md section 3: a COMMIT at offset 5 from a real Kafka 3.3 segment.
REAL_COMMIT = bytes.fromhex(
    "0000000000000005000000420000000002 3f7b394d 0030 00000000 0000018799fcd557 "
    "0000018799fcd557 0000000000000000 0000 ffffffff 00000001 "
    "20 00 00 00 08 00000001 0c 0000 00000000 00".replace(" ", ""))


def _dump(paths, **kw) -> tuple[int, list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    rc = dump_files([str(p) for p in paths], DumpOptions(**kw), out=out, err=err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()


def test_real_commit_batch_lines(tmp_path) -> None:
    seg = tmp_path / "00000000000000000005.log"
    seg.write_bytes(REAL_COMMIT)
    rc, out, err = _dump([seg], deep_iteration=True)
    assert rc == 0 and err == []
    assert out == [
        f"Dumping {seg}",
        "Log starting offset: 5",
        "baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 producerId: 0 "
        "producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1681915696471 size: 78 "
        "magic: 2 compresscodec: none crc: 1065040205 isvalid: true",
        "| offset: 5 CreateTime: 1681915696471 keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 0",
    ]


def _segment() -> bytes:
    seg = encode_batch([(b"k1", b"hello", [("a", b"x"), ("b", None)], 1000),
                        (None, b"w", [], 1001), (b"", None, [], 999)],
                       producer_id=3, producer_epoch=0, base_sequence=7, transactional=True,
                       compression="gzip")
    seg += encode_control_batch(ControlType.ABORT, producer_id=3, producer_epoch=0,
                                coordinator_epoch=2, base_offset=3, timestamp_ms=1002)
    seg += encode_batch([(b"z", b"\xff\xfe", [], 2000)], base_offset=4, timestamp_type=1,
                        max_timestamp=2500, delete_horizon_ms=1990)
    return seg


def test_log_deep_iteration_and_print_data_log(tmp_path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(_segment() + b"\x00" * 9)
    rc, out, err = _dump([seg], print_data_log=True)
    assert rc == 0 and err == []
    assert out[0] == f"Dumping {seg}" and out[1] == "Log starting offset: 0"
    assert out[2].startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 7 lastSequence: 9 producerId: 3 "
        "producerEpoch: 0 partitionLeaderEpoch: -1 isTransactional: true isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 size: ")
    assert " magic: 2 compresscodec: gzip crc: " in out[2]
    assert out[2].endswith(" isvalid: true")
    assert out[3:6] == [
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: 7 headerKeys: [a,b] "
        "key: k1 payload: hello",
        "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 1 sequence: 8 headerKeys: [] "
        "payload: w",
        "| offset: 2 CreateTime: 999 keySize: 0 valueSize: -1 sequence: 9 headerKeys: [] key: ",
    ]
    assert "isControl: true" in out[6] and " CreateTime: 1002 size: 78 " in out[6]
    assert out[7] == ("| offset: 3 CreateTime: 1002 keySize: 4 valueSize: 6 sequence: -1 "
                      "headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 2")
    assert "deleteHorizonMs: OptionalLong[1990]" in out[8]
    assert " LogAppendTime: 2500 " in out[8]
    assert out[9] == ("| offset: 4 LogAppendTime: 2500 keySize: 1 valueSize: 2 sequence: -1 "
                      "headerKeys: [] key: z payload: \ufffd\ufffd")
    assert out[10] == "Found 9 invalid bytes at the end of 00000000000000000000.log"
    assert len(out) == 11


def test_shallow_and_invalid_crc(tmp_path) -> None:
    data = bytearray(_segment())
    data[70] ^= 0x55  # inside the first (gzip) batch
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(data))
    rc, out, _ = _dump([seg])
    assert rc == 0
    assert [line.endswith("isvalid: false") for line in out[2:]] == [True, False, False]


def test_indexes_and_txnindex(tmp_path) -> None:
    seg_bytes = b"".join(encode_batch([(b"k", bytes(1500), [], 100 + i)], base_offset=i)
                         for i in range(12))
    offsets, times = build_indexes(seg_bytes, 0)
    assert offsets
    (tmp_path / "00000000000000000000.log").write_bytes(seg_bytes)
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(encode_offset_index(offsets, 0) + b"\x00" * 32)  # preallocated tail
    tidx = tmp_path / "00000000000000000000.timeindex"
    tidx.write_bytes(encode_time_index(times, 0) + b"\x00" * 24)
    txn = tmp_path / "00000000000000000000.txnindex"
    txn.write_bytes(encode_txn_index([AbortedTxn(3, 0, 2, 3), AbortedTxn(9, 4, 8, 9)]))
    rc, out, err = _dump([idx, tidx, txn])
    assert rc == 0 and err == []
    assert out == (
        [f"Dumping {idx}"] + [f"offset: {o} position: {p}" for o, p in offsets]
        + [f"Dumping {tidx}"] + [f"timestamp: {t} offset: {o}" for t, o in times]
        + [f"Dumping {txn}",
           "version: 0 producerId: 3 firstOffset: 0 lastOffset: 2 lastStableOffset: 3",
           "version: 0 producerId: 9 firstOffset: 4 lastOffset: 8 lastStableOffset: 9"])


def test_index_mismatch_reported(tmp_path) -> None:
    seg_bytes = b"".join(encode_batch([(b"k", b"v", [], 1)], base_offset=i) for i in range(3))
    (tmp_path / "00000000000000000000.log").write_bytes(seg_bytes)
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(encode_offset_index([(2, 0)], 0))  # position 0 holds offset 0
    rc, out, err = _dump([idx])
    assert rc == 0 and out[1] == "offset: 2 position: 0"
    assert err == [f"Mismatches in :{idx}", "  Index offset: 2, log offset: 0"]


def test_empty_index_and_unknown_file(tmp_path) -> None:
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(b"")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    rc, out, err = _dump([idx, other])
    assert rc == 0 and out == [f"Dumping {idx}", f"{idx} is empty.", f"Dumping {other}"]
    assert err == [f"Ignoring unknown file {other}"]


def test_corrupt_record_is_an_error_not_a_crash(tmp_path) -> None:
    data = bytearray(encode_batch([(b"k", b"v", [], 1)]))
    data[-1] = 0x7F  # headers count -> negative
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(data))
    rc, out, err = _dump([seg], deep_iteration=True)
    assert rc == 1 and "isvalid: false" in out[2]
    assert err and err[0].startswith("Error: ")


def test_cli_mixed_order_and_url(tmp_path, capsys) -> None:
    seg = tmp_path / "00000000000000000005.log"
    seg.write_bytes(REAL_COMMIT)
    txn = tmp_path / "00000000000000000005.txnindex"
    txn.write_bytes(b"")
    rc = cli_main(["dump", str(seg), "--deep-iteration", f"file://{txn}"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert out[-2].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert out[-1] == f"Dumping file://{txn}"
    rc = cli_main(["dump", "--files", f"{seg}"])
    assert rc == 0 and len(capsys.readouterr().out.splitlines()) == 3


@pytest.mark.parametrize("size", [0, 10, 17])
def test_short_tails_are_invalid_bytes(tmp_path, size) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(REAL_COMMIT + b"\x01" * size)
    rc, out, _ = _dump([seg])
    assert rc == 0
    if size:
        assert out[-1] == f"Found {size} invalid bytes at the end of 00000000000000000000.log"
    else:
        assert out[-1].endswith("isvalid: true")


def test_fsspec_memory_urls_and_index_cross_check() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    seg_bytes = b"".join(encode_batch([(b"k", bytes(2000), [], 50 + i)], base_offset=100 + i)
                         for i in range(8))
    offsets, times = build_indexes(seg_bytes, 100)
    root = "memory://dumptest/t-3"
    with fs.open(f"{root}/00000000000000000100.log", "wb") as f:
        f.write(seg_bytes)
    with fs.open(f"{root}/00000000000000000100.index", "wb") as f:
        f.write(encode_offset_index(offsets, 100))
    with fs.open(f"{root}/00000000000000000100.timeindex", "wb") as f:
        f.write(encode_time_index(times, 100))
    try:
        rc, out, err = _dump([f"{root}/00000000000000000100.log",
                              f"{root}/00000000000000000100.index",
                              f"{root}/00000000000000000100.timeindex"])
    finally:
        fs.rm("/dumptest", recursive=True)
    assert rc == 0 and err == []  # the indexes agree with the log: no mismatch reports
    assert out[0] == f"Dumping {root}/00000000000000000100.log"
    assert out[1] == "Log starting offset: 100" and len([o for o in out if "baseOffset" in o]) == 8
    assert f"offset: {offsets[0].offset} position: {offsets[0].position}" in out
    assert out[-1] == f"timestamp: {times[-1].timestamp} offset: {times[-1].offset}"


def test_a_shared_object_lists_its_runs_by_partition(tmp_path) -> None:
    """``txnlog dump`` of a shared object: each partition's run under a line naming it,
    then that run's batches as its own segment prints them; a file that is not one (no
    footer) is an error, not a crash."""
    from txnlog.log_format.segments.shared_object import RunToWrite, build

    run0 = encode_batch([(b"k", b"v0", [], 1000)], base_offset=7)
    run1 = REAL_COMMIT
    data, _ = build([RunToWrite("orders", 0, 7, 8, run0), RunToWrite("orders", 3, 5, 6, run1)],
                    42, 1)
    obj = tmp_path / "00000000000000000042-00001-0123456789abcdef.wal"
    obj.write_bytes(data)
    rc, out, err = _dump([obj], deep_iteration=True)
    assert rc == 0 and err == []
    assert out[1] == "Shared object written by producer 42 epoch 1: 2 runs"
    assert out[2] == f"Partition: orders-0 baseOffset: 7 endOffset: 8 position: 0 size: {len(run0)}"
    assert out[3].startswith("baseOffset: 7 lastOffset: 7 count: 1")
    assert out[5] == (f"Partition: orders-3 baseOffset: 5 endOffset: 6 position: {len(run0)} "
                      f"size: {len(run1)}")
    assert out[6].startswith("baseOffset: 5 lastOffset: 5 count: 1")
    bad = tmp_path / "00000000000000000042-00001-fedcba9876543210.wal"
    bad.write_bytes(run0)
    rc, _, err = _dump([bad])
    assert rc == 1 and "not a shared object" in err[0]
