"""Object storage under a root URL, written only with put-if-absent.

Object storage has no append and no rename, so the log is a set of immutable objects whose
names are offsets; exactly-once rests on one primitive: *put-if-absent* (S3
`If-None-Match: *`; locally, a temp file hard-linked to its final name). This module gives
that primitive one meaning on every backend, including the parts real servers get wrong:

- a 412 on a retried PUT whose first attempt did land is a success, not a lost race, so a
  412 always reads the object back and compares bytes;
- some servers send a 412 body without the condition name, so s3fs raises
  `OSError(EINVAL)` (the HTTP 412 as `__cause__`) instead of `FileExistsError`;
- AWS answers concurrent conditional writes with 409 ConditionalRequestConflict (retry);
- throttling (503 SlowDown), 5xx and timeouts get bounded retries with backoff, then a
  `StorageError` naming the object.

Paths are relative to the root and `/`-separated. `Storage.for_url` caches one instance per
(process, root, options) because Spark reuses Python workers and s3fs clients are costly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import random
import stat
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar, TypeVar
from urllib.parse import unquote, urlparse

import numpy as np

from . import dir_sync, unsafe
from .errors import TxnlogError

T = TypeVar("T")

OPTION_PREFIX = "storage."
# Options of txnlog's own retry loop (taken out before the rest goes to fsspec).
OWN_OPTIONS = ("max_attempts", "retry_base_delay_s", "retry_max_delay_s")
# AWS environment that changes which server/credentials a cached client talks to.
_ENV_KEYS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
             "AWS_DEFAULT_REGION", "AWS_PROFILE")
_TEMP_MARK = ".txnlog-tmp-"


class StorageError(TxnlogError, OSError):
    """A storage operation failed for good (after retries); names the object."""


class StorageConfigError(StorageError, ValueError):
    """A root URL, path or storage option that cannot work; says what to use instead."""


class TransientStorageError(StorageError):
    """A failure worth retrying (throttling, 5xx, timeouts, conditional-write conflicts)."""


@dataclass(frozen=True, order=True)
class ObjectInfo:
    """One object of a listing: its name (last path component) and size in bytes."""

    name: str
    size: int


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter; defaults ride out a few seconds of 503s."""

    max_attempts: int = 8
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, attempt: int) -> float:
        top = min(self.max_delay_s, self.base_delay_s * (2 ** attempt))
        return top / 2 + random.random() * top / 2


def _check_path(path: str) -> str:
    """Refuse paths that could leave the root; storage paths are plain relative names."""
    if not isinstance(path, str) or not path:
        raise StorageConfigError(f"storage path must be a non-empty string, got {path!r}")
    parts = path.strip("/").split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StorageConfigError(
            f"storage path {path!r} must be relative to the root, '/'-separated, with no "
            "empty, '.' or '..' components")
    return "/".join(parts)


