"""Fixtures for the container executor's tests: real sandboxes on both backends, no mocks.

Every test that takes ``backend_name`` runs once on bubblewrap and once on docker. A backend
that cannot start on the machine makes its tests fail with the backend's own message (what is
missing): they are never skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from polyloop.adapters.container import (
    BubblewrapBackend,
    ContainerExecutor,
    DockerBackend,
    Limits,
    SandboxBackend,
    ensure_docker_image,
)
from polyloop.ports import Action
from polyloop.types import ActionOutcome

BACKENDS = ("bubblewrap", "docker")

_image_built = False


def make_backend(name: str) -> SandboxBackend:
    if name == "bubblewrap":
        return BubblewrapBackend()
    return DockerBackend()


async def _ensure_image() -> None:
    global _image_built
    if not _image_built:
        await ensure_docker_image()
        _image_built = True


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


ExecutorFactory = Callable[..., Awaitable[ContainerExecutor]]


@pytest.fixture
async def make_executor(backend_name: str) -> AsyncIterator[ExecutorFactory]:
    """Start executors on the parametrized backend; every one is closed after the test."""
    started: list[ContainerExecutor] = []
    if backend_name == "docker":
        await _ensure_image()

    async def factory(**kwargs: object) -> ContainerExecutor:
        kwargs.setdefault("time_limit_seconds", 5.0)
        kwargs.setdefault("interrupt_grace_seconds", 1.0)
        executor = ContainerExecutor(make_backend(backend_name), **kwargs)  # type: ignore[arg-type]
        started.append(executor)
        await executor.start()
        return executor

    yield factory
    for executor in started:
        await executor.close()


@pytest.fixture
async def executor(make_executor: ExecutorFactory) -> ContainerExecutor:
    return await make_executor(limits=Limits(memory_mb=256, max_processes=32))


async def run_code(executor: ContainerExecutor, code: str) -> ActionOutcome:
    return await executor.execute(Action(text=code, tool_call=None))


def processes_of(session_id: str) -> list[int]:
    """Host PIDs whose command line mentions ``session_id`` (sandboxed code and its clients).

    Sandboxed processes are visible from the host's PID namespace; the driver's argv carries
    the session id, and so do its forked children.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if session_id.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def wait_until_gone(session_id: str, seconds: float = 15.0) -> list[int]:
    """Poll until no process of the session is left; return what is left at the deadline."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        left = processes_of(session_id)
        if not left or asyncio.get_running_loop().time() > deadline:
            return left
        await asyncio.sleep(0.1)


async def containers_of(session_id: str) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        "docker",
        "ps",
        "--all",
        "--quiet",
        "--filter",
        f"label=io.polyloop.session={session_id}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode().split()


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                parents[int(entry.name)] = int(stat[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _is_sandbox(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"polyloop-end-" in cmdline or b"bwrap" in cmdline or b"polyloop-" in cmdline


@pytest.fixture(scope="session", autouse=True)
def no_sandbox_outlives_the_tests() -> Iterator[None]:
    """After all container tests: no container owned by this process, no sandbox process."""
    yield
    owner = f"io.polyloop.owner={socket.gethostname()}:{os.getpid()}"
    deadline = time.monotonic() + 15
    while True:
        if shutil.which("docker") is None:
            left = []  # no Docker client: the docker tests failed already, saying so
        else:
            listed = subprocess.run(
                ["docker", "ps", "--all", "--quiet", "--filter", f"label={owner}"],
                capture_output=True,
                text=True,
                check=False,
            )
            left = listed.stdout.split() if listed.returncode == 0 else [listed.stderr]
        processes = [pid for pid in _descendants(os.getpid()) if _is_sandbox(pid)]
        if (not left and not processes) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == [], f"containers left behind: {left}"
    assert processes == [], f"processes left behind: {processes}"
