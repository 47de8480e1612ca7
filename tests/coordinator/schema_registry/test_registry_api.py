"""Confluent Schema Registry's REST API served by ``txnlog schema-registry``: answers and
error codes as Confluent's clients expect them, checked with plain HTTP (httpx) and with
confluent-kafka's ``SchemaRegistryClient``; the state is the root's ``_schemas`` topic in
Confluent's record format, read back with txnlog's own consumer."""

from __future__ import annotations

import base64
import json
import stat
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf import descriptor_pb2
from registry_proc import RegistryProc, Served
from txnlog.log_format.consumer import Consumer

from tests.coordinator.server.test_coordinator_service import make_cert


def avro_rec(name: str, *fields: tuple[str, Any], **defaults: Any) -> str:
    out = []
    for fname, ftype in fields:
        fd: dict[str, Any] = {"name": fname, "type": ftype}
        if fname in defaults:
            fd["default"] = defaults[fname]
        out.append(fd)
    return json.dumps({"type": "record", "name": name, "fields": out})


S1 = avro_rec("User", ("name", "string"))
S2 = avro_rec("User", ("name", "string"), ("age", "int"), age=0)
S_BAD = avro_rec("User", ("name", "string"), ("email", "string"))  # no default


@pytest.fixture(scope="module")
def http(served: Served) -> httpx.Client:
    return httpx.Client(base_url=served.registry.url, timeout=60)


def code(resp: httpx.Response) -> tuple[int, int]:
    return resp.status_code, resp.json()["error_code"]


def register(http: httpx.Client, subject: str, schema: str, **extra: Any) -> httpx.Response:
    return http.post(f"/subjects/{subject}/versions", json={"schema": schema, **extra})


def test_register_lookup_versions_and_ids(http: httpx.Client) -> None:
    r1 = register(http, "users-value", S1)
    assert r1.status_code == 200, r1.text
    first = r1.json()["id"]
    # the same schema again (other spacing): same id, no new version
    assert register(http, "users-value", json.dumps(json.loads(S1), indent=2)).json() == {
        "id": first}
    second = register(http, "users-value", S2).json()["id"]
    assert second != first
    assert http.get("/subjects/users-value/versions").json() == [1, 2]
    latest = http.get("/subjects/users-value/versions/latest").json()
    assert (latest["version"], latest["id"], json.loads(latest["schema"])) == (
        2, second, json.loads(S2))
    assert http.get("/subjects/users-value/versions/1/schema").json() == json.loads(S1)
    assert json.loads(http.get(f"/schemas/ids/{first}").json()["schema"]) == json.loads(S1)
    assert http.get(f"/schemas/ids/{first}/schema").json() == json.loads(S1)
    found = http.post("/subjects/users-value", json={"schema": S2}).json()
    assert (found["subject"], found["version"], found["id"]) == ("users-value", 2, second)
    # the same schema under another subject keeps its id
    assert register(http, "users-copy", S1).json()["id"] == first
    assert http.get(f"/schemas/ids/{first}/versions").json() == [
        {"subject": "users-copy", "version": 1}, {"subject": "users-value", "version": 1}]
    assert http.get(f"/schemas/ids/{first}/subjects").json() == ["users-copy", "users-value"]
    assert {"users-value", "users-copy"} <= set(http.get("/subjects").json())
    assert sorted(http.get("/schemas/types").json()) == ["AVRO", "JSON", "PROTOBUF"]