class Storage:
    """The interface every backend implements; build one with `Storage.for_url`."""

    url: str
    retry: RetryPolicy

    _cache: ClassVar[dict[tuple[Any, ...], Storage]] = {}
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def for_url(cls, root: str, options: Mapping[str, Any] | None = None) -> Storage:
        """The storage for `root` (`file://...`, a plain path, or `s3://bucket/prefix`).

        `options` may hold any reader/writer options; only keys prefixed `storage.` are used
        (prefix removed). One instance per process and configuration is reused.
        """
        if not isinstance(root, str) or not root:
            raise StorageConfigError(f"storage root must be a non-empty URL, got {root!r}")
        own = {k[len(OPTION_PREFIX):]: v for k, v in (options or {}).items()
               if isinstance(k, str) and k.startswith(OPTION_PREFIX)}
        env = tuple(os.environ.get(k) for k in _ENV_KEYS)
        key = (os.getpid(), root.rstrip("/"), _freeze(own), env)
        with cls._cache_lock:
            found = cls._cache.get(key)
            if found is None:
                found = _build(root, own)
                cls._cache[key] = found
            return found

    @classmethod
    def clear_cache(cls) -> None:
        """Forget cached instances (tests that change the environment)."""
        with cls._cache_lock:
            cls._cache.clear()

    # ---- the interface -----------------------------------------------------------------
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create `path` holding `data` unless it exists; never overwrites.

        True: the object now holds exactly `data` (we wrote it, or an earlier attempt of ours
        did). False: it holds other bytes (another writer won, or a fence is there).
        """
        raise NotImplementedError

    def put(self, path: str, data: bytes) -> None:
        """Write `path` unconditionally (registration files only, never log objects)."""
        raise NotImplementedError

    def get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes `[start, end)` of `path` (whole object by default); FileNotFoundError if absent."""
        raise NotImplementedError

    def get_view(self, path: str, start: int | None = None,
                 end: int | None = None) -> bytes | memoryview:
        """Like ``get``, but may return a read-only view instead of a copy (local files:
        a memory map of the page cache). Readers that only decode from it use this."""
        return self.get(path, start, end)

    def size(self, path: str) -> int:
        """Size in bytes; FileNotFoundError if absent."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def list(self, directory: str) -> list[ObjectInfo]:
        """Objects directly under `directory`, sorted by name; [] if there are none."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Remove `path`; a missing object is not an error (pruning may race)."""
        raise NotImplementedError

    def delete_many(self, paths: list[str]) -> None:
        """Remove every path (missing ones are fine); S3 does it in bulk requests."""
        for path in paths:
            self.delete(path)

    def list_dirs(self, directory: str = "") -> list[str]:
        """Names of the sub-directories (common prefixes) directly under `directory`."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # ---- shared retry loop ---------------------------------------------------------------
    def _retrying(self, what: str, path: str, fn: Callable[[], T]) -> T:
        last: BaseException | None = None
        for attempt in range(self.retry.max_attempts):
            try:
                return fn()
            except TransientStorageError as exc:
                last = exc
            if attempt + 1 < self.retry.max_attempts:
                time.sleep(self.retry.delay(attempt))
        raise StorageError(
            f"{what} {self.url}/{path} failed after {self.retry.max_attempts} attempts: "
            f"{last}") from last


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _retry_policy(options: dict[str, Any]) -> RetryPolicy:
    try:
        return RetryPolicy(
            max_attempts=int(options.pop("max_attempts", RetryPolicy.max_attempts)),
            base_delay_s=float(options.pop("retry_base_delay_s", RetryPolicy.base_delay_s)),
            max_delay_s=float(options.pop("retry_max_delay_s", RetryPolicy.max_delay_s)),
        )
    except (TypeError, ValueError) as exc:
        raise StorageConfigError(
            f"storage.max_attempts / storage.retry_*_delay_s must be numbers: {exc}") from exc


def _build(root: str, options: dict[str, Any]) -> Storage:
    options = dict(options)
    retry = _retry_policy(options)
    parsed = urlparse(root)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StorageConfigError(
                f"file URL {root!r} names host {parsed.netloc!r}; use file:///absolute/path")
        path = unquote(parsed.path) if scheme == "file" else root
        if options:
            raise StorageConfigError(
                f"local root {root!r} takes no storage options, got {sorted(options)}")
        return LocalStorage(os.path.abspath(path), retry)
    if scheme in ("s3", "s3a"):
        return S3Storage(parsed.netloc, parsed.path.strip("/"), options, retry)
    raise StorageConfigError(
        f"unsupported storage root {root!r}: use file:///path, a local path, or "
        "s3://bucket/prefix (put-if-absent is only guaranteed on these)")


# ======================================================================================
# Local files
# ======================================================================================


# Ranges at least this large are memory-mapped by LocalStorage.get_view (smaller ones are
# cheaper to read).
MMAP_MIN_BYTES = 1 << 20
# Objects of at least DIRECT_MIN_BYTES whose memory starts at a DIRECT_ALIGN boundary are
# written with O_DIRECT (all but the last partial block): the device reads them from our
# memory, instead of the CPU copying every byte into the page cache first. That copy (and
# the page-cache pages it allocates) cost a Spark write ~2 s CPU per 1.3 GB; the object is
# fsynced either way, so durability is the same. Smaller objects (the coordinator's) take
# the page cache: a synchronous device write is slower for them than a copy.
DIRECT_MIN_BYTES = 1 << 20
DIRECT_ALIGN = 4096  # the largest logical block size of common devices


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised uint8 array whose data starts at a DIRECT_ALIGN boundary (so that
    LocalStorage can write it with direct I/O)."""
    raw = np.empty(nbytes + DIRECT_ALIGN, np.uint8)
    skip = -raw.ctypes.data % DIRECT_ALIGN
    return raw[skip:skip + nbytes]


