"""A read-only view of the root's ``_schemas`` for readers that decode values (the Spark
source, ``txnlog dump``): schemas by id and a subject's latest version, straight from
storage with txnlog's consumer; no registry process and no coordinator needed.

One catalog per root and process (``catalog_for``); an id it does not know yet makes it
read the topic's new records once more (a schema registered after the catalog was built).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from txnlog.log_format.consumer import Consumer
from txnlog.log_format.errors import TxnlogError

from .records import TOPIC, SchemaValue
from .schemas import ParsedSchema, ResolvedReference, SchemaParseError, parse
from .state import RegistryState, StoredSchema

_catalogs: dict[tuple[str, tuple[tuple[str, str], ...]], SchemaCatalog] = {}
_catalogs_lock = threading.Lock()


class SchemaNotFoundError(TxnlogError):
    """No schema with that id, or no live version of that subject, in the root."""


class SchemaCatalog:
    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = root
        self.state = RegistryState()
        self._lock = threading.Lock()
        self._parsed: dict[int, ParsedSchema] = {}
        try:
            self._consumer: Consumer | None = Consumer(
                root, assignment={(TOPIC, 0): 0}, storage_options=storage_options)
        except TxnlogError:  # no _schemas topic: no registry ever ran on this root
            self._consumer = None
        self.refresh()

    def refresh(self) -> None:
        if self._consumer is None:
            return
        with self._lock:
            while True:
                polled = self._consumer.poll_arrow(0.0)
                if not polled:
                    return
                for batches in polled.values():
                    for b in batches:
                        for k, v in zip(b.column("key").to_pylist(),
                                        b.column("value").to_pylist(), strict=True):
                            self.state.apply(k, v)

    def stored(self, schema_id: int) -> StoredSchema:
        found = self.state.by_id.get(schema_id)
        if found is None:
            self.refresh()
            found = self.state.by_id.get(schema_id)
        if found is None:
            raise SchemaNotFoundError(f"schema id {schema_id} is not in {self.root}'s "
                                      f"{TOPIC} topic")
        return found

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The schema parsed with its references (cached per id: ids never change)."""
        got = self._parsed.get(schema_id)
        if got is None:
            s = self.stored(schema_id)
            got = self._parsed[schema_id] = self._parse(s.schema_type, s.schema, s)
        return got

    def _parse(self, schema_type: str, text: str, s: StoredSchema) -> ParsedSchema:
        try:
            refs = [ResolvedReference(*r) for r in self.state.resolve_references(s.references)]
            return parse(schema_type, text, refs)
        except (KeyError, SchemaParseError) as exc:
            raise SchemaNotFoundError(f"a schema in {TOPIC} cannot be used: {exc}") from None

    def latest(self, subject: str) -> SchemaValue:
        self.refresh()
        versions = self.state.versions(subject)
        if not versions:
            raise SchemaNotFoundError(f"subject {subject!r} has no live version in "
                                      f"{self.root}'s {TOPIC} topic")
        return versions[-1]


def catalog_for(root: str, storage_options: Mapping[str, Any] | None = None) -> SchemaCatalog:
    key = (root, tuple(sorted((str(k), str(v)) for k, v in (storage_options or {}).items())))
    with _catalogs_lock:
        cat = _catalogs.get(key)
        if cat is None:
            cat = _catalogs[key] = SchemaCatalog(root, storage_options)
        return cat
