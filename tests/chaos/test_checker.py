"""The checker on hand-made histories: every anomaly is found, and a clean history passes."""

from __future__ import annotations

from typing import Any

import pytest

from .checker import ANOMALIES, Txn, check


def send(txn: str, value: int, tp: str = "a-0", offset: int | None = None,
         outcome: str = "ok") -> dict[str, Any]:
    topic, _, p = tp.rpartition("-")
    return {"f": "send", "proc": txn.split(":")[0], "txn": txn, "topic": topic,
            "partition": int(p), "key": str(value % 3), "value": value, "offset": offset,
            "outcome": outcome, "t0": 0.0, "t1": 0.0}


def end(f: str, txn: str, outcome: str) -> dict[str, Any]:
    return {"f": f, "proc": txn.split(":")[0], "txn": txn, "outcome": outcome,
            "t0": 0.0, "t1": 0.0}


def poll(reads: dict[str, list[list[int]]], *, mode: str = "poll", proc: str = "c1",
         iso: str = "read_committed", bounds: dict[str, list[int]] | None = None,
         ranges: dict[str, list[int]] | None = None, snapshot: list[int] | None = None,
         t0: float = 0.0) -> dict[str, Any]:
    return {"f": "poll", "proc": proc, "isolation": iso, "mode": mode, "reads": reads,
            "bounds": bounds, "ranges": ranges, "snapshot": snapshot, "outcome": "ok",
            "t0": t0, "t1": t0}


def final(reads: dict[str, list[list[int]]], **kw: Any) -> dict[str, Any]:
    return poll(reads, mode="final", proc="final", **kw)


# Two committed transactions across two partitions, one aborted, one unknown (invisible).
T1 = [send("w1:0", 1, "a-0", 0), send("w1:0", 2, "b-0", 0), end("commit", "w1:0", "ok")]
T2 = [send("w1:1", 3, "a-0", 2), end("abort", "w1:1", "ok")]
T3 = [send("w2:0", 4, "a-0", 5), send("w2:0", 5, "b-0", 2), end("commit", "w2:0", "ok")]
T4 = [send("w3:0", 6, "b-0", None), end("commit", "w3:0", "unknown")]
BOUNDS = {"a-0": [7, 7], "b-0": [4, 4]}
FINAL_READS = {"a-0": [[0, 1], [5, 4]], "b-0": [[0, 2], [2, 5]]}
CLEAN = [*T1, *T2, *T3, *T4,
         poll({"a-0": [[0, 1]], "b-0": [[0, 2]]}, bounds={"a-0": [2, 2], "b-0": [2, 2]},
              ranges={"a-0": [0, 2], "b-0": [0, 2]}, snapshot=[1, 1], t0=1),
         poll({"a-0": [[5, 4]], "b-0": [[2, 5]]}, bounds=BOUNDS,
              ranges={"a-0": [2, 7], "b-0": [2, 4]}, snapshot=[1, 2], t0=2),
         poll({"a-0": [[0, 1], [2, 3], [5, 4]]}, iso="read_uncommitted", proc="u1",
              bounds=BOUNDS, ranges={"a-0": [0, 7]}, snapshot=[1, 2]),
         poll(FINAL_READS, mode="scan", proc="s1", bounds=BOUNDS,
              ranges={"a-0": [0, 7], "b-0": [0, 4]}),
         final(FINAL_READS, bounds=BOUNDS, ranges={"a-0": [0, 7], "b-0": [0, 4]})]


def kinds(ops: list[dict[str, Any]]) -> set[str]:
    return set(check(ops).counts)


def test_clean_history_is_valid() -> None:
    res = check(CLEAN)
    assert res.valid, res.summary()
    assert res.stats["committed"] == 2 and res.stats["aborted"] == 1
    assert res.stats["unknown"] == 1


