"""Filter pushdown on topic, partition, offset and timestamp (option ``pushFilters=true``).

Spark removes a pushed filter from its plan, so a filter accepted here must be applied
exactly: ``narrow`` prunes partitions and offset ranges before any task runs (the saving),
``apply`` then filters rows in every task (the guarantee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .planning import OffsetRange

COLUMNS = {"topic", "partition", "offset", "timestamp"}
_OPS = {
    "EqualTo": "eq", "GreaterThan": "gt", "GreaterThanOrEqual": "ge",
    "LessThan": "lt", "LessThanOrEqual": "le", "In": "in",
}
_COMPUTE = {"eq": pc.equal, "gt": pc.greater, "ge": pc.greater_equal,
            "lt": pc.less, "le": pc.less_equal}


@dataclass(frozen=True)
class RowFilter:
    column: str
    op: str  # eq gt ge lt le in
    value: Any  # for "in": a tuple


def _micros(value: Any) -> int:
    if isinstance(value, datetime):
        # Naive datetimes come from PySpark's local-time conversion: .timestamp() undoes it.
        return round(value.timestamp() * 1_000_000)
    return int(value)


def accept(filters: list) -> tuple[list[RowFilter], list]:
    """Split Spark's filters into the ones we apply exactly and the ones we leave to Spark."""
    mine, rest = [], []
    for f in filters:
        name = type(f).__name__
        attr = getattr(f, "attribute", None)
        col = attr[0] if isinstance(attr, tuple) and len(attr) == 1 else None
        if col not in COLUMNS:
            rest.append(f)
            continue
        if name == "IsNotNull":  # these columns are never null
            continue
        op = _OPS.get(name)
        if op is None or (col == "topic" and op not in ("eq", "in")):
            rest.append(f)
            continue
        value = tuple(f.value) if op == "in" else f.value
        if col == "timestamp":
            value = tuple(map(_micros, value)) if op == "in" else _micros(value)
        mine.append(RowFilter(col, op, value))
    return mine, rest


def _holds(op: str, left: Any, right: Any) -> bool:
    return {"eq": left == right, "gt": left > right, "ge": left >= right,
            "lt": left < right, "le": left <= right}[op] if op != "in" else left in right


def narrow(ranges: list[OffsetRange], filters: list[RowFilter]) -> list[OffsetRange]:
    """Drop ranges no row of which can pass, and tighten offset bounds."""
    out = []
    for r in ranges:
        keep = True
        start, end = r.start, r.end
        for f in filters:
            if f.column in ("topic", "partition"):
                keep &= _holds(f.op, r.topic if f.column == "topic" else r.partition, f.value)
            elif f.column == "offset":
                if f.op == "eq":
                    start, end = max(start, f.value), min(end, f.value + 1)
                elif f.op == "in":
                    if f.value:
                        start, end = max(start, min(f.value)), min(end, max(f.value) + 1)
                    else:
                        keep = False
                elif f.op in ("gt", "ge"):
                    start = max(start, f.value + (1 if f.op == "gt" else 0))
                else:
                    end = min(end, f.value + (0 if f.op == "lt" else 1))
        if keep and end > start:
            out.append(replace(r, start=start, end=end))
    return out


def timestamp_floor_ms(filters: list[RowFilter]) -> int | None:
    """The smallest record timestamp (ms) a row can have to pass the timestamp filters."""
    floor = None
    for f in filters:
        if f.column == "timestamp" and f.op in ("gt", "ge", "eq"):
            ms = math.floor(f.value / 1000) + 1 if f.op == "gt" else math.ceil(f.value / 1000)
            floor = ms if floor is None else max(floor, ms)
    return floor


def apply(batch: pa.RecordBatch, filters: list[RowFilter]) -> pa.RecordBatch:
    mask = None
    for f in filters:
        col = batch.column(batch.schema.get_field_index(f.column))
        if f.op == "in":
            value_set = pa.array(list(f.value), type=col.type)
            m = pc.is_in(col, value_set=value_set)
        else:
            m = _COMPUTE[f.op](col, pa.scalar(f.value, type=col.type))
        mask = m if mask is None else pc.and_(mask, m)
    return batch if mask is None else batch.filter(mask)
