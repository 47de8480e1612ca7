"""The S3 backend through s3fs: conditional PUTs carry ``If-None-Match: *``.

What is S3-specific lives here: mapping ``storage.*`` options (strings, from Spark) to
s3fs/botocore arguments, and classifying errors, which s3fs spells in several ways: a 412
refusal (``FileExistsError``, or ``OSError(EINVAL)`` with the HTTP 412 as cause), transient
failures worth a retry (throttling, 5xx, 409 conflicts, transport errors), and the rest.
"""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .. import planted_bugs
from .base import (
    ObjectInfo,
    RetryPolicy,
    Storage,
    StorageConfigError,
    StorageError,
    TransientStorageError,
    _check_path,
)

T = TypeVar("T")


_BOOL_OPTIONS = {"anon", "use_ssl", "requester_pays", "version_aware", "cache_regions",
                 "asynchronous", "fixed_upload_size", "use_listings_cache"}
_INT_OPTIONS = {"default_block_size", "max_concurrency", "retries"}
_FLOAT_OPTIONS = {"connect_timeout", "read_timeout"}
_DICT_OPTIONS = {"client_kwargs", "config_kwargs", "s3_additional_kwargs"}
# A PUT takes at most 5 GiB. s3fs writes a body of 2 x its chunksize (50 MiB by default) or
# more as a multipart upload with If-None-Match on CompleteMultipartUpload, which Ceph RGW 16
# ignores: the later writer silently replaced the object and was told it won. With this
# chunksize, s3fs sends every body below 5 GiB as one conditional PUT, which every S3 honours.
_SINGLE_PUT_MAX = 5 << 30
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
        if planted_bugs.enabled("plain_put"):  # planted bug (chaos self-test): overwrite
            self.put(path, data)
            return True
        key = self._key(path)
        body = bytes(data)
        if len(body) >= _SINGLE_PUT_MAX:  # only a multipart upload could write it
            raise StorageError(
                f"put-if-absent of {len(body)} bytes to {self.url}/{path}: one S3 PUT takes"
                " less than 5 GiB, and the condition on a multipart upload is not honoured"
                " by every S3 (Ceph RGW ignores it)")

        def attempt() -> bool:
            try:
                self.fs.pipe_file(key, body, mode="create", chunksize=_SINGLE_PUT_MAX)
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
                # One GET. With max_concurrency > 1 (its default) s3fs sends a HEAD before
                # every whole-object read, to split a big object into parallel ranges:
                # twice the requests and round trips for every manifest, head and log
                # object read whole, while big objects are read by range (manifests and
                # tails give where a run lies).
                return self.fs.cat_file(key, max_concurrency=1)
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

    def list(self, directory: str, start_after: str | None = None,
             limit: int | None = None) -> list[ObjectInfo]:
        if start_after is None and limit is None:
            # SeaweedFS lists an emptied directory's own key ("dir/", size 0) under itself,
            # which s3fs names as a file "dir": not an object in it
            own = self._dir_key(directory).rstrip("/")
            out = [ObjectInfo(e["name"].rstrip("/").rsplit("/", 1)[-1],
                              int(e.get("size") or 0))
                   for e in self._ls(directory)
                   if e.get("type") == "file" and e["name"].rstrip("/") != own]
            out.sort()
            return out
        return self._list_from(directory, start_after, limit)

    def _list_from(self, directory: str, start_after: str | None,
                   limit: int | None) -> list[ObjectInfo]:
        """ListObjectsV2 with StartAfter/MaxKeys, page by page (s3fs's ``ls`` has neither:
        it lists the whole prefix)."""
        dir_key = self._dir_key(directory).rstrip("/")
        bucket, _, prefix = dir_key.partition("/")
        prefix = f"{prefix}/" if prefix else ""

        def pages() -> list[ObjectInfo]:
            out: list[ObjectInfo] = []
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if start_after is not None:
                kwargs["StartAfter"] = prefix + start_after
            while True:
                if limit is not None:
                    kwargs["MaxKeys"] = min(1000, limit - len(out))
                try:
                    resp = self.fs.call_s3("list_objects_v2", **kwargs)
                except FileNotFoundError:
                    return out
                for c in resp.get("Contents", ()):
                    name = c["Key"][len(prefix):]
                    if name and "/" not in name:
                        out.append(ObjectInfo(name, int(c.get("Size") or 0)))
                if (limit is not None and len(out) >= limit) or not resp.get("IsTruncated"):
                    return out[:limit] if limit is not None else out
                kwargs["ContinuationToken"] = resp["NextContinuationToken"]
                kwargs.pop("StartAfter", None)

        return self._retrying("LIST", directory or ".", lambda: self._call(
            "LIST", directory or ".", pages))

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
        unique = list(dict.fromkeys(paths))
        for i in range(0, len(unique), 1000):
            chunk = unique[i:i + 1000]
            self._retrying("bulk DELETE", chunk[0],
                           lambda chunk=chunk: self._call(
                               "bulk DELETE", chunk[0], lambda: self._delete_objects(chunk)))

    def _delete_objects(self, chunk: list[str]) -> None:
        """One DeleteObjects. It answers 200 even when keys were not deleted, listing those
        under ``Errors`` (s3fs's ``rm`` drops them): a key that stayed is an error here,
        transient for the codes worth a retry, so a cleanup that lists what it deletes
        does not spin on objects that never go away."""
        keys = [self._key(p).split("/", 1)[1] for p in chunk]
        resp = self.fs.call_s3("delete_objects", Bucket=self.bucket, Delete={
            "Objects": [{"Key": k} for k in keys], "Quiet": True})
        errors = [e for e in resp.get("Errors") or () if e.get("Code") != "NoSuchKey"]
        if not errors:
            return
        first = errors[0]
        msg = (f"bulk DELETE under {self.url}: {len(errors)} of {len(keys)} objects not "
               f"deleted, e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}")
        if any(e.get("Code") in _RETRY_CODES for e in errors):
            raise TransientStorageError(msg)
        raise StorageError(msg)


def _reraise(exc: BaseException) -> Callable[[], Any]:
    def again() -> Any:
        raise exc

    return again
