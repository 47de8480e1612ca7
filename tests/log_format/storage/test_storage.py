"""Storage semantics on local files and on a real S3 server, incl. the put-if-absent race."""

from __future__ import annotations

import errno
import multiprocessing
import os
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from s3fs.errors import translate_boto_error
from txnlog.log_format.storage import (
    LocalStorage,
    ObjectInfo,
    RetryPolicy,
    S3Storage,
    Storage,
    StorageConfigError,
    StorageError,
    s3fs_kwargs,
)

# ---------------------------------------------------------------------------- semantics


def test_put_if_absent_semantics(every_root: str) -> None:
    st = Storage.for_url(every_root)
    assert st.put_if_absent("t-0/00000000000000000000.log", b"first") is True
    # same bytes again: our own retry -> success
    assert st.put_if_absent("t-0/00000000000000000000.log", b"first") is True
    # other bytes: lost race, never overwritten
    assert st.put_if_absent("t-0/00000000000000000000.log", b"second") is False
    assert st.put_if_absent("t-0/00000000000000000000.log", b"firsT") is False
    assert st.get("t-0/00000000000000000000.log") == b"first"


def test_empty_object_is_a_fence(every_root: str) -> None:
    st = Storage.for_url(every_root)
    assert st.put_if_absent("t-0/00000000000000000005.log", b"") is True
    assert st.put_if_absent("t-0/00000000000000000005.log", b"late zombie write") is False
    assert st.size("t-0/00000000000000000005.log") == 0
    assert st.get("t-0/00000000000000000005.log") == b""
    assert st.list("t-0") == [ObjectInfo("00000000000000000005.log", 0)]


def test_get_ranges_size_exists_delete(every_root: str) -> None:
    st = Storage.for_url(every_root)
    st.put("a/b/obj", b"0123456789")
    assert st.get("a/b/obj") == b"0123456789"
    assert st.get("a/b/obj", 2, 5) == b"234"
    assert st.get("a/b/obj", 7) == b"789"
    assert st.get("a/b/obj", 0, 1) == b"0"
    assert st.get("a/b/obj", 5, 50) == b"56789"
    assert st.get("a/b/obj", 4, 4) == b""
    assert st.size("a/b/obj") == 10
    assert st.exists("a/b/obj") and not st.exists("a/b/none") and not st.exists("a/b")
    with pytest.raises(FileNotFoundError):
        st.get("a/b/none")
    with pytest.raises(FileNotFoundError):
        st.get("a/b/none", 0, 4)
    with pytest.raises(FileNotFoundError):
        st.size("a/b/none")
    st.put("a/b/obj", b"new")  # plain put overwrites (registration files)
    assert st.get("a/b/obj") == b"new"
    st.delete("a/b/obj")
    st.delete("a/b/obj")  # idempotent
    assert not st.exists("a/b/obj")


