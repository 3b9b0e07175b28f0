"""Whole-buffer reads and writes on raw file descriptors (``os.pread``/``os.pwrite`` may be short)."""

from __future__ import annotations

import errno
import os

__all__ = ["read_all", "write_all"]


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
