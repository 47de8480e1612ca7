"""How the coordinator's HTTP/JSON API carries what JSON cannot, and what it shares.

- Bytes, as base64: group members' protocol metadata and assignments are opaque bytes to the
  coordinator; the gateway sends them and the group coordinator stores and returns them, so
  both sides use ``b64``/``unb64``.
- Written ranges (``written_parts``): Confirm, EndTxn's ``written`` and ``confirm_many``
  carry them, parsed by one function.
"""

from __future__ import annotations

import base64
from typing import Any

from txnlog.log_format import layout


def b64(data: bytes | None) -> str:
    """``data`` as base64 text (``None`` as the empty string)."""
    return base64.b64encode(data or b"").decode()


def unb64(text: str) -> bytes:
    """The bytes of base64 ``text`` (the empty string as no bytes)."""
    return base64.b64decode(text) if text else b""


def written_parts(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Written ranges, typed: topic, partition, base_offset, and for a run in a shared
    object its ``object`` (``_wal/<name>``, nothing else), ``position`` and ``size`` (ints
    >= 0). ValueError, KeyError or TypeError for anything else (InvalidRequest)."""
    out = []
    for item in items:
        row: dict[str, Any] = {"topic": str(item["topic"]),
                               "partition": int(item["partition"]),
                               "base_offset": int(item["base_offset"])}
        if item.get("object") is not None:
            row["object"] = layout.check_shared_path(item["object"])
            for f in ("position", "size"):
                v = item[f]
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{f} must be an int >= 0, got {v!r}")
                row[f] = v
        out.append(row)
    return out
