"""Schemas of the three types: parsed with their own libraries (fastavro for Avro,
jsonschema's metaschema check for JSON Schema, protoc for Protobuf), given the canonical
text a schema's identity is decided on, and compared (``can_read``) by their type's rules.

References: a schema may name other subjects' versions (Avro named types, .proto imports,
JSON Schema ``$ref`` URLs). ``parse`` gets them already resolved, transitively, in an order
where every schema comes after what it references.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import avro_compat, json_compat, protobuf_schema
from .records import AVRO, JSON, PROTOBUF


class SchemaParseError(ValueError):
    """The schema is not valid for its type (answered as 42201)."""


@dataclass(frozen=True)
class ResolvedReference:
    name: str
    schema_type: str
    text: str


@dataclass
class ParsedSchema:
    schema_type: str
    canonical: str
    parsed: Any
    context: Any = field(default=None)  # Avro: named types; JSON: referenced documents


def canonical_text(schema_type: str, text: str) -> str:
    """The text identity is decided on: compact JSON for Avro and JSON Schema (so spacing
    never makes a second id), the stripped text for Protobuf."""
    if schema_type in (AVRO, JSON):
        try:
            return json.dumps(json.loads(text), separators=(",", ":"))
        except ValueError as exc:
            raise SchemaParseError(f"the schema is not JSON: {exc}") from None
    return text.strip()


def parse(schema_type: str, text: str, refs: list[ResolvedReference]) -> ParsedSchema:
    if schema_type == AVRO:
        return _avro(text, refs)
    if schema_type == JSON:
        return _json(text, refs)
    if schema_type == PROTOBUF:
        try:
            fdp = protobuf_schema.parse(text, tuple((r.name, r.text) for r in refs))
        except protobuf_schema.ProtobufParseError as exc:
            raise SchemaParseError(str(exc)) from None
        return ParsedSchema(PROTOBUF, canonical_text(PROTOBUF, text), fdp)
    raise SchemaParseError(f"unknown schema type {schema_type!r}")


def _avro(text: str, refs: list[ResolvedReference]) -> ParsedSchema:
    import fastavro

    named: dict[str, Any] = {}
    try:
        for ref in refs:
            fastavro.parse_schema(json.loads(ref.text), named_schemas=named, _write_hint=False)
        obj = json.loads(text)
        parsed = fastavro.parse_schema(obj, named_schemas=named, _write_hint=False)
    except Exception as exc:  # json's, fastavro's (SchemaParseException, UnknownType, ...)
        # and the TypeErrors/KeyErrors of JSON that is no Avro schema at all
        raise SchemaParseError(f"{type(exc).__name__}: {exc}") from None
    return ParsedSchema(AVRO, canonical_text(AVRO, text), parsed, named)


def _json(text: str, refs: list[ResolvedReference]) -> ParsedSchema:
    import jsonschema

    try:
        obj = json.loads(text)
        ref_docs = {r.name: json.loads(r.text) for r in refs}
    except ValueError as exc:
        raise SchemaParseError(f"the schema is not JSON: {exc}") from None
    if not isinstance(obj, dict | bool):
        raise SchemaParseError("a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(obj).check_schema(obj)
    except jsonschema.SchemaError as exc:
        raise SchemaParseError(f"not a valid JSON Schema: {exc.message}") from None
    return ParsedSchema(JSON, canonical_text(JSON, text), obj, ref_docs)


def can_read(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"{{type:SCHEMA_TYPE_CHANGED, message:{writer.schema_type} -> "
                f"{reader.schema_type}}}"]
    if reader.schema_type == AVRO:
        return avro_compat.can_read(reader.parsed, writer.parsed, reader.context,
                                    writer.context)
    if reader.schema_type == JSON:
        return json_compat.can_read(reader.parsed, writer.parsed, reader.context,
                                    writer.context)
    return protobuf_schema.can_read(reader.parsed, writer.parsed)


def check_level(level: str, new: ParsedSchema, existing: list[ParsedSchema]) -> list[str]:
    """Compatibility of ``new`` with a subject's live versions (oldest first) at ``level``:
    BACKWARD (new reads old), FORWARD (old reads new), FULL (both); against the latest only,
    or every version for the _TRANSITIVE forms; NONE checks nothing."""
    level = level.upper()
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += can_read(new, old)
        if base in ("FORWARD", "FULL"):
            problems += can_read(old, new)
        if problems:
            break
    return problems
