"""Topic metadata: put-if-absent creation, first creator wins."""

from __future__ import annotations

import uuid

import pytest
from txnlog.log_format.errors import InvalidTopicNameError
from txnlog.log_format.storage import Storage
from txnlog.log_format.topics import (
    TopicMeta,
    TopicMetadataError,
    UnknownTopicError,
    create_topic,
    create_topic_if_absent,
    list_topics,
    read_topic,
)


def test_create_read_list(any_root: str) -> None:
    st = Storage.for_url(any_root)
    assert list_topics(st) == []
    meta = create_topic(st, "orders", 4, {"retention.ms": 1000}, now_ms=5)
    assert meta == TopicMeta("orders", 4, {"retention.ms": "1000"}, 5, meta.topic_id)
    assert uuid.UUID(meta.topic_id).version == 4
    assert read_topic(st, "orders") == meta
    # a second creator gets the first one's metadata, whatever it asked for, and is told
    # it did not create it, even with the same shape in the same millisecond
    assert create_topic(st, "orders", 9, now_ms=6) == meta
    assert create_topic_if_absent(st, "orders", 4, {"retention.ms": 1000}, now_ms=5) == \
        (meta, False)
    # metadata written before topic ids reads with none
    st.put("_meta/topics/old.json", b'{"name":"old","partitions":1,"config":{},'
                                    b'"created_ms":1}')
    assert read_topic(st, "old") == TopicMeta("old", 1, {}, 1, "")
    st.delete("_meta/topics/old.json")
    create_topic(st, "__consumer_offsets", 50)
    create_topic(st, "a.b_c", 1)
    assert list_topics(st) == ["__consumer_offsets", "a.b_c", "orders"]


def test_unknown_and_invalid(file_root: str) -> None:
    st = Storage.for_url(file_root)
    with pytest.raises(UnknownTopicError, match="'nope' does not exist"):
        read_topic(st, "nope")
    with pytest.raises(InvalidTopicNameError):
        create_topic(st, "../escape", 1)
    with pytest.raises(InvalidTopicNameError):
        read_topic(st, "a/b")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="partitions"):
            create_topic(st, "t", bad)  # type: ignore[arg-type]
    assert list_topics(st) == []


def test_corrupt_metadata_is_named(file_root: str) -> None:
    st = Storage.for_url(file_root)
    st.put("_meta/topics/bad.json", b"{not json")
    with pytest.raises(TopicMetadataError, match=r"bad\.json"):
        read_topic(st, "bad")
