"""File-descriptor helpers of the file stores: whole-buffer reads and writes (``os.pread`` and
``os.pwrite`` may be short) and making a directory entry durable."""

from __future__ import annotations

import errno
import os

__all__ = ["read_all", "sync_directory", "write_all"]


def write_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written == 0:  # pragma: no cover - pwrite reports a full disk as ENOSPC instead
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]
        offset += written


def read_all(fd: int) -> bytes:
    """The whole file, read from offset 0 to its end."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def sync_directory(path: str) -> None:
    """Make the entries of the directory ``path`` durable (a new file's name survives a crash
    only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
