"""The local-folder backend: put-if-absent as a temp file, fsync, then ``os.link``.

``link`` fails if the name exists, so it is atomic put-if-absent on any POSIX file system;
the directory is fsynced afterwards (grouped across threads by ``dir_sync``) so the name is
as durable as the bytes. Two costs of large objects are cut here, and only here: writes of
aligned memory go out with O_DIRECT (no copy into the page cache), and large reads are
memory-mapped (no copy out of it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import stat
import uuid
from typing import BinaryIO

import numpy as np

from .. import planted_bugs
from . import dir_sync
from .base import ObjectInfo, RetryPolicy, Storage, _check_path

# Temp files carry this mark in their name, so a listing never shows a half-written object.
_TEMP_MARK = ".txnlog-tmp-"


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

    writes_aligned_directly = True

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
        if planted_bugs.enabled("plain_put"):  # planted bug (chaos self-test): overwrite
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

    def list(self, directory: str, start_after: str | None = None,
             limit: int | None = None) -> list[ObjectInfo]:
        full = self._full(directory) if directory.strip("/") else self.base
        try:
            entries = list(os.scandir(full))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for entry in entries:
            if _TEMP_MARK in entry.name:
                continue
            if start_after is not None and entry.name <= start_after:
                continue
            try:
                if entry.is_file():
                    out.append(ObjectInfo(entry.name, entry.stat().st_size))
            except FileNotFoundError:  # deleted while listing
                continue
        out.sort()
        if limit is not None:
            del out[limit:]
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