def _direct_head(view: memoryview) -> int:
    """How many leading bytes of ``view`` can go out with direct I/O (0: none)."""
    if not hasattr(os, "O_DIRECT") or view.nbytes < DIRECT_MIN_BYTES or \
            not view.c_contiguous:
        return 0
    if np.frombuffer(view, np.uint8).ctypes.data % DIRECT_ALIGN:
        return 0
    return view.nbytes - view.nbytes % DIRECT_ALIGN


def _write_direct(fd: int, view: memoryview, head: int) -> memoryview:
    """Write ``view[:head]`` through ``fd`` (opened with O_DIRECT), then switch ``fd`` to
    buffered I/O; returns what is left to write. A file system that refuses the direct
    write (EINVAL) gets the bytes buffered instead."""
    done = 0
    try:
        while done < head:
            n = os.write(fd, view[done:head])
            done += n
            if n % DIRECT_ALIGN:  # a short, unaligned write: finish buffered
                break
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
    return view[done:]


class LocalStorage(Storage):
    """A local folder: temp file + fsync + `os.link` (atomic, fails if the name exists)."""

    def __init__(self, base: str, retry: RetryPolicy | None = None) -> None:
        self.base = base
        self.url = "file://" + base
        self.retry = retry or RetryPolicy()

    def _full(self, path: str) -> str:
        return os.path.join(self.base, *_check_path(path).split("/"))

    def _write_temp(self, full: str, data: bytes) -> str:
        directory = os.path.dirname(full)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory,
                           f".{os.path.basename(full)}{_TEMP_MARK}{uuid.uuid4().hex}")
        view = memoryview(data).cast("B")
        direct = _direct_head(view)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            fd = os.open(tmp, flags | (os.O_DIRECT if direct else 0), 0o644)
        except OSError as exc:  # a file system without direct I/O
            if not direct or exc.errno != errno.EINVAL:
                raise
            direct = 0
            # Linux refuses O_DIRECT only after creating the file: open it again without
            # O_EXCL (the temp name is ours alone).
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if direct:
                view = _write_direct(fd, view, direct)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    @staticmethod
    def _fsync_dir(directory: str) -> None:
        dir_sync.fsync_dir(directory)  # one fsync for concurrent links into one directory

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if unsafe.enabled("plain_put"):  # planted bug (chaos self-test): overwrite
            self.put(path, data)
            return True
        full = self._full(path)
        if os.path.exists(full):
            return self._same(full, data)
        tmp = self._write_temp(full, data)
        try:
            os.link(tmp, full)
        except FileExistsError:
            return self._same(full, data)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._fsync_dir(os.path.dirname(full))
        return True

    @staticmethod
    def _same(full: str, data: bytes) -> bool:
        if os.path.getsize(full) != len(data):
            return False
        with open(full, "rb") as f:
            return f.read() == bytes(data)

    def put(self, path: str, data: bytes) -> None:
        full = self._full(path)
        tmp = self._write_temp(full, data)
        try:
            os.replace(tmp, full)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self._fsync_dir(os.path.dirname(full))

    def _open(self, path: str) -> BinaryIO:
        """The object's file for reading; a directory of that name is no object."""
        full = self._full(path)
        try:
            return open(full, "rb")  # the caller closes it
        except IsADirectoryError as exc:
            raise FileNotFoundError(errno.ENOENT, "not an object (a directory)", full) from exc

    def get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        with self._open(path) as f:
            if start:
                f.seek(start)
            if end is None:
                return f.read()
            return f.read(max(0, end - (start or 0)))

    def get_view(self, path: str, start: int | None = None,
                 end: int | None = None) -> bytes | memoryview:
        """A read-only memory map of the range (ranges of MMAP_MIN_BYTES and more).

        Reading a segment copies it from the page cache into fresh memory (a copy plus page
        faults: as much CPU as decoding it); a map shares the page cache's pages. Safe
        because objects are never modified once written (put-if-absent of a complete temp
        file), and deleting one while it is mapped keeps the mapped pages.
        """
        if start is not None and end is not None and end - start < MMAP_MIN_BYTES:
            return self.get(path, start, end)
        with self._open(path) as f:
            size = os.fstat(f.fileno()).st_size
            lo = min(start or 0, size)
            hi = size if end is None else max(lo, min(end, size))
            if hi - lo < MMAP_MIN_BYTES:
                f.seek(lo)
                return f.read(hi - lo)
            aligned = lo - lo % mmap.ALLOCATIONGRANULARITY
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mapped = mmap.mmap(f.fileno(), hi - aligned, flags=flags, prot=mmap.PROT_READ,
                               offset=aligned)
        return memoryview(mapped)[lo - aligned:hi - aligned]

    def size(self, path: str) -> int:
        full = self._full(path)
        st = os.stat(full)
        if stat.S_ISDIR(st.st_mode):  # a "directory" is not an object, as on S3
            raise FileNotFoundError(errno.ENOENT, "not an object (a directory)", full)
        return st.st_size

    def list(self, directory: str) -> list[ObjectInfo]:
        full = self._full(directory) if directory.strip("/") else self.base
        try:
            entries = list(os.scandir(full))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for entry in entries:
            if _TEMP_MARK in entry.name:
                continue
            try:
                if entry.is_file():
                    out.append(ObjectInfo(entry.name, entry.stat().st_size))
            except FileNotFoundError:  # deleted while listing
                continue
        out.sort()
        return out

    def list_dirs(self, directory: str = "") -> list[str]:
        full = self._full(directory) if directory.strip("/") else self.base
        try:
            return sorted(e.name for e in os.scandir(full) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._full(path))


