"""Exclusive claims in the root: what makes ids and versions unique across registry processes.

Registries share no leader, so each decision that must be made once is a put-if-absent of a
small object under ``_meta/schema_registry/``; exactly one writer's put succeeds:

- ``fingerprints/<sha256>``: the id of one schema (type, text, references). Whoever claims
  it first decides the id, so the same schema registered through two registries at once
  gets one id.
- ``ids/<id>``: an id is handed out once. A claimer walks up from the highest id it knows
  until its put succeeds; an id claimed by a process that died before writing its record is
  a gap, never a duplicate.
- ``versions/<subject as hex>/<version>``: a subject's version, holding the whole
  ``SCHEMA`` value, so a registry that loses the race reads what won, and one that finds the
  winner dead can write the winner's record for it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from txnlog.log_format.storage import Storage

from .records import SchemaValue

PREFIX = "_meta/schema_registry"


def fingerprint(schema_type: str, canonical: str, references: list[dict[str, Any]]) -> str:
    blob = json.dumps([schema_type, canonical, references], separators=(",", ":"),
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _subject_dir(subject: str) -> str:
    return f"{PREFIX}/versions/{subject.encode().hex()}"


class Claims:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._highest_tried = 0

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.storage.get(path))
        except FileNotFoundError:
            return None

    def id_for(self, fp: str) -> int | None:
        """The id already decided for this fingerprint, if any."""
        got = self._read(f"{PREFIX}/fingerprints/{fp}")
        return None if got is None else int(got["id"])

    def allocate_id(self, fp: str, known_max: int) -> int:
        """The fingerprint's id: the one already claimed, else a fresh one claimed here."""
        existing = self.id_for(fp)
        if existing is not None:
            return existing
        n = max(known_max, self._highest_tried) + 1
        body = json.dumps({"fingerprint": fp}).encode()
        while not self.storage.put_if_absent(f"{PREFIX}/ids/{n}", body):
            n += 1
        self._highest_tried = n
        if self.storage.put_if_absent(f"{PREFIX}/fingerprints/{fp}",
                                      json.dumps({"id": n}).encode()):
            return n
        # another registry decided this schema's id between our two puts: theirs holds
        winner = self.id_for(fp)
        assert winner is not None
        return winner

    def claim_id(self, schema_id: int, fp: str) -> str | None:
        """IMPORT mode: take the given id for this fingerprint. None when it is ours (now or
        before), else the fingerprint that holds it."""
        path = f"{PREFIX}/ids/{schema_id}"
        if not self.storage.put_if_absent(path, json.dumps({"fingerprint": fp}).encode()):
            held = (self._read(path) or {}).get("fingerprint")
            if held != fp:
                return str(held)
        self.storage.put_if_absent(f"{PREFIX}/fingerprints/{fp}",
                                   json.dumps({"id": schema_id}).encode())
        return None

    def claim_version(self, value: SchemaValue) -> SchemaValue:
        """Claim ``value.subject`` ``value.version``; returns the value that holds it (ours,
        or the one another registry claimed first)."""
        path = f"{_subject_dir(value.subject)}/{value.version}"
        if self.storage.put_if_absent(path, json.dumps(value.to_json()).encode()):
            return value
        held = self._read(path)
        if held is None:  # deleted in between (a hard delete): claim again
            return self.claim_version(value)
        return SchemaValue.from_json(held)

    def release_version(self, subject: str, version: int) -> None:
        """After a hard delete: the version number may be claimed again."""
        self.storage.delete(f"{_subject_dir(subject)}/{version}")
