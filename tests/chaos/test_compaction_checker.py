"""The checker on compacted topics (chaos/compaction.py): a value may vanish only once a
later committed record of its key in its partition exists; anything else is still found."""

from __future__ import annotations

from typing import Any

from .checker import check
from .test_checker import end, final, poll


def send(txn: str, value: int, key: str, t0: float) -> dict[str, Any]:
    return {"f": "send", "proc": txn.split(":")[0], "txn": txn, "topic": "a",
            "partition": 0, "key": key, "value": value, "t0": t0, "t1": t0}


def commit(txn: str, t1: float, outcome: str = "ok") -> dict[str, Any]:
    op = end("commit", txn, outcome)
    op["t0"] = op["t1"] = t1
    return op


# k0 written at offsets 0 (txn A) and 2 (txn B, sent after A committed); k1 at 4 (txn C)
HISTORY = [send("w1:0", 10, "k0", 1.0), commit("w1:0", 2.0),
           send("w1:1", 11, "k0", 3.0), commit("w1:1", 4.0),
           send("w1:2", 12, "k1", 5.0), commit("w1:2", 6.0),
           poll({"a-0": [[0, 10], [2, 11], [4, 12]]}, mode="scan", proc="s1",
                bounds={"a-0": [6, 6]}, ranges={"a-0": [0, 6]})]
COMPACTED = final({"a-0": [[2, 11], [4, 12]]}, bounds={"a-0": [6, 6]},
                  ranges={"a-0": [0, 6]})


def test_a_superseded_value_may_vanish_only_on_a_compacted_topic() -> None:
    assert check([*HISTORY, COMPACTED], compacted=True).valid
    plain = check([*HISTORY, COMPACTED])
    assert "lost-write" in plain.counts and "inconsistent-offset" in plain.counts


def test_the_latest_value_of_a_key_may_not_vanish() -> None:
    lost = final({"a-0": [[2, 11]]}, bounds={"a-0": [6, 6]}, ranges={"a-0": [0, 6]})
    assert "lost-write" in check([*HISTORY, lost], compacted=True).counts


def test_an_aborted_write_supersedes_nothing() -> None:
    ops = [send("w1:0", 10, "k0", 1.0), commit("w1:0", 2.0),
           send("w1:1", 11, "k0", 3.0), end("abort", "w1:1", "ok"),
           final({"a-0": []}, bounds={"a-0": [4, 4]}, ranges={"a-0": [0, 4]})]
    assert "lost-write" in check(ops, compacted=True).counts


def test_a_write_sent_before_the_other_committed_does_not_supersede_it() -> None:
    # B's send overlaps A's commit: their order is not known, so A's value must stay
    ops = [send("w1:0", 10, "k0", 1.0), send("w2:0", 11, "k0", 1.5), commit("w1:0", 2.0),
           commit("w2:0", 2.5),
           final({"a-0": [[1, 11]]}, bounds={"a-0": [4, 4]}, ranges={"a-0": [0, 4]})]
    assert "lost-write" in check(ops, compacted=True).counts
