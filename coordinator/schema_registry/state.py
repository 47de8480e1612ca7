"""The registry's state as ``_schemas`` records build it: subjects and their versions,
schemas by id, compatibility levels and modes.

Every registry process rebuilds this from the topic (``store``) and applies new records as
they appear, so any number of processes agree on it once they have read the same offset.
A record this version cannot read is logged and skipped (another registry's key type must
not stop this one from serving).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

from .records import Key, Reference, SchemaValue

log = logging.getLogger("txnlog.schema_registry.state")
DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"


@dataclass(frozen=True)
class StoredSchema:
    """What an id names: the schema's text, type and references."""

    schema: str
    schema_type: str
    references: tuple[Reference, ...]


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        self.by_id: dict[int, StoredSchema] = {}
        self.config: dict[str | None, str] = {}
        self.mode: dict[str | None, str] = {}
        self.max_id = 0

    # ------------------------------------------------------------------ applying records
    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        if key_bytes is None:
            return
        try:
            key = Key.decode(key_bytes)
            value = None if value_bytes is None else json.loads(value_bytes)
            self._apply(key, value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("skipping a _schemas record this registry cannot read (%s): key %r",
                        exc, key_bytes[:200])

    def _apply(self, key: Key, value: dict | None) -> None:
        kt = key.keytype
        if kt == "SCHEMA":
            if key.subject is None or key.version is None:
                raise ValueError("SCHEMA key without subject or version")
            versions = self.subjects.setdefault(key.subject, {})
            if value is None:
                gone = versions.pop(key.version, None)
                if not versions:
                    del self.subjects[key.subject]
                if gone is not None:
                    self._forget_id(gone.id)
                return
            sv = SchemaValue.from_json(value)
            versions[key.version] = sv
            self.by_id.setdefault(sv.id, StoredSchema(sv.schema, sv.schema_type,
                                                      sv.references))
            self.max_id = max(self.max_id, sv.id)
        elif kt == "CONFIG":
            if value is None:
                self.config.pop(key.subject, None)
            else:
                self.config[key.subject] = str(value["compatibilityLevel"]).upper()
        elif kt == "MODE":
            if value is None:
                self.mode.pop(key.subject, None)
            else:
                self.mode[key.subject] = str(value["mode"]).upper()
        elif kt == "DELETE_SUBJECT":
            if value is None or key.subject is None:
                return
            upto = int(value.get("version", 2**31 - 1))
            versions = self.subjects.get(key.subject, {})
            for v, sv in list(versions.items()):
                if v <= upto and not sv.deleted:
                    versions[v] = replace(sv, deleted=True)
        elif kt in ("NOOP", "CLEAR_SUBJECT", "CONTEXT"):
            return
        else:
            log.debug("ignoring _schemas key type %s", kt)

    def _forget_id(self, schema_id: int) -> None:
        """After a hard delete: the id stays known while any version still names it."""
        if not any(sv.id == schema_id for vs in self.subjects.values() for sv in vs.values()):
            self.by_id.pop(schema_id, None)

    # ---------------------------------------------------------------------------- queries
    def versions(self, subject: str, deleted: bool = False) -> list[SchemaValue]:
        """The subject's versions in order (soft-deleted ones only with ``deleted``)."""
        vs = self.subjects.get(subject, {})
        return [vs[v] for v in sorted(vs) if deleted or not vs[v].deleted]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, deleted))

    def compatibility(self, subject: str | None) -> str:
        if subject is not None and subject in self.config:
            return self.config[subject]
        return self.config.get(None, DEFAULT_COMPATIBILITY)

    def mode_of(self, subject: str | None) -> str:
        if subject is not None and subject in self.mode:
            return self.mode[subject]
        return self.mode.get(None, DEFAULT_MODE)

    def resolve_references(self, refs: tuple[Reference, ...],
                           seen: set[str] | None = None) -> list[tuple[str, str, str]]:
        """(name, schema type, text) of every schema ``refs`` name, transitively, each after
        what it references; KeyError naming the first reference not found."""
        seen = set() if seen is None else seen
        out: list[tuple[str, str, str]] = []
        for ref in refs:
            if ref.name in seen:
                continue
            seen.add(ref.name)
            versions = self.versions(ref.subject)
            sv = (versions[-1] if versions else None) if ref.version == -1 else next(
                (v for v in versions if v.version == ref.version), None)
            if sv is None:
                raise KeyError(f"reference {ref.name!r}: subject '{ref.subject}' version "
                               f"{ref.version} not found")
            out += self.resolve_references(sv.references, seen)
            out.append((ref.name, sv.schema_type, sv.schema))
        return out

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas whose references name ``subject`` ``version``."""
        out = set()
        for vs in self.subjects.values():
            for sv in vs.values():
                if not sv.deleted and any(r.subject == subject and r.version == version
                                          for r in sv.references):
                    out.add(sv.id)
        return sorted(out)
