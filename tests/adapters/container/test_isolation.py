"""Isolation, proven from inside the sandbox against what the host itself can do."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polyloop.adapters.container import (
    BubblewrapBackend,
    ContainerExecutor,
    Limits,
    SessionDeadError,
)
from polyloop.types import ActionStatus
from tests.adapters.container.conftest import ExecutorFactory, run_code

#: Every test starts real sandboxes on both backends.
pytestmark = pytest.mark.slow

FORK_LOOP = (
    "import os, signal, time\n"
    "children = []\n"
    "error = None\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as e:\n"
    "        error = type(e).__name__\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
    "    children.append(pid)\n"
    "for pid in children:\n"
    "    os.kill(pid, signal.SIGKILL)\n"
    "    os.waitpid(pid, 0)\n"
    "print(len(children), error)\n"
)


@pytest.fixture
async def loopback_port() -> AsyncIterator[int]:
    """A TCP listener on the host's loopback that answers ``pong``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port
    server.close()
    await server.wait_closed()


async def test_no_network_connect_fails_inside_and_succeeds_outside(
    executor: ContainerExecutor, loopback_port: int
) -> None:
    """Inside the sandbox a connection to a loopback server of the host fails and only the sandbox's
    own lo exists; outside it succeeds."""
    reader, writer = await asyncio.open_connection("127.0.0.1", loopback_port)
    assert await reader.read() == b"pong"
    writer.close()
    await writer.wait_closed()

    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {loopback_port}), timeout=3).recv(4)\n"
        "    print('connected')\n"
        "except OSError as error:\n"
        "    print('refused', type(error).__name__)\n"
        "print(sorted(name for _, name in socket.if_nameindex()))\n"
    )
    outcome = await run_code(executor, code)
    assert outcome.status is ActionStatus.EXECUTED
    assert outcome.observation.startswith("refused "), outcome.observation
    # The only interface inside is the sandbox's own loopback.
    assert outcome.observation.endswith("['lo']\n"), outcome.observation


async def test_root_is_read_only_and_scratch_is_private_and_writable(
    executor: ContainerExecutor,
) -> None:
    """The sandbox cannot write to / or /usr, can write to /scratch, and the host file system is
    untouched."""
    code = (
        "import os\n"
        "for path in ('/usr/evil', '/evil', '/scratch/ok'):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print(path, 'written')\n"
        "    except OSError as error:\n"
        "        print(path, error.strerror)\n"
    )
    outcome = await run_code(executor, code)
    lines = outcome.observation.splitlines()
    assert lines[0] in ("/usr/evil Read-only file system", "/usr/evil Permission denied")
    assert lines[1] in ("/evil Read-only file system", "/evil Permission denied")
    assert lines[2] == "/scratch/ok written"
    assert not Path("/usr/evil").exists()  # noqa: ASYNC240


async def test_unprivileged_user_without_capabilities(executor: ContainerExecutor) -> None:
    """Code runs as nobody (65534) with no capabilities and no_new_privs set."""
    code = (
        "import os\n"
        "status = open('/proc/self/status').read()\n"
        "caps = {l.split(':')[0]: l.split()[1] for l in status.splitlines() if l.startswith('Cap')}\n"
        "print(os.getuid(), os.geteuid(), os.getgid())\n"
        "print(caps['CapEff'], caps['CapPrm'], caps['CapBnd'])\n"
        "print(status.split('NoNewPrivs:')[1].split()[0] if 'NoNewPrivs' in status else '?')\n"
    )
    outcome = await run_code(executor, code)
    lines = outcome.observation.splitlines()
    assert lines[0] == "65534 65534 65534"
    assert lines[1] == "0000000000000000 0000000000000000 0000000000000000"
    assert lines[2] == "1"
    # What the driver reported at start says the same, without running any code.
    info = executor.sandbox_info
    assert info["uid"] == 65534
    assert isinstance(info["pid"], int)
    assert str(info["python"]).count(".") == 2


async def test_no_nested_namespaces(executor: ContainerExecutor) -> None:
    """The code cannot make a user namespace of its own (bwrap --disable-userns; docker's
    seccomp profile), nor mount anything."""
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), libc.unshare(0x00020000))\n"
    )
    outcome = await run_code(executor, code)
    assert outcome.observation == "-1 -1\n", outcome.observation


