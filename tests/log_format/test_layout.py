"""Object names: Kafka topic-name rules, segment names that sort by offset."""

from __future__ import annotations

import pytest
from txnlog.log_format import layout
from txnlog.log_format.errors import InvalidTopicNameError


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 249, "__consumer_offsets",
                                  "..."])
def test_valid_topic_names(name: str) -> None:
    assert layout.validate_topic(name) == name


@pytest.mark.parametrize("name,why", [
    ("", "empty"), (".", "not allowed"), ("..", "not allowed"), ("x" * 250, "at most 249"),
    ("a/b", "'/'"), ("../etc", "'/'"), ("sp ace", "' '"), ("ünï", "only ASCII"),
    ("a\\b", "only ASCII"), ("tab\t", "only ASCII"),
])
def test_invalid_topic_names_say_what_is_allowed(name: str, why: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=why) as info:
        layout.validate_topic(name)
    assert isinstance(info.value, ValueError)


def test_invalid_topic_type() -> None:
    with pytest.raises(InvalidTopicNameError, match="string"):
        layout.validate_topic(3)


def test_segment_names_sort_by_offset() -> None:
    assert layout.segment_name(42) == "00000000000000000042.log"
    assert layout.segment_name(7, ".txnindex") == "00000000000000000007.txnindex"
    assert layout.segment_name(2**63 - 1) == "00000009223372036854775807.log"[-24:]
    names = [layout.segment_name(o) for o in (10, 9, 100, 2**40, 0)]
    assert sorted(names) == [layout.segment_name(o) for o in sorted((10, 9, 100, 2**40, 0))]
    assert layout.parse_segment_name("00000000000000000042.log") == (42, ".log")
    assert layout.parse_segment_name("00000000000000000042.timeindex") == (42, ".timeindex")
    for bad in ("42.log", "00000000000000000042.txt", "0000000000000000004x.log",
                ".00000000000000000042.log.txnlog-tmp-abc", "00000000000000000042.log.tmp"):
        assert layout.parse_segment_name(bad) is None
    with pytest.raises(ValueError):
        layout.segment_name(-1)
    with pytest.raises(ValueError):
        layout.segment_name(1, ".exe")


def test_paths() -> None:
    assert layout.partition_dir("orders", 3) == "orders-3"
    assert layout.segment_path("orders", 0, 5) == "orders-0/00000000000000000005.log"
    assert layout.topic_meta_path("orders") == "_meta/topics/orders.json"
    assert layout.stable_path(3, 17) == "_stable/0000000003-00000000000000000017.json"
    assert layout.parse_stable_name("0000000003-00000000000000000017.json") == (3, 17)
    assert layout.parse_stable_name("3-17.json") is None
    assert layout.COORDINATOR_FILE == "_coordinator.json"
    assert layout.txn_state_log_path(9) == "__transaction_state-0/00000000000000000009.log"
    assert layout.txn_state_snapshot_path(9) == \
        "__transaction_state-0/00000000000000000009.snapshot"
    assert layout.consumer_offsets_dir(4) == "__consumer_offsets-4"
    assert layout.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert layout.parse_partition_dir("_meta") is None
    assert layout.parse_partition_dir("t-01") is None
    with pytest.raises(InvalidTopicNameError):
        layout.partition_dir("../x", 0)
    with pytest.raises(ValueError):
        layout.partition_dir("t", -1)
    with pytest.raises(ValueError):
        layout.stable_name(2**31, 0)