def test_confluent_error_codes(http: httpx.Client) -> None:
    register(http, "errs", S1)
    assert code(http.get("/subjects/nope/versions")) == (404, 40401)
    assert code(http.get("/subjects/nope/versions/1")) == (404, 40401)
    assert code(http.get("/subjects/errs/versions/9")) == (404, 40402)
    assert code(http.get("/schemas/ids/99999")) == (404, 40403)
    assert code(http.post("/subjects/errs", json={"schema": S2})) == (404, 40403)
    assert code(http.get("/subjects/errs/versions/0")) == (422, 42202)
    assert code(http.get("/subjects/errs/versions/abc")) == (422, 42202)
    assert code(register(http, "errs", '{"type": "recrod"}')) == (422, 42201)
    assert code(register(http, "errs", "")) == (422, 42201)
    assert code(register(http, "errs", S1, schemaType="XML")) == (422, 42201)
    assert code(http.put("/config/errs", json={"compatibility": "SIDEWAYS"})) == (422, 42203)
    assert code(http.put("/mode/errs", json={"mode": "WRITEONLY"})) == (422, 42204)
    incompatible = register(http, "errs", S_BAD)
    assert code(incompatible) == (409, 40901)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in incompatible.json()["message"]
    bad_json = http.post("/subjects/errs/versions", content=b"{not json",
                         headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400


def test_soft_and_hard_deletes(http: httpx.Client) -> None:
    s = "deletes"
    first = register(http, s, S1).json()["id"]
    register(http, s, S2)
    # a version: soft first, then permanent
    assert code(http.delete(f"/subjects/{s}/versions/1?permanent=true")) == (404, 40407)
    assert http.delete(f"/subjects/{s}/versions/1").json() == 1
    assert code(http.delete(f"/subjects/{s}/versions/1")) == (404, 40402)
    assert http.get(f"/subjects/{s}/versions").json() == [2]
    assert http.get(f"/subjects/{s}/versions?deleted=true").json() == [1, 2]
    assert http.get(f"/subjects/{s}/versions/1?deleted=true").json()["id"] == first
    assert http.delete(f"/subjects/{s}/versions/1?permanent=true").json() == 1
    assert http.get(f"/subjects/{s}/versions?deleted=true").json() == [2]
    # the subject: soft, then permanent
    assert code(http.delete(f"/subjects/{s}?permanent=true")) == (404, 40405)
    assert http.delete(f"/subjects/{s}").json() == [2]
    assert code(http.delete(f"/subjects/{s}")) == (404, 40404)
    assert code(http.get(f"/subjects/{s}/versions")) == (404, 40401)
    assert s not in http.get("/subjects").json()
    assert s in http.get("/subjects?deleted=true").json()
    assert http.post(f"/subjects/{s}?deleted=true", json={"schema": S2}).json()["version"] == 2
    assert http.delete(f"/subjects/{s}?permanent=true").json() == [2]
    assert s not in http.get("/subjects?deleted=true").json()
    # registered again after a hard delete: version 1 again, and the schema's old id
    assert register(http, s, S1).json()["id"] == first
    assert http.get(f"/subjects/{s}/versions").json() == [1]


def test_versions_after_a_soft_deleted_subject_continue(http: httpx.Client) -> None:
    s = "soft-then-new"
    register(http, s, S1)
    http.delete(f"/subjects/{s}")
    register(http, s, S1)
    assert http.get(f"/subjects/{s}/versions").json() == [2]


def test_compatibility_config_global_and_per_subject(http: httpx.Client) -> None:
    s = "configured"
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert code(http.get(f"/config/{s}")) == (404, 40408)
    assert http.get(f"/config/{s}?defaultToGlobal=true").json() == {
        "compatibilityLevel": "BACKWARD"}
    register(http, s, S1)
    assert register(http, s, S_BAD).status_code == 409
    assert http.put(f"/config/{s}", json={"compatibility": "forward"}).json() == {
        "compatibility": "FORWARD"}
    assert http.get(f"/config/{s}").json() == {"compatibilityLevel": "FORWARD"}
    # FORWARD: the old schema reads the new one's data (the new field is skipped)
    assert register(http, s, S_BAD).status_code == 200
    assert http.delete(f"/config/{s}").json() == {"compatibilityLevel": "FORWARD"}
    assert code(http.get(f"/config/{s}")) == (404, 40408)
    # NONE for one subject only
    http.put(f"/config/{s}", json={"compatibility": "NONE"})
    assert register(http, s, json.dumps("string")).status_code == 200
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}


def test_compatibility_endpoint(http: httpx.Client) -> None:
    s = "compat-test"
    register(http, s, S1)
    ok = http.post(f"/compatibility/subjects/{s}/versions/latest", json={"schema": S2})
    assert ok.json() == {"is_compatible": True}
    bad = http.post(f"/compatibility/subjects/{s}/versions/latest?verbose=true",
                    json={"schema": S_BAD}).json()
    assert bad["is_compatible"] is False and bad["messages"]
    assert http.post(f"/compatibility/subjects/{s}/versions",
                     json={"schema": S2}).json() == {"is_compatible": True}
    assert code(http.post("/compatibility/subjects/none-such/versions/latest",
                          json={"schema": S2})) == (404, 40401)


