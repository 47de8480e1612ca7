"""Object storage under a root URL, written only with put-if-absent (the place layer's base).

One module per concern, as fsspec lays out its implementations:

- ``base``: the ``Storage`` interface, its errors, the per-process instance cache, the retry
  loop (``RetryPolicy`` is ``log_format.retry``'s, the project's only one) and the choice of
  backend from a root URL;
- ``local``: ``LocalStorage``, a folder (temp file + fsync + ``link``; O_DIRECT writes,
  mmap reads);
- ``s3``: ``S3Storage`` through s3fs (option mapping, error classification);
- ``s3_arrow``: pyarrow's native S3 reads for the read path (same options as ``s3``);
- ``dir_sync``: grouped directory fsyncs for local put-if-absent.

Import from here (``from txnlog.log_format.storage import Storage``); the modules are the
layout of the code, not separate APIs. Importing this package does not import s3fs.
"""

from __future__ import annotations

from ..retry import RetryPolicy
from .base import (
    OPTION_PREFIX,
    OWN_OPTIONS,
    ObjectInfo,
    Storage,
    StorageConfigError,
    StorageError,
    TransientStorageError,
)
from .local import (
    DIRECT_ALIGN,
    DIRECT_MIN_BYTES,
    MMAP_MIN_BYTES,
    LocalStorage,
    aligned_empty,
)
from .s3 import S3Storage, is_precondition_failed, is_transient, s3fs_kwargs

__all__ = [
    "DIRECT_ALIGN",
    "DIRECT_MIN_BYTES",
    "MMAP_MIN_BYTES",
    "OPTION_PREFIX",
    "OWN_OPTIONS",
    "LocalStorage",
    "ObjectInfo",
    "RetryPolicy",
    "S3Storage",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "TransientStorageError",
    "aligned_empty",
    "is_precondition_failed",
    "is_transient",
    "s3fs_kwargs",
]