# ======================================================================================
# S3 (s3fs)
# ======================================================================================

_BOOL_OPTIONS = {"anon", "use_ssl", "requester_pays", "version_aware", "cache_regions",
                 "asynchronous", "fixed_upload_size", "use_listings_cache"}
_INT_OPTIONS = {"default_block_size", "max_concurrency", "retries"}
_FLOAT_OPTIONS = {"connect_timeout", "read_timeout"}
_DICT_OPTIONS = {"client_kwargs", "config_kwargs", "s3_additional_kwargs"}
_RETRY_CODES = {"SlowDown", "ServiceUnavailable", "Throttling", "ThrottlingException",
                "RequestTimeout", "RequestTimeoutException", "InternalError",
                "ConditionalRequestConflict", "OperationAborted", "RequestLimitExceeded",
                "TooManyRequests", "BadGateway", "GatewayTimeout"}


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise StorageConfigError(f"storage.{key} must be true or false, got {value!r}")


def s3fs_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """Map `storage.*` options (prefix removed, values often strings) to S3FileSystem args.

    `endpoint_url` and `region` belong in botocore's client kwargs; dict options may come as
    JSON strings (Spark options are strings).
    """
    out: dict[str, Any] = {}
    client: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for key, value in options.items():
        if key in _DICT_OPTIONS:
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise StorageConfigError(
                        f"storage.{key} must be a JSON object, got {value!r}") from exc
            if not isinstance(value, Mapping):
                raise StorageConfigError(f"storage.{key} must be a mapping, got {value!r}")
            target = {"client_kwargs": client, "config_kwargs": config}.get(key)
            if target is None:
                out[key] = dict(value)
            else:
                target.update(value)
        elif key in ("endpoint_url", "endpoint"):
            client["endpoint_url"] = str(value)
        elif key in ("region", "region_name"):
            client["region_name"] = str(value)
        elif key in ("access_key_id", "aws_access_key_id"):
            out["key"] = str(value)
        elif key in ("secret_access_key", "aws_secret_access_key"):
            out["secret"] = str(value)
        elif key in ("session_token", "aws_session_token"):
            out["token"] = str(value)
        elif key in ("addressing_style", "path_style"):
            style = "path" if key == "path_style" and _as_bool(key, value) else str(value)
            config.setdefault("s3", {})["addressing_style"] = style
        elif key in _BOOL_OPTIONS:
            out[key] = _as_bool(key, value)
        elif key in _INT_OPTIONS:
            out[key] = int(value)
        elif key in _FLOAT_OPTIONS:
            config[key] = float(value)
        else:
            out[key] = value
    if client:
        out["client_kwargs"] = client
    if config:
        out["config_kwargs"] = config
    return out


