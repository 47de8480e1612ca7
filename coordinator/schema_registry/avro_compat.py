"""Avro compatibility: can a reader schema read what a writer schema wrote, by the Avro
specification's schema resolution rules (the ones Avro's Java ``SchemaCompatibility`` and
Confluent's registry apply).

Schemas come parsed by fastavro (full names resolved, named types collected in a dict), so
this module is only the resolution check: primitives equal or promoted (int -> long, float,
double; long -> float, double; float -> double; string <-> bytes), records by unqualified
name or a reader alias (each reader field found in the writer, by name or alias, and read
recursively, or else given a default; writer-only fields are skipped), enums (the writer's
symbols among the reader's, unless the reader has a default symbol), fixed (name and size),
arrays and maps by their items and values, unions (every writer branch readable; a writer
non-union readable by some reader branch). Logical types are ignored, as Avro does.
Recursive types are checked once per (reader, writer) pair of names.
"""

from __future__ import annotations

from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes",
                        "string"})
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"},
              "float": {"double"}, "string": {"bytes"}, "bytes": {"string"}}
Named = dict[str, Any]


def _resolve(schema: Any, named: Named) -> Any:
    """Named references (full names) to their definitions; ``{"type": "int", ...}`` to
    ``"int"``."""
    while True:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            schema = named[schema]
            continue
        if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
            return schema["type"]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            schema = schema["type"]
            continue
        return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    t = schema["type"]
    return "record" if t == "error" else t


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    if _short(reader["name"]) == _short(writer["name"]):
        return True
    aliases = reader.get("aliases") or []
    return writer["name"] in aliases or _short(writer["name"]) in {_short(a) for a in aliases}


class _Checker:
    def __init__(self, reader_named: Named, writer_named: Named) -> None:
        self.rn, self.wn = reader_named, writer_named
        self.problems: list[str] = []
        self._assumed: set[tuple[str, str]] = set()

    def fail(self, kind: str, path: str, detail: str) -> bool:
        self.problems.append(f"{{type:{kind}, location:{path or '/'}, message:{detail}}}")
        return False

    def check(self, reader: Any, writer: Any, path: str) -> bool:
        r, w = _resolve(reader, self.rn), _resolve(writer, self.wn)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":
            ok = True
            for i, branch in enumerate(w):
                if not self._readable(r, branch):
                    ok = self.fail("MISSING_UNION_BRANCH", f"{path}/{i}",
                                   f"reader union lacking writer type: "
                                   f"{_kind(_resolve(branch, self.wn)).upper()}")
            return ok
        if rk == "union":
            if any(self._quiet(b, w) for b in r):
                return True
            return self.fail("MISSING_UNION_BRANCH", path,
                             f"reader union lacking writer type: {wk.upper()}")
        if rk != wk:
            if wk in PROMOTIONS and rk in PROMOTIONS[wk]:
                return True
            return self.fail("TYPE_MISMATCH", path,
                             f"reader type: {rk.upper()} not compatible with writer type: "
                             f"{wk.upper()}")
        if rk in PRIMITIVES:
            return True
        if rk == "array":
            return self.check(r["items"], w["items"], f"{path}/items")
        if rk == "map":
            return self.check(r["values"], w["values"], f"{path}/values")
        if not _names_match(r, w):
            return self.fail("NAME_MISMATCH", f"{path}/name",
                             f"expected: {w['name']}")
        if rk == "fixed":
            if r["size"] != w["size"]:
                return self.fail("FIXED_SIZE_MISMATCH", f"{path}/size",
                                 f"expected: {w['size']}, found: {r['size']}")
            return True
        if rk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and r.get("default") is None:
                return self.fail("MISSING_ENUM_SYMBOLS", f"{path}/symbols",
                                 f"{sorted(missing)}")
            return True
        return self._record(r, w, path)

    def _record(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        pair = (r["name"], w["name"])
        if pair in self._assumed:  # a recursive type: assumed while being checked
            return True
        self._assumed.add(pair)
        writer_fields = {f["name"]: f for f in w["fields"]}
        ok = True
        for i, rf in enumerate(r["fields"]):
            wf = writer_fields.get(rf["name"])
            if wf is None:
                wf = next((writer_fields[a] for a in rf.get("aliases") or ()
                           if a in writer_fields), None)
            if wf is None:
                if "default" not in rf:
                    ok = self.fail("READER_FIELD_MISSING_DEFAULT_VALUE",
                                   f"{path}/fields/{i}", rf["name"])
                continue
            ok = self.check(rf["type"], wf["type"], f"{path}/fields/{i}/type") and ok
        return ok

    def _quiet(self, reader: Any, writer: Any) -> bool:
        """Whether ``reader`` reads ``writer``, recording no problem (one union branch)."""
        saved, assumed = len(self.problems), set(self._assumed)
        ok = self.check(reader, writer, "")
        del self.problems[saved:]
        if not ok:
            self._assumed = assumed
        return ok

    def _readable(self, reader: Any, writer_branch: Any) -> bool:
        if _kind(reader) == "union":
            return any(self._quiet(b, writer_branch) for b in reader)
        return self._quiet(reader, writer_branch)


def can_read(reader: Any, writer: Any, reader_named: Named, writer_named: Named) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    checker = _Checker(reader_named, writer_named)
    checker.check(reader, writer, "")
    return checker.problems