def test_txn_status() -> None:
    assert Txn("x", "w", 0, commit="ok").status == "committed"
    assert Txn("x", "w", 0, commit="fail").status == "aborted"
    assert Txn("x", "w", 0, commit="unknown", abort="ok").status == "aborted"
    assert Txn("x", "w", 0, commit="unknown", abort="fail").status == "unknown"


def test_lost_write() -> None:
    reads = {"a-0": [[0, 1], [5, 4]], "b-0": [[0, 2]]}  # value 5 of w2:0 is gone
    assert "lost-write" in kinds([*T1, *T3, final(reads)])


def test_aborted_read() -> None:
    ops = [*T2, poll({"a-0": [[2, 3]]}, mode="scan")]
    assert kinds(ops) == {"aborted-read"}
    # a commit the coordinator definitely refused counts as aborted too
    ops = [send("w9:0", 9, "a-0"), end("commit", "w9:0", "fail"), final({"a-0": [[0, 9]]})]
    assert "aborted-read" in kinds(ops)
    # read_uncommitted may read aborted data
    ops = [*T2, poll({"a-0": [[2, 3]]}, iso="read_uncommitted", mode="scan")]
    assert kinds(ops) == set()


def test_read_of_an_unknown_transaction_the_final_read_shows_nothing_of() -> None:
    """T4's commit outcome is unknown and the final read shows none of it: it aborted, so
    a read_committed read of its record (a Kafka client's, without bounds) is an aborted
    read; under read_uncommitted it is not."""
    kafka_poll = poll({"b-0": [[3, 6]]}, proc="k1")
    res = check([*CLEAN, kafka_poll])
    assert res.counts.get("aborted-read") == 1, res.counts
    assert res.anomalies["aborted-read"][0]["resolved_by_final"] is True
    assert "aborted-read" not in kinds([*CLEAN, {**kafka_poll, "isolation":
                                                 "read_uncommitted"}])


def test_torn_transaction_in_full_read_and_incremental_poll() -> None:
    assert "torn-transaction" in kinds([*T1, poll({"a-0": [[0, 1]]}, mode="scan")])
    # incremental poll read a-0 only, but b-0's half sits at the snapshot's LSO
    ops = [*T1, poll({"a-0": [[0, 1]]}, bounds={"a-0": [1, 1], "b-0": [1, 0]},
                     ranges={"a-0": [0, 1], "b-0": [0, 0]}),
           final({"a-0": [[0, 1]], "b-0": [[0, 2]]})]
    assert kinds(ops) == {"torn-transaction"}
    # same poll, snapshot covering b-0 too: fine (the consumer may read b-0 later)
    ops[len(T1)] = poll({"a-0": [[0, 1]]}, bounds={"a-0": [1, 1], "b-0": [1, 1]},
                        ranges={"a-0": [0, 1], "b-0": [0, 0]})
    assert kinds(ops) == set()


def test_unknown_outcome_must_resolve_all_or_nothing() -> None:
    t = [send("w5:0", 10, "a-0"), send("w5:0", 11, "b-0"), end("commit", "w5:0", "unknown")]
    assert kinds([*t, final({"a-0": [[0, 10]], "b-0": [[0, 11]]})]) == set()
    assert kinds([*t, final({})]) == set()
    assert kinds([*t, final({"a-0": [[0, 10]]})]) == {"torn-transaction"}


def test_duplicate() -> None:
    reads = {"a-0": [[0, 1], [1, 1]], "b-0": [[0, 2]]}
    assert "duplicate" in kinds([*T1, final(reads)])
    ops = [*T1, poll({"a-0": [[0, 1]], "b-0": [[0, 2]]}, mode="scan"),
           final({"a-0": [[3, 1]], "b-0": [[0, 2]]})]
    assert "duplicate" in kinds(ops)


