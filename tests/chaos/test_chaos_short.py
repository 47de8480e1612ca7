"""The short chaos profile as pytest tests: one fault class per test, every anomaly fails it.

The default suite runs the classes that matter most in a few minutes; the rest are marked
slow. A Spark class costs a JVM start or more (its workload runs at least
``Profile.spark_duration`` seconds), so the Spark classes are slow tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .run import MERGEABLE, PROFILES, Profile, run_all

SHORT = Profile(producers=3, txns_per_producer=25, duration=10.0)
assert SHORT.duration <= PROFILES["short"].duration

DEFAULT_FILE = ["coordinator-kill", "coordinator-faultpoints", "zombie", "two-coordinators",
                "disk-full", "mixed"]
SLOW_FILE = ["none", "coordinator-pause", "client-kill"]
DEFAULT_S3 = ["s3-proxy", "s3-restart"]
SLOW_S3 = ["coordinator-kill", "s3-pause", "zombie", "mixed"]
SPARK = ["spark-worker-kill", "spark-driver-kill", "spark-driver-pause"]
# on Ceph RGW: the classes whose objects are deleted and names freed under the workload
RGW = ["zombie", "merge-worker", "two-coordinators"]


def _check(fault: str, backend: str, tmp_path: Path, acls: bool = False) -> None:
    (res,) = run_all([fault], [backend], SHORT, tmp_path, seed=7, log=print, acls=acls)
    print(res)
    assert res.error is None, res.error
    assert res.committed > 0
    assert not res.bugs, res.bugs  # also res.error: a TypeError is no fault's doing
    # An outcome stays unknown only when a fault cut both the EndTxn's answer and the abort
    # that follows it: each fault catches at most the transaction each producer has in
    # flight (it re-initializes, fencing that one, before its next). The faults: those the
    # nemesis injected and every coordinator that died and was replaced (a coordinator
    # armed with fault points kills itself, which the nemesis does not count); the first
    # coordinator stands for the end of the run (workers stopped, the final wait). Anything
    # above is the workload failing for a reason of its own, which unknowns would hide.
    producers = SHORT.producers + (1 if fault.startswith("spark-") else 0)  # + Spark's driver
    assert res.unknown <= producers * (res.faults_injected + res.coordinators), res
    assert not res.anomalies, (res.anomalies, res.examples, res.history)
    # merging and cleanup ran under the fault: reads went through manifests and merged
    # objects, and merged-away small objects were deleted. The short profile stops after
    # 10 s: on a machine too loaded to commit 20 transactions in that time (disk-full on
    # 2 cores at load 18 committed 3) there is nothing to merge, and that says nothing
    if res.committed >= MERGEABLE:
        assert res.merges > 0 and res.deleted > 0, res
    if fault.startswith("spark-"):
        assert res.spark_jobs.get("committed", 0) > 0, res.spark_jobs
        assert res.stream_records > 0
    if acls:  # the intruder was refused (with no fault: every time) and never read
        assert res.intruder_refused > 0, res
        if fault == "none":
            assert res.intruder_refused == res.intruder_attempts, res


@pytest.mark.parametrize("fault", [*DEFAULT_FILE,
                                   *(pytest.param(f, marks=pytest.mark.slow) for f in SLOW_FILE)])
def test_chaos_file(fault: str, tmp_path: Path) -> None:
    _check(fault, "file", tmp_path)


def test_chaos_file_acls(tmp_path: Path) -> None:
    """ACLs on (``--acls``): the producers as principals allowed exactly their
    transactional ids, an intruder that may write nothing, no anomaly (checker:
    ``unauthorized-visible``, ``unauthorized-accepted``). Other classes: ``-m slow``."""
    _check("none", "file", tmp_path, acls=True)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["coordinator-kill", "client-kill", "gateway-kill"])
def test_chaos_file_acls_faults(fault: str, tmp_path: Path) -> None:
    _check(fault, "file", tmp_path, acls=True)


@pytest.mark.parametrize("fault", [*DEFAULT_S3,
                                   *(pytest.param(f, marks=pytest.mark.slow) for f in SLOW_S3)])
def test_chaos_s3(fault: str, tmp_path: Path) -> None:
    _check(fault, "s3", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("fault", RGW)
def test_chaos_rgw(fault: str, tmp_path: Path) -> None:
    """The second S3 implementation (its own cluster, as the long runs use): deletes of
    merged-away objects, listings from the merged end and put-if-absent into freed names
    under the fault."""
    _check(fault, "rgw", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["file", "s3"])
@pytest.mark.parametrize("fault", SPARK)
def test_chaos_spark(fault: str, backend: str, tmp_path: Path) -> None:
    _check(fault, backend, tmp_path)


def test_scenario_classes_are_known() -> None:
    from .run import FILE_FAULTS, RGW_FAULTS, S3_FAULTS

    assert set(DEFAULT_FILE + SLOW_FILE + SPARK) <= set(FILE_FAULTS)
    assert set(DEFAULT_S3 + SLOW_S3 + SPARK) <= set(S3_FAULTS)
    assert set(RGW) <= set(RGW_FAULTS)
