"""The compatibility rules, one case each: Avro's schema resolution (reader vs writer), JSON
Schema under open and closed content models, Protobuf's wire-compatible changes, and the
levels (BACKWARD, FORWARD, FULL, their transitive forms, NONE).

Each case names the reader and the writer; BACKWARD registers a new schema that must read
the old one's data, so "new reads old" is ``can_read(new, old)``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from txnlog.coordinator.schema_registry.schemas import (
    ParsedSchema,
    SchemaParseError,
    can_read,
    check_level,
    parse,
)


def avro(schema: Any) -> ParsedSchema:
    return parse("AVRO", json.dumps(schema), [])


def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def kinds(problems: list[str]) -> set[str]:
    return {p.split(",")[0].removeprefix("{type:") for p in problems}


# ------------------------------------------------------------------------------- Avro

PROMOTIONS = [("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
              ("long", "double"), ("float", "double"), ("string", "bytes"),
              ("bytes", "string")]


@pytest.mark.parametrize(("writer", "reader"), PROMOTIONS)
def test_avro_promotions_read_one_way(writer: str, reader: str) -> None:
    assert can_read(avro(reader), avro(writer)) == []
    if {writer, reader} != {"string", "bytes"}:
        assert kinds(can_read(avro(writer), avro(reader))) == {"TYPE_MISMATCH"}


@pytest.mark.parametrize(("writer", "reader"), [("long", "int"), ("double", "float"),
                                                ("string", "int"), ("boolean", "int"),
                                                ("null", "string")])
def test_avro_no_other_primitive_reads_another(writer: str, reader: str) -> None:
    assert kinds(can_read(avro(reader), avro(writer))) == {"TYPE_MISMATCH"}


def test_avro_a_reader_field_needs_the_writer_field_or_a_default() -> None:
    old = avro(rec(f("a", "int")))
    with_default = avro(rec(f("a", "int"), f("b", "string", default="x")))
    without = avro(rec(f("a", "int"), f("b", "string")))
    assert can_read(with_default, old) == []
    assert kinds(can_read(without, old)) == {"READER_FIELD_MISSING_DEFAULT_VALUE"}
    # the writer's extra field is skipped by a reader that lacks it
    assert can_read(old, without) == []


def test_avro_field_found_by_reader_alias_and_record_by_alias() -> None:
    writer = avro(rec(f("old_name", "int"), name="Old"))
    reader = avro(rec(f("new_name", "int", aliases=["old_name"]), name="New", aliases=["Old"]))
    assert can_read(reader, writer) == []
    assert kinds(can_read(avro(rec(f("new_name", "int"), name="Old")), writer)) == {
        "READER_FIELD_MISSING_DEFAULT_VALUE"}


def test_avro_record_names_must_match_unqualified() -> None:
    assert can_read(avro(rec(f("a", "int"), name="x.R")), avro(rec(f("a", "int"),
                                                                  name="y.R"))) == []
    assert kinds(can_read(avro(rec(f("a", "int"), name="S")),
                          avro(rec(f("a", "int"))))) == {"NAME_MISMATCH"}


def test_avro_field_types_are_resolved_recursively() -> None:
    writer = avro(rec(f("a", "int")))
    assert can_read(avro(rec(f("a", "long"))), writer) == []
    assert kinds(can_read(avro(rec(f("a", "string"))), writer)) == {"TYPE_MISMATCH"}


def _enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "E", "symbols": list(symbols), **extra}


def test_avro_enum_writer_symbols_must_be_known_unless_reader_default() -> None:
    small, big = avro(_enum("A", "B")), avro(_enum("A", "B", "C"))
    assert can_read(big, small) == []
    assert kinds(can_read(small, big)) == {"MISSING_ENUM_SYMBOLS"}
    assert can_read(avro(_enum("A", "B", default="A")), big) == []


def test_avro_fixed_needs_same_name_and_size() -> None:
    fx = {"type": "fixed", "name": "F", "size": 4}
    assert can_read(avro(fx), avro(fx)) == []
    assert kinds(can_read(avro({**fx, "size": 8}), avro(fx))) == {"FIXED_SIZE_MISMATCH"}
    assert kinds(can_read(avro({**fx, "name": "G"}), avro(fx))) == {"NAME_MISMATCH"}


def test_avro_arrays_and_maps_by_items_and_values() -> None:
    assert can_read(avro({"type": "array", "items": "long"}),
                    avro({"type": "array", "items": "int"})) == []
    assert kinds(can_read(avro({"type": "array", "items": "int"}),
                          avro({"type": "array", "items": "long"}))) == {"TYPE_MISMATCH"}
    assert can_read(avro({"type": "map", "values": "double"}),
                    avro({"type": "map", "values": "float"})) == []
    assert kinds(can_read(avro({"type": "map", "values": "int"}),
                          avro({"type": "array", "items": "int"}))) == {"TYPE_MISMATCH"}


def test_avro_unions() -> None:
    # every writer branch must be readable
    assert can_read(avro(["null", "string", "int"]), avro(["null", "string"])) == []
    assert kinds(can_read(avro(["null", "string"]), avro(["null", "string", "int"]))) == {
        "MISSING_UNION_BRANCH"}
    # a writer non-union is read by some reader branch (promotion included)
    assert can_read(avro(["null", "long"]), avro("int")) == []
    assert kinds(can_read(avro(["null", "string"]), avro("int"))) == {"MISSING_UNION_BRANCH"}
    # a writer union read by a reader non-union: each branch
    assert can_read(avro("long"), avro(["int", "long"])) == []
    assert kinds(can_read(avro("int"), avro(["null", "int"]))) == {"MISSING_UNION_BRANCH"}


def test_avro_recursive_types_terminate() -> None:
    node = rec(f("v", "int"), f("next", ["null", "Node"], default=None), name="Node")
    wider = rec(f("v", "long"), f("next", ["null", "Node"], default=None), name="Node")
    assert can_read(avro(wider), avro(node)) == []
    assert kinds(can_read(avro(node), avro(wider))) == {"TYPE_MISMATCH"}


def test_avro_invalid_schemas_are_parse_errors() -> None:
    for bad in ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}',
                '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", '
                '"default": "x"}]}', "not json", '{"type": "enum", "name": "E"}'):
        with pytest.raises(SchemaParseError):
            parse("AVRO", bad, [])


# ---------------------------------------------------------------------- levels (Avro)

V1 = rec(f("a", "int"))
V2 = rec(f("a", "int"), f("b", "string", default="x"))
V3 = rec(f("a", "int"), f("b", "string"))


@pytest.mark.parametrize(("level", "ok"), [
    ("BACKWARD", True), ("BACKWARD_TRANSITIVE", False), ("FORWARD", True),
    ("FORWARD_TRANSITIVE", True), ("FULL", True), ("FULL_TRANSITIVE", False), ("NONE", True)])
def test_levels_latest_only_or_transitive(level: str, ok: bool) -> None:
    """v3 adds no default: it reads v2's data (which has b) but not v1's."""
    assert (check_level(level, avro(V3), [avro(V1), avro(V2)]) == []) is ok


@pytest.mark.parametrize(("level", "ok"), [("BACKWARD", False), ("FORWARD", True),
                                           ("FULL", False), ("NONE", True)])
def test_levels_directions(level: str, ok: bool) -> None:
    """Adding a field without a default: old readers skip it (FORWARD), new readers can't
    find it in old data (BACKWARD)."""
    assert (check_level(level, avro(V3), [avro(V1)]) == []) is ok


# ------------------------------------------------------------------------- JSON Schema

def js(schema: Any) -> ParsedSchema:
    return parse("JSON", json.dumps(schema), [])


def obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


CLOSED = {"additionalProperties": False}


@pytest.mark.parametrize(("name", "writer", "reader", "problem"), [
    ("add property, open model", obj({"a": {"type": "string"}}),
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}),
     "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"),
    ("add property, closed model", obj({"a": {"type": "string"}}, **CLOSED),
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, **CLOSED), None),
    ("remove property, open model", obj({"a": {"type": "string"}, "b": {"type": "integer"}}),
     obj({"a": {"type": "string"}}), None),
    ("remove property, closed model",
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, **CLOSED),
     obj({"a": {"type": "string"}}, **CLOSED), "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"),
    ("remove property, partially open (covered)",
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, **CLOSED),
     obj({"a": {"type": "string"}}, additionalProperties={"type": "number"}), None),
    ("remove property, partially open (not covered)",
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, **CLOSED),
     obj({"a": {"type": "string"}}, additionalProperties={"type": "string"}),
     "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"),
    ("close an open model", obj({"a": {"type": "string"}}),
     obj({"a": {"type": "string"}}, **CLOSED), "ADDITIONAL_PROPERTIES_REMOVED"),
    ("open a closed model", obj({"a": {"type": "string"}}, **CLOSED),
     obj({"a": {"type": "string"}}), None),
    ("required added", obj({"a": {"type": "string"}}),
     obj({"a": {"type": "string"}}, required=["a"]), "REQUIRED_ATTRIBUTE_ADDED"),
    ("required removed", obj({"a": {"type": "string"}}, required=["a"]),
     obj({"a": {"type": "string"}}), None),
    ("type widened integer -> number", {"type": "integer"}, {"type": "number"}, None),
    ("type narrowed number -> integer", {"type": "number"}, {"type": "integer"},
     "TYPE_NARROWED"),
    ("type changed", {"type": "string"}, {"type": "integer"}, "TYPE_CHANGED"),
    ("type union widened", {"type": "string"}, {"type": ["string", "null"]}, None),
    ("type union narrowed", {"type": ["string", "null"]}, {"type": "string"}, "TYPE_NARROWED"),
    ("maxLength decreased", {"type": "string", "maxLength": 10},
     {"type": "string", "maxLength": 5}, "MAX_LENGTH_DECREASED"),
    ("maxLength increased", {"type": "string", "maxLength": 5},
     {"type": "string", "maxLength": 10}, None),
    ("minLength increased", {"type": "string"}, {"type": "string", "minLength": 1},
     "MIN_LENGTH_ADDED"),
    ("maximum decreased", {"type": "number", "maximum": 10}, {"type": "number", "maximum": 5},
     "MAXIMUM_DECREASED"),
    ("minimum decreased", {"type": "number", "minimum": 5}, {"type": "number", "minimum": 1},
     None),
    ("enum narrowed", {"enum": ["a", "b"]}, {"enum": ["a"]}, "ENUM_ARRAY_NARROWED"),
    ("enum widened", {"enum": ["a"]}, {"enum": ["a", "b"]}, None),
    ("items narrowed", {"type": "array", "items": {"type": "number"}},
     {"type": "array", "items": {"type": "integer"}}, "TYPE_NARROWED"),
    ("oneOf branch added", {"oneOf": [{"type": "string"}]},
     {"oneOf": [{"type": "string"}, {"type": "integer"}]}, None),
    ("oneOf branch removed", {"oneOf": [{"type": "string"}, {"type": "integer"}]},
     {"oneOf": [{"type": "string"}]}, "COMBINED_TYPE_SUBSCHEMAS_CHANGED"),
    ("pattern added", {"type": "string"}, {"type": "string", "pattern": "^a"},
     "PATTERN_ADDED"),
])
def test_json_schema_rules(name: str, writer: Any, reader: Any, problem: str | None) -> None:
    got = kinds(can_read(js(reader), js(writer)))
    assert got == ({problem} if problem else set()), name


def test_json_schema_refs_and_recursion() -> None:
    tree = {"$defs": {"node": obj({"v": {"type": "integer"},
                                   "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                                  **CLOSED)},
            "$ref": "#/$defs/node"}
    wider = json.loads(json.dumps(tree).replace('"integer"', '"number"'))
    assert can_read(js(wider), js(tree)) == []
    assert kinds(can_read(js(tree), js(wider))) == {"TYPE_NARROWED"}


def test_json_schema_invalid_is_a_parse_error() -> None:
    with pytest.raises(SchemaParseError):
        parse("JSON", '{"type": 12}', [])
    with pytest.raises(SchemaParseError):
        parse("JSON", "[1, 2]", [])


# ---------------------------------------------------------------------------- Protobuf

def pb(body: str, package: str = "t", syntax: str = "proto3") -> ParsedSchema:
    return parse("PROTOBUF", f'syntax = "{syntax}";\npackage {package};\n{body}\n', [])


BASE = "message M { int32 a = 1; string b = 2; }"


@pytest.mark.parametrize(("name", "new", "problem"), [
    ("field added", "message M { int32 a = 1; string b = 2; double c = 3; }", None),
    ("field removed", "message M { int32 a = 1; }", None),
    ("field renamed", "message M { int32 x = 1; string b = 2; }", None),
    ("int32 -> int64 (same wire group)", "message M { int64 a = 1; string b = 2; }", None),
    ("int32 -> bool (same wire group)", "message M { bool a = 1; string b = 2; }", None),
    ("string -> bytes", "message M { int32 a = 1; bytes b = 2; }", None),
    ("int32 -> string", "message M { string a = 1; string b = 2; }",
     "FIELD_SCALAR_KIND_CHANGED"),
    ("int32 -> sint32", "message M { sint32 a = 1; string b = 2; }",
     "FIELD_SCALAR_KIND_CHANGED"),
    ("scalar -> message", "message N { int32 z = 1; }\nmessage M { N a = 1; string b = 2; }",
     "FIELD_KIND_CHANGED"),
    ("singular -> repeated", "message M { repeated int32 a = 1; string b = 2; }",
     "FIELD_LABEL_CHANGED"),
    ("message removed", "message Other { int32 a = 1; }", "MESSAGE_REMOVED"),
    ("two fields moved into a oneof",
     "message M { oneof o { int32 a = 1; string b = 2; } }", "MULTIPLE_FIELDS_MOVED_TO_ONEOF"),
    ("one field moved into a oneof", "message M { string b = 2; oneof o { int32 a = 1; } }",
     None),
])
def test_protobuf_rules(name: str, new: str, problem: str | None) -> None:
    got = kinds(can_read(pb(new), pb(BASE)))
    assert got == ({problem} if problem else set()), name


def test_protobuf_named_type_and_package_changes() -> None:
    old = pb("message A { int32 x = 1; }\nmessage B { int32 x = 1; }\n"
             "message M { A f = 1; }")
    new = pb("message A { int32 x = 1; }\nmessage B { int32 x = 1; }\n"
             "message M { B f = 1; }")
    assert kinds(can_read(new, old)) == {"FIELD_NAMED_TYPE_CHANGED"}
    assert "PACKAGE_CHANGED" in kinds(can_read(pb(BASE, package="u"), pb(BASE)))


def test_protobuf_required_fields_proto2() -> None:
    old = pb("message M { optional int32 a = 1; }", syntax="proto2")
    new = pb("message M { optional int32 a = 1; required int32 b = 2; }", syntax="proto2")
    assert kinds(can_read(new, old)) == {"REQUIRED_FIELD_ADDED"}
    assert kinds(can_read(old, new)) == {"REQUIRED_FIELD_REMOVED"}


def test_protobuf_base64_descriptor_and_text_agree() -> None:
    text = pb(BASE)
    b64 = base64.b64encode(text.parsed.SerializeToString()).decode()
    as_descriptor = parse("PROTOBUF", b64, [])
    assert as_descriptor.parsed == text.parsed
    assert can_read(as_descriptor, text) == []


def test_protobuf_syntax_error_is_protocs_message() -> None:
    with pytest.raises(SchemaParseError, match=r"schema\.proto"):
        parse("PROTOBUF", 'syntax = "proto3";\nmessage M { int32 a = ; }\n', [])


def test_types_never_read_each_other() -> None:
    assert kinds(can_read(js({"type": "string"}), avro("string"))) == {"SCHEMA_TYPE_CHANGED"}