def test_s3_get_of_a_whole_object_is_one_request(s3_root: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole-object GET is one GET: s3fs (max_concurrency > 1, its default) sent a HEAD
    before every whole-object read to split big objects into parallel ranges, which
    doubled the requests (and the round trips) of reading a manifest, a stable head, a log
    object. A range read was one GET already."""
    import s3fs

    st = Storage.for_url(s3_root)
    st.put("w/small", b"x" * 100)
    st.put("w/big", b"y" * (3 << 20))
    heads: list[str] = []
    info = s3fs.S3FileSystem._info

    async def counting_info(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        heads.append(path)
        return await info(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_info", counting_info)
    assert st.get("w/small") == b"x" * 100
    assert st.get("w/big") == b"y" * (3 << 20)
    assert st.get("w/big", 5, 10) == b"yyyyy"
    assert heads == []
    with pytest.raises(FileNotFoundError):
        st.get("w/none")


def test_list_sorted_files_only(every_root: str) -> None:
    st = Storage.for_url(every_root)
    names = ["00000000000000000010.log", "00000000000000000002.log",
             "00000000000000000002.txnindex", "00000000000000000000.log"]
    for i, name in enumerate(names):
        st.put_if_absent(f"orders-0/{name}", b"x" * i)
    st.put_if_absent("orders-0/sub/nested", b"n")
    listed = st.list("orders-0")
    assert listed == sorted(ObjectInfo(n, i) for i, n in enumerate(names))
    assert [o.name for o in listed] == sorted(names)
    assert st.list("orders-1") == []
    assert st.list("orders-0/") == listed
    assert "orders-0" in st.list_dirs("")
    assert st.list_dirs("orders-0") == ["sub"]


def test_listing_is_never_stale(every_root: str) -> None:
    st = Storage.for_url(every_root)
    assert st.list("p-0") == []
    st.put_if_absent("p-0/a", b"1")
    assert [o.name for o in st.list("p-0")] == ["a"]
    st.put_if_absent("p-0/b", b"2")
    assert [o.name for o in st.list("p-0")] == ["a", "b"]
    st.delete("p-0/a")
    assert [o.name for o in st.list("p-0")] == ["b"]
    # emptied: nothing (SeaweedFS lists the directory's own key "p-0/" under it)
    st.delete("p-0/b")
    assert st.list("p-0") == []
    assert st.list("p-0", start_after="") == []
    st.put_if_absent("p-1/x", b"3")
    st.delete_many(["p-1/x"])
    assert st.list("p-1") == []


def test_list_start_after_and_limit(every_root: str) -> None:
    """S3's ListObjectsV2 StartAfter/MaxKeys (how readers list from a partition's merged
    end): strictly after, names only directly under the directory, the first `limit`."""
    st = Storage.for_url(every_root)
    names = [f"{i:020d}.log" for i in (0, 3, 7, 12, 40)]
    for name in names:
        assert st.put_if_absent(f"p-0/{name}", name.encode())
    # a "directory" sorting among the names (on S3 a CommonPrefix, which counts toward
    # MaxKeys), and a sibling directory whose name extends this one's
    assert st.put_if_absent(f"p-0/{9:020d}.sub/x", b"x")
    assert st.put_if_absent(f"p-00/{1:020d}.log", b"y")
    assert st.put_if_absent("top", b"t")

    def listed(directory: str = "p-0", **kw: Any) -> list[str]:
        return [o.name for o in st.list(directory, **kw)]

    assert listed() == names
    assert listed(start_after=None, limit=None) == names
    assert listed(start_after=names[1]) == names[2:]  # strictly after
    assert listed(start_after=names[1][:-4]) == names[1:]  # a prefix sorts before the name
    assert listed(start_after=f"{5:020d}.log") == names[2:]  # not a name that exists
    assert listed(start_after="") == names
    assert listed(start_after=names[-1]) == []
    assert listed(start_after="~") == []
    assert listed(limit=2) == names[:2]
    assert listed(limit=len(names)) == names
    assert listed(limit=100) == names
    assert listed(limit=0) == []
    assert listed(start_after=names[0], limit=2) == names[1:3]
    # 7, then the directory (not an object: the listing goes on), then 12
    assert listed(start_after=names[1], limit=2) == names[2:4]
    assert listed(start_after=names[2], limit=1) == names[3:4]
    assert listed("p-0/", start_after=names[2], limit=1) == names[3:4]
    assert st.list("p-0", start_after=names[3]) == [ObjectInfo(names[4], len(names[4]))]
    assert listed("p-00", start_after="") == [f"{1:020d}.log"]
    assert listed("", start_after="a") == ["top"]
    assert listed("", limit=1) == ["top"]
    assert listed("nothing-here", start_after="a", limit=3) == []
    # deletes show at once
    st.delete(f"p-0/{names[3]}")
    assert listed(start_after=names[1], limit=2) == [names[2], names[4]]


def test_delete_many(every_root: str) -> None:
    """Bulk deletes (S3 DeleteObjects): missing and repeated names are fine, nothing else is
    touched, and a freed name can be taken again with put-if-absent."""
    st = Storage.for_url(every_root)
    names = [f"d-0/{i:020d}.log" for i in range(7)]
    for name in names:
        assert st.put_if_absent(name, name.encode())
    assert st.put_if_absent("d-0/sub/keep", b"k")
    assert st.put_if_absent("d-1/00000000000000000001.log", b"other")
    st.delete_many([names[1], names[3], "d-0/missing", names[5], names[3]])
    assert [o.name for o in st.list("d-0")] == [names[i][4:] for i in (0, 2, 4, 6)]
    st.delete_many([])
    st.delete_many(names)
    assert st.list("d-0") == []
    assert st.list_dirs("d-0") == ["sub"]
    assert st.get("d-0/sub/keep") == b"k"
    assert st.get("d-1/00000000000000000001.log") == b"other"
    assert not st.exists(names[0])
    assert st.put_if_absent(names[0], b"again") is True
    assert st.put_if_absent(names[0], b"zombie") is False
    assert st.get(names[0]) == b"again"


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/../b", "a//b", "./a", ""])
def test_paths_cannot_escape_the_root(file_root: str, bad: str) -> None:
    st = Storage.for_url(file_root)
    with pytest.raises(StorageConfigError):
        st.put_if_absent(bad, b"x")


def test_for_url_caches_per_root_and_options(file_root: str, tmp_path: Any) -> None:
    a = Storage.for_url(file_root, {"unrelated": "x"})
    assert Storage.for_url(file_root) is a
    assert Storage.for_url(file_root + "/") is a
    assert isinstance(a, LocalStorage)
    assert Storage.for_url(str(tmp_path / "plain")).url == "file://" + str(tmp_path / "plain")
    with pytest.raises(StorageConfigError, match="unsupported storage root"):
        Storage.for_url("gopher://x/y")
    with pytest.raises(StorageConfigError, match="no storage options"):
        Storage.for_url(file_root, {"storage.endpoint_url": "http://x"})


def test_local_put_if_absent_leaves_no_temp_files(file_root: str) -> None:
    st = Storage.for_url(file_root)
    st.put_if_absent("d/x", b"1")
    st.put_if_absent("d/x", b"2")
    st.put("d/y", b"3")
    base = file_root[len("file://"):]
    assert sorted(os.listdir(os.path.join(base, "d"))) == ["x", "y"]


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 1, (3 << 20) + 4095, 5 << 20])
@pytest.mark.parametrize("aligned", [True, False])
def test_local_large_objects_direct_io(file_root: str, size: int, aligned: bool,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects from aligned memory go out with O_DIRECT (but the last partial block): the
    same bytes and put-if-absent answers as buffered writes; a file system refusing direct
    I/O (EINVAL at open or at the write) gets them buffered."""
    import numpy as np
    from txnlog.log_format.storage import local as storage_mod

    rng = np.random.default_rng(size)
    buf = storage_mod.aligned_empty(size + 1)
    data = buf[:size] if aligned else buf[1:]
    data[:] = rng.integers(0, 256, size, dtype=np.uint8)
    expected = data.tobytes()
    assert bool(storage_mod._direct_head(memoryview(data))) == aligned
    st = Storage.for_url(file_root)
    assert st.put_if_absent("d/a.log", memoryview(data)) is True
    assert st.get("d/a.log") == expected
    assert st.put_if_absent("d/a.log", memoryview(data)) is True
    other = data.copy()
    other[size // 2] ^= 1
    assert st.put_if_absent("d/a.log", memoryview(other)) is False
    assert st.get("d/a.log") == expected

    real_write = os.write

    def refuse_direct(fd: int, b: Any) -> int:
        if os.O_DIRECT & storage_mod.fcntl.fcntl(fd, storage_mod.fcntl.F_GETFL):
            raise OSError(errno.EINVAL, "no direct I/O here")
        return real_write(fd, b)

    monkeypatch.setattr(storage_mod.os, "write", refuse_direct)
    assert st.put_if_absent("d/b.log", memoryview(data)) is True
    assert st.get("d/b.log") == expected
    monkeypatch.undo()

    real_open = os.open

    def refuse_direct_open(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:  # as Linux does: the file is created, then refused
            os.close(real_open(path, flags & ~os.O_DIRECT, mode))
            raise OSError(errno.EINVAL, "no direct I/O here")
        return real_open(path, flags, mode)

    monkeypatch.setattr(storage_mod.os, "open", refuse_direct_open)
    assert st.put_if_absent("d/c.log", memoryview(data)) is True
    assert st.get("d/c.log") == expected
    base = file_root[len("file://"):]
    assert sorted(os.listdir(os.path.join(base, "d"))) == ["a.log", "b.log", "c.log"]


def test_s3_options_mapping() -> None:
    kw = s3fs_kwargs({"endpoint_url": "http://127.0.0.1:1", "region": "eu-west-1",
                      "key": "k", "secret": "s", "anon": "false", "path_style": "true",
                      "config_kwargs": '{"connect_timeout": 3}', "max_concurrency": "4"})
    assert kw == {"key": "k", "secret": "s", "anon": False, "max_concurrency": 4,
                  "client_kwargs": {"endpoint_url": "http://127.0.0.1:1",
                                    "region_name": "eu-west-1"},
                  "config_kwargs": {"connect_timeout": 3, "s3": {"addressing_style": "path"}}}
    with pytest.raises(StorageConfigError, match="anon"):
        s3fs_kwargs({"anon": "maybe"})


def test_s3_explicit_options(s3_impl_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`storage.*` options alone reach the server (no AWS environment)."""
    for key in s3_impl_server.env():
        monkeypatch.delenv(key, raising=False)
    st = Storage.for_url("s3://txnlog-tests/opts", s3_impl_server.storage_options())
    assert st.put_if_absent("x/y", b"hello") is True
    assert Storage.for_url("s3://txnlog-tests/opts", s3_impl_server.storage_options()) is st
    assert st.get("x/y") == b"hello"


def test_arrow_s3_options_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge worker's Arrow reader talks to the server s3fs talks to, or is not used."""
    from txnlog.log_format.storage.s3_arrow import arrow_s3_kwargs

    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    assert arrow_s3_kwargs({
        "storage.endpoint_url": "http://127.0.0.1:1", "storage.region": "eu-west-1",
        "storage.key": "k", "storage.secret": "s", "storage.anon": "false",
        "storage.path_style": "true", "storage.max_attempts": "3", "other": "x",
        "storage.config_kwargs": {"connect_timeout": 3, "read_timeout": 7}}) == {
        "endpoint_override": "127.0.0.1:1", "scheme": "http", "region": "eu-west-1",
        "access_key": "k", "secret_key": "s", "anonymous": False,
        "force_virtual_addressing": False, "connect_timeout": 3.0, "request_timeout": 7.0}
    assert arrow_s3_kwargs({"storage.client_kwargs": '{"endpoint_url": '
                            '"https://s3.example:9000", "region_name": "r"}'}) == {
        "endpoint_override": "s3.example:9000", "scheme": "https", "region": "r"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    assert arrow_s3_kwargs({})["endpoint_override"] == "127.0.0.1:2"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:3")
    assert arrow_s3_kwargs({})["endpoint_override"] == "127.0.0.1:3"
    # no Arrow equivalent: s3fs stays
    for options in ({"client_kwargs": {"verify": False}}, {"requester_pays": "true"},
                    {"s3_additional_kwargs": {"SSECustomerKey": "x"}}, {"profile": "p"},
                    {"config_kwargs": {"proxies": {}}}, {"key": "k"},
                    {"endpoint_url": "http://127.0.0.1:1/some/path"}):
        assert arrow_s3_kwargs({f"storage.{k}": v for k, v in options.items()}) is None


def test_arrow_reader_reads_what_s3fs_reads(s3_impl_server: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Same bytes as S3Storage.get, by explicit options and by the AWS environment alone;
    a missing object is FileNotFoundError; a wrong secret is a StorageError."""
    from txnlog.log_format.storage.s3_arrow import arrow_reader

    root = f"s3://txnlog-tests/arrow-{os.urandom(4).hex()}"
    st = Storage.for_url(root)
    bodies = {"p/a.log": os.urandom(300), "p/b.txnindex": b"", "p/c.log": os.urandom(3 << 20)}
    for path, body in bodies.items():
        assert st.put_if_absent(path, body)

    def reads_as_s3fs(get: Any, storage: Storage) -> None:
        assert get is not None
        for path, body in bodies.items():
            assert get(path) == body == storage.get(path)
        with pytest.raises(FileNotFoundError):
            get("p/missing.log")

    reads_as_s3fs(arrow_reader(st, {}), st)
    for key in s3_impl_server.env():
        monkeypatch.delenv(key, raising=False)
    options = {f"storage.{k}": v for k, v in
               {"endpoint_url": s3_impl_server.endpoint, "key": s3_impl_server.access_key,
                "secret": s3_impl_server.secret_key,
                "region": s3_impl_server.region}.items()}
    explicit = Storage.for_url(root, options)
    reads_as_s3fs(arrow_reader(explicit, options), explicit)
    wrong = dict(options, **{"storage.secret": "not-the-secret"})
    bad = arrow_reader(Storage.for_url(root, wrong), wrong)
    assert bad is not None
    with pytest.raises(StorageError, match="Arrow"):
        bad("p/a.log")


def test_arrow_reader_retries_what_s3_fails_transiently(s3_server: Any, tmp_path: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the chaos proxy answering 500 (after forwarding) and 503 SlowDown: every GET
    still returns the object. Arrow alone retries 3 times; a GET failing then failed the
    whole merge (chaos s3-proxy: 386 merges redone in one run)."""
    import json
    import subprocess
    import sys
    import time
    import urllib.request

    from chaos.proxy import set_faults
    from txnlog.log_format.storage.s3_arrow import arrow_reader

    port_file = tmp_path / "proxy.port"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "chaos.proxy", "--upstream", s3_server.endpoint,
         "--port-file", str(port_file), "--seed", "7"],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proxy.poll() is None and time.monotonic() < deadline, "no proxy"
            time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{json.loads(port_file.read_text())['port']}"
        root = f"s3://txnlog-tests/arrow-retry-{os.urandom(4).hex()}"
        bodies = {f"p/{i:020d}.log": os.urandom(200 + i) for i in range(30)}
        direct = Storage.for_url(root)
        for path, body in bodies.items():
            assert direct.put_if_absent(path, body)
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        options = {"storage.retry_base_delay_s": "0.001", "storage.retry_max_delay_s": "0.01"}
        through = Storage.for_url(root, options)
        get = arrow_reader(through, options)
        assert get is not None
        set_faults(endpoint, p_500=0.35, p_503=0.15)
        assert {path: get(path) for path in bodies} == bodies
        with urllib.request.urlopen(f"{endpoint}/__chaos__/stats", timeout=5) as resp:
            stats = json.loads(resp.read())
        assert stats["500"] + stats["503"] >= 30, stats  # faults did happen
    finally:
        proxy.kill()
        proxy.wait()


def test_s3_missing_bucket_is_a_clear_error(s3_impl_server: Any) -> None:
    st = Storage.for_url("s3://no-such-bucket-here/p", s3_impl_server.storage_options())
    with pytest.raises(StorageError, match="no-such-bucket-here"):
        st.put_if_absent("a", b"x")
    with pytest.raises(StorageError, match="no-such-bucket-here"):
        st.put("a", b"x")


# ------------------------------------------------------------------- the race


def _body(who: int, k: int, size: int) -> bytes:
    unit = f"writer-{who}-{k};".encode()
    return (unit * (1 + k % 3 + size // len(unit)))[: max(size, len(unit) * (1 + k % 3))]


def _racer(root: str, env: dict[str, str], who: int, keys: int, size: int, barrier: Any,
           results: Any) -> None:
    os.environ.update(env)
    st = Storage.for_url(root)
    st.exists("race/warm-up")  # connect before the start line
    bodies = [_body(who, k, size) for k in range(keys)]
    barrier.wait(timeout=120)
    won = [st.put_if_absent(f"race/{k:020d}.log", bodies[k]) for k in range(keys)]
    results.put((who, won))


@pytest.mark.parametrize("procs,keys,size", [(6, 25, 0), (3, 2, 6 << 20)],
                         ids=["small", "6MiB"])
def test_put_if_absent_race_exactly_one_winner(every_root: str, procs: int, keys: int,
                                               size: int) -> None:
    """All processes start together (barrier) and walk the same keys in the same order;
    the 6 MiB case is where non-atomic fakes (moto) let two writers win."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [ctx.Process(target=_racer, args=(every_root, env, who, keys, size, barrier, results))
               for who in range(procs)]
    for w in workers:
        w.start()
    won = dict(results.get(timeout=300) for _ in workers)
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    st = Storage.for_url(every_root)
    for k in range(keys):
        winners = [who for who in range(procs) if won[who][k]]
        assert len(winners) == 1, f"key {k}: winners {winners}"
        assert st.get(f"race/{k:020d}.log") == _body(winners[0], k, size)
    assert len(st.list("race")) == keys


def test_put_if_absent_of_a_large_body_never_overwrites(s3_impl_root: str) -> None:
    """Above 2 x s3fs's 50 MiB chunk, s3fs would write as a multipart upload, and RGW 16
    ignores If-None-Match on CompleteMultipartUpload: the second writer silently replaced
    the object and was told it won. Merged segments reach segment.bytes (1 GiB by default),
    so put-if-absent must send every body S3 allows in one PUT (up to 5 GiB) as one PUT."""
    size = (100 << 20) + 1
    first = bytes(range(256)) * (size // 256) + b"1"
    second = first[:-1] + b"2"
    st = Storage.for_url(s3_impl_root)
    assert st.put_if_absent("big/00000000000000000000.log", first) is True
    assert st.put_if_absent("big/00000000000000000000.log", second) is False
    assert st.size("big/00000000000000000000.log") == size
    assert st.get("big/00000000000000000000.log", size - 1) == b"1"
    assert st.put_if_absent("big/00000000000000000000.log", first) is True  # our retry


def test_put_if_absent_refuses_what_only_a_multipart_upload_could_write(
        s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 5 GiB and more (S3's PUT limit, here made small) there is no conditional write
    every S3 honours: a clear error, nothing written."""
    from txnlog.log_format.storage import s3 as s3_mod

    monkeypatch.setattr(s3_mod, "_SINGLE_PUT_MAX", 10)
    st = Storage.for_url(s3_root)
    with pytest.raises(StorageError, match="multipart"):
        st.put_if_absent("huge/x", b"x" * 10)
    assert not st.exists("huge/x")
    assert st.put_if_absent("huge/y", b"x" * 9) is True


# ------------------------------------------------------- conditional-write reality


class FlakyFs:
    """Wraps a real s3fs filesystem; scripted failures shaped exactly as s3fs raises them."""

    def __init__(self, real: Any, failures: list[BaseException], land_first: bool = False):
        self.real = real
        self.failures = failures
        self.land_first = land_first
        self.pipe_calls = 0

    def pipe_file(self, path: str, data: bytes, **kw: Any) -> Any:
        self.pipe_calls += 1
        if self.failures:
            exc = self.failures.pop(0)
            if self.land_first:  # the PUT landed, but its answer was lost
                self.real.pipe_file(path, data, **kw)
                self.land_first = False
            raise exc
        return self.real.pipe_file(path, data, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _client_error(status: int, code: str, condition: str | None = None) -> BaseException:
    error: dict[str, str] = {"Code": code, "Message": f"{code} happened"}
    if condition:
        error["Condition"] = condition
    err = ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}},
                      "PutObject")
    return translate_boto_error(err)


def _flaky(s3_root: str, failures: list[BaseException], land_first: bool = False,
           attempts: int = 4) -> tuple[S3Storage, FlakyFs]:
    real = Storage.for_url(s3_root)
    assert isinstance(real, S3Storage)
    fs = FlakyFs(real.fs, failures, land_first)
    st = S3Storage(real.bucket, real.prefix, {}, RetryPolicy(attempts, 0.001, 0.002), fs=fs)
    return st, fs


class RefusingDeletes:
    """Wraps a real s3fs filesystem: DeleteObjects keeps `key` and reports it under
    ``Errors`` with `code` (200 all the same, as S3 does), `times` times."""

    def __init__(self, real: Any, key: str, code: str, times: int) -> None:
        self.real, self.key, self.code, self.times = real, key, code, times
        self.calls = 0

    def call_s3(self, method: str, **kw: Any) -> Any:
        if method != "delete_objects":
            return self.real.call_s3(method, **kw)
        self.calls += 1
        objects = kw["Delete"]["Objects"]
        refuse = self.times > 0 and any(o["Key"].endswith(self.key) for o in objects)
        if refuse:
            self.times -= 1
            objects = [o for o in objects if not o["Key"].endswith(self.key)]
        resp = dict(self.real.call_s3(method, **dict(kw, Delete=dict(kw["Delete"],
                                                                     Objects=objects))))
        if refuse:
            resp["Errors"] = [{"Key": self.key, "Code": self.code, "Message": "no"}]
        return resp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("code,times,deleted", [("InternalError", 2, True),
                                                ("NoSuchKey", 9, False),
                                                ("AccessDenied", 1, False)])
def test_delete_many_reports_keys_delete_objects_kept(s3_root: str, code: str, times: int,
                                                      deleted: bool) -> None:
    """s3fs's ``rm`` ignores DeleteObjects' per-key ``Errors``: a cleanup that lists what
    it deletes then spun on objects that never went away. Retryable codes are retried,
    NoSuchKey is a delete, anything else is an error naming the key."""
    real = Storage.for_url(s3_root)
    assert isinstance(real, S3Storage)
    for name in ("a", "b", "c"):
        real.put(f"x/{name}", b"1")
    fs = RefusingDeletes(real.fs, "x/b", code, times)
    st = S3Storage(real.bucket, real.prefix, {}, RetryPolicy(4, 0.001, 0.002), fs=fs)
    if code == "AccessDenied":
        with pytest.raises(StorageError, match="x/b: AccessDenied"):
            st.delete_many(["x/a", "x/b", "x/c"])
        assert fs.calls == 1  # not retried
    else:
        st.delete_many(["x/a", "x/b", "x/c", "x/a"])
        assert fs.calls == (times + 1 if deleted else 1)
    assert [o.name for o in st.list("x")] == ([] if deleted else ["b"])


def test_412_shapes_s3fs_produces() -> None:
    """Pin how s3fs reports 412s, since put_if_absent depends on it."""
    named = _client_error(412, "PreconditionFailed", "If-None-Match")
    assert isinstance(named, FileExistsError)
    bare = _client_error(412, "PreconditionFailed")  # SeaweedFS, MinIO: no Condition
    assert isinstance(bare, OSError) and not isinstance(bare, FileExistsError)
    assert bare.errno == errno.EINVAL and isinstance(bare.__cause__, ClientError)


def test_retried_put_whose_first_attempt_landed_is_success(s3_root: str) -> None:
    # first attempt lands but times out; the retry then gets a 412 (bare, as SeaweedFS)
    st, fs = _flaky(s3_root, [EndpointConnectionError(endpoint_url="http://x")],
                    land_first=True)
    assert st.put_if_absent("k/0.log", b"ours") is True
    assert fs.pipe_calls == 2
    assert st.get("k/0.log") == b"ours"


def test_412_with_other_bytes_is_a_lost_race(s3_root: str) -> None:
    st, _ = _flaky(s3_root, [])
    assert st.put_if_absent("k/1.log", b"theirs") is True
    assert st.put_if_absent("k/1.log", b"ours") is False  # real server's bare 412
    st2, _ = _flaky(s3_root, [_client_error(412, "PreconditionFailed", "If-None-Match")])
    assert st2.put_if_absent("k/1.log", b"ours") is False
    assert st.get("k/1.log") == b"theirs"


@pytest.mark.parametrize("status,code", [(409, "ConditionalRequestConflict"),
                                         (503, "SlowDown"), (500, "InternalError"),
                                         (503, "503")])
def test_transient_errors_are_retried(s3_root: str, status: int, code: str) -> None:
    st, fs = _flaky(s3_root, [_client_error(status, code), _client_error(status, code)])
    assert st.put_if_absent(f"k/{status}-{code}.log", b"data") is True
    assert fs.pipe_calls == 3


def test_persistent_throttling_gives_a_clear_error(s3_root: str) -> None:
    st, fs = _flaky(s3_root, [_client_error(503, "SlowDown") for _ in range(10)], attempts=3)
    with pytest.raises(StorageError, match=r"k/slow\.log.*after 3 attempts") as info:
        st.put_if_absent("k/slow.log", b"data")
    assert fs.pipe_calls == 3
    assert "SlowDown" in str(info.value)


def test_access_denied_is_not_retried(s3_root: str) -> None:
    st, fs = _flaky(s3_root, [_client_error(403, "AccessDenied")] * 5)
    with pytest.raises(StorageError, match=r"k/denied\.log"):
        st.put_if_absent("k/denied.log", b"data")
    assert fs.pipe_calls == 1
