"""Kafka request/response framing through ``kio`` (generated from Kafka's message schemas).

A request frame is ``int32 size`` + request header + body; the header's version follows
from the API's flexibility, which kio knows per (api key, version). ``peek_header`` reads
the four fixed leading fields by hand because ApiVersions must be answered even for a
version kio (or this gateway) does not know, as a broker does. ``build`` turns plain dicts
into kio entities for one response version, dropping the fields that version lacks, so a
handler writes one dict for every version it serves.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
import types
import typing
from contextvars import ContextVar
from dataclasses import MISSING, fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

_FIXED = struct.Struct(">hhi")

# (client id of the request header, client address) of the request being handled: what
# Kafka's group coordinator records of a member (DescribeGroups' client_id, client_host)
CLIENT: ContextVar[tuple[str, str]] = ContextVar("txnlog_gateway_client", default=("", ""))
# which of the gateway's brokers (0: the first, ``node_id``) the request's connection reached
BROKER: ContextVar[int] = ContextVar("txnlog_gateway_broker", default=0)


class FrameError(Exception):
    """A frame this gateway cannot parse: the connection is closed (Kafka does the same)."""


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without its size)."""
    if len(frame) < _FIXED.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    return _FIXED.unpack_from(frame, 0)


def request_class(api_key: int, version: int) -> type[Any] | None:
    """kio's request class, or None when kio has no such API or version."""
    try:
        return load_request_schema(api_key, version)
    except Exception:
        return None


def parse_request(frame: bytes, cls: type[Any]) -> tuple[Any, Any]:
    """(header, body) of a request frame whose API key and version have class ``cls``."""
    try:
        header, n = entity_reader(cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(cls)(frame, n)
        null = _null_where_required(body)
    except (SerialError, ValueError, TypeError, UnicodeDecodeError, OverflowError,
            IndexError, KeyError) as exc:
        raise FrameError(f"malformed {cls.__name__} v{cls.__version__}: {exc!r}") from None
    if null is not None:
        # Kafka's generated readers refuse this too ("non-nullable field ... was serialized
        # as null"); kio decodes it as None, which no handler expects
        raise FrameError(f"malformed {cls.__name__} v{cls.__version__}: non-nullable field "
                         f"{null} is null")
    return header, body


def _null_where_required(entity: Any, path: str = "") -> str | None:
    """The dotted name of the first field of a decoded entity that is null although its
    schema does not allow null, or None."""
    for name, _kafka_type, kind, _ent, _required, nullable in _fields(type(entity)):
        v = getattr(entity, name)
        where = f"{path}{name}"
        if v is None:
            if not nullable:
                return where
        elif kind == "many":
            for item in v:
                bad = _null_where_required(item, where + ".")
                if bad is not None:
                    return bad
        elif kind == "one":
            bad = _null_where_required(v, where + ".")
            if bad is not None:
                return bad
    return None


def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def encode_response(cls: type[Any], correlation_id: int, body: Any) -> bytes:
    """The response frame: size, response header (kio's version for this API), body."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(cls)(buf, body)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


# ------------------------------------------------------------------ dicts -> kio entities
def _entity_of(tp: Any) -> tuple[str, type[Any] | None]:
    """('one'|'many'|'plain', entity class) for a field's annotation."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _entity_of(args[0]) if len(args) == 1 else ("plain", None)
    if origin is tuple:
        args = typing.get_args(tp)
        if args and hasattr(args[0], "__dataclass_fields__"):
            return "many", args[0]
        return "plain", None
    if hasattr(tp, "__dataclass_fields__"):
        return "one", tp
    return "plain", None


# (name, kafka type, 'one'|'many'|'plain', nested entity, required, may be null)
_Field = tuple[str, str, str, type[Any] | None, bool, bool]
_FIELD_CACHE: dict[type[Any], list[_Field]] = {}


def _fields(cls: type[Any]) -> list[_Field]:
    got = _FIELD_CACHE.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls, sys.modules[cls.__module__].__dict__)
        got = []
        for f in fields(cls):
            if not f.init:
                continue
            tp = hints[f.name]
            kind, ent = _entity_of(tp)
            required = f.default is MISSING and f.default_factory is MISSING
            nullable = (typing.get_origin(tp) in (typing.Union, types.UnionType)
                        and type(None) in typing.get_args(tp))
            got.append((f.name, f.metadata.get("kafka_type", ""), kind, ent, required,
                        nullable))
        _FIELD_CACHE[cls] = got
    return got


def build(cls: type[Any], values: dict[str, Any]) -> Any:
    """A kio entity of ``cls`` from a plain dict: fields ``cls`` lacks are dropped, nested
    dicts/lists become nested entities, error codes and durations get kio's types."""
    kw: dict[str, Any] = {}
    for name, kafka_type, kind, ent, _required, _nullable in _fields(cls):
        if name not in values:
            continue
        v = values[name]
        if v is None:
            kw[name] = None
        elif kind == "many":
            kw[name] = tuple(x if not isinstance(x, dict) else build(ent, x)  # type: ignore[arg-type]
                             for x in v)
        elif kind == "one":
            kw[name] = build(ent, v) if isinstance(v, dict) else v  # type: ignore[arg-type]
        elif kafka_type == "error_code":
            kw[name] = ErrorCode(int(v))
        elif kafka_type == "datetime_i64" and not isinstance(v, datetime.datetime):
            # milliseconds since the epoch; Kafka's -1 ("none") is 1 ms before it
            kw[name] = datetime.datetime.fromtimestamp(int(v) / 1000, datetime.UTC)
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kw[name] = v if isinstance(v, datetime.timedelta) else \
                datetime.timedelta(milliseconds=int(v))
        else:
            kw[name] = v
    return cls(**kw)


def has_field(cls: type[Any], name: str) -> bool:
    return any(f[0] == name for f in _fields(cls))


def ms(value: Any) -> int:
    """A kio duration (timedelta) or a plain number as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


_BLANK_PLAIN = {"string": "", "bytes": b"", "records": None, "bool": False, "uuid": None,
                "float64": 0.0}


def blank(cls: type[Any], code: int, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """A response (or the nested entity at ``path``, a list field of each level) with every
    field empty and every error code ``code``: the answer to a refused request or item."""
    for name in path:
        cls = next(f[3] for f in _fields(cls) if f[0] == name)  # type: ignore[assignment]
    out: dict[str, Any] = {}
    for name, kafka_type, kind, ent, _required, nullable in _fields(cls):
        if kind == "many":
            out[name] = []
        elif kind == "one":
            out[name] = blank(ent, code)  # type: ignore[arg-type]
        elif kafka_type == "error_code":
            out[name] = code
        elif nullable:
            out[name] = None
        elif name == "session_id":
            out[name] = 0  # no fetch session
        elif kafka_type in _BLANK_PLAIN:
            out[name] = _BLANK_PLAIN[kafka_type]
        elif kafka_type.startswith("timedelta") or kafka_type.startswith("uint"):
            out[name] = 0
        else:
            out[name] = -1  # Kafka's "none" for ids, offsets, epochs and timestamps
    return out
