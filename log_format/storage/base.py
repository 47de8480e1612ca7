"""Object storage under a root URL, written only with put-if-absent: the interface.

Object storage has no append and no rename, so the log is a set of immutable objects whose
names are offsets; exactly-once rests on one primitive: *put-if-absent* (S3
`If-None-Match: *`; locally, a temp file hard-linked to its final name). This package gives
that primitive one meaning on every backend, including the parts real servers get wrong:

- a 412 on a retried PUT whose first attempt did land is a success, not a lost race, so a
  412 always reads the object back and compares bytes;
- some servers send a 412 body without the condition name, so s3fs raises
  `OSError(EINVAL)` (the HTTP 412 as `__cause__`) instead of `FileExistsError`;
- AWS answers concurrent conditional writes with 409 ConditionalRequestConflict (retry);
- throttling (503 SlowDown), 5xx and timeouts get bounded retries with backoff, then a
  `StorageError` naming the object.

This module holds what every backend shares: the `Storage` interface, its errors, the
per-process instance cache, the retry loop (the project's one `RetryPolicy`, from
``log_format/retry.py``) and the choice of backend from a root URL. The backends live in
``local.py`` (a folder: O_DIRECT writes, mmap reads) and ``s3.py`` (s3fs, error
classification), so a reader of one backend does not wade through the other.

Paths are relative to the root and `/`-separated. `Storage.for_url` caches one instance per
(process, root, options) because Spark reuses Python workers and s3fs clients are costly.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote, urlparse

from ..errors import TxnlogError
from ..retry import RetriesExhausted, RetryPolicy, retry_call

T = TypeVar("T")

OPTION_PREFIX = "storage."
# Options of txnlog's own retry loop (taken out before the rest goes to fsspec).
OWN_OPTIONS = ("max_attempts", "retry_base_delay_s", "retry_max_delay_s")
# AWS environment that changes which server/credentials a cached client talks to.
_ENV_KEYS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
             "AWS_DEFAULT_REGION", "AWS_PROFILE")


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
    # True where a put writes aligned memory with direct I/O (a local root): writers then
    # build their objects in aligned buffers (``aligned_empty``) instead of ``bytes``
    writes_aligned_directly: ClassVar[bool] = False

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
                # how to open the same storage in another process (coordinator/merge_worker)
                found.spec = (root, {OPTION_PREFIX + k: v for k, v in own.items()})
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
        """True if `path` is an object (a "directory" of that name is not, as on S3)."""
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def list(self, directory: str, start_after: str | None = None,
             limit: int | None = None) -> list[ObjectInfo]:
        """Objects directly under `directory`, sorted by name; [] if there are none.

        ``start_after``: only names sorting after it (S3's ListObjectsV2 StartAfter: the
        listing costs what follows, not what precedes it — how a reader finds a partition's
        newest objects without listing its history). ``limit``: at most that many, the
        first ones (S3's MaxKeys).
        """
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
        """Call ``fn`` under ``self.retry``: a TransientStorageError is retried with
        backoff; once the policy gives up, a StorageError names the operation and the
        object (callers above storage see which object failed, not a bare 503)."""
        try:
            return retry_call(fn, self.retry, TransientStorageError)
        except RetriesExhausted as exc:
            raise StorageError(
                f"{what} {self.url}/{path} failed after {exc.attempts} attempts: "
                f"{exc.last}") from exc.last


def _freeze(value: Any) -> Any:
    """A hashable copy of an options value (the cache key)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _retry_policy(options: dict[str, Any]) -> RetryPolicy:
    """Take txnlog's own retry options (OWN_OPTIONS) out of ``options``; the rest is the
    backend's. A value that cannot make a policy (not a number, < 1 attempt, a negative
    delay) is a configuration error, reported when the storage is built."""
    try:
        return RetryPolicy(
            max_attempts=int(options.pop("max_attempts", RetryPolicy.max_attempts)),
            base_delay_s=float(options.pop("retry_base_delay_s", RetryPolicy.base_delay_s)),
            max_delay_s=float(options.pop("retry_max_delay_s", RetryPolicy.max_delay_s)),
        )
    except (TypeError, ValueError) as exc:
        raise StorageConfigError(
            "storage.max_attempts / storage.retry_*_delay_s must be numbers (max_attempts "
            f">= 1, delays >= 0): {exc}") from exc


# The backends by kind, named as fsspec's registry names its implementations: a backend is
# imported when a root first needs it (a process that only uses local files never loads
# s3fs), and this module, which every backend imports, imports none of them.
BACKENDS: dict[str, str] = {
    "file": "txnlog.log_format.storage.local:LocalStorage",
    "s3": "txnlog.log_format.storage.s3:S3Storage",
}


def _backend(kind: str) -> Any:
    module, _, name = BACKENDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def _build(root: str, options: dict[str, Any]) -> Storage:
    """The backend for ``root``, with the options it takes."""
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
        return _backend("file")(os.path.abspath(path), retry)
    if scheme in ("s3", "s3a"):
        return _backend("s3")(parsed.netloc, parsed.path.strip("/"), options, retry)
    raise StorageConfigError(
        f"unsupported storage root {root!r}: use file:///path, a local path, or "
        "s3://bucket/prefix (put-if-absent is only guaranteed on these)")
