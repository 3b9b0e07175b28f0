"""The host side of ``_lifeline_launcher.py``: wrap a command in it, and signal a wrapped child.

See ``_lifeline_launcher.py`` and design 0026 for what the launcher guarantees. On Windows nothing is
wrapped (the MCP SDK puts each server in a Job Object that dies with its handle).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["LIFELINE_SCRIPT", "Lifeline"]

#: The launcher script, run by path (importing the package would be slower and needless).
LIFELINE_SCRIPT: Final = Path(__file__).with_name("_lifeline_launcher.py")


def _children_of_this_process() -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError):
                found += [
                    int(pid) for pid in Path(f"/proc/self/task/{task}/children").read_text().split()
                ]
    return found


@dataclass(frozen=True, slots=True)
class Lifeline:
    """One launcher's identity: ``grace`` is how long its server gets between SIGTERM and
    SIGKILL; ``token`` lets this process find the launcher among its children."""

    grace: float
    token: str

    @classmethod
    def new(cls, grace: float) -> Lifeline:
        return cls(grace, uuid.uuid4().hex)

    @property
    def available(self) -> bool:
        return os.name == "posix" and bool(sys.executable)

    def command(self, command: str, args: Sequence[str]) -> tuple[str, list[str]]:
        """``(executable, args)`` that run ``command args`` under the launcher (unchanged
        where the launcher is not available)."""
        if not self.available:
            return command, list(args)
        launcher = ["-I", "-S", str(LIFELINE_SCRIPT), str(os.getpid()), f"{self.grace:g}"]
        return sys.executable, [*launcher, self.token, "--", command, *args]

    def signal(self, signum: int = signal.SIGUSR1) -> bool:
        """Send ``signum`` to this lifeline's launcher if it is still a child of this process
        (Linux: found through /proc; SIGUSR1 makes it kill its server at once). True if sent."""
        if not hasattr(os, "pidfd_open"):
            return False  # not Linux: the launcher is not found, its server gets the SDK's grace
        for pid in _children_of_this_process():
            pidfd = None
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
            if pidfd is None:
                continue
            try:
                # Read after opening the pidfd: a pid reused since the listing fails this check.
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if self.token.encode() in argv and str(LIFELINE_SCRIPT).encode() in argv:
                    signal.pidfd_send_signal(pidfd, signum)
                    return True
            except OSError:
                continue
            finally:
                os.close(pidfd)
        return False