def _client_error(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, S3 error code) of a botocore ClientError behind an s3fs exception."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        response = getattr(cur, "response", None)
        if isinstance(response, Mapping) and ("Error" in response
                                              or "ResponseMetadata" in response):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = response.get("Error", {}).get("Code")
            return status, code
        cur = cur.__cause__ or cur.__context__
    return None, None


def _is_transport_error(exc: BaseException) -> bool:
    """Network-level failures (no HTTP answer): retrying is safe and useful."""
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"BotoCoreError", "HTTPClientError", "EndpointConnectionError",
                         "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
                         "ClientPayloadError", "ClientConnectionError", "ServerDisconnectedError",
                         "IncompleteRead", "ResponseParserError", "FSTimeoutError"})


def is_precondition_failed(exc: BaseException) -> bool:
    """A put-if-absent refusal, however the server/s3fs spelled it."""
    if isinstance(exc, FileExistsError):
        return True
    status, code = _client_error(exc)
    return status == 412 or code in ("PreconditionFailed", "412")


def is_transient(exc: BaseException) -> bool:
    status, code = _client_error(exc)
    if status is not None or code is not None:
        return (code in _RETRY_CODES or status in (409, 429)
                or (status is not None and status >= 500))
    if isinstance(exc, OSError) and exc.errno in (errno.EBUSY, errno.ETIMEDOUT,
                                                    errno.ECONNRESET, errno.EAGAIN):
        return True
    return _is_transport_error(exc) or any(
        _is_transport_error(c) for c in (exc.__cause__, exc.__context__) if c is not None)