async def test_host_secrets_are_not_visible(executor: ContainerExecutor) -> None:
    """The host's environment variables and home directories are not visible inside the sandbox, in
    any process."""
    os.environ["POLYLOOP_TEST_SECRET"] = "hunter2-secret"
    try:
        # A session started after the secret was set still must not see it.
        await executor.restart()
        code = (
            "import os\n"
            "print(sorted(os.environ))\n"
            "print(any(b'hunter2' in open(f'/proc/{p}/environ', 'rb').read()\n"
            "          for p in os.listdir('/proc') if p.isdigit()\n"
            "          if os.access(f'/proc/{p}/environ', os.R_OK)))\n"
            "for path in ('/root', '/home', '/work', '/etc/shadow'):\n"
            "    print(path, os.path.exists(path))\n"
        )
        outcome = await run_code(executor, code)
    finally:
        del os.environ["POLYLOOP_TEST_SECRET"]
    lines = outcome.observation.splitlines()
    assert "POLYLOOP_TEST_SECRET" not in lines[0]
    assert set(eval(lines[0])) <= {"PATH", "HOME", "TMPDIR", "HOSTNAME", "LC_CTYPE", "PWD"}
    assert lines[1] == "False"
    assert lines[2:] == [
        "/root False",
        "/home False",
        "/work False",
        "/etc/shadow False",
    ]
    assert Path("/root").exists()  # noqa: ASYNC240


async def test_memory_limit_turns_a_large_allocation_into_memory_error(
    make_executor: ExecutorFactory,
) -> None:
    """Past the memory limit an allocation is a MemoryError observation, and the session keeps its
    state."""
    executor = await make_executor(limits=Limits(memory_mb=128, max_processes=32))
    small = await run_code(executor, "block = b'x' * (16 * 1024 * 1024)\nprint(len(block))")
    assert small.observation == f"{16 * 1024 * 1024}\n"
    big = await run_code(executor, "huge = b'x' * (512 * 1024 * 1024)\nprint('allocated')")
    assert big.status is ActionStatus.EXECUTED
    assert "allocated" not in big.observation
    assert big.observation.rstrip().endswith("MemoryError")
    assert (await run_code(executor, "print(len(block))")).observation == f"{16 * 1024 * 1024}\n"


async def test_memory_limit_bounds_the_whole_sandbox(make_executor: ExecutorFactory) -> None:
    """Several processes together cannot use more than the limit (each one alone could)."""
    executor = await make_executor(limits=Limits(memory_mb=128, max_processes=32))
    code = (
        "import os, time\n"
        "pids = []\n"
        "for _ in range(5):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (60 * 1024 * 1024)\n"
        "        time.sleep(1.5)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "codes = [os.waitpid(pid, 0)[1] for pid in pids]\n"
        "print(sum(1 for c in codes if os.WIFSIGNALED(c) and os.WTERMSIG(c) == 9))\n"
    )
    try:
        outcome = await run_code(executor, code)
    except SessionDeadError:
        return  # the OOM killer picked the interpreter itself: the limit held
    killed = int(outcome.observation.split()[-1])
    assert killed >= 1, outcome.observation


async def test_process_limit_stops_a_fork_loop(make_executor: ExecutorFactory) -> None:
    """A fork loop stops at the process limit with BlockingIOError and the session stays alive."""
    executor = await make_executor(limits=Limits(memory_mb=256, max_processes=24))
    outcome = await run_code(executor, FORK_LOOP)
    count, error = outcome.observation.split()
    assert 0 < int(count) < 24
    assert error == "BlockingIOError"
    assert (await run_code(executor, "print('alive')")).observation == "alive\n"


async def test_rlimit_fallback_bounds_memory_and_processes() -> None:
    """Where no cgroup can be made, bubblewrap's limits come from rlimits (forced here)."""
    backend = BubblewrapBackend(limits_via="rlimit")
    executor = ContainerExecutor(backend, limits=Limits(memory_mb=128, max_processes=48))
    async with executor:
        assert backend.limits_mechanism == "rlimit"
        big = await run_code(executor, "huge = b'x' * (512 * 1024 * 1024)\nprint('allocated')")
        assert big.observation.rstrip().endswith("MemoryError")
        forks = await run_code(executor, FORK_LOOP)
    count, error = forks.observation.split()
    assert int(count) < 48
    assert error == "BlockingIOError"