def test_modes(http: httpx.Client) -> None:
    s = "moded"
    register(http, s, S1)
    assert http.get("/mode").json() == {"mode": "READWRITE"}
    assert http.put(f"/mode/{s}", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    assert code(register(http, s, S2)) == (422, 42205)
    assert code(http.delete(f"/subjects/{s}")) == (422, 42205)
    assert http.delete(f"/mode/{s}").json() == {"mode": "READONLY"}
    assert code(http.get(f"/mode/{s}")) == (404, 40409)
    # IMPORT: ids come with the schema, no compatibility check; only into an empty subject
    # unless forced
    imp = "imported"
    assert code(http.put(f"/mode/{s}", json={"mode": "IMPORT"})) == (422, 42205)
    assert http.put(f"/mode/{imp}", json={"mode": "IMPORT"}).json() == {"mode": "IMPORT"}
    assert register(http, imp, S1, id=7000, version=3).json() == {"id": 7000}
    assert register(http, imp, json.dumps("int"), id=7001, version=4).json() == {"id": 7001}
    assert http.get(f"/subjects/{imp}/versions").json() == [3, 4]
    assert code(register(http, imp, json.dumps("long"), id=7000, version=5)) == (422, 42207)
    http.delete(f"/mode/{imp}")
    assert code(register(http, imp, json.dumps("double"), id=7002)) == (422, 42205)
    # a later registration never hands out an imported id again
    fresh = register(http, "after-import", json.dumps({"type": "fixed", "name": "F",
                                                        "size": 3})).json()["id"]
    assert fresh not in (7000, 7001)


def test_avro_references(http: httpx.Client) -> None:
    addr = json.dumps({"type": "record", "name": "Address", "namespace": "com.acme",
                       "fields": [{"name": "city", "type": "string"}]})
    register(http, "address", addr)
    person = json.dumps({"type": "record", "name": "Person", "namespace": "com.acme",
                         "fields": [{"name": "home", "type": "com.acme.Address"}]})
    refs = [{"name": "com.acme.Address", "subject": "address", "version": 1}]
    assert code(register(http, "person", person)) == (422, 42201)  # Address unknown
    pid = register(http, "person", person, references=refs).json()["id"]
    got = http.get(f"/schemas/ids/{pid}").json()
    assert got["references"] == refs
    assert http.get("/subjects/address/versions/1/referencedby").json() == [pid]
    assert code(http.delete("/subjects/address/versions/1")) == (422, 42206)


def test_json_and_protobuf_schemas(http: httpx.Client) -> None:
    js = json.dumps({"type": "object", "properties": {"a": {"type": "string"}},
                     "additionalProperties": False})
    jid = register(http, "json-subject", js, schemaType="JSON").json()["id"]
    assert http.get(f"/schemas/ids/{jid}").json()["schemaType"] == "JSON"
    wider = json.dumps({"type": "object", "properties": {"a": {"type": "string"},
                                                         "b": {"type": "integer"}},
                        "additionalProperties": False})
    assert register(http, "json-subject", wider, schemaType="JSON").status_code == 200
    proto = 'syntax = "proto3";\npackage demo;\nmessage Ping { int32 n = 1; }\n'
    pid = register(http, "proto-subject", proto, schemaType="PROTOBUF").json()["id"]
    assert http.get(f"/schemas/ids/{pid}").json()["schema"] == proto.strip()
    serialized = http.get(f"/schemas/ids/{pid}?format=serialized").json()["schema"]
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert fdp.message_type[0].name == "Ping"
    changed = proto.replace("int32 n", "string n")
    assert code(register(http, "proto-subject", changed, schemaType="PROTOBUF")) == (409, 40901)
    assert code(register(http, "proto-subject", "message {", schemaType="PROTOBUF")) == (
        422, 42201)


def test_schema_registry_client(served: Served) -> None:
    c = SchemaRegistryClient({"url": served.registry.url})
    sid = c.register_schema("client-subject", Schema(S1, "AVRO"))
    assert c.get_schema(sid).schema_str is not None
    reg = c.lookup_schema("client-subject", Schema(S1, "AVRO"))
    assert (reg.schema_id, reg.version) == (sid, 1)
    assert c.get_latest_version("client-subject").schema_id == sid
    assert c.get_versions("client-subject") == [1]
    assert c.test_compatibility("client-subject", Schema(S2, "AVRO")) is True
    assert c.test_compatibility("client-subject", Schema(S_BAD, "AVRO")) is False
    c.set_compatibility("client-subject", "FULL")
    assert c.get_compatibility("client-subject") == "FULL"
    with pytest.raises(SchemaRegistryError) as err:
        c.get_version("client-subject", 5)
    assert (err.value.http_status_code, err.value.error_code) == (404, 40402)
    with pytest.raises(SchemaRegistryError) as err:
        c.register_schema("client-subject", Schema(S_BAD, "AVRO"))
    assert err.value.error_code == 40901
    assert c.delete_subject("client-subject") == [1]
    assert c.delete_subject("client-subject", permanent=True) == [1]
    ref = SchemaReference("com.acme.Address", "address", 1)
    assert isinstance(ref, SchemaReference)


def test_state_is_the_schemas_topic_in_confluents_format(served: Served,
                                                         http: httpx.Client) -> None:
    register(http, "topic-check", S1)
    # its own soft-deleted subject and subject config: what other tests leave in the
    # topic may be elsewhere (another worker's registry) or compacted away
    register(http, "topic-check-gone", S1)
    assert http.delete("/subjects/topic-check-gone").json() == [1]
    assert http.put("/config/topic-check", json={"compatibility": "FULL"}).status_code == 200
    with Consumer(served.root, assignment={("_schemas", 0): 0}) as consumer:
        records = [(json.loads(r.key), None if r.value is None else json.loads(r.value))
                   for r in consumer]
    keys = [k for k, _ in records]
    assert {"keytype": "SCHEMA", "subject": "topic-check", "version": 1, "magic": 1} in keys
    value = next(v for k, v in records if k.get("subject") == "topic-check")
    assert set(value) >= {"subject", "version", "id", "schema", "deleted"}
    assert value["deleted"] is False
    assert {"keytype": "DELETE_SUBJECT", "subject": "topic-check-gone", "magic": 0} in keys
    assert {"keytype": "CONFIG", "subject": "topic-check", "magic": 0} in keys
    # a second registry process, started now, serves the same state
    with RegistryProc(served.root) as other:
        other_http = httpx.Client(base_url=other.url, timeout=60)
        assert other_http.get("/subjects/topic-check/versions").json() == [1]
        assert other_http.get("/subjects").json() == http.get("/subjects").json()


def test_token_and_tls(served: Served, tmp_path) -> None:
    """``--token-file`` with ``--tls-cert``/``--tls-key``: HTTPS only, and the token as the
    HTTP Basic password (Confluent's clients' ``basic.auth.user.info``) or a Bearer token."""
    cert, key = make_cert(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(stat.S_IRUSR | stat.S_IWUSR)
    extra = ["--token-file", str(token), "--tls-cert", cert, "--tls-key", key]
    with RegistryProc(served.root, extra=extra) as reg:
        url = reg.url.replace("http://", "https://")
        with httpx.Client(verify=cert) as c:
            assert c.get(f"{url}/subjects").status_code == 401
            assert c.get(f"{url}/subjects", auth=("any", "wrong")).status_code == 401
            assert c.get(f"{url}/subjects", auth=("any", "s3cret-token")).status_code == 200
            assert c.get(f"{url}/subjects", headers={
                "Authorization": "Bearer s3cret-token"}).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{reg.url}/subjects", auth=("any", "s3cret-token"))  # plain HTTP
        sr = SchemaRegistryClient({"url": url, "ssl.ca.location": cert,
                                   "basic.auth.user.info": "u:s3cret-token"})
        assert isinstance(sr.get_subjects(), list)
        assert "s3cret" not in reg.log_text()