def test_a_copy_in_aborted_data_is_not_a_duplicate() -> None:
    """A killed Spark task attempt's rows stay in the log as aborted data: read_uncommitted
    shows them, read_committed skips them. Only such a copy, written by another producer
    (the attempt's own member id) than the kept copy, is exempt."""
    ranges = {"a-0": [0, 4], "b-0": [0, 1]}
    ru = poll({"a-0": [[1, 1], [3, 1]], "b-0": [[0, 2]]}, iso="read_uncommitted",
              proc="u1", ranges=ranges)
    ru["producers"] = {"a-0": [[1, 1, 7], [3, 3, 8]], "b-0": [[0, 0, 8]]}
    fin = final({"a-0": [[3, 1]], "b-0": [[0, 2]]}, ranges=ranges)
    res = check([*T1, ru, fin])
    assert res.valid, res.summary()
    assert res.stats["aborted_copies"] == 1
    # one producer wrote the value at 1 and at 3: a batch written twice
    same = dict(ru, producers={"a-0": [[1, 1, 8], [3, 3, 8]], "b-0": [[0, 0, 8]]})
    assert kinds([*T1, same, fin]) == {"duplicate"}
    # producers unknown: counted
    unknown = {k: v for k, v in ru.items() if k != "producers"}
    assert kinds([*T1, unknown, fin]) == {"duplicate"}
    # no read_committed read covered offset 1: it may be a committed copy; counted
    uncovered = final({"a-0": [[3, 1]], "b-0": [[0, 2]]}, ranges={"a-0": [2, 4], "b-0": [0, 1]})
    assert kinds([*T1, ru, uncovered]) == {"duplicate"}
    # a read_committed read returned the copy too: a duplicate however the rest reads
    rc = poll({"a-0": [[1, 1]]}, mode="scan", ranges={"a-0": [0, 2]})
    assert "duplicate" in kinds([*T1, ru, rc, fin])
    # covered, but below that read's log start (deleted, not skipped): counted
    deleted = final({"a-0": [[3, 1]], "b-0": [[0, 2]]}, ranges=ranges)
    deleted["log_start"] = {"a-0": 2}
    assert "duplicate" in kinds([*T1, ru, deleted])


def test_inconsistent_offsets() -> None:
    ops = [*T1, *T3, poll({"a-0": [[0, 1]]}, mode="scan"), poll({"a-0": [[0, 4]]}, mode="scan")]
    assert "inconsistent-offset" in kinds(ops)
    # a read that covered offset 0 and got nothing, while another read has a value there
    ops = [*T1, poll({}, ranges={"a-0": [0, 2]}, mode="poll", proc="c2"),
           final({"a-0": [[0, 1]], "b-0": [[0, 2]]})]
    assert kinds(ops) == {"inconsistent-offset"}


def test_nonmonotonic_poll_and_skip() -> None:
    p1 = poll({"a-0": [[5, 4]]}, ranges={"a-0": [0, 6]}, t0=1)
    p2 = poll({"a-0": [[0, 1]]}, ranges={"a-0": [6, 7]}, t0=2)
    assert "nonmonotonic-poll" in kinds([*T1, *T3, p1, p2])
    p2 = poll({}, ranges={"a-0": [7, 8]}, t0=2)
    assert "poll-skip" in kinds([*T1, *T3, p1, p2])
    p1 = poll({}, snapshot=[2, 5], bounds={"a-0": [6, 6]}, t0=1)
    p2 = poll({}, snapshot=[2, 4], bounds={"a-0": [5, 5]}, t0=2)
    assert kinds([p1, p2]) == {"nonmonotonic-poll"}


def test_read_past_lso_and_hw() -> None:
    ops = [*T1, poll({"a-0": [[0, 1]], "b-0": [[0, 2]]}, bounds={"a-0": [1, 0], "b-0": [1, 1]},
                     ranges={"a-0": [0, 1], "b-0": [0, 1]})]
    assert "read-past-lso" in kinds(ops)
    ops = [*T2, poll({"a-0": [[2, 3]]}, iso="read_uncommitted", bounds={"a-0": [2, 0]},
                     ranges={"a-0": [0, 3]})]
    assert kinds(ops) == {"read-past-hw"}


