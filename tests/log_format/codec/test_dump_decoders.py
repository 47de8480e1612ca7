"""``txnlog dump``'s Kafka decoders and index checks, and a message (not a traceback) for a
file that is not named by a base offset."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

from txnlog.coordinator.state.txn_log_records import OWN_KINDS, LogRecord, to_kafka_record
from txnlog.log_format.codec.consumer_offsets import encode_offset_commit
from txnlog.log_format.codec.dump_decoders import OWN_KIND_NAMES
from txnlog.log_format.codec.indexes import build_indexes, encode_offset_index, encode_time_index
from txnlog.log_format.codec.records import encode_batch


def _txnlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txnlog.coordinator.cli", "dump", *args],
                          capture_output=True, text=True, timeout=120)


def _payloads(stdout: str) -> list[tuple[str, str]]:
    """(key, payload) of each record line, as kafka-dump-log prints them."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("| offset:") and " key: " in line:
            key = line.split(" key: ", 1)[1].split(" payload: ", 1)
            out.append((key[0], key[1] if len(key) > 1 else ""))
    return out


def test_offsets_decoder(tmp_path) -> None:
    k1, v1 = encode_offset_commit("grp", "orders", 2, 42, "meta", 1700000000000)
    k2, _ = encode_offset_commit("grp", "orders", 3, 0, "", 0)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(encode_batch([(k1, v1, [], 1700000000000), (k2, None, [], 1700000000001)]))
    r = _txnlog("--offsets-decoder", "--files", str(seg))
    assert r.returncode == 0, r.stderr
    assert _payloads(r.stdout) == [
        ('{"type":"1","data":{"group":"grp","topic":"orders","partition":2}}',
         '{"version":"3","data":{"offset":42,"leaderEpoch":-1,"metadata":"meta",'
         '"commitTimestamp":1700000000000}}'),
        ('{"type":"1","data":{"group":"grp","topic":"orders","partition":3}}', "<DELETE>"),
    ]


def test_transaction_log_decoder_reads_kafkas_and_txnlogs_records(tmp_path) -> None:
    assert {v: k for k, v in OWN_KINDS.items()} == OWN_KIND_NAMES  # the two lists agree
    recs = [
        LogRecord("takeover", {"id": "", "epoch": 3}),
        LogRecord("txn", {"tid": "job-1", "pid": 7, "epoch": 2, "timeout_ms": 60000,
                          "state": 1, "partitions": [["orders", [0, 1]]],
                          "last_update_ms": 1700000000500, "start_ms": 1700000000000,
                          "ext": {"members": {}}}),
        LogRecord("txn", {"tid": "gone", "tombstone": True}),
        LogRecord("topic", {"id": "orders", "name": "orders", "partitions": 2, "config": {}}),
    ]
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(encode_batch([to_kafka_record(r, 1700000000000) for r in recs]))
    r = _txnlog(str(seg), "--transaction-log-decoder")
    assert r.returncode == 0, r.stderr
    got = _payloads(r.stdout)
    assert got[0][0] == '{"type":"1000","data":{"kind":"takeover","id":""}}'
    assert json.loads(got[0][1]) == {"version": "0", "data": {"id": "", "epoch": 3}}
    assert got[1][0] == '{"type":"0","data":{"transactionalId":"job-1"}}'
    assert json.loads(got[1][1]) == {"version": "0", "data": {
        "producerId": 7, "producerEpoch": 2, "transactionTimeoutMs": 60000,
        "transactionStatus": 1,
        "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 1]}],
        "transactionLastUpdateTimestampMs": 1700000000500,
        "transactionStartTimestampMs": 1700000000000}}
    assert got[2] == ('{"type":"0","data":{"transactionalId":"gone"}}', "<DELETE>")
    assert json.loads(got[3][1])["data"]["partitions"] == 2
    # a type no decoder knows, and a value that does not parse: Kafka's skip lines
    odd = tmp_path / "00000000000000000010.log"
    odd.write_bytes(encode_batch([(struct.pack(">hh", 7, 0), b"x", [], 1),
                                  (struct.pack(">hh", 0, 1) + b"t", b"\x00\x00\x01", [], 1)],
                                 base_offset=10))
    r = _txnlog(str(odd), "--transaction-log-decoder")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("| offset:")]
    assert lines[0].endswith(" key: Unknown record type 7 at offset 10, skipping.")
    assert " key: Error at offset 11, skipping. truncated" in lines[1]
    # a record without a key stops the file with Kafka's message
    nokey = tmp_path / "00000000000000000020.log"
    nokey.write_bytes(encode_batch([(None, b"x", [], 1)], base_offset=20))
    r = _txnlog(str(nokey), "--offsets-decoder")
    assert r.returncode == 1 and "message had a missing key" in r.stderr
    assert "Traceback" not in r.stderr
    # one decoder at a time (Kafka would silently take the offsets decoder)
    assert _txnlog(str(seg), "--transaction-log-decoder", "--offsets-decoder").returncode == 2


def test_bad_file_names_are_a_message_not_a_traceback(tmp_path) -> None:
    for name in ("segment.log", "0x12.index", "x.timeindex"):
        f = tmp_path / name
        f.write_bytes(b"")
        r = _txnlog(str(f))
        assert r.returncode == 1
        assert "Traceback" not in r.stderr
        assert "is not a segment file name" in r.stderr and "20 digits" in r.stderr


def test_index_sanity_check_and_verify_index_only(tmp_path) -> None:
    seg = b"".join(encode_batch([(b"k", b"v" * 300, [], 1000 + i)], base_offset=i)
                   for i in range(20))
    (tmp_path / "00000000000000000000.log").write_bytes(seg)
    offsets, times = build_indexes(seg, 0, index_interval_bytes=400)
    assert len(offsets) > 2
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(encode_offset_index(offsets, 0))
    tidx = tmp_path / "00000000000000000000.timeindex"
    tidx.write_bytes(encode_time_index(times, 0))

    r = _txnlog("--index-sanity-check", str(idx), str(tidx))
    assert r.returncode == 0, r.stderr
    assert f"{idx} passed sanity check." in r.stdout
    assert f"{tidx} passed sanity check." in r.stdout
    assert "offset:" not in r.stdout and "timestamp:" not in r.stdout

    r = _txnlog("--verify-index-only", str(idx), str(tidx))
    assert r.returncode == 0 and r.stderr == ""
    assert "offset:" not in r.stdout and "timestamp:" not in r.stdout
    # ... but a mismatch with the log is still reported
    bad = list(offsets)
    bad[1] = (bad[1][0] + 1, bad[1][1])
    idx.write_bytes(encode_offset_index(bad, 0))
    r = _txnlog("--verify-index-only", str(idx))
    assert "Mismatches in :" in r.stderr and "offset:" not in r.stdout

    idx.write_bytes(encode_offset_index(offsets, 0) + b"\x00\x00\x00")  # torn
    r = _txnlog("--index-sanity-check", str(idx))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "failed sanity check" in r.stderr and "multiple of 8" in r.stderr
