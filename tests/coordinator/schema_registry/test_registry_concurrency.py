"""Several ``txnlog schema-registry`` processes serving one root register the same and
different schemas at once: each schema gets one id wherever it was registered, no id is
handed out twice, each subject holds each schema once with versions 1..n; after a SIGKILL of
one registry mid-load too, and after a registry died between claiming a version and
writing its record (the next registration writes it from the claim)."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict

import httpx
import pytest
from coordinator_proc import CoordinatorProc
from registry_proc import RegistryProc
from txnlog.coordinator.schema_registry.claims import Claims
from txnlog.coordinator.schema_registry.records import SchemaValue
from txnlog.log_format.storage import Storage

SUBJECTS = ["conc-a", "conc-b", "conc-c"]


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"S{i}",
                       "fields": [{"name": f"f{i}", "type": "long"}]})


def hammer(urls: list[str], jobs: list[tuple[str, int]], seed: int,
           results: dict[tuple[str, int], set[int]], failures: list[tuple[str, int]],
           lock: threading.Lock) -> None:
    rnd = random.Random(seed)
    order = jobs[:]
    rnd.shuffle(order)
    with httpx.Client(timeout=120) as http:
        for subject, i in order:
            url = urls[rnd.randrange(len(urls))]
            try:
                r = http.post(f"{url}/subjects/{subject}/versions", json={"schema": schema(i)})
                r.raise_for_status()
            except httpx.HTTPError:
                with lock:
                    failures.append((subject, i))
                continue
            with lock:
                results[(subject, i)].add(r.json()["id"])


def run_round(urls: list[str], jobs: list[tuple[str, int]], threads: int,
              kill: RegistryProc | None = None) -> tuple[dict, list]:
    results: dict[tuple[str, int], set[int]] = defaultdict(set)
    failures: list[tuple[str, int]] = []
    lock = threading.Lock()
    ts = [threading.Thread(target=hammer, args=(urls, jobs, seed, results, failures, lock))
          for seed in range(threads)]
    for t in ts:
        t.start()
    if kill is not None:
        while sum(len(v) for v in results.values()) < len(jobs) // 2:
            threading.Event().wait(0.02)
        kill.kill()
    for t in ts:
        t.join(300)
    return results, failures


def check(http: httpx.Client, results: dict[tuple[str, int], set[int]]) -> None:
    by_schema: dict[int, set[int]] = defaultdict(set)
    for (_, i), ids in results.items():
        by_schema[i] |= ids
    assert all(len(ids) == 1 for ids in by_schema.values()), by_schema
    ids = [next(iter(v)) for v in by_schema.values()]
    assert len(set(ids)) == len(ids), "two schemas share an id"
    for subject in SUBJECTS:
        versions = http.get(f"/subjects/{subject}/versions").json()
        assert versions == list(range(1, len(versions) + 1))
        held = [http.get(f"/subjects/{subject}/versions/{v}").json() for v in versions]
        names = [json.loads(h["schema"])["name"] for h in held]
        assert len(names) == len(set(names)), f"{subject} holds a schema twice: {names}"
        for h in held:
            i = int(json.loads(h["schema"])["name"][1:])
            assert by_schema[i] == {h["id"]}


@pytest.mark.parametrize("per_subject", [4, pytest.param(12, marks=pytest.mark.slow)])
def test_registries_agree_on_ids_and_versions(tmp_path, per_subject: int) -> None:
    """A killed registry's unfinished write holds the topic's stable end until the
    coordinator drops its reservation: this root's coordinator does that after 2 s."""
    root = tmp_path.as_uri()
    coord = CoordinatorProc(root, extra=["--reservation-timeout-ms", "2000"])
    regs: list[RegistryProc] = []
    try:
        coord.wait_healthy()
        regs = [RegistryProc(root, extra=["--claim-wait-s", "1"]) for _ in range(3)]
        for r in regs:
            r.wait_listening()
        _agree(root, regs, per_subject)
    finally:
        for r in regs:
            r.stop()
        coord.stop()


def _agree(root: str, regs: list[RegistryProc], n: int) -> None:
    urls = [r.url for r in regs]
    extra = regs[1:]  # one of them is killed
    http = httpx.Client(base_url=regs[0].url, timeout=60)
    for s in SUBJECTS:  # schemas of one subject register in any order
        http.put(f"/config/{s}", json={"compatibility": "NONE"})
    # round 1: every schema into every subject, through every registry at once
    jobs = [(s, i) for s in SUBJECTS for i in range(n)]
    results, failures = run_round(urls, jobs, threads=6)
    assert failures == []
    check(http, results)
    # round 2: new schemas while one registry is SIGKILLed mid-load
    jobs2 = [(s, i) for s in SUBJECTS for i in range(n, 2 * n)]
    results2, failures2 = run_round(urls, jobs2, threads=6, kill=extra[0])
    for subject, i in failures2:  # what the dead one never answered: ask a survivor
        r = http.post(f"/subjects/{subject}/versions", json={"schema": schema(i)})
        assert r.status_code == 200, r.text
        results2[(subject, i)].add(r.json()["id"])
    merged = {**results, **results2}
    check(http, merged)
    # a registry that died after claiming a version, before writing its record
    versions = http.get("/subjects/conc-a/versions").json()
    orphan_id = max(next(iter(v)) for v in merged.values()) + 1000
    Claims(Storage.for_url(root)).claim_version(SchemaValue(
        "conc-a", versions[-1] + 1, orphan_id, schema(99)))
    r = httpx.post(f"{extra[1].url}/subjects/conc-a/versions",
                   json={"schema": schema(100)}, timeout=120)
    assert r.status_code == 200, r.text
    after = http.get("/subjects/conc-a/versions").json()
    assert after == [*versions, versions[-1] + 1, versions[-1] + 2]
    orphan = http.get(f"/subjects/conc-a/versions/{versions[-1] + 1}").json()
    assert (orphan["id"], json.loads(orphan["schema"])["name"]) == (orphan_id, "S99")
