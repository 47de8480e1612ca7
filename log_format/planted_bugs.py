"""Planted bugs for the chaos checker's self-test: each switch disables one safety mechanism.

(Named for what it holds: switches that plant bugs on purpose. The environment variable
keeps its older name, ``TXNLOG_UNSAFE``, which scripts and the chaos harness set.)

A checker that never fails proves nothing, so ``tests/chaos/test_planted.py`` turns off one
mechanism at a time and expects the matching anomaly. ``TXNLOG_UNSAFE`` is a comma-separated
list of names; unset (always, outside that test) every ``enabled`` call returns False.

Names and where they act:

- ``plain_put``: ``Storage.put_if_absent`` overwrites instead of failing
  (log_format/storage/local.py and s3.py)
- ``no_epoch_check``: the coordinator accepts an older producer epoch
  (coordinator/txn_metadata.py)
- ``abort_after_prepare``: the coordinator answers an abort of a transaction whose commit is
  already decided (PrepareCommit logged) with success (coordinator/transaction_coordinator.py)
- ``ignore_lso``: read_committed readers read up to the HW, not the LSO (log_format/reader.py)
- ``delta_omits_partition``: a stable delta head leaves out one partition its snapshot
  changed, showing that partition's value before (coordinator/stable_publisher.py)
- ``one_shot_early_drop``: the coordinator drops a one-shot transactional id as soon as its
  transaction is decided, without the retention period a retried EndTxn relies on
  (coordinator/transaction_coordinator.py)
- ``trust_merged_away``: readers ignore the manifest and read the small objects below the
  merged end, which may be deleted or a zombie's late write (log_format/reader.py)
- ``delete_before_grace``: the merger deletes merged-away objects at once, without the grace
  period readers in flight rely on (coordinator/log_merger.py)
- ``merge_above_lso``: the merger merges small objects above the published LSO, where an
  open transaction's reserved offsets may not be written yet: the gap is taken for resolved,
  the merged end passes it and the write that lands there later is never read
  (coordinator/log_merger.py)
- ``compact_ignore_aborted``: the log cleaner's offset map takes the keys of aborted
  transactions as if committed, so an aborted write supersedes the committed value of its
  key and compaction removes that value (log_format/log_cleaner.py)
- ``read_below_log_start``: readers read below the log start offset as if nothing were
  deleted, skipping silently to the first object left instead of OffsetOutOfRange
  (log_format/reader.py)
- ``retention_deletes_kept_segment``: retention deletes, with the segments it drops, the
  first segment the new manifest still names (coordinator/log_retention.py)
- ``gateway_fetch_ignores_lso``: the Kafka gateway serves a read_committed Fetch up to the
  HW instead of the LSO, so a Kafka client reads an open transaction's records (which
  may abort later) (coordinator/gateway/consume.py)
- ``shared_deleted_early``: the merger deletes a shared object as soon as one partition
  merged its run out of it, while other partitions' tails still name it
  (coordinator/maintenance/log_merger.py)
- ``trust_unconfirmed_runs``: readers take a partition's runs from the shared objects'
  footers (what writers wrote: a zombie's or a killed writer's unconfirmed runs too) instead
  of the published tail of confirmed runs (log_format/reader.py, with ``unconfirmed_runs``
  here)
- ``tail_aborts_ignored``: readers ignore the ``.txnindex`` entries a stable head publishes
  with a run of ABORT markers, so read_committed returns the aborted data of a transaction
  whose markers are not merged yet (log_format/reader.py)
"""

from __future__ import annotations

import os
from typing import Any

ENV = "TXNLOG_UNSAFE"
NAMES = frozenset({"plain_put", "no_epoch_check", "abort_after_prepare", "ignore_lso",
                   "one_shot_early_drop", "delta_omits_partition", "trust_merged_away",
                   "delete_before_grace", "merge_above_lso", "compact_ignore_aborted",
                   "read_below_log_start", "retention_deletes_kept_segment",
                   "gateway_fetch_ignores_lso", "shared_deleted_early",
                   "trust_unconfirmed_runs", "tail_aborts_ignored"})

_parsed: tuple[str, frozenset[str]] = ("", frozenset())


def _names(spec: str) -> frozenset[str]:
    names = frozenset(filter(None, (s.strip() for s in spec.split(","))))
    unknown = names - NAMES
    if unknown:
        raise ValueError(f"unknown {ENV} names {sorted(unknown)}; known: {sorted(NAMES)}")
    return names


def enabled(name: str) -> bool:
    """True if the planted bug `name` is switched on in this process's environment.

    Re-reads the environment (cheaply: one dict lookup when unset) so tests can flip it.
    """
    global _parsed
    spec = os.environ.get(ENV, "")
    if not spec:
        return False
    if spec != _parsed[0]:
        _parsed = (spec, _names(spec))
    return name in _parsed[1]


def unconfirmed_runs(storage: Any, shared_dir: str, topic: str, partition: int,
                     known: set[int]) -> list[tuple[int, int, str, int]]:
    """What ``trust_unconfirmed_runs`` makes a reader use: the runs of a partition taken
    from the shared objects' own footers (what writers wrote, a zombie's or a killed
    writer's too, merged or not) instead of the published tail (what the coordinator
    confirmed, above M), as ``(base, size, object path, position)``; the reader names the
    folder of shared objects (this module does not know where things are stored)."""
    from .segments.shared_object import SharedObjectError, read_footer
    out = []
    for obj in storage.list(shared_dir):
        path = f"{shared_dir}/{obj.name}"
        try:
            entries = read_footer(storage.get(path)).entries
        except (FileNotFoundError, SharedObjectError):
            continue
        out += [(e.base, e.size, path, e.position) for e in entries
                if (e.topic, e.partition) == (topic, partition) and e.base not in known]
    return out
