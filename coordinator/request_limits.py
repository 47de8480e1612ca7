"""Every API request is typed and bounded here, before any field reaches the coordinator.

Why a module of its own: a field that only fails deep inside the coordinator fails too late.
A 100,000-character ``transactional_id`` once passed every handler, was applied to the
state, and only then failed to encode as a Kafka STRING inside the log writer — which
wedged every later write. So each operation has a declared shape (``OPERATION_SHAPES``) and
``check_request`` refuses anything else with ``InvalidRequest`` naming the field (``field
'partitions[3].count': ...``), before the handler runs.

Limits are Kafka's where Kafka has one: STRING fields are at most 32,767 UTF-8 bytes, topic
names at most 249 characters, partitions/sequences/counts/timeouts int32, producer ids and
offsets int64, epochs int16. Lists hold at most ``MAX_LIST_ITEMS`` entries, the body is at
most ``MAX_BODY_BYTES`` (``http_server``) and JSON may nest at most ``MAX_JSON_DEPTH`` deep
(checked before parsing, so a deep body never reaches the recursive JSON parser's limit).
Unknown fields are ignored (a newer client may send more), but they count against the body
and depth limits like any other byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequestError

MAX_STRING_BYTES = 0x7FFF          # Kafka's STRING: int16 length
MAX_TOPIC_CHARS = 249              # Kafka's topic name limit
MAX_LIST_ITEMS = 100_000           # partitions / members / offsets in one request
MAX_CONFIG_ENTRIES = 1_000
MAX_BODY_BYTES = 16 << 20          # the HTTP server refuses larger bodies with 413
MAX_JSON_DEPTH = 32
INT16 = (-(1 << 15), (1 << 15) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class Str:
    """A JSON string of ``min_chars`` to ``max_bytes`` (UTF-8) bytes."""

    max_bytes: int = MAX_STRING_BYTES
    min_chars: int = 1


@dataclass(frozen=True)
class Int:
    """A JSON integer (not a bool, not a float, not a string) in [lo, hi]."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Bool:
    """A JSON true/false."""


@dataclass(frozen=True)
class ListOf:
    """A JSON array of at most ``max_items`` items of one shape."""

    item: Shape
    max_items: int = MAX_LIST_ITEMS


@dataclass(frozen=True)
class ConfigMap:
    """A JSON object of config name -> scalar (string, number, bool); values become
    strings, as Kafka's CreateTopics carries them (their meaning: ``topic_config``)."""

    max_entries: int = MAX_CONFIG_ENTRIES


@dataclass(frozen=True)
class Field:
    """One field of an object: its shape, whether it must be present, its default, and
    whether JSON null is allowed (then it stays None)."""

    shape: Shape
    required: bool = True
    default: Any = None
    nullable: bool = False


@dataclass(frozen=True)
class Obj:
    fields: dict[str, Field] = field(default_factory=dict)


Shape = Str | Int | Bool | ListOf | ConfigMap | Obj

TXN_ID = Str()
TOPIC = Str(max_bytes=MAX_TOPIC_CHARS * 4)  # the name rules (chars, length) are checked later
PARTITION = Int(0, INT32[1])
PRODUCER_ID = Int(-1, INT64[1])
EPOCH = Int(-1, INT16[1])
TIMEOUT_MS = Int(*INT32)  # its range is the coordinator's: InvalidTransactionTimeout, as Kafka
OFFSET = Int(0, INT64[1])
BATCH_ID = Int(0, INT64[1])


def _part(**extra: Int) -> ListOf:
    return ListOf(Obj({"topic": Field(TOPIC), "partition": Field(PARTITION),
                       **{k: Field(v) for k, v in extra.items()}}))


_PRODUCER = {"producer_id": Field(PRODUCER_ID), "epoch": Field(EPOCH)}
_TXN_PRODUCER = {"transactional_id": Field(TXN_ID), **_PRODUCER}
WRITTEN = _part(base_offset=OFFSET)