def test_nonmonotonic_send() -> None:
    t = [send("w1:0", 1, "a-0"), end("commit", "w1:0", "ok"),
         send("w1:1", 2, "a-0"), end("commit", "w1:1", "ok")]
    assert kinds([*t, final({"a-0": [[0, 1], [1, 2]]})]) == set()
    assert kinds([*t, final({"a-0": [[0, 2], [1, 1]]})]) == {"nonmonotonic-send"}


def test_phantom_read() -> None:
    assert kinds([poll({"a-0": [[0, 77]]}, mode="scan")]) == {"phantom-read"}


def stream_out(*records: tuple[str, int, str]) -> dict[str, Any]:
    """The stream's output topic as the harness records it: (out tp, offset, value)."""
    reads: dict[str, list[list[Any]]] = {}
    for tp, offset, value in records:
        reads.setdefault(tp, []).append([offset, value])
    return {"f": "stream-final", "proc": "final", "reads": reads, "t1": 0.0}


# the committed input of CLEAN: a-0@0=1, a-0@5=4, b-0@0=2, b-0@2=5
STREAM_OK = [("o-0", 0, "out:a-0:0:1"), ("o-1", 0, "out:b-0:0:2"),
             ("o-0", 1, "out:a-0:5:4"), ("o-1", 1, "out:b-0:2:5")]


def test_stream_exactly_once() -> None:
    assert kinds([*CLEAN, stream_out(*STREAM_OK)]) == set()
    assert check([*CLEAN, stream_out(*STREAM_OK)]).stats["stream_records"] == 4
    assert kinds([*CLEAN, stream_out(*STREAM_OK[:3])]) == {"stream-lost"}
    dup = ("o-1", 2, "out:a-0:0:1")
    assert kinds([*CLEAN, stream_out(*STREAM_OK, dup)]) == {"stream-duplicate"}
    # the aborted record of w1:1 (a-0@2=3) went through the pipeline
    aborted = ("o-1", 2, "out:a-0:2:3")
    assert kinds([*CLEAN, stream_out(*STREAM_OK, aborted)]) == {"stream-phantom"}
    wrong_value = ("o-0", 1, "out:a-0:5:99")
    assert kinds([*CLEAN, stream_out(*STREAM_OK[:2], wrong_value, STREAM_OK[3])]) == {
        "stream-phantom"}
    swapped = [("o-0", 0, "out:a-0:5:4"), ("o-1", 0, "out:b-0:0:2"),
               ("o-0", 1, "out:a-0:0:1"), ("o-1", 1, "out:b-0:2:5")]
    assert kinds([*CLEAN, stream_out(*swapped)]) == {"stream-order"}


def _retry(answer: str, after_s: float) -> dict[str, Any]:
    return {"f": "retry", "proc": "w0", "txn": "w0:9", "tid": "x-1s9", "end": "commit",
            "t0": 100.0, "t1": 100.0 + after_s, "answer": answer, "retention_ms": 1500}


def test_one_shot_retries() -> None:
    assert kinds([*CLEAN, _retry("same", 0.5), _retry("unknown-id", 2.0)]) == set()
    assert kinds([*CLEAN, _retry("transient: timeout", 0.1)]) == set()
    assert kinds([*CLEAN, _retry("unknown-id", 1.0)]) == {"early-drop"}
    assert kinds([*CLEAN, _retry("other: InvalidTxnStateError: ...", 0.2)]) == {
        "retry-changed"}
    assert check([*CLEAN, _retry("same", 0.5)]).stats["one_shot_retries_same"] == 1


def test_every_anomaly_kind_has_a_test() -> None:
    """Every kind the checker reports is expected by a test: its name appears in an
    ``assert`` of some test function of tests/chaos (read from the tests themselves, so a
    new kind, or a test deleted or renamed away, fails here)."""
    import ast
    from pathlib import Path

    asserted: dict[str, list[str]] = {}
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_") \
                    or fn.name == "test_every_anomaly_kind_has_a_test":
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Assert):
                    for c in ast.walk(node):
                        if isinstance(c, ast.Constant) and c.value in ANOMALIES:
                            asserted.setdefault(c.value, []).append(f"{path.name}::{fn.name}")
    missing = [k for k in ANOMALIES if k not in asserted]
    assert not missing, f"anomaly kinds no test asserts: {missing}"


