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
most ``MAX_BODY_BYTES`` (``http_server``). Depth is bounded by the shapes themselves (a
declared field holds exactly its shape); unknown fields are ignored (a newer client may
send more) but may nest at most ``MAX_JSON_DEPTH`` levels, and a body deeper than the JSON
parser's own recursion limit is refused the same way, never a 500. Checking costs 2-4 us
for a typical request (measured against json.loads' 4-7 us).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequestError

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
# a written range; a run in a shared object also names the object (its name is checked
# by the API) and its bytes there
WRITTEN = ListOf(Obj({"topic": Field(TOPIC), "partition": Field(PARTITION),
                      "base_offset": Field(OFFSET),
                      "object": Field(Str(max_bytes=256), required=False, nullable=True),
                      "position": Field(Int(0, INT64[1]), required=False, default=0),
                      "size": Field(Int(0, INT64[1]), required=False, default=0)}))
GROUP_BYTES = Str(max_bytes=4 << 20, min_chars=0)  # base64 of a group's metadata/assignment

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
        "metadata": Field(Str(min_chars=0), required=False, default=""),
        "leader_epoch": Field(Int(*INT32), required=False, default=-1)})))}),
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
    # the admin operations (admin_ops.py): Kafka's tools' filters, bounded the same way
    "list_groups": Obj(),
    "delete_group": Obj({"group_id": Field(Str()),
                         "partitions": Field(_part(), required=False, nullable=True)}),
    "list_transactions": Obj({
        "states": Field(ListOf(Str(max_bytes=64)), required=False, nullable=True),
        "producer_ids": Field(ListOf(PRODUCER_ID), required=False, nullable=True),
        "duration_ms": Field(Int(0, INT64[1]), required=False, nullable=True)}),
    "describe_transactions": Obj({"transactional_ids": Field(ListOf(TXN_ID))}),
    "describe_producers": Obj({"partitions": Field(_part())}),
    "abort_transaction": Obj({
        "transactional_id": Field(TXN_ID, required=False, nullable=True),
        "topic": Field(TOPIC, required=False, nullable=True),
        "partition": Field(PARTITION, required=False, nullable=True),
        "start_offset": Field(OFFSET, required=False, nullable=True)}),
    # consumer-group membership (group_membership.py); metadata and assignments: base64
    "join_group": Obj({
        "group_id": Field(Str()), "member_id": Field(Str(min_chars=0)),
        "client_id": Field(Str(min_chars=0), required=False, default=""),
        "client_host": Field(Str(max_bytes=255, min_chars=0), required=False, default=""),
        "session_timeout_ms": Field(Int(*INT32)), "rebalance_timeout_ms": Field(Int(*INT32)),
        "protocol_type": Field(Str(min_chars=0)),
        "require_known_member_id": Field(Bool(), required=False, default=False),
        "group_instance_id": Field(Str(), required=False, nullable=True),
        "protocols": Field(ListOf(Obj({"name": Field(Str()),
                                       "metadata": Field(GROUP_BYTES)}), max_items=1_000))}),
    "sync_group": Obj({
        "group_id": Field(Str()), "member_id": Field(Str()),
        "generation_id": Field(Int(*INT32)),
        "group_instance_id": Field(Str(), required=False, nullable=True),
        "assignments": Field(ListOf(Obj({"member_id": Field(Str()),
                                         "assignment": Field(GROUP_BYTES)})),
                             required=False, nullable=True)}),
    "group_heartbeat": Obj({"group_id": Field(Str()), "member_id": Field(Str(min_chars=0)),
                            "generation_id": Field(Int(*INT32)),
                            "group_instance_id": Field(Str(), required=False,
                                                       nullable=True)}),
    "leave_group": Obj({"group_id": Field(Str()),
                        "member_ids": Field(ListOf(Str()), required=False, default=[]),
                        "members": Field(ListOf(Obj({
                            "member_id": Field(Str(min_chars=0)),
                            "group_instance_id": Field(Str(), required=False,
                                                       nullable=True)})),
                            required=False, default=[])}),
    "commit_offsets": Obj({
        "group_id": Field(Str()), "member_id": Field(Str(min_chars=0)),
        "generation_id": Field(Int(*INT32)),
        "group_instance_id": Field(Str(), required=False, nullable=True),
        "offsets": Field(ListOf(Obj({
            "topic": Field(TOPIC), "partition": Field(PARTITION), "offset": Field(OFFSET),
            "metadata": Field(Str(min_chars=0), required=False, default=""),
        "leader_epoch": Field(Int(*INT32), required=False, default=-1)})))}),
    "describe_group": Obj({"group_id": Field(Str())}),
    # Kafka clients' transactions through gateways (kafka_txn.py)
    "kafka_init_producer_id": Obj({
        "transactional_id": Field(TXN_ID), "transaction_timeout_ms": Field(TIMEOUT_MS),
        "producer_id": Field(PRODUCER_ID, required=False, default=-1),
        "epoch": Field(EPOCH, required=False, default=-1)}),
    "kafka_txn_check": Obj(dict(_TXN_PRODUCER)),
    "kafka_reserve": Obj({**_TXN_PRODUCER, "partitions": Field(_part(
        base_sequence=Int(0, INT32[1]), count=Int(1, INT32[1])))}),
    "kafka_add_offsets": Obj({**_TXN_PRODUCER, "group_id": Field(Str()),
                              "offsets": Field(ListOf(Obj({
                                  "topic": Field(TOPIC), "partition": Field(PARTITION),
                                  "offset": Field(OFFSET),
                                  "metadata": Field(Str(min_chars=0), required=False,
                                                    default=""),
                                  "leader_epoch": Field(Int(*INT32), required=False,
                                                        default=-1)})))}),
    "kafka_end_txn": Obj({**_TXN_PRODUCER, "commit": Field(Bool())}),
    # a gateway's flush (transaction/flush_calls.py): many producers in one call
    "reserve_many": Obj({"entries": Field(ListOf(Obj({
        **_PRODUCER,
        "transactional_id": Field(TXN_ID, required=False, nullable=True),
        "partitions": Field(_part(base_sequence=Int(0, INT32[1]),
                                  count=Int(1, INT32[1])))})))}),
    "confirm_many": Obj({"entries": Field(ListOf(Obj({**_PRODUCER,
                                                      "partitions": Field(WRITTEN)}))),
                         "wait_stable": Field(Bool(), required=False, default=False)}),
    # the topic lifecycle (maintenance/topic_admin.py)
    "delete_records": Obj({
        "partitions": Field(_part(offset=Int(-1, INT64[1]))),
        "timeout_ms": Field(Int(0, INT32[1]), required=False, default=60_000)}),
    "delete_topic": Obj({"name": Field(TOPIC)}),
    "auto_create_topic": Obj({"name": Field(TOPIC),
                              "partitions": Field(Int(1, INT32[1]), required=False,
                                                  nullable=True)}),
    "create_partitions": Obj({"name": Field(TOPIC), "total": Field(Int(1, INT32[1])),
                              "validate_only": Field(Bool(), required=False, default=False)}),
    "alter_configs": Obj({
        "name": Field(TOPIC),
        "set": Field(ConfigMap(), required=False, default={}, nullable=True),
        "delete": Field(ListOf(Str(max_bytes=255), max_items=MAX_CONFIG_ENTRIES),
                        required=False, nullable=True),
        "append": Field(ConfigMap(), required=False, default={}, nullable=True),
        "subtract": Field(ConfigMap(), required=False, default={}, nullable=True),
        "replace": Field(Bool(), required=False, default=False),
        "validate_only": Field(Bool(), required=False, default=False)}),
}

