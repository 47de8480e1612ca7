"""Kafka's compression streams round-trip and match what Kafka's client libraries read."""

import numpy as np
import pytest
from txnlog.log_format.codec.compression import Codec, compress, decompress, decompress_array
from txnlog.log_format.errors import CompressionError

PAYLOAD = b"".join(i.to_bytes(4, "big") * 3 for i in range(50_000))


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip(codec: Codec) -> None:
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD


def test_snappy_writes_xerial_and_reads_raw() -> None:
    import cramjam

    framed = compress(Codec.SNAPPY, PAYLOAD)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))
    assert decompress(Codec.SNAPPY, raw) == PAYLOAD


def test_kafka_python_reads_our_streams() -> None:
    from kafka import codec as kc

    assert kc.gzip_decode(compress(Codec.GZIP, PAYLOAD)) == PAYLOAD
    assert kc.snappy_decode(compress(Codec.SNAPPY, PAYLOAD)) == PAYLOAD
    assert kc.lz4_decode(compress(Codec.LZ4, PAYLOAD)) == PAYLOAD
    assert kc.zstd_decode(compress(Codec.ZSTD, PAYLOAD)) == PAYLOAD


def test_bounded_output_and_garbage() -> None:
    with pytest.raises(CompressionError, match="over the"):
        decompress(Codec.ZSTD, compress(Codec.ZSTD, PAYLOAD), max_size=1000)
    with pytest.raises(CompressionError):
        decompress(Codec.LZ4, b"\x04\x22\x4d\x18garbage")
    with pytest.raises(CompressionError, match="unknown compression"):
        Codec.parse("brotli")


@pytest.mark.parametrize("codec", list(Codec))
def test_bounded_at_the_exact_size_and_arrays(codec: Codec) -> None:
    """The bound is inclusive; decompress_array gives the same bytes as a uint8 array."""
    packed = compress(codec, PAYLOAD)
    assert decompress(codec, packed, max_size=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(CompressionError, match="over the"):
        decompress(codec, packed, max_size=len(PAYLOAD) - 1)
    for bound in (None, len(PAYLOAD), 1 << 30):
        out = decompress_array(codec, packed, max_size=bound)
        assert isinstance(out, np.ndarray) and out.dtype == np.uint8
        assert out.tobytes() == PAYLOAD
