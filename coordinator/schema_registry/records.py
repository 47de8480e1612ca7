"""The ``_schemas`` topic's records in Confluent's format, so Confluent's own registry or
Karapace pointed at the gateway would read the same state.

Keys and values are JSON. Key types: ``SCHEMA`` (``subject``, ``version``, ``magic`` 1;
value: subject, version, id, schema, schemaType (absent for AVRO), references, deleted),
``CONFIG`` (``subject`` null for the global level; value ``compatibilityLevel``), ``MODE``
(value ``mode``), ``DELETE_SUBJECT`` (value: subject and the highest version deleted) and
``NOOP``. A tombstone (null value) removes the key: a hard delete. The topic is compacted
per key, so the newest record of each key is the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TOPIC = "_schemas"
AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)


@dataclass(frozen=True)
class Reference:
    """A named schema this one imports: Avro's named type, a .proto import path, a JSON
    Schema ``$ref`` URL; its text is ``subject``'s ``version``."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaValue:
    """One subject-version: which schema (``id``) it is, and whether it was soft-deleted."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version,
                               "id": self.id}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["schema"] = self.schema
        out["deleted"] = self.deleted
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SchemaValue:
        return cls(str(d["subject"]), int(d["version"]), int(d["id"]), str(d["schema"]),
                   str(d.get("schemaType") or AVRO),
                   tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in d.get("references") or ()),
                   bool(d.get("deleted", False)))


@dataclass(frozen=True)
class Key:
    """A record key; ``subject`` None is the global CONFIG or MODE."""

    keytype: str
    subject: str | None = None
    version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def encode(self) -> bytes:
        d: dict[str, Any] = {"keytype": self.keytype, "subject": self.subject}
        if self.keytype == "SCHEMA":
            d["version"] = self.version
            d["magic"] = 1
        else:
            d["magic"] = 0
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Key:
        d = json.loads(data)
        version = d.get("version")
        return cls(str(d["keytype"]), d.get("subject"),
                   None if version is None else int(version))


def schema_key(subject: str, version: int) -> Key:
    return Key("SCHEMA", subject, version)


def config_key(subject: str | None) -> Key:
    return Key("CONFIG", subject)


def mode_key(subject: str | None) -> Key:
    return Key("MODE", subject)


def delete_subject_key(subject: str) -> Key:
    return Key("DELETE_SUBJECT", subject)


def encode_value(value: dict[str, Any] | SchemaValue | None) -> bytes | None:
    if value is None:
        return None
    d = value.to_json() if isinstance(value, SchemaValue) else value
    return json.dumps(d, separators=(",", ":")).encode()
