"""The registry's operations, as Confluent's REST API defines them, over the store.

Every operation first reads the topic to its end (``SchemaStore.catch_up``), so it sees
what every registry process of the root wrote before it. Writes that must happen once are
claimed first (``claims``): a schema's id, a subject's version. Registering:

1. the schema is parsed with its references (42201 when invalid);
2. a live version of the subject holding the same schema (same type, canonical text and
   references) answers with its id: registering twice changes nothing;
3. the subject's compatibility level is checked against its live versions (409);
4. the id: the one this schema already has anywhere in the root, else a fresh claimed one;
5. the next version number is claimed. A registry that loses that claim to another waits
   for the winner's record and starts over (the winner's schema may change what is
   compatible); if the winner died before writing it, the loser writes it from the claim.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from typing import Any

from . import errors
from .claims import fingerprint
from .records import (
    AVRO,
    PROTOBUF,
    SCHEMA_TYPES,
    Reference,
    SchemaValue,
    config_key,
    delete_subject_key,
    mode_key,
    schema_key,
)
from .schemas import (
    ParsedSchema,
    ResolvedReference,
    SchemaParseError,
    canonical_text,
    check_level,
    parse,
)
from .state import DEFAULT_COMPATIBILITY, DEFAULT_MODE, RegistryState
from .store import SchemaStore

log = logging.getLogger("txnlog.schema_registry")
MAX_VERSION = 2**31 - 1
MAX_SCHEMA_BYTES = 4 << 20
WINNER_WAIT_S = 5.0
MAX_ROUNDS = 50


@functools.lru_cache(maxsize=1024)
def _parse_cached(schema_type: str, text: str,
                  refs: tuple[ResolvedReference, ...]) -> ParsedSchema:
    return parse(schema_type, text, list(refs))


def parse_version(version: str | int, allow_latest: bool = True) -> int:
    """A version path segment: 1..2^31-1, or "latest"/-1 (returned as -1)."""
    if allow_latest and str(version).lower() in ("latest", "-1"):
        return -1
    try:
        v = int(version)
    except (TypeError, ValueError):
        raise errors.invalid_version(version) from None
    if not 1 <= v <= MAX_VERSION:
        raise errors.invalid_version(version)
    return v


def _schema_json(sv: SchemaValue) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": sv.subject, "version": sv.version, "id": sv.id}
    if sv.schema_type != AVRO:
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = [r.to_json() for r in sv.references]
    out["schema"] = sv.schema
    return out


class Registry:
    """``claim_wait_s``: how long a registry that lost a version's claim waits for the
    winner's record before writing it from the claim itself."""

    def __init__(self, store: SchemaStore, claim_wait_s: float = WINNER_WAIT_S) -> None:
        self.store = store
        self.claim_wait_s = claim_wait_s

    def fresh(self) -> RegistryState:
        self.store.catch_up()
        return self.store.state

    # ------------------------------------------------------------------- schemas
    def _request_schema(self, body: Any) -> tuple[str, str, tuple[Reference, ...]]:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise errors.invalid_schema("Empty schema")
        if len(text.encode()) > MAX_SCHEMA_BYTES:
            raise errors.schema_too_large(len(text.encode()), MAX_SCHEMA_BYTES)
        schema_type = str(body.get("schemaType") or AVRO).upper()
        if schema_type not in SCHEMA_TYPES:
            raise errors.invalid_schema(f"Unknown schema type {schema_type!r}")
        try:
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in body.get("references") or ())
        except (KeyError, TypeError, ValueError):
            raise errors.invalid_schema("references must be objects with name, subject "
                                        "and version") from None
        return schema_type, text, refs

    def _parse(self, state: RegistryState, schema_type: str, text: str,
               refs: tuple[Reference, ...]) -> ParsedSchema:
        try:
            resolved = tuple(ResolvedReference(*r) for r in state.resolve_references(refs))
        except KeyError as exc:
            raise errors.invalid_schema(str(exc.args[0])) from None
        try:
            return _parse_cached(schema_type, text, resolved)
        except SchemaParseError as exc:
            raise errors.invalid_schema(str(exc)) from None

    def _parse_stored(self, state: RegistryState, sv: SchemaValue) -> ParsedSchema:
        return self._parse(state, sv.schema_type, sv.schema, sv.references)

    @staticmethod
    def _fingerprint(schema_type: str, text: str, refs: tuple[Reference, ...]) -> str:
        try:
            canonical = canonical_text(schema_type, text)
        except SchemaParseError:
            canonical = text
        return fingerprint(schema_type, canonical, [r.to_json() for r in refs])

    def _writable(self, state: RegistryState, subject: str | None) -> str:
        mode = state.mode_of(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise errors.not_permitted(f"Subject {subject} is in read-only mode" if subject
                                       else "The registry is in read-only mode")
        return mode

    def register(self, subject: str, body: Any) -> dict[str, Any]:
        schema_type, text, refs = self._request_schema(body)
        want_id = body.get("id") if isinstance(body, dict) else None
        want_version = body.get("version") if isinstance(body, dict) else None
        with self.store.lock:
            for _ in range(MAX_ROUNDS):
                state = self.fresh()
                mode = self._writable(state, subject)
                importing = mode == "IMPORT"
                if want_id is not None and not importing:
                    raise errors.not_permitted(f"Subject {subject} is not in import mode")
                parsed = self._parse(state, schema_type, text, refs)
                fp = fingerprint(schema_type, parsed.canonical, [r.to_json() for r in refs])
                live = state.versions(subject)
                for sv in live:
                    if self._fingerprint(sv.schema_type, sv.schema, sv.references) == fp:
                        if want_id is not None and int(want_id) != sv.id:
                            raise errors.id_does_not_match(
                                f"Schema already registered with id {sv.id} instead of "
                                f"input id {want_id}")
                        return {"id": sv.id}
                if not importing:
                    problems = check_level(state.compatibility(subject), parsed,
                                           [self._parse_stored(state, sv) for sv in live])
                    if problems:
                        raise errors.incompatible(subject, problems)
                schema_id = self._schema_id(state, fp, want_id)
                every = state.versions(subject, deleted=True)
                version = (parse_version(want_version, allow_latest=False)
                           if importing and want_version is not None
                           else (every[-1].version + 1 if every else 1))
                value = SchemaValue(subject, version, schema_id, parsed.canonical,
                                    schema_type, refs)
                held = self.store.claims.claim_version(value)
                if held.id == schema_id:
                    self.store.write([(schema_key(subject, held.version), held)])
                    return {"id": schema_id}
                if importing and want_version is not None:
                    raise errors.id_does_not_match(
                        f"Version {version} of {subject} already holds schema {held.id}")
                self._wait_for(held)
        raise errors.timeout(f"could not register under {subject}: too many concurrent "
                             "registrations")

    def _schema_id(self, state: RegistryState, fp: str, want_id: Any) -> int:
        claims = self.store.claims
        if want_id is None:
            return claims.allocate_id(fp, state.max_id)
        try:
            schema_id = int(want_id)
        except (TypeError, ValueError):
            raise errors.bad_request(f"id must be an integer, got {want_id!r}") from None
        other = claims.claim_id(schema_id, fp)
        if other is not None:
            raise errors.id_does_not_match(f"Overwrite new schema with id {schema_id} is "
                                           "not permitted: another schema holds that id")
        return schema_id

    def _wait_for(self, held: SchemaValue) -> None:
        """Another registry claimed ``held``'s version: wait for its record; write it from
        the claim if the claimer seems gone."""
        deadline = time.monotonic() + self.claim_wait_s
        while time.monotonic() < deadline:
            state = self.fresh()
            if held.version in state.subjects.get(held.subject, {}):
                return
            time.sleep(0.05)
        log.warning("version %d of %s was claimed but never written; writing it from the "
                    "claim", held.version, held.subject)
        self.store.write([(schema_key(held.subject, held.version), held)])

    def lookup(self, subject: str, body: Any, deleted: bool) -> dict[str, Any]:
        schema_type, text, refs = self._request_schema(body)
        state = self.fresh()
        versions = state.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        parsed = self._parse(state, schema_type, text, refs)
        fp = fingerprint(schema_type, parsed.canonical, [r.to_json() for r in refs])
        for sv in reversed(versions):
            if self._fingerprint(sv.schema_type, sv.schema, sv.references) == fp:
                return _schema_json(sv)
        raise errors.schema_not_found()

    # ------------------------------------------------------------------ subjects
    def subjects(self, deleted: bool, prefix: str) -> list[str]:
        return [s for s in self.fresh().subject_names(deleted) if s.startswith(prefix)]

    def versions(self, subject: str, deleted: bool) -> list[int]:
        vs = self.fresh().versions(subject, deleted)
        if not vs:
            raise errors.subject_not_found(subject)
        return [sv.version for sv in vs]

    def _version(self, state: RegistryState, subject: str, version: str | int,
                 deleted: bool) -> SchemaValue:
        v = parse_version(version)
        vs = state.versions(subject, deleted=True)
        if not vs:
            raise errors.subject_not_found(subject)
        visible = vs if deleted else [sv for sv in vs if not sv.deleted]
        if v == -1:
            if not visible:
                raise errors.subject_not_found(subject)
            return visible[-1]
        sv = next((x for x in visible if x.version == v), None)
        if sv is None:
            raise errors.version_not_found(v)
        return sv

    def get_version(self, subject: str, version: str, deleted: bool) -> dict[str, Any]:
        return _schema_json(self._version(self.fresh(), subject, version, deleted))

    def referenced_by(self, subject: str, version: str) -> list[int]:
        state = self.fresh()
        sv = self._version(state, subject, version, deleted=True)
        return state.referenced_by(subject, sv.version)

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self.store.lock:
            state = self.fresh()
            self._writable(state, subject)
            every = state.versions(subject, deleted=True)
            if not every:
                raise errors.subject_not_found(subject)
            live = [sv for sv in every if not sv.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                self.store.write([(schema_key(subject, sv.version), None) for sv in every]
                                 + [(delete_subject_key(subject), None)])
                for sv in every:
                    self.store.claims.release_version(subject, sv.version)
                return [sv.version for sv in every]
            if not live:
                raise errors.subject_soft_deleted(subject)
            for sv in live:
                self._not_referenced(state, sv)
            records: list[tuple[Any, Any]] = [
                (schema_key(subject, sv.version), replace(sv, deleted=True)) for sv in live]
            records.append((delete_subject_key(subject),
                            {"subject": subject, "version": live[-1].version}))
            if subject in state.config:
                records.append((config_key(subject), None))
            if subject in state.mode:
                records.append((mode_key(subject), None))
            self.store.write(records)
            return [sv.version for sv in live]

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        with self.store.lock:
            state = self.fresh()
            self._writable(state, subject)
            sv = self._version(state, subject, version, deleted=permanent)
            if permanent:
                if not sv.deleted:
                    raise errors.version_not_soft_deleted(subject, sv.version)
                self._not_referenced(state, sv)
                self.store.write([(schema_key(subject, sv.version), None)])
                self.store.claims.release_version(subject, sv.version)
                return sv.version
            self._not_referenced(state, sv)
            self.store.write([(schema_key(subject, sv.version), replace(sv, deleted=True))])
            return sv.version

    @staticmethod
    def _not_referenced(state: RegistryState, sv: SchemaValue) -> None:
        if state.referenced_by(sv.subject, sv.version):
            raise errors.reference_exists(
                f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,"
                f"subject={sv.subject},version={sv.version}}}.")

    # ------------------------------------------------------------------ by id
    def schema_by_id(self, schema_id: int, fmt: str | None) -> dict[str, Any]:
        state = self.fresh()
        stored = state.by_id.get(schema_id)
        if stored is None:
            raise errors.schema_not_found(schema_id)
        text = stored.schema
        if stored.schema_type == PROTOBUF and (fmt or "").lower() == "serialized":
            from .protobuf_schema import serialized

            parsed = self._parse(state, PROTOBUF, text, stored.references)
            text = serialized(parsed.parsed)
        out: dict[str, Any] = {}
        if stored.schema_type != AVRO:
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = [r.to_json() for r in stored.references]
        out["schema"] = text
        return out

    def id_versions(self, schema_id: int, deleted: bool) -> list[dict[str, Any]]:
        state = self.fresh()
        if schema_id not in state.by_id:
            raise errors.schema_not_found(schema_id)
        return [{"subject": s, "version": sv.version} for s in sorted(state.subjects)
                for sv in state.versions(s, deleted) if sv.id == schema_id]

    def id_subjects(self, schema_id: int, deleted: bool) -> list[str]:
        return sorted({v["subject"] for v in self.id_versions(schema_id, deleted)})

    # ------------------------------------------------------------ config and mode
    def get_config(self, subject: str | None, default_to_global: bool) -> dict[str, Any]:
        state = self.fresh()
        if subject is not None and subject not in state.config and not default_to_global:
            raise errors.subject_compatibility_not_configured(subject)
        return {"compatibilityLevel": state.compatibility(subject)}

    def set_config(self, subject: str | None, body: Any) -> dict[str, Any]:
        level = body.get("compatibility", body.get("compatibilityLevel")) \
            if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in errors.COMPATIBILITY_LEVELS:
            raise errors.invalid_compatibility_level()
        with self.store.lock:
            self._writable(self.fresh(), subject)
            self.store.write([(config_key(subject), {"compatibilityLevel": level.upper()})])
        return {"compatibility": level.upper()}

    def delete_config(self, subject: str | None) -> dict[str, Any]:
        with self.store.lock:
            state = self.fresh()
            if subject is not None and subject not in state.config:
                raise errors.subject_compatibility_not_configured(subject)
            before = state.config.get(subject, DEFAULT_COMPATIBILITY)
            self.store.write([(config_key(subject), None)])
        return {"compatibilityLevel": before}

    def get_mode(self, subject: str | None, default_to_global: bool) -> dict[str, Any]:
        state = self.fresh()
        if subject is not None and subject not in state.mode and not default_to_global:
            raise errors.subject_mode_not_configured(subject)
        return {"mode": state.mode_of(subject)}

    def set_mode(self, subject: str | None, body: Any, force: bool) -> dict[str, Any]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in errors.MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        with self.store.lock:
            state = self.fresh()
            if mode == "IMPORT" and not force:
                has = state.versions(subject) if subject else state.subject_names()
                if has:
                    raise errors.not_permitted("Cannot import since found existing subjects")
            self.store.write([(mode_key(subject), {"mode": mode})])
        return {"mode": mode}

    def delete_mode(self, subject: str) -> dict[str, Any]:
        with self.store.lock:
            state = self.fresh()
            if subject not in state.mode:
                raise errors.subject_mode_not_configured(subject)
            before = state.mode.get(subject, DEFAULT_MODE)
            self.store.write([(mode_key(subject), None)])
        return {"mode": before}

    # -------------------------------------------------------------- compatibility
    def test_compatibility(self, subject: str, version: str | None, body: Any,
                           verbose: bool) -> dict[str, Any]:
        schema_type, text, refs = self._request_schema(body)
        state = self.fresh()
        parsed = self._parse(state, schema_type, text, refs)
        if version is None:
            against = state.versions(subject)
        else:
            against = [self._version(state, subject, version, deleted=False)]
        level = state.compatibility(subject)
        if version is not None:
            level = level.removesuffix("_TRANSITIVE")
        problems = check_level(level, parsed, [self._parse_stored(state, sv)
                                               for sv in against])
        out: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            out["messages"] = problems
        return out