def test_records_below_the_log_start_are_deleted_not_lost() -> None:
    """Retention deleted w1:0's records (a-0 below 2, b-0 below 2): the final read and a
    scan with that log start are valid without them; a read returning a record below its
    own log start is read-below-log-start; a lost record above it is still a lost write."""
    ls = {"a-0": 2, "b-0": 2}
    after = {"a-0": [[5, 4]], "b-0": [[2, 5]]}
    ops = [*T1, *T2, *T3,
           poll(after, mode="scan", proc="s1", bounds=BOUNDS,
                ranges={"a-0": [2, 7], "b-0": [2, 4]}),
           final(after, bounds=BOUNDS, ranges={"a-0": [2, 7], "b-0": [2, 4]})]
    for op in ops[-2:]:
        op["log_start"] = ls
    assert kinds(ops) == set()
    res = check(ops)
    assert res.stats["deleted_by_retention"] == 2
    # without the log start those are lost writes and a torn scan
    bare = [dict(op, log_start=None) if op["f"] == "poll" else op for op in ops]
    assert {"lost-write"} <= kinds(bare)
    # a read below its own log start
    below = [*ops, dict(poll({"a-0": [[0, 1]]}, ranges={"a-0": [0, 2]}), log_start=ls)]
    assert "read-below-log-start" in kinds(below)
    # above the log start nothing is excused: T3's b-0 record missing is a lost write
    lost = [*T1, *T2, *T3, dict(final({"a-0": [[5, 4]]}, bounds=BOUNDS), log_start=ls)]
    assert "lost-write" in kinds(lost)


@pytest.mark.parametrize("drop", range(len(CLEAN)))
def test_dropping_any_op_never_crashes(drop: int) -> None:
    check(CLEAN[:drop] + CLEAN[drop + 1:])


def _intrude(txn: str, values: list[int], outcome: str, error: str | None) -> list[dict[str, Any]]:
    return [{"f": "intrude", "proc": "x9", "txn": txn, "kind": "own", "tid": "chaos-x9",
             "values": values, "t0": 0.0, "t1": 0.0},
            {"f": "intrude-end", "proc": "x9", "txn": txn, "kind": "own", "tid": "chaos-x9",
             "outcome": outcome, "error": error, "t0": 0.0, "t1": 0.0}]


def test_the_intruders_values_must_never_be_read() -> None:
    """An ``--acls`` run's intruder: refused attempts whose values no read returns are
    valid; one of its values in any read (read_uncommitted too) is unauthorized-visible
    (not a phantom), an attempt answered as committed unauthorized-accepted."""
    refused = [*_intrude("x9:0", [90, 91], "refused",
                         "TopicAuthorizationFailedError: WRITE on topics ['a']"),
               *_intrude("x9:1", [92], "refused",
                         "TransactionalIdAuthorizationFailedError: WRITE on w1"),
               *_intrude("x9:2", [93], "unknown", "OSError: connection refused")]
    res = check([*CLEAN, *refused])
    assert res.valid, res.summary()
    assert res.stats["intruder_attempts"] == 3 and res.stats["intruder_refused"] == 2
    assert res.stats["intruder_refusals"] == {"TopicAuthorizationFailedError": 1,
                                              "TransactionalIdAuthorizationFailedError": 1}
    seen = poll({"a-0": [[7, 90]]}, iso="read_uncommitted", proc="u2",
                bounds={"a-0": [8, 8]}, ranges={"a-0": [7, 8]})
    assert kinds([*CLEAN, *refused, seen]) == {"unauthorized-visible"}
    accepted = _intrude("x9:3", [94], "accepted", None)
    assert kinds([*CLEAN, *refused, *accepted]) == {"unauthorized-accepted"}
