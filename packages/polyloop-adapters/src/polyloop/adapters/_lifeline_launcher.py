"""Run one command so that it, and everything it starts, dies with the process that started us.

Run as a script by the agent's own interpreter, never imported (standard library only):

    python -I -S _lifeline_launcher.py <parent pid> <grace seconds> <token> -- <command> [args...]

The MCP binder starts every stdio server through this launcher (design 0026). The launcher
stays between the binder's process and the server:

- It becomes a *child subreaper* (Linux), so every descendant the server leaves behind —
  a ``uvx``/``npx`` grandchild, a process that called ``setsid`` — is re-parented to it rather
  than to init, and can still be found and killed.
- It starts the server in a process group of its own, with the parent-death signal set to
  SIGKILL (so the server dies even if the launcher itself is SIGKILLed). The launcher is
  single-threaded, so that signal follows the right thread.
- It watches its parent *process* (a pidfd where the kernel has them, else ``getppid``), not a
  thread, and never reads stdin: a busy server that reads nothing still dies with its agent.
- When the parent dies, or on SIGTERM/SIGINT/SIGHUP, it sends SIGTERM to the server's group and
  to every other descendant, waits up to ``grace`` seconds, then SIGKILLs whatever is left,
  reaping until it has no child at all. SIGUSR1 skips the grace. When the server exits by
  itself, the launcher sweeps its leftovers the same way and exits with the server's status.

The token is only there so that the binder can find this process among its children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.1
#: How long SIGKILLs are repeated for a descendant that will not go (stuck in the kernel).
KILL_BOUND_SECONDS = 5.0


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


def _pidfd(pid: int) -> int | None:
    opener: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None


def _children() -> list[int]:
    """The pids of our own children (Linux /proc; empty elsewhere)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as listing:
            return [int(pid) for pid in listing.read().split()]
    except (OSError, ValueError):
        pass
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(me):
            found.append(int(entry))
    return found


class Launcher:
    def __init__(self, parent: int, grace: float) -> None:
        self.parent = parent
        self.grace = grace
        self.server: subprocess.Popen[bytes] | None = None
        self.server_status: int | None = None
        self.requested: int | None = None

    # -- signals and waiting ---------------------------------------------------------

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.requested != signal.SIGUSR1:
            self.requested = signum

    def reap(self) -> bool:
        """Collect every exited child; return False once there is no child left at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if self.server is not None and pid == self.server.pid:
                self.server_status = status
                self.server.returncode = os.waitstatus_to_exitcode(status)

    def signal_all(self, signum: int) -> None:
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.server.pid, signum)
        for pid in _children():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def tear_down(self, grace: float) -> None:
        """SIGTERM everything, wait up to ``grace``, SIGKILL the rest, reap to the last child."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.reap() and time.monotonic() < deadline and self.requested != signal.SIGUSR1:
            time.sleep(0.02)
        give_up = time.monotonic() + KILL_BOUND_SECONDS
        while self.reap() and time.monotonic() < give_up:
            self.signal_all(signal.SIGKILL)
            time.sleep(0.01)

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent

    # -- the run -----------------------------------------------------------------------

    def run(self, command: list[str]) -> int:
        prctl = _prctl()
        if prctl is not None:
            prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        watch = _pidfd(self.parent)
        if not self.parent_alive():
            return 1  # the agent is already gone: start nothing
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, self.on_signal)
        launcher = os.getpid()

        def in_child() -> None:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
                signal.signal(signum, signal.SIG_DFL)
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != launcher:
                    os._exit(1)

        try:
            self.server = subprocess.Popen(
                command, preexec_fn=in_child, process_group=0, close_fds=True
            )
        except OSError as error:
            sys.stderr.write(f"polyloop: cannot start {command[0]!r}: {error}\n")
            sys.stderr.flush()
            return 127
        # Only the server holds the protocol pipes from now on: their ends close with it.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        server_fd = _pidfd(self.server.pid)
        watched = [fd for fd in (wake_read, watch, server_fd) if fd is not None]
        timeout = POLL_SECONDS if watch is None or server_fd is None else None
        while True:
            self.reap()
            if self.server_status is not None:
                self.tear_down(self.grace)
                code = self.server.returncode
                return code if code >= 0 else 128 - code
            if self.requested is not None:
                self.tear_down(0.0 if self.requested == signal.SIGUSR1 else self.grace)
                return 128 + self.requested
            if not self.parent_alive():
                self.tear_down(self.grace)
                return 1
            ready = select.select(watched, [], [], timeout)[0]
            if wake_read in ready:
                os.read(wake_read, 512)
            if watch is not None and watch in ready:
                # Readable, yet the parent is still ours (an older kernel's early notice):
                # fall back to polling rather than spin on it.
                watched.remove(watch)
                watch, timeout = None, POLL_SECONDS


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        sys.stderr.write(
            "usage: _lifeline_launcher.py PARENT_PID GRACE TOKEN -- COMMAND [ARGS...]\n"
        )
        return 2
    return Launcher(int(argv[1]), float(argv[2])).run(argv[5:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
