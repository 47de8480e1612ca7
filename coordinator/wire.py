"""How the coordinator's HTTP/JSON API carries what JSON cannot: bytes, as base64.

Group members' protocol metadata and assignments are opaque bytes to the coordinator; the
gateway sends them and the group coordinator stores and returns them, so both sides use
these two functions.
"""

from __future__ import annotations

import base64


def b64(data: bytes | None) -> str:
    """``data`` as base64 text (``None`` as the empty string)."""
    return base64.b64encode(data or b"").decode()


def unb64(text: str) -> bytes:
    """The bytes of base64 ``text`` (the empty string as no bytes)."""
    return base64.b64decode(text) if text else b""
