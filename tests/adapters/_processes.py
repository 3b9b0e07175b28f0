"""Finding real processes through /proc, for tests that prove nothing is left running."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


def _parent_of(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has exited; only its reaping is pending
            return int(fields[1])
    return None


def live_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def descendants(pid: int) -> set[int]:
    """Every live (non-zombie) process below ``pid``."""
    children: dict[int, list[int]] = {}
    for candidate in live_pids():
        parent = _parent_of(candidate)
        if parent is not None:
            children.setdefault(parent, []).append(candidate)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def tagged(tag: str) -> set[int]:
    """Live processes whose environment holds ``POLYLOOP_TEST_TAG=<tag>`` (they and everything
    they started inherit it, wherever they were re-parented to)."""
    needle = f"POLYLOOP_TEST_TAG={tag}".encode()
    found: set[int] = set()
    for pid in live_pids():
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if needle in environ and _parent_of(pid) is not None:
                found.add(pid)
    return found


def wait_until_none(tag: str, seconds: float) -> set[int]:
    """Poll until no process carries ``tag`` or ``seconds`` pass; return what is left."""
    deadline = time.monotonic() + seconds
    while True:
        left = tagged(tag)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def kill_all(pids: set[int]) -> None:
    """Clean up after a failed assertion, so one failure does not leak into other tests."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
