"""Starting the child processes of :mod:`tests.stores._child` from tests."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    """Start ``python -m tests.stores._child ARGS`` with line-buffered text pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores._child", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for a child, fail with its stderr if it failed, return its stdout."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{err}"
    return out
