"""Property-based fuzzing of every coordinator operation over real HTTP.

Whatever arrives — random JSON, a field of the wrong type, a string past Kafka's 32,767
bytes, an out-of-range number, a list past its bound, deep nesting, a huge body — is
answered within a bound, with a 4xx that names the offending field, never a 500 or a hang;
and the coordinator keeps serving writes afterwards (the 100,000-character
``transactional_id`` once wedged its log writer for good).
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from coordinator_proc import CoordinatorProc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txnlog.coordinator.server.request_limits import (
    MAX_JSON_DEPTH,
    OPERATION_SHAPES,
    Bool,
    ConfigMap,
    Field,
    Int,
    ListOf,
    Obj,
    Shape,
    Str,
)

# A request is answered within this long or the test fails (a hang is the bug, not slowness).
ANSWER_BOUND_S = 30.0
SMALL_BODY_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory):
    root = f"file://{tmp_path_factory.mktemp('fuzz-root')}"
    proc = CoordinatorProc(root, extra=["--max-request-bytes", str(SMALL_BODY_LIMIT)],
                           log_path=tmp_path_factory.mktemp("fuzz-log") / "coord.log")
    proc.wait_healthy()
    yield proc
    assert proc.proc.poll() is None, f"coordinator died during the fuzz:\n{proc.log_tail()}"
    proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_tail(60)


def post(endpoint: str, path: str, body: bytes, method: str = "POST") -> tuple[int, dict]:
    u = urlparse(endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=ANSWER_BOUND_S)
    try:
        conn.request(method, path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = {"raw": data[:200].decode(errors="replace")}
    return resp.status, answer


def still_serving(endpoint: str) -> None:
    """/healthz answers and a write through the log (init_producer_id) succeeds."""
    status, _ = post(endpoint, "/healthz", b"", method="GET")
    assert status == 200
    status, answer = post(endpoint, "/v1/init_producer_id",
                          json.dumps({"transactional_id": "fuzz-canary"}).encode())
    assert status == 200, answer


# ------------------------------------------------------------------ generating requests
def valid_value(shape: Shape) -> st.SearchStrategy[Any]:
    """Small well-typed values of a shape (they may still be refused by the coordinator's
    own rules: unknown producer, bad topic name — with a 4xx)."""
    if isinstance(shape, Str):
        return st.text(alphabet="abcxyz-._09", min_size=max(1, shape.min_chars), max_size=12)
    if isinstance(shape, Int):
        return st.integers(max(shape.lo, -1), min(shape.hi, 5))
    if isinstance(shape, Bool):
        return st.booleans()
    if isinstance(shape, ListOf):
        return st.lists(valid_value(shape.item), max_size=3)
    if isinstance(shape, ConfigMap):
        return st.just({})
    assert isinstance(shape, Obj)
    return st.fixed_dictionaries({k: valid_value(f.shape) for k, f in shape.fields.items()})


def wrong_value(shape: Shape) -> st.SearchStrategy[Any]:
    """A value the shape must refuse."""
    deep: Any = 1
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = [deep]
    options: list[st.SearchStrategy[Any]] = [st.just(deep), st.just({"nested": {"x": [1]}})]
    if isinstance(shape, Str):
        options += [st.integers(), st.booleans(), st.lists(st.text(), max_size=2),
                    st.just("x" * (shape.max_bytes + 1)),
                    st.just("\u00e9" * (shape.max_bytes // 2 + 1))]
    elif isinstance(shape, Int):
        options += [st.text(max_size=5), st.booleans(), st.floats(allow_nan=False),
                    st.integers(min_value=shape.hi + 1),
                    st.integers(max_value=shape.lo - 1)]
    elif isinstance(shape, Bool):
        options += [st.integers(), st.text(max_size=5), st.just(None).map(lambda _: "true")]
    elif isinstance(shape, ListOf):
        options += [st.text(max_size=5), st.integers(), st.just({"a": 1}),
                    st.just([0] * (shape.max_items + 1))]
    elif isinstance(shape, ConfigMap):
        options += [st.just({"retention.ms": [1]}), st.just([1, 2])]
    else:
        options += [st.integers(), st.text(max_size=5)]
    return st.one_of(options)


def paths(shape: Obj, prefix: str = "") -> list[tuple[str, list[str], Field]]:
    """(printed path, keys, field) of every field, nested ones included (list item 0)."""
    out = []
    for name, spec in shape.fields.items():
        printed = f"{prefix}.{name}" if prefix else name
        out.append((printed, [name], spec))
        inner = spec.shape
        if isinstance(inner, ListOf) and isinstance(inner.item, Obj):
            for sub, keys, f in paths(inner.item, f"{printed}[0]"):
                out.append((sub, [name, "0", *keys], f))
    return out


@st.composite
def mutated_request(draw: st.DrawFn) -> tuple[str, dict[str, Any], str, str]:
    """(operation, body, path of the broken field, how it was broken)."""
    op = draw(st.sampled_from(sorted(op for op, s in OPERATION_SHAPES.items() if s.fields)))
    shape = OPERATION_SHAPES[op]
    body = draw(valid_value(shape))
    printed, keys, spec = draw(st.sampled_from(paths(shape)))
    # a nested field needs a list item to live in
    holder: Any = body
    here: Any = shape  # the shape of ``holder``, followed down (lists in lists too)
    for key in keys[:-1]:
        if key == "0":
            here = here.item
            if not holder:
                holder.append(draw(valid_value(here)))
            holder = holder[0]
        else:
            here = here.fields[key].shape
            holder = holder[key]
    if spec.required and draw(st.booleans()):
        del holder[keys[-1]]
        return op, body, printed, "missing"
    holder[keys[-1]] = draw(wrong_value(spec.shape))
    return op, body, printed, "wrong"


# ------------------------------------------------------------------------------ tests
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=mutated_request())
def test_a_bad_field_is_a_4xx_naming_it(coordinator: CoordinatorProc,
                                        case: tuple[str, dict, str, str]) -> None:
    op, body, field_path, how = case
    raw = json.dumps(body).encode()
    status, answer = post(coordinator.endpoint, f"/v1/{op}", raw)
    if len(raw) > SMALL_BODY_LIMIT:
        assert status == 413, (op, field_path, answer)
        return
    assert status == 400, (op, field_path, how, answer)
    message = answer.get("message", "")
    if "nests JSON deeper" not in message:
        # the field itself, or a part of it (config.<name>, partitions[2].topic)
        named = re.search(rf"field '{re.escape(field_path)}['.\[ ]", message)
        assert named, (op, field_path, how, message)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPERATION_SHAPES)),
       body=st.one_of(json_values, st.dictionaries(
           st.sampled_from(["transactional_id", "producer_id", "epoch", "partitions",
                            "name", "config", "members", "written", "commit", "group_id",
                            "offsets", "batch_id", "member_key", "publish"]),
           json_values, max_size=6)))
def test_random_json_is_never_a_500(coordinator: CoordinatorProc, op: str, body: Any) -> None:
    status, answer = post(coordinator.endpoint, f"/v1/{op}", json.dumps(body).encode())
    assert status < 500, (op, body, answer)
    if status != 200:
        assert answer.get("error"), answer


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(sorted(OPERATION_SHAPES)), raw=st.binary(max_size=200))
def test_random_bytes_are_a_400(coordinator: CoordinatorProc, op: str, raw: bytes) -> None:
    """Bytes that are not a JSON object are InvalidRequest (400) naming the body, whatever
    the operation: not another 4xx, not a 200 (a body read as something it is not)."""
    import contextlib

    from hypothesis import assume

    with contextlib.suppress(ValueError):  # not JSON at all (nor UTF-8): kept
        assume(not isinstance(json.loads(raw), dict))  # a JSON object: the fields decide
    status, answer = post(coordinator.endpoint, f"/v1/{op}", raw)
    assert status == 400, (op, raw, status, answer)
    assert answer.get("error") == "InvalidRequest", answer
    assert answer["message"].startswith(f"{op}: request body "), answer


@pytest.mark.parametrize("op", sorted(OPERATION_SHAPES))
def test_deep_and_huge_bodies(coordinator: CoordinatorProc, op: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    status, answer = post(coordinator.endpoint, f"/v1/{op}", deep)
    assert status == 400 and "deeper" in answer["message"], answer
    deep_obj = b'{"a":' * 5_000 + b"1" + b"}" * 5_000
    status, answer = post(coordinator.endpoint, f"/v1/{op}", deep_obj)
    assert status == 400 and "deeper" in answer["message"], answer
    huge = json.dumps({"transactional_id": "x" * (SMALL_BODY_LIMIT + 1)}).encode()
    status, answer = post(coordinator.endpoint, f"/v1/{op}", huge)
    assert status == 413 and str(SMALL_BODY_LIMIT) in answer["message"], answer
    still_serving(coordinator.endpoint)


def test_the_long_transactional_id_that_wedged_the_log(coordinator: CoordinatorProc) -> None:
    status, answer = post(coordinator.endpoint, "/v1/init_producer_id",
                          json.dumps({"transactional_id": "x" * 100_000}).encode())
    assert status == 400 and "'transactional_id'" in answer["message"], answer
    still_serving(coordinator.endpoint)


def test_a_chunked_body_past_the_limit_is_413(coordinator: CoordinatorProc) -> None:
    u = urlparse(coordinator.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=ANSWER_BOUND_S)
    chunks = (b"[" + b"1," * 1000 + b"1]" for _ in range(200))  # ~400 KB, no length
    conn.request("POST", "/v1/list_topics", chunks, {"Content-Type": "application/json"},
                 encode_chunked=True)
    resp = conn.getresponse()
    assert resp.status == 413, resp.read()
    conn.close()
    still_serving(coordinator.endpoint)


def test_default_limit_refuses_a_huge_body(tmp_path: Path) -> None:
    with CoordinatorProc(f"file://{tmp_path / 'root'}") as proc:
        status, answer = post(proc.endpoint, "/v1/list_topics", b" " * (17 << 20))
        assert status == 413, answer
        still_serving(proc.endpoint)


def test_every_operation_is_fuzzed() -> None:
    """A new operation gets a shape (request_limits) and with it this fuzzing."""
    from txnlog.coordinator.server.api import OPERATIONS

    assert set(OPERATIONS) == set(OPERATION_SHAPES)