class S3Storage(Storage):
    """`s3://bucket/prefix` through s3fs; conditional PUTs carry `If-None-Match: *`."""

    def __init__(self, bucket: str, prefix: str, options: Mapping[str, Any],
                 retry: RetryPolicy | None = None, fs: Any = None) -> None:
        if not bucket:
            raise StorageConfigError("an s3 root needs a bucket: s3://bucket[/prefix]")
        self.bucket = bucket
        self.prefix = prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.retry = retry or RetryPolicy()
        if fs is None:
            import s3fs

            kwargs = s3fs_kwargs(options)
            kwargs.setdefault("use_listings_cache", False)  # listings must never be stale
            # One attempt per call below us: botocore's and s3fs's own retry loops back off
            # up to 8-15 s, so a call made while the server was briefly down kept sleeping
            # long after it was back (every commit waited on it). ``_retrying`` retries
            # with backoff capped at RetryPolicy.max_delay_s instead.
            kwargs.setdefault("config_kwargs", {}).setdefault(
                "retries", {"max_attempts": 1, "mode": "standard"})
            kwargs["skip_instance_cache"] = True  # our own cache keys on the options
            fs = s3fs.S3FileSystem(**kwargs)
            fs.retries = 1  # s3fs's own loop (a class attribute, not an argument)
        self.fs = fs

    def _key(self, path: str) -> str:
        rel = _check_path(path)
        return f"{self.bucket}/{self.prefix}/{rel}" if self.prefix else f"{self.bucket}/{rel}"

    def _dir_key(self, directory: str) -> str:
        if directory.strip("/"):
            return self._key(directory)
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def _call(self, what: str, path: str, fn: Callable[[], T]) -> T:
        """One attempt: classify errors into transient (retry), missing, or fatal."""
        try:
            return fn()
        except FileNotFoundError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise TransientStorageError(f"{type(exc).__name__}: {exc}") from exc
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"{what} {self.url}/{path} failed: {exc}") from exc

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if unsafe.enabled("plain_put"):  # planted bug (chaos self-test): overwrite
            self.put(path, data)
            return True
        key = self._key(path)
        body = bytes(data)

        def attempt() -> bool:
            try:
                self.fs.pipe_file(key, body, mode="create")
                return True
            except FileNotFoundError as exc:
                raise self._no_bucket("put-if-absent", path, exc) from exc
            except Exception as exc:
                if not is_precondition_failed(exc):
                    return self._call("conditional PUT of", path, _reraise(exc))
            # Someone holds the name: maybe our own earlier attempt. Compare bytes.
            try:
                held = self._call("read-back of", path,
                                  lambda: self.fs.cat_file(key))
            except FileNotFoundError as exc:  # deleted in between: just try again
                raise TransientStorageError(f"{path} vanished after a 412") from exc
            return held == body

        return self._retrying("put-if-absent", path, attempt)

    def put(self, path: str, data: bytes) -> None:
        key = self._key(path)
        body = bytes(data)

        def attempt() -> None:
            try:
                self.fs.pipe_file(key, body)
            except FileNotFoundError as exc:
                raise self._no_bucket("PUT", path, exc) from exc

        self._retrying("PUT", path, lambda: self._call("PUT", path, attempt))

    def _no_bucket(self, what: str, path: str, exc: BaseException) -> StorageError:
        return StorageError(f"{what} {self.url}/{path} failed: {exc} (does bucket "
                            f"{self.bucket!r} exist? txnlog does not create buckets)")

    def get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        key = self._key(path)
        if start is not None and end is not None and end <= start:
            self.size(path)  # still FileNotFoundError for a missing object
            return b""

        def read() -> bytes:
            if start is None and end is None:
                return self.fs.cat_file(key)
            return self.fs.cat_file(key, start=start, end=end)

        return self._retrying("GET", path, lambda: self._call("GET", path, read))

    def size(self, path: str) -> int:
        key = self._key(path)

        def head() -> int:
            info = self.fs.info(key, refresh=True)
            if info.get("type") == "directory":
                raise FileNotFoundError(f"{self.url}/{path}")
            return int(info["size"])

        return self._retrying("HEAD", path, lambda: self._call("HEAD", path, head))

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        key = self._dir_key(directory)

        def ls() -> list[dict[str, Any]]:
            try:
                return self.fs.ls(key, detail=True, refresh=True)
            except FileNotFoundError:
                return []

        return self._retrying("LIST", directory or ".", lambda: self._call(
            "LIST", directory or ".", ls))

    def list(self, directory: str) -> list[ObjectInfo]:
        out = [ObjectInfo(e["name"].rstrip("/").rsplit("/", 1)[-1], int(e.get("size") or 0))
               for e in self._ls(directory) if e.get("type") == "file"]
        out.sort()
        return out

    def list_dirs(self, directory: str = "") -> list[str]:
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1]
                      for e in self._ls(directory) if e.get("type") == "directory")

    def delete(self, path: str) -> None:
        key = self._key(path)

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(key)

        self._retrying("DELETE", path, lambda: self._call("DELETE", path, rm))

    def delete_many(self, paths: list[str]) -> None:
        """DeleteObjects, up to 1,000 keys per request (one DELETE each costs a round trip
        and ~2 ms of s3fs CPU: pruning hundreds of log objects one by one was slow)."""
        for i in range(0, len(paths), 1000):
            chunk = paths[i:i + 1000]
            keys = [self._key(p) for p in chunk]
            self._retrying("bulk DELETE", chunk[0],
                           lambda keys=keys, first=chunk[0]: self._call(
                               "bulk DELETE", first, lambda: self.fs.rm(keys)))


def _reraise(exc: BaseException) -> Callable[[], Any]:
    def again() -> Any:
        raise exc

    return again
