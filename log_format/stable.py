"""The stable-offset snapshot (DESIGN.md 5.4): what readers trust.

One object, `_stable/<epoch>-<seq>.json`, moves every partition's HW and LSO at once, so a
reader sees a transaction in all partitions or in none. Names sort as (coordinator epoch,
seq): a fenced coordinator's late snapshot sorts below the current one, and readers take the
highest name and never go backwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import TxnlogError
from .layout import STABLE_DIR, parse_stable_name, stable_path
from .storage import Storage

DEFAULT_KEEP = 10


class StableSnapshotError(TxnlogError, ValueError):
    """A stable snapshot that cannot be parsed or is inconsistent (lso > hw)."""


@dataclass(frozen=True)
class StableSnapshot:
    coordinator_epoch: int
    seq: int
    partitions: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # "t-p": (hw, lso)
    written_ms: int = 0

    def __post_init__(self) -> None:
        for key, (hw, lso) in self.partitions.items():
            if not 0 <= lso <= hw:
                raise StableSnapshotError(
                    f"stable snapshot {self.key}: partition {key} has lso {lso} > hw {hw} "
                    "or a negative offset")

    @property
    def key(self) -> tuple[int, int]:
        """Sort key; equals the order of the object names."""
        return (self.coordinator_epoch, self.seq)

    @property
    def path(self) -> str:
        return stable_path(self.coordinator_epoch, self.seq)

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(hw, lso) of a partition; (0, 0) if nothing was ever resolved there."""
        return tuple(self.partitions.get(f"{topic}-{partition}", (0, 0)))  # type: ignore

    def hw(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition)[0]

    def lso(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition)[1]

    def to_json(self) -> bytes:
        return json.dumps({
            "coordinator_epoch": self.coordinator_epoch, "seq": self.seq,
            "written_ms": self.written_ms,
            "partitions": {k: {"hw": hw, "lso": lso}
                           for k, (hw, lso) in sorted(self.partitions.items())},
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str = "stable snapshot") -> StableSnapshot:
        try:
            obj: Any = json.loads(data)
            parts = {str(k): (int(v["hw"]), int(v["lso"]))
                     for k, v in obj["partitions"].items()}
            return cls(int(obj["coordinator_epoch"]), int(obj["seq"]), parts,
                       int(obj.get("written_ms", 0)))
        except StableSnapshotError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StableSnapshotError(f"{source}: not a valid stable snapshot: {exc}") from exc


def write_stable(storage: Storage, snapshot: StableSnapshot) -> bool:
    """Write the snapshot put-if-absent; False if its name already holds other bytes."""
    return storage.put_if_absent(snapshot.path, snapshot.to_json())


def make_snapshot(coordinator_epoch: int, seq: int,
                  partitions: Mapping[str, tuple[int, int]],
                  now_ms: int | None = None) -> StableSnapshot:
    return StableSnapshot(coordinator_epoch, seq, dict(partitions),
                          int(time.time() * 1000) if now_ms is None else now_ms)


def list_stable(storage: Storage) -> list[tuple[int, int]]:
    """(epoch, seq) of every snapshot object, ascending."""
    keys = [parse_stable_name(o.name) for o in storage.list(STABLE_DIR)]
    return sorted(k for k in keys if k is not None)


def read_latest_stable(storage: Storage,
                       not_below: StableSnapshot | None = None) -> StableSnapshot | None:
    """The snapshot with the highest name, or `not_below` if that one is newer.

    None when the root has no snapshot yet (nothing is readable). A snapshot pruned between
    the listing and the read makes it list again.
    """
    for _ in range(5):
        keys = list_stable(storage)
        if not keys:
            return not_below
        epoch, seq = keys[-1]
        if not_below is not None and (epoch, seq) <= not_below.key:
            return not_below
        path = stable_path(epoch, seq)
        try:
            data = storage.get(path)
        except FileNotFoundError:
            continue
        return StableSnapshot.from_json(data, f"{storage.url}/{path}")
    raise StableSnapshotError(
        f"stable snapshots under {storage.url}/{STABLE_DIR} kept vanishing while read")


def prune_stable(storage: Storage, keep: int = DEFAULT_KEEP) -> int:
    """Delete all but the newest `keep` snapshots; returns how many were deleted."""
    if keep < 1:
        raise ValueError("keep must be >= 1: readers need the newest snapshot")
    keys = list_stable(storage)
    old = keys[:-keep]
    for epoch, seq in old:
        storage.delete(stable_path(epoch, seq))
    return len(old)
