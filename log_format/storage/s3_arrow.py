"""Whole-object GETs through Arrow's C++ S3 client, for a process that reads many small
objects and nothing else (the coordinator's merge worker).

Why: s3fs (aiobotocore) spends some 3.5 ms of Python CPU on each GET of a small object;
Arrow's S3 filesystem about 0.7 ms, in C++ (SeaweedFS, 32 parallel GETs of 300-byte
objects, measured with bench/merge_isolation.py). A merge reads some 50 objects, and on a
2-core machine the merge worker's CPU competes with the coordinator answering commits.

Only reads go this way: every write stays with ``S3Storage``, whose put-if-absent Arrow's
filesystem API does not offer. The reader talks to the same server with the same
credentials as the root's ``S3Storage``; when the root's options hold anything Arrow cannot
honour the same way (a ``client_kwargs`` entry such as ``verify``, a requester-pays bucket,
extra request arguments...), ``arrow_reader`` returns None and the caller keeps s3fs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .base import (
    OPTION_PREFIX,
    OWN_OPTIONS,
    StorageConfigError,
    StorageError,
    TransientStorageError,
)
from .s3 import S3Storage, s3fs_kwargs

# S3FileSystem arguments (as s3fs_kwargs gives them) that change nothing about a GET of a
# whole object
_IRRELEVANT = {"use_listings_cache", "max_concurrency", "default_block_size", "cache_regions",
               "fixed_upload_size", "asynchronous", "retries", "skip_instance_cache"}
_CREDENTIALS = {"key": "access_key", "secret": "secret_key", "token": "session_token"}
_CONFIG_KEYS = {"connect_timeout", "read_timeout", "retries", "s3"}
ARROW_RETRY_ATTEMPTS = 3  # Arrow's own retry of a failed request; then the root's policy
# AWS SDK error names (in Arrow's messages) that no retry mends: wrong or missing
# credentials, no bucket. Anything else (5xx, throttling, a broken connection) is retried.
_FATAL_CODES = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH",
                "INVALID_SIGNATURE", "NO_SUCH_BUCKET", "UNRECOGNIZED_CLIENT")


def arrow_s3_kwargs(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """``pyarrow.fs.S3FileSystem`` arguments for the options a root was opened with (only
    ``storage.*`` keys count, as in ``Storage.for_url``), or None when one of them has no
    Arrow equivalent. The options are read through ``s3fs_kwargs``, which knows their
    aliases and string forms, so the two clients cannot read them differently."""
    own = {name: v for k, v in options.items()
           if isinstance(k, str) and k.startswith(OPTION_PREFIX)
           and (name := k[len(OPTION_PREFIX):]) not in OWN_OPTIONS}
    out: dict[str, Any] = {}
    endpoint: str | None = None
    for key, value in s3fs_kwargs(own).items():
        if key in _IRRELEVANT:
            continue
        if key in _CREDENTIALS:
            out[_CREDENTIALS[key]] = str(value)
        elif key == "anon":
            out["anonymous"] = value
        elif key == "use_ssl":
            out["scheme"] = "https" if value else "http"
        elif key == "client_kwargs":
            if set(value) - {"endpoint_url", "region_name"}:
                return None  # verify, a proxy, ...: leave it to botocore
            endpoint = value.get("endpoint_url")
            if "region_name" in value:
                out["region"] = value["region_name"]
        elif key == "config_kwargs":
            if set(value) - _CONFIG_KEYS:
                return None
            for ck, arrow_key in (("connect_timeout", "connect_timeout"),
                                  ("read_timeout", "request_timeout")):
                if ck in value:
                    out[arrow_key] = float(value[ck])
            s3 = value.get("s3") or {}
            if not isinstance(s3, Mapping):
                return None
            if s3.get("addressing_style") is not None:
                out["force_virtual_addressing"] = s3["addressing_style"] == "virtual"
        else:
            return None  # requester_pays, version_aware, profile, s3_additional_kwargs, ...
    if endpoint is None:  # where botocore looks (s3fs talks to that server)
        endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3")
                    or os.environ.get("AWS_ENDPOINT_URL"))
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if not parts.netloc or parts.path.strip("/"):
            return None  # an endpoint with a path: leave it to botocore
        out["endpoint_override"] = parts.netloc
        out.setdefault("scheme", parts.scheme or "https")
    if ("access_key" in out) != ("secret_key" in out):
        return None  # botocore would take the other half from elsewhere; do not guess
    return out


def arrow_reader(storage: S3Storage, options: Mapping[str, Any]
                 ) -> Callable[[str], bytes] | None:
    """A ``get(path) -> bytes`` for whole objects of ``storage``'s root through Arrow, or
    None (the options have no Arrow equivalent, or this pyarrow has no S3 support).
    A missing object raises FileNotFoundError; any other failure is retried (Arrow's own
    few attempts, then the root's retry policy, as for ``S3Storage.get``) unless it names
    credentials or the bucket, and then raises StorageError."""
    try:
        kwargs = arrow_s3_kwargs(options)
    except (StorageConfigError, ValueError, TypeError):
        return None  # S3Storage reports bad options itself
    if kwargs is None:
        return None
    try:
        from pyarrow import fs as pafs

        kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(
            max_attempts=ARROW_RETRY_ATTEMPTS)
        filesystem = pafs.S3FileSystem(**kwargs)
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return None
    url = storage.url

    def get(path: str) -> bytes:
        key = storage._key(path)  # the same bucket/prefix mapping

        def attempt() -> bytes:
            try:
                with filesystem.open_input_stream(key, compression=None) as stream:
                    return stream.read()
            except FileNotFoundError:
                raise
            except OSError as exc:
                msg = f"GET {url}/{path} failed (Arrow S3 client): {exc}"
                if any(code in str(exc) for code in _FATAL_CODES):
                    raise StorageError(msg) from exc
                raise TransientStorageError(msg) from exc

        # the root's retry policy over Arrow's own few attempts, as S3Storage.get has it:
        # a GET that failed after Arrow's 3 attempts used to fail the whole merge, its ~50
        # GETs all redone at the next tick (386 times in one chaos run with S3 errors)
        return storage._retrying("GET", path, attempt)

    return get
