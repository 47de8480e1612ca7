"""Spark's Kafka lag metrics for txnlog streams, computed from the query's progress.

Spark's Kafka source puts ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``avgOffsetsBehindLatest`` in each batch's ``sources[i].metrics`` (``ReportsSourceMetrics``).
A Python data source cannot: PySpark 4.3's ``DataSourceStreamReader`` has no metrics hook,
and the JVM wrapper (``PythonMicroBatchStream``) implements neither ``ReportsSourceMetrics``
nor ``toString`` — which is also why the progress' source ``description`` is
``PythonMicroBatchStream...@<hash>``, different on every run, and nothing a source can change.

What a txnlog source does report is enough to compute the same numbers: ``endOffset`` (the
offsets the batch consumed up to) and ``latestOffset`` (every partition's LSO when the batch
was planned, ``reportLatestOffset``) — Kafka's formula is latest minus consumed, per
partition. So this module offers:

- ``offsets_behind_latest(end, latest)``: Spark's metric map from those two offsets;
- ``source_lag(progress)``: for every txnlog source of a progress (``query.lastProgress``,
  ``query.recentProgress[i]`` or a listener event's), a stable description
  (``txnlog[orders,payments]``) and the metrics;
- ``TxnlogLagListener``: a ``StreamingQueryListener`` to attach with
  ``spark.streams.addListener``; it keeps each query's latest lag and can call back (to
  log, or to push into a metrics system).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from ..stream_offsets import decode

log = logging.getLogger(__name__)

METRIC_NAMES = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")


def _offsets(raw: Any) -> dict[tuple[str, int], int] | None:
    """A txnlog offset (JSON text or dict) as partition offsets; None if it is not one."""
    if raw is None:
        return None
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(value, Mapping) or not all(
                isinstance(v, Mapping) for k, v in value.items() if not k.startswith("@")):
            return None
        return decode(value)
    except (ValueError, TypeError, AttributeError):
        return None


def offsets_behind_latest(end_offset: Any, latest_offset: Any) -> dict[str, str]:
    """Spark's KafkaMicroBatchStream.metrics: per partition ``latest - consumed``, reported
    as min, max and average (strings, as in the progress JSON); {} when either is absent."""
    consumed, latest = _offsets(end_offset), _offsets(latest_offset)
    if not consumed or not latest:
        return {}
    behind = [off - consumed[tp] for tp, off in latest.items() if tp in consumed]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)),
            "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def source_lag(progress: Any) -> list[dict[str, Any]]:
    """``[{"index", "description", "metrics"}]`` for each txnlog source of ``progress``.

    ``description`` is ``txnlog[<topics>]``, the same on every run (the progress' own is not);
    ``metrics`` is ``offsets_behind_latest`` of the source's end and latest offsets."""
    out = []
    for i, src in enumerate(_field(progress, "sources") or []):
        latest = _offsets(_field(src, "latestOffset"))
        if latest is None or "PythonMicroBatchStream" not in str(_field(src, "description")):
            continue
        end = _offsets(_field(src, "endOffset")) or {}
        topics = sorted({t for t, _ in latest} | {t for t, _ in end})
        out.append({"index": i, "description": f"txnlog[{','.join(topics)}]",
                    "metrics": offsets_behind_latest(_field(src, "endOffset"),
                                                     _field(src, "latestOffset"))})
    return out


class TxnlogLagListener(StreamingQueryListener):
    """Attach with ``spark.streams.addListener(TxnlogLagListener())``: after every progress
    event, ``lag[query_id]`` holds ``source_lag`` of that query's latest progress, and
    ``on_lag(query_id, name, rows)`` is called if given (e.g. to log or export it)."""

    def __init__(self, on_lag: Callable[[str, str | None, list[dict[str, Any]]], None]
                 | None = None) -> None:
        super().__init__()
        self.lag: dict[str, list[dict[str, Any]]] = {}
        self.on_lag = on_lag

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        rows = source_lag(progress)
        if not rows:
            return
        query_id = str(_field(progress, "id"))
        self.lag[query_id] = rows
        for row in rows:
            log.info("query %s %s: %s", query_id, row["description"], row["metrics"])
        if self.on_lag is not None:
            self.on_lag(query_id, _field(progress, "name"), rows)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
