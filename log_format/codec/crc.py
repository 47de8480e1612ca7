"""CRC-32C (Castagnoli), the checksum of v2 record batches, via the hardware-backed package."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Unsigned CRC-32C of ``data``, continuing from ``value``."""
    return _crc32c.crc32c(data, value)