OPERATION_SHAPES: dict[str, Obj] = {
    "init_producer_id": Obj({
        "transactional_id": Field(TXN_ID, required=False, nullable=True),
        "transaction_timeout_ms": Field(TIMEOUT_MS, required=False, default=60_000),
        "one_shot": Field(Bool(), required=False, default=False)}),
    "add_member": Obj({**_TXN_PRODUCER, "member_key": Field(Str())}),
    "reserve": Obj({**_PRODUCER, "partitions": Field(_part(base_sequence=Int(0, INT32[1]),
                                                           count=Int(1, INT32[1])))}),
    "confirm": Obj({**_PRODUCER, "partitions": Field(WRITTEN),
                    "wait_stable": Field(Bool(), required=False, default=False)}),
    "heartbeat": Obj(dict(_TXN_PRODUCER)),
    "add_offsets": Obj({**_TXN_PRODUCER, "group_id": Field(Str()), "offsets": Field(ListOf(Obj({
        "topic": Field(TOPIC), "partition": Field(PARTITION), "offset": Field(OFFSET),
        "metadata": Field(Str(min_chars=0), required=False, default="")})))}),
    "committed_offsets": Obj({"group_id": Field(Str())}),
    "end_txn": Obj({
        **_TXN_PRODUCER, "commit": Field(Bool()),
        "members": Field(ListOf(PRODUCER_ID), required=False, nullable=True),
        "batch_id": Field(BATCH_ID, required=False, nullable=True),
        "written": Field(WRITTEN, required=False, nullable=True)}),
    "begin_batch": Obj({"transactional_id": Field(TXN_ID), "batch_id": Field(BATCH_ID),
                        "transaction_timeout_ms": Field(TIMEOUT_MS, required=False,
                                                        default=60_000)}),
    "create_topic": Obj({"name": Field(TOPIC), "partitions": Field(Int(INT32[0], INT32[1])),
                         "config": Field(ConfigMap(), required=False, default={},
                                         nullable=True),
                         "exist_ok": Field(Bool(), required=False, default=False)}),
    "describe_topic": Obj({"name": Field(TOPIC)}),
    "list_topics": Obj(),
    "describe_txn": Obj({"transactional_id": Field(TXN_ID)}),
    "stable": Obj({"publish": Field(Bool(), required=False, default=False)}),
}

# Strings are skipped when measuring depth: a bracket inside a string is no nesting.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``raw`` nests arrays/objects deeper than ``limit``. Cheap for every real
    request: fewer than ``limit`` opening brackets in all cannot nest that deep."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_body(op: str, raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, refused (InvalidRequest) when it is not JSON, not
    an object, or nested deeper than MAX_JSON_DEPTH."""
    if json_depth_exceeds(raw):
        raise InvalidRequestError(f"{op}: request body nests JSON deeper than "
                                  f"{MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"{op}: request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"{op}: request body must be a JSON object")
    return body


def check_request(op: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` checked against ``op``'s shape: a new dict holding only the declared
    fields, typed, with defaults filled in. Raises InvalidRequest naming the first bad
    field."""
    shape = OPERATION_SHAPES[op]
    return _check_obj(shape, body, op, "")


def _fail(op: str, path: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(f"{op}: field {path!r} {why}")


def _check_obj(shape: Obj, value: Any, op: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(op, path or "(body)", f"must be a JSON object, not {_kind(value)}")
    out: dict[str, Any] = {}
    for name, spec in shape.fields.items():
        where = f"{path}.{name}" if path else name
        if name not in value:
            if spec.required:
                raise _fail(op, where, "is required")
            out[name] = spec.default
            continue
        item = value[name]
        if item is None:
            if not spec.nullable:
                raise _fail(op, where, "must not be null")
            out[name] = None
            continue
        out[name] = _check(spec.shape, item, op, where)
    return out


def _check(shape: Shape, value: Any, op: str, path: str) -> Any:
    if isinstance(shape, Str):
        if not isinstance(value, str):
            raise _fail(op, path, f"must be a string, not {_kind(value)}")
        if len(value) < shape.min_chars:
            raise _fail(op, path, "must not be empty")
        # 4 bytes per char at most: only long strings need the encoding to be measured
        if len(value) * 4 > shape.max_bytes:
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise _fail(op, path, "is not valid UTF-8 (lone surrogate)") from None
            if size > shape.max_bytes:
                raise _fail(op, path, f"is {size} bytes long; at most {shape.max_bytes}")
        return value
    if isinstance(shape, Int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(op, path, f"must be an integer, not {_kind(value)}")
        if not shape.lo <= value <= shape.hi:
            raise _fail(op, path, f"must be in [{shape.lo}, {shape.hi}], got {value}")
        return value
    if isinstance(shape, Bool):
        if not isinstance(value, bool):
            raise _fail(op, path, f"must be true or false, not {_kind(value)}")
        return value
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            raise _fail(op, path, f"must be a JSON array, not {_kind(value)}")
        if len(value) > shape.max_items:
            raise _fail(op, path, f"has {len(value)} items; at most {shape.max_items}")
        return [_check(shape.item, v, op, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(shape, ConfigMap):
        if not isinstance(value, dict):
            raise _fail(op, path, f"must be a JSON object, not {_kind(value)}")
        if len(value) > shape.max_entries:
            raise _fail(op, path, f"has {len(value)} entries; at most {shape.max_entries}")
        out = {}
        for k, v in value.items():
            where = f"{path}.{k[:64]}"
            _check(Str(max_bytes=MAX_STRING_BYTES), k, op, f"{path} key")
            if isinstance(v, bool):
                out[k] = "true" if v else "false"
            elif isinstance(v, (int, float, str)):
                out[k] = _check(Str(min_chars=0), str(v), op, where)
            else:
                raise _fail(op, where, f"must be a string, number or bool, not {_kind(v)}")
        return out
    return _check_obj(shape, value, op, path)


def _kind(value: Any) -> str:
    """A JSON type name for error messages (never the value: it may be huge)."""
    if value is None:
        return "null"
    return {bool: "a bool", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
