"""CRC-32C (Castagnoli), the checksum of v2 record batches, via the hardware-backed package.

The ``crc32c`` package's ``__init__`` looks up its own version through
``importlib.metadata`` (a scan of every ``sys.path`` entry's distributions): 25-100 ms of
CPU in every fresh process, more than the rest of this package's import, and a Spark query
starts several such processes (task workers, planners) that each check a CRC. Its C
extension needs none of that, so it is loaded by itself from the package's folder; if that
fails for any reason (another layout, another build), the package is imported as usual.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


def _load_extension() -> Callable[..., int]:
    import importlib.machinery
    import importlib.util

    loaded = sys.modules.get("crc32c")
    if loaded is not None:
        return loaded.crc32c  # type: ignore[no-any-return]
    try:
        spec = importlib.util.find_spec("crc32c")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "_crc32c" + suffix)
                if not os.path.exists(path):
                    continue
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                ext_spec = importlib.util.spec_from_file_location("crc32c._crc32c", path,
                                                                  loader=loader)
                assert ext_spec is not None
                module: Any = importlib.util.module_from_spec(ext_spec)
                loader.exec_module(module)
                fn = module.crc32c
                if fn(b"123456789") == 0xE3069283:  # the CRC-32C check value
                    return fn  # type: ignore[no-any-return]
    except Exception:  # any surprise: the package's own import below
        pass
    import crc32c as package

    return package.crc32c  # type: ignore[no-any-return]


_crc32c = _load_extension()


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Unsigned CRC-32C of ``data``, continuing from ``value``."""
    return _crc32c(data, value)
