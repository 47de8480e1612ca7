"""Stable snapshots: highest name wins, readers never go backwards, pruning."""

from __future__ import annotations

import pytest
from txnlog.log_format.stable import (
    StableSnapshot,
    StableSnapshotError,
    list_stable,
    make_snapshot,
    prune_stable,
    read_latest_stable,
    write_stable,
)
from txnlog.log_format.storage import Storage


def test_latest_wins_by_epoch_then_seq(every_root: str) -> None:
    st = Storage.for_url(every_root)
    assert read_latest_stable(st) is None
    s1 = make_snapshot(1, 5, {"t-0": (10, 8)}, now_ms=1)
    s2 = make_snapshot(1, 12, {"t-0": (20, 20), "t-1": (3, 0)}, now_ms=2)
    s3 = make_snapshot(2, 1, {"t-0": (21, 21)}, now_ms=3)
    assert write_stable(st, s1) and write_stable(st, s2)
    assert read_latest_stable(st) == s2
    assert write_stable(st, s3)
    # a fenced epoch-1 coordinator's late snapshot sorts below epoch 2
    late = make_snapshot(1, 99, {"t-0": (50, 50)}, now_ms=4)
    assert write_stable(st, late)
    got = read_latest_stable(st)
    assert got == s3 and got.offsets("t", 0) == (21, 21)
    assert got.offsets("t", 1) == (0, 0)  # never resolved
    assert s2.hw("t", 1) == 3 and s2.lso("t", 1) == 0
    # same name, other bytes: refused
    assert write_stable(st, make_snapshot(2, 1, {"t-0": (0, 0)})) is False
    assert write_stable(st, s3) is True


def test_never_goes_backwards(file_root: str) -> None:
    st = Storage.for_url(file_root)
    newer = make_snapshot(3, 1, {"t-0": (5, 5)})
    write_stable(st, make_snapshot(2, 7, {"t-0": (4, 4)}))
    assert read_latest_stable(st, not_below=newer) is newer
    assert read_latest_stable(Storage.for_url(file_root + "/empty"), not_below=newer) is newer


def test_prune_keeps_newest(every_root: str) -> None:
    st = Storage.for_url(every_root)
    for seq in range(7):
        write_stable(st, make_snapshot(1, seq, {"t-0": (seq, seq)}))
    assert prune_stable(st, keep=3) == 4
    assert list_stable(st) == [(1, 4), (1, 5), (1, 6)]
    assert read_latest_stable(st).seq == 6
    with pytest.raises(ValueError):
        prune_stable(st, keep=0)


def test_json_roundtrip_and_validation() -> None:
    s = make_snapshot(4, 2, {"a-0": (9, 3)}, now_ms=77)
    assert StableSnapshot.from_json(s.to_json()) == s
    assert s.path == "_stable/0000000004-00000000000000000002.json"
    with pytest.raises(StableSnapshotError, match="lso 5 > hw 3"):
        make_snapshot(1, 1, {"a-0": (3, 5)})
    with pytest.raises(StableSnapshotError, match=r"x\.json"):
        StableSnapshot.from_json(b'{"seq": 1}', "x.json")


def test_tails_carry_an_aborts_txnindex_entries_and_refuse_bad_ones() -> None:
    """A run of abort markers carries its .txnindex entries (a sixth field, only there);
    an entry that does not end at a marker of its run, or is not four integers, makes the
    head invalid instead of being half-read."""
    from txnlog.log_format.layout import shared_object_name, shared_object_path
    from txnlog.log_format.stable import TailEntry, decode_tails, encode_tails

    a, b = (shared_object_path(shared_object_name(9, 0, n * 16)) for n in "ab")
    tails = {"t-0": (TailEntry(0, 5, a, 0, 400),
                     TailEntry(5, 7, b, 61, 122, ((9, 2, 5, 6), (11, 3, 6, 7))))}
    enc = encode_tails(tails)
    assert [len(r) for r in enc["tails"]["t-0"]] == [5, 6]
    assert decode_tails(enc, "h") == tails
    for bad in ([[9, 2, 8, 9]], [[9, 6, 5, 6]], [[9, 2, 5]], [], "x", [[9, "a", 5, 6]]):
        row = [5, 7, 1, 61, 122, bad]
        with pytest.raises(StableSnapshotError, match="invalid tails"):
            decode_tails({"objects": enc["objects"], "tails": {"t-0": [row]}}, "h")
    with pytest.raises(StableSnapshotError, match="invalid tails"):
        decode_tails({"objects": enc["objects"],
                      "tails": {"t-0": [[5, 7, 1, 61, 122, [[9, 2, 5, 6]], 0]]}}, "h")