def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays/objects more than ``limit`` levels (iterative, stops
    at the first such branch)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for sub in (item.values() if type(item) is dict else item):
            if type(sub) is dict or type(sub) is list:
                stack.append((sub, depth + 1))
    return False


def parse_body(op: str, raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, refused (InvalidRequest) when it is not JSON or
    not an object. A body nested deeper than the parser can go (its RecursionError) is
    refused as too deep, never a 500; depth within the parser's reach is bounded by the
    shapes (``check_request``)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidRequestError(f"{op}: request body nests JSON deeper than "
                                  f"{MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InvalidRequestError(f"{op}: request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"{op}: request body must be a JSON object")
    return body


def check_request(op: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` checked against ``op``'s shape: a new dict holding only the declared
    fields, typed, with defaults filled in. Raises InvalidRequest naming the first bad
    field."""
    try:
        return _VALIDATORS[op](body)
    except _Bad as bad:
        where = "".join(p if p.startswith("[") else f".{p}" for p in bad.path).lstrip(".")
        raise InvalidRequestError(f"{op}: field {where or '(body)'!r} {bad.why}") from None


# ------------------------------------------------------------------ compiled validators
# Every RPC goes through here, so each shape is compiled once into a closure that does only
# type and range checks on the way; the path of a bad field is built only when one is
# found (each level adds its part while the error unwinds). ~3-8 us per typical request.
Validator = Callable[[Any], Any]
_MISSING = object()


class _Bad(Exception):  # an internal signal: never leaves check_request
    """A value the shape refuses; ``path`` grows while it unwinds."""

    def __init__(self, why: str, path: list[str] | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.path = path or []


def _compile(shape: Shape) -> Validator:
    if isinstance(shape, Str):
        return _compile_str(shape)
    if isinstance(shape, Int):
        lo, hi = shape.lo, shape.hi

        def check_int(x: Any) -> Any:
            if type(x) is not int:  # bool is a subclass of int: refused here too
                raise _Bad(f"must be an integer, not {_kind(x)}")
            if not lo <= x <= hi:
                raise _Bad(f"must be in [{lo}, {hi}], got {x}")
            return x
        return check_int
    if isinstance(shape, Bool):
        def check_bool(x: Any) -> Any:
            if x is True or x is False:
                return x
            raise _Bad(f"must be true or false, not {_kind(x)}")
        return check_bool
    if isinstance(shape, ListOf):
        return _compile_list(shape)
    if isinstance(shape, ConfigMap):
        return _compile_config(shape)
    return _compile_obj(shape)


def _compile_str(shape: Str) -> Validator:
    max_bytes, min_chars = shape.max_bytes, shape.min_chars

    def check_str(x: Any) -> Any:
        if type(x) is not str:
            raise _Bad(f"must be a string, not {_kind(x)}")
        n = len(x)
        if n < min_chars:
            raise _Bad("must not be empty")
        if n * 4 > max_bytes:  # 4 bytes per char at most: only long ones are measured
            try:
                size = len(x.encode("utf-8"))
            except UnicodeEncodeError:
                raise _Bad("is not valid UTF-8 (lone surrogate)") from None
            if size > max_bytes:
                raise _Bad(f"is {size} bytes long; at most {max_bytes}")
        return x
    return check_str


def _compile_list(shape: ListOf) -> Validator:
    item, max_items = _compile(shape.item), shape.max_items

    def check_list(x: Any) -> Any:
        if type(x) is not list:
            raise _Bad(f"must be a JSON array, not {_kind(x)}")
        if len(x) > max_items:
            raise _Bad(f"has {len(x)} items; at most {max_items}")
        out = []
        for i, e in enumerate(x):
            try:
                out.append(item(e))
            except _Bad as bad:
                bad.path.insert(0, f"[{i}]")
                raise
        return out
    return check_list


def _compile_config(shape: ConfigMap) -> Validator:
    max_entries = shape.max_entries
    key_check, value_check = _compile_str(Str()), _compile_str(Str(min_chars=0))

    def check_config(x: Any) -> Any:
        if type(x) is not dict:
            raise _Bad(f"must be a JSON object, not {_kind(x)}")
        if len(x) > max_entries:
            raise _Bad(f"has {len(x)} entries; at most {max_entries}")
        out = {}
        for k, v in x.items():
            try:
                key_check(k)
            except _Bad as bad:
                raise _Bad(f"has a bad key: {bad.why}") from None
            try:
                if v is True or v is False:
                    out[k] = "true" if v else "false"
                elif type(v) in (int, float, str):
                    out[k] = value_check(str(v))
                else:
                    raise _Bad(f"must be a string, number or bool, not {_kind(v)}")
            except _Bad as bad:
                bad.path.insert(0, k[:64])
                raise
        return out
    return check_config


def _compile_obj(shape: Obj) -> Validator:
    fields = tuple((name, _compile(f.shape), f.required, f.default, f.nullable)
                   for name, f in shape.fields.items())
    known = frozenset(shape.fields)

    def check_obj(x: Any) -> Any:
        if type(x) is not dict:
            raise _Bad(f"must be a JSON object, not {_kind(x)}")
        out: dict[str, Any] = {}
        present = 0
        for name, check, required, default, nullable in fields:
            item = x.get(name, _MISSING)
            if item is _MISSING:
                if required:
                    raise _Bad("is required", [name])
                out[name] = default
                continue
            present += 1
            if item is None:
                if not nullable:
                    raise _Bad("must not be null", [name])
                out[name] = None
            else:
                try:
                    out[name] = check(item)
                except _Bad as bad:
                    bad.path.insert(0, name)
                    raise
        if len(x) > present:  # unknown fields: ignored, but not nested without bound
            for key, item in x.items():
                if key not in known and (type(item) is dict or type(item) is list) \
                        and deeper_than(item, MAX_JSON_DEPTH):
                    raise _Bad(f"nests JSON deeper than {MAX_JSON_DEPTH} levels",
                               [str(key)[:64]])
        return out
    return check_obj


_VALIDATORS: dict[str, Validator] = {op: _compile(s) for op, s in OPERATION_SHAPES.items()}


def _kind(value: Any) -> str:
    """A JSON type name for error messages (never the value: it may be huge)."""
    if value is None:
        return "null"
    return {bool: "a bool", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
