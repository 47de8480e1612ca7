"""Kafka's default partitioner, against Kafka's, librdkafka's and kafka-python's own vectors."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from txnlog.log_format.codec.partitioner import (
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

# Kafka clients UtilsTest.testMurmur2 (signed int32)
KAFKA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# librdkafka unittest_murmur2 (as unsigned 32-bit)
LIBRDKAFKA = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"": 0x106E08D9,
}
# kafka-python / aiokafka DefaultPartitioner test: partition of 1000
PARTITION_OF_1000 = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566,
                     b"\x00 ": 742}


@pytest.mark.parametrize(("key", "want"), KAFKA.items())
def test_kafka_vectors(key: bytes, want: int) -> None:
    assert murmur2(key) == want


@pytest.mark.parametrize(("key", "want"), LIBRDKAFKA.items())
def test_librdkafka_vectors(key: bytes, want: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == want


def test_partition_vectors_scalar_and_vectorized() -> None:
    for key, want in PARTITION_OF_1000.items():
        assert partition_for_key(key, 1000) == want
    keys = pa.array(list(PARTITION_OF_1000), pa.binary())
    assert partitions_for_keys(keys, 1000).tolist() == list(PARTITION_OF_1000.values())
    # the hash vectors through the vectorized path too
    vecs = list(KAFKA) + list(LIBRDKAFKA)
    wants = [to_positive(murmur2(k)) % 2**31 for k in vecs]
    assert partitions_for_keys(pa.array(vecs, pa.binary()), 2**31 - 1).tolist() == [
        w % (2**31 - 1) for w in wants]


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_vectorized_input_types_nulls_and_slices() -> None:
    raw = [b"alpha", None, b"", b"\xff\x00\x01", b"x" * 37]
    want = [partition_for_key(k, 12) if k is not None else -1 for k in raw]
    for arr in (pa.array(raw, pa.binary()), pa.array(raw, pa.large_binary()),
                pa.array(raw, pa.binary_view())):
        assert partitions_for_keys(arr, 12).tolist() == want
    text = ["a", None, "héllo"]
    assert partitions_for_keys(pa.array(text), 7).tolist() == [
        partition_for_key(b"a", 7), -1, partition_for_key("héllo".encode(), 7)]
    big = pa.array([b"pad", *raw, b"pad"], pa.binary())
    assert partitions_for_keys(big.slice(1, len(raw)), 12).tolist() == want
    chunked = pa.chunked_array([pa.array(raw[:2], pa.binary()), pa.array(raw[2:], pa.binary())])
    assert partitions_for_keys(chunked, 12).tolist() == want
    assert partitions_for_keys(pa.array([], pa.binary()), 3).tolist() == []
    with pytest.raises(ValueError):
        partitions_for_keys(pa.array([b"a"]), 0)
    with pytest.raises(TypeError):
        partitions_for_keys(pa.array([1, 2]), 3)


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.binary(max_size=64), min_size=1, max_size=30),
       n=st.integers(1, 10_000))
def test_matches_kafka_python(keys: list[bytes], n: int) -> None:
    theirs = [(kafka_python_murmur2(k) & 0x7FFFFFFF) % n for k in keys]
    assert [partition_for_key(k, n) for k in keys] == theirs
    assert partitions_for_keys(pa.array(keys, pa.binary()), n).tolist() == theirs
