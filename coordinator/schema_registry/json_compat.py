"""JSON Schema compatibility: does the reader schema accept every document the writer schema
accepts (Confluent's definition: BACKWARD means the new schema reads what the old one
wrote), checked keyword by keyword for the cases schemas use in practice.

Covered, with Confluent's names for the differences: ``type`` (narrowed or changed;
integer reads as number), ``enum``/``const`` narrowed, string ``maxLength``/``minLength``/
``pattern``, number ``maximum``/``minimum``/``exclusive*``/``multipleOf``, arrays
(``items``, ``minItems``/``maxItems``, ``uniqueItems``), objects under open and closed
content models (``additionalProperties`` true, false or a schema: a property removed from a
closed model, added to an open one, or not covered by a partially open one; ``required``
added), ``anyOf``/``oneOf`` (each writer branch read by the reader; a writer non-union
read by some reader branch), ``allOf`` on the reader (every part), and local ``$ref``s
(``#/definitions/...``, ``#/$defs/...``, recursive ones too) and references to other
subjects' schemas by name. Not covered: ``patternProperties``, ``dependencies``,
``if/then/else``, ``not`` (a schema using them is compared on the keywords above only).
"""

from __future__ import annotations

from typing import Any

_NUMERIC_MAX = ("maximum", "exclusiveMaximum")
_NUMERIC_MIN = ("minimum", "exclusiveMinimum")


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _pointer(doc: Any, pointer: str) -> Any:
    for part in [p for p in pointer.lstrip("/").split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


class _Side:
    """One schema and the documents its ``$ref``s point into."""

    def __init__(self, root: Any, refs: dict[str, Any]) -> None:
        self.root, self.refs = root, refs

    def resolve(self, s: Any) -> Any:
        seen = 0
        while isinstance(s, dict) and "$ref" in s and seen < 64:
            ref = s["$ref"]
            base, _, frag = ref.partition("#")
            doc = self.refs.get(base, self.root) if base else self.root
            s = _pointer(doc, frag)
            seen += 1
        return s


class _Checker:
    def __init__(self, reader: _Side, writer: _Side) -> None:
        self.r, self.w = reader, writer
        self.problems: list[str] = []
        self._assumed: set[tuple[int, int]] = set()

    def fail(self, kind: str, path: str) -> bool:
        self.problems.append(f"{{type:{kind}, location:#{path}}}")
        return False

    def quiet(self, r: Any, w: Any) -> bool:
        saved = len(self.problems)
        ok = self.check(r, w, "")
        del self.problems[saved:]
        return ok

    def check(self, r: Any, w: Any, path: str) -> bool:
        r, w = self.r.resolve(r), self.w.resolve(w)
        if w is False or r is True or r == {}:
            return True
        if r is False:
            return self.fail("SCHEMA_NARROWED", path)
        if w is True:
            w = {}
        pair = (id(r), id(w))
        if pair in self._assumed:
            return True
        self._assumed.add(pair)
        for key in ("anyOf", "oneOf"):
            if key in w:
                ok = True
                for i, branch in enumerate(w[key]):
                    merged = {**{k: v for k, v in w.items() if k != key}, **branch} \
                        if isinstance(branch, dict) else branch
                    if not self.check(r, merged, f"{path}/{key}/{i}"):
                        ok = False
                return ok
        for key in ("anyOf", "oneOf"):
            if key in r:
                if any(self.quiet(b, w) for b in r[key]):
                    return True
                return self.fail("COMBINED_TYPE_SUBSCHEMAS_CHANGED", f"{path}/{key}")
        if "allOf" in r:
            return all([self.check(part, w, f"{path}/allOf/{i}")
                        for i, part in enumerate(r["allOf"])])
        return self._keywords(r, w, path)

    def _keywords(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        ok = True
        rt, wt = _types(r), _types(w)
        if rt is not None:
            if wt is None:
                ok = self.fail("TYPE_NARROWED", f"{path}/type")
            else:
                lost = {t for t in wt if t not in rt and not (t == "integer" and "number" in rt)}
                if lost:
                    related = wt & rt or ("number" in wt and "integer" in rt)
                    ok = self.fail("TYPE_NARROWED" if related else "TYPE_CHANGED",
                                   f"{path}/type")
        if "enum" in r and (("enum" not in w and "const" not in w)
                            or any(v not in r["enum"] for v in w.get("enum", [w.get("const")]))):
            ok = self.fail("ENUM_ARRAY_NARROWED", f"{path}/enum")
        if "const" in r and w.get("const", object()) != r["const"] \
                and w.get("enum") != [r["const"]]:
            ok = self.fail("CONST_CHANGED", f"{path}/const")
        ok = self._bounds(r, w, path) and ok
        if rt is None or "object" in rt:
            ok = self._object(r, w, path) and ok
        if rt is None or "array" in rt:
            ok = self._array(r, w, path) and ok
        return ok

    def _bounds(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        ok = True
        for key, kind in (("maxLength", "MAX_LENGTH"), ("maxItems", "MAX_ITEMS"),
                          ("maxProperties", "MAX_PROPERTIES")):
            if key in r and (key not in w or w[key] > r[key]):
                ok = self.fail(f"{kind}_{'DECREASED' if key in w else 'ADDED'}",
                               f"{path}/{key}")
        for key, kind in (("minLength", "MIN_LENGTH"), ("minItems", "MIN_ITEMS"),
                          ("minProperties", "MIN_PROPERTIES")):
            if r.get(key, 0) > w.get(key, 0):
                ok = self.fail(f"{kind}_{'INCREASED' if key in w else 'ADDED'}",
                               f"{path}/{key}")
        for key in _NUMERIC_MAX:
            if key in r and (key not in w or w[key] > r[key]):
                ok = self.fail(f"{key.upper()}_{'DECREASED' if key in w else 'ADDED'}",
                               f"{path}/{key}")
        for key in _NUMERIC_MIN:
            if key in r and (key not in w or w[key] < r[key]):
                ok = self.fail(f"{key.upper()}_{'INCREASED' if key in w else 'ADDED'}",
                               f"{path}/{key}")
        if "multipleOf" in r and ("multipleOf" not in w or
                                  (w["multipleOf"] / r["multipleOf"]) % 1 != 0):
            ok = self.fail("MULTIPLE_OF_CHANGED", f"{path}/multipleOf")
        if "pattern" in r and w.get("pattern") != r["pattern"]:
            ok = self.fail("PATTERN_CHANGED" if "pattern" in w else "PATTERN_ADDED",
                           f"{path}/pattern")
        if r.get("uniqueItems") and not w.get("uniqueItems"):
            ok = self.fail("UNIQUE_ITEMS_ADDED", f"{path}/uniqueItems")
        return ok

    def _object(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        ok = True
        r_add = r.get("additionalProperties", True)
        w_add = w.get("additionalProperties", True)
        r_props, w_props = r.get("properties") or {}, w.get("properties") or {}
        for name in sorted(set(r_props) | set(w_props)):
            at = f"{path}/properties/{name}"
            if name in r_props and name in w_props:
                ok = self.check(r_props[name], w_props[name], at) and ok
            elif name in w_props:  # removed in the reader
                if r_add is False:
                    ok = self.fail("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
                elif isinstance(r_add, dict) and not self.quiet(r_add, w_props[name]):
                    ok = self.fail(
                        "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
            else:  # added in the reader
                if w_add is False:
                    continue
                if isinstance(w_add, dict):
                    if not self.quiet(r_props[name], w_add):
                        ok = self.fail(
                            "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
                elif self.r.resolve(r_props[name]) not in ({}, True):
                    ok = self.fail("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at)
        if r_add is False and w_add is not False:
            ok = self.fail("ADDITIONAL_PROPERTIES_REMOVED", f"{path}/additionalProperties")
        elif isinstance(r_add, dict) and w_add is not False and not self.check(
                r_add, w_add if isinstance(w_add, dict) else {}, f"{path}/additionalProperties"):
            ok = self.fail("ADDITIONAL_PROPERTIES_NARROWED", f"{path}/additionalProperties")
        added = sorted(set(r.get("required") or ()) - set(w.get("required") or ()))
        for name in added:
            ok = self.fail("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}")
        return ok

    def _array(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        ri, wi = r.get("items"), w.get("items")
        if ri is None or isinstance(ri, list) or isinstance(wi, list):
            return True
        return self.check(ri, {} if wi is None else wi, f"{path}/items")


def can_read(reader: Any, writer: Any, reader_refs: dict[str, Any] | None = None,
             writer_refs: dict[str, Any] | None = None) -> list[str]:
    """Why ``reader`` rejects some document ``writer`` accepts (empty: it accepts all)."""
    checker = _Checker(_Side(reader, reader_refs or {}), _Side(writer, writer_refs or {}))
    checker.check(reader, writer, "")
    return checker.problems
