"""``<column>.format=json``: Confluent-framed JSON Schema payloads into a typed column.

The reader schema gives the Spark type; each document (the payload after the id) is parsed
with ``json`` and its values converted to that type: JSON Schema's open content model is
the evolution rule (the registry's JSON compatibility keeps a reader's properties readable
from older documents), so a reader property a document lacks is null and a property the
reader does not know is dropped. A value of the wrong JSON type fails the task, naming the
property. The writer's id must be a JSON schema of the root; documents are not validated
against it (Confluent's deserializer validates only when asked; validate on the writing
side).

JSON Schema to Spark: ``object`` with ``properties`` as struct (in the properties' order);
``object`` without properties and with an ``additionalProperties`` schema as
map<string, T>; ``array`` with an ``items`` schema as array; ``string`` as string
(``format`` is not interpreted); ``integer`` as long; ``number`` as double; ``boolean`` as
boolean; a type list with ``null`` as the other type; local ``$ref``s (``#/definitions/..``,
``#/$defs/..``) followed. Anything else (no ``type``, several types, ``anyOf``/``oneOf``,
recursion, references to other subjects) is a string column holding the JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType
    from txnlog.coordinator.schema_registry.catalog import SchemaCatalog

_SIMPLE = {"string": "StringType", "integer": "LongType", "number": "DoubleType",
           "boolean": "BooleanType"}


def _resolve(node: Any, root: Any, seen: frozenset[str]) -> tuple[Any, frozenset[str]] | None:
    """Follow local ``$ref``s; None for a reference that leaves the document or loops."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#") or ref in seen:
            return None
        seen = seen | {ref}
        target = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return None
        node = target
    return node, seen


def _kind(node: Any) -> str | None:
    """The one JSON type ``node`` describes (null dropped from a list), or None."""
    if not isinstance(node, dict):
        return None
    t = node.get("type")
    if t is None:
        return "object" if "properties" in node else None
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        return rest[0] if len(rest) == 1 and isinstance(rest[0], str) else None
    return t if isinstance(t, str) else None


def spark_type(schema: Any, root: Any = None, seen: frozenset[str] = frozenset()) -> DataType:
    from pyspark.sql import types as T

    root = schema if root is None else root
    got = _resolve(schema, root, seen)
    if got is None:
        return T.StringType()
    node, seen = got
    kind = _kind(node)
    if kind in _SIMPLE and not any(k in node for k in ("anyOf", "oneOf", "allOf")):
        return getattr(T, _SIMPLE[kind])()
    if kind == "object" and not any(k in node for k in ("anyOf", "oneOf")):
        props = node.get("properties")
        if isinstance(props, dict) and props:
            return T.StructType([T.StructField(str(n), spark_type(p, root, seen))
                                 for n, p in props.items()])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return T.MapType(T.StringType(), spark_type(extra, root, seen))
        return T.StringType()
    if kind == "array" and isinstance(node.get("items"), dict):
        return T.ArrayType(spark_type(node["items"], root, seen))
    return T.StringType()


# ------------------------------------------------------------------ documents into Python


class _Mismatch(ValueError):
    pass


def converter(t: DataType, where: str = "") -> Callable[[Any], Any]:
    """A function turning a parsed JSON value into what a column of Spark type ``t`` takes,
    raising with the property's path when the JSON type does not fit."""
    from pyspark.sql import types as T

    def wrong(v: Any, what: str) -> _Mismatch:
        return _Mismatch(f"{where or 'the document'} is {json.dumps(v)[:80]}, not {what}")

    if isinstance(t, T.StructType):
        fields = [(f.name, converter(f.dataType, f"{where}.{f.name}" if where else f.name))
                  for f in t.fields]

        def struct(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise wrong(v, "an object")
            return {name: conv(v.get(name)) for name, conv in fields}
        return struct
    if isinstance(t, T.MapType):
        vconv = converter(t.valueType, f"{where}.*")

        def mapping(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise wrong(v, "an object")
            return [(k, vconv(x)) for k, x in v.items()]
        return mapping
    if isinstance(t, T.ArrayType):
        iconv = converter(t.elementType, f"{where}[]")

        def array(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise wrong(v, "an array")
            return [iconv(x) for x in v]
        return array
    if isinstance(t, T.LongType):
        def integer(v: Any) -> Any:
            if v is None or (isinstance(v, int) and not isinstance(v, bool)):
                return v
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise wrong(v, "an integer")
        return integer
    if isinstance(t, T.DoubleType):
        def number(v: Any) -> Any:
            if v is None or (isinstance(v, int | float) and not isinstance(v, bool)):
                return v
            raise wrong(v, "a number")
        return number
    if isinstance(t, T.BooleanType):
        def boolean(v: Any) -> Any:
            if v is None or isinstance(v, bool):
                return v
            raise wrong(v, "a boolean")
        return boolean

    def text(v: Any) -> Any:  # string, or JSON text for what has no narrower column type
        return v if v is None or isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return text


class JsonRecords:
    """JSON payloads converted to the reader schema's column type (see the docstring)."""

    def __init__(self, catalog: SchemaCatalog, decoding: Any) -> None:
        """``decoding``: the column's ``value_decoding.ValueDecoding`` (not imported: that
        module imports this one)."""
        from pyspark.sql.types import StructType

        self.catalog = catalog
        self.decoding = decoding
        parsed = catalog.parsed(decoding.reader_id).parsed
        value_type = decoding.value_type()
        # a non-object schema is wrapped into a one-field struct named after the column
        self.wrapped = not isinstance(spark_type(parsed), StructType)
        self.convert = converter(value_type.fields[0].dataType if self.wrapped
                                 else value_type)
        self._known: set[int] = set()

    def __call__(self, sid: int, v: bytes) -> Any:
        if sid not in self._known:
            stored = self.catalog.stored(sid)
            if stored.schema_type != "JSON":
                raise ValueError(f"schema {sid} is {stored.schema_type}, not JSON")
            self._known.add(sid)
        doc = json.loads(v[5:])
        out = self.convert(doc)
        return {self.decoding.column: out} if self.wrapped else out
