"""A merge's storage side (coordinator/merge_worker.py ``MergeStore``) and how many of its
requests are in flight (coordinator/merge_policy.py ``io_parallelism``): the segment is
built, held and only written once the merger asks (after logging the plan), a store that
did not build it refuses to write it (a worker that died in between: the merge is rebuilt
from its inputs), and a merge sends one request at a time while merging keeps up."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from txnlog.coordinator.maintenance.merge_policy import MAX_IO_PARALLEL, io_parallelism
from txnlog.coordinator.maintenance.merge_worker import Built, BuiltLost, MergeStore, bounded_map
from txnlog.coordinator.state.merge_state import SMALL
from txnlog.log_format import layout
from txnlog.log_format.codec.records import encode_batch, iter_batches
from txnlog.log_format.manifest import MergedObject
from txnlog.log_format.storage import Storage, StorageError


def small_objects(storage: Storage, n: int) -> list[tuple[int, int, int, bool]]:
    """n one-record small objects of ``t-0`` at offsets 0..n-1; their merge rows."""
    rows = []
    for off in range(n):
        data = encode_batch([(b"k", f"v{off}".encode(), [], None)], base_offset=off)
        assert storage.put_if_absent(layout.segment_path("t", 0, off), data)
        rows.append((SMALL, off, off + 1, False))
    return rows


def built_here(tmp_path: Path, pool: ThreadPoolExecutor, n: int, parallel: int
               ) -> tuple[Storage, list[tuple[int, int, int, bool]], MergeStore,
                          list[tuple[int, int]], Built, MergedObject]:
    """n small objects on a local root, built by a store ``parallel`` requests at a time:
    the storage, the rows, the store, the inputs' (size, CRC), what was built and the level
    1 run to write it as."""
    storage = Storage.for_url(tmp_path.as_uri())
    rows = small_objects(storage, n)
    store = MergeStore(storage, pool)
    metas, built = store.build("t", 0, rows, parallel)
    out = MergedObject(1, 0, n, built.size, False, built.max_timestamp)
    return storage, rows, store, metas, built, out


@pytest.fixture
def pool() -> ThreadPoolExecutor:
    with ThreadPoolExecutor(max_workers=MAX_IO_PARALLEL) as p:
        yield p


def test_a_built_segment_is_written_only_by_the_store_that_built_it(
        tmp_path: Path, pool: ThreadPoolExecutor) -> None:
    storage, rows, store, metas, built, out = built_here(tmp_path, pool, 6, 1)
    assert [size for size, _ in metas] == [storage.size(layout.segment_path("t", 0, r[1]))
                                           for r in rows]
    assert (built.base_offset, built.end_offset, built.has_txnindex) == (0, 6, False)
    # nothing is written by building: the plan is logged first
    assert not storage.exists(out.path("t", 0))

    # a new worker (the one that built it died) does not hold it: rebuilt, never guessed
    with pytest.raises(BuiltLost, match=r"not built here"):
        MergeStore(storage, pool).write_built("t", 0, out)
    # nor does a store asked for another output than it built
    other = MergedObject(1, 0, 5, built.size, False, built.max_timestamp)
    with pytest.raises(BuiltLost):
        store.write_built("t", 0, other)
    assert isinstance(BuiltLost("x"), StorageError)  # the merger retries it next tick

    refused, written = store.write_built("t", 0, out)
    assert refused == [] and written == sum(
        storage.size(out.path("t", 0, suffix)) for suffix in
        (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIMEINDEX_SUFFIX))
    merged = storage.get(out.path("t", 0))
    assert merged == b"".join(storage.get(layout.segment_path("t", 0, r[1])) for r in rows)
    assert [b.base_offset for b in iter_batches(merged)] == list(range(6))
    # written once: asked again (a retry after a lost answer), it is rebuilt first
    with pytest.raises(BuiltLost):
        store.write_built("t", 0, out)


def test_an_output_name_holding_other_bytes_is_refused_not_overwritten(
        tmp_path: Path, pool: ThreadPoolExecutor) -> None:
    storage, _, store, _, _, out = built_here(tmp_path, pool, 4, 4)
    assert storage.put_if_absent(out.path("t", 0, layout.INDEX_SUFFIX), b"someone else's")
    refused, _ = store.write_built("t", 0, out)
    assert refused == [out.path("t", 0, layout.INDEX_SUFFIX)]
    assert storage.get(out.path("t", 0, layout.INDEX_SUFFIX)) == b"someone else's"


def test_an_input_that_is_gone_fails_the_build(tmp_path: Path,
                                               pool: ThreadPoolExecutor) -> None:
    storage = Storage.for_url(tmp_path.as_uri())
    rows = small_objects(storage, 3)
    storage.delete(layout.segment_path("t", 0, 1))
    with pytest.raises(FileNotFoundError):
        MergeStore(storage, pool).build("t", 0, rows, 2)


@pytest.mark.parametrize("parallel", [1, 3, MAX_IO_PARALLEL])
def test_bounded_map_keeps_order_and_at_most_parallel_calls_in_flight(
        pool: ThreadPoolExecutor, parallel: int) -> None:
    lock = threading.Lock()
    flying = peak = 0

    def call(x: int) -> int:
        nonlocal flying, peak
        with lock:
            flying += 1
            peak = max(peak, flying)
        time.sleep(0.002)
        with lock:
            flying -= 1
        return x * x

    assert bounded_map(pool, call, list(range(40)), parallel) == [x * x for x in range(40)]
    assert peak <= parallel
    if parallel > 1:
        assert peak > 1  # it does go out in parallel


def test_a_merge_sends_one_request_at_a_time_while_merging_keeps_up() -> None:
    # a merge's worth of small objects waiting (the merger's trigger): one at a time
    assert io_parallelism(0, 32) == 1
    assert io_parallelism(32, 32) == 1
    assert io_parallelism(63, 32) == 1
    # behind: one more in flight per merge's worth waiting, up to a full round of GETs
    assert io_parallelism(64, 32) == 2
    assert io_parallelism(320, 32) == 10
    assert io_parallelism(100_000, 32) == MAX_IO_PARALLEL
    assert io_parallelism(10, 4) == 2
