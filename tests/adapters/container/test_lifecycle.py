"""Lifecycle: parameters and session identity, exit, cancellation, process death, and what a
backend that cannot start says."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from polyloop.adapters.container import (
    BackendUnavailableError,
    BubblewrapBackend,
    ContainerExecutor,
    DockerBackend,
    Limits,
    SessionDeadError,
    remove_orphan_containers,
)
from polyloop.ports import ActionExecutor
from tests.adapters.container.conftest import (
    ExecutorFactory,
    containers_of,
    make_backend,
    processes_of,
    run_code,
    wait_until_gone,
)


@pytest.mark.slow
async def test_parameters_report_the_configuration_and_session(
    make_executor: ExecutorFactory, backend_name: str
) -> None:
    """parameters() report backend, statefulness, session, limits, network, user and image as
    strings, the same on every call."""
    executor = await make_executor(
        limits=Limits(memory_mb=200, max_processes=20, scratch_mb=16),
        time_limit_seconds=7.5,
        max_output_chars=1234,
    )
    assert isinstance(executor, ActionExecutor)
    params = executor.parameters()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    assert params["backend"] == backend_name
    assert params["stateful"] == "true"
    assert params["session_id"] == executor.session_id
    assert params["network"] == "none"
    assert params["time_limit_seconds"] == "7.5"
    assert params["max_output_chars"] == "1234"
    assert (params["memory_mb"], params["max_processes"], params["scratch_mb"]) == (
        "200",
        "20",
        "16",
    )
    assert params["uid"] == "65534"
    expected_image = "host:/usr" if backend_name == "bubblewrap" else "polyloop-python:local"
    assert params["image"] == expected_image
    # Asking again changes nothing: the snapshot is stable for the session's lifetime.
    assert executor.parameters() == params


@pytest.mark.slow
async def test_restart_replaces_the_session_and_its_identity(executor: ContainerExecutor) -> None:
    """restart gives a new session id and fresh state, and the old session's processes are gone."""
    before = executor.session_id
    await run_code(executor, "secret = 1")
    await executor.restart()
    assert executor.session_id != before
    assert executor.parameters()["session_id"] == executor.session_id
    outcome = await run_code(executor, "print('secret' in globals())")
    assert outcome.observation == "False\n"
    assert await wait_until_gone(before) == []


@pytest.mark.slow
async def test_exit_kills_the_sandbox(backend_name: str, executor: ContainerExecutor) -> None:
    """close kills every process of the sandbox, forked children included (and its container on
    docker)."""
    session_id = executor.session_id
    await run_code(executor, "import os\nif os.fork() == 0:\n    import time\n    time.sleep(120)")
    assert len(processes_of(session_id)) >= 2
    await executor.close()
    assert await wait_until_gone(session_id) == []
    if backend_name == "docker":
        assert await containers_of(session_id) == []


@pytest.mark.slow
async def test_async_with_closes_the_session(backend_name: str) -> None:
    """Leaving async with closes the session and leaves no process or container behind."""
    if backend_name == "docker":
        from polyloop.adapters.container import ensure_docker_image

        await ensure_docker_image()
    async with ContainerExecutor(make_backend(backend_name)) as executor:
        session_id = executor.session_id
        assert (await run_code(executor, "print(6 * 7)")).observation == "42\n"
        assert processes_of(session_id) != []
    assert not executor.alive
    assert await wait_until_gone(session_id) == []
    if backend_name == "docker":
        assert await containers_of(session_id) == []


@pytest.mark.slow
async def test_cancellation_kills_the_sandbox(
    executor: ContainerExecutor, backend_name: str
) -> None:
    """Cancelling a running action kills the sandbox, and the next execute says the session died by
    cancellation."""
    session_id = executor.session_id
    task = asyncio.create_task(run_code(executor, "import time\ntime.sleep(120)"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not executor.alive
    assert await wait_until_gone(session_id) == []
    if backend_name == "docker":
        assert await containers_of(session_id) == []
    with pytest.raises(SessionDeadError, match="cancelled"):
        await run_code(executor, "print(1)")


_OWNER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from polyloop.adapters.container import ContainerExecutor, BubblewrapBackend, DockerBackend
    from polyloop.ports import Action

    async def main():
        backend = BubblewrapBackend() if sys.argv[1] == "bubblewrap" else DockerBackend()
        executor = ContainerExecutor(backend, time_limit_seconds=600)
        await executor.start()
        print(executor.session_id, flush=True)
        code = "import os, time\\nif os.fork() == 0:\\n    time.sleep(600)\\ntime.sleep(600)"
        await executor.execute(Action(text=code, tool_call=None))

    asyncio.run(main())
    """
)


@pytest.mark.crash
@pytest.mark.slow
async def test_sandbox_dies_with_its_owner_process(backend_name: str, tmp_path: Path) -> None:
    """SIGKILL of the owning process (no cleanup code runs) stops everything inside within 2 s,
    the sandboxed code busy and with a forked child."""
    if backend_name == "docker":
        from polyloop.adapters.container import ensure_docker_image

        await ensure_docker_image()
    script = tmp_path / "owner.py"
    script.write_text(_OWNER_SCRIPT)
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        backend_name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert owner.stdout is not None
    line = await asyncio.wait_for(owner.stdout.readline(), 60)
    session_id = line.decode().strip()
    assert len(session_id) == 32, line
    # Wait until the action (and its forked child) are running inside.
    for _ in range(100):
        if len(processes_of(session_id)) >= 3:
            break
        await asyncio.sleep(0.1)
    assert len(processes_of(session_id)) >= 3
    owner.send_signal(signal.SIGKILL)
    await owner.communicate()
    # Within 2 s, as for MCP servers (issue 20): bwrap by --die-with-parent, docker because the
    # client's death closes the driver's stdin and the driver exits at once.
    assert await wait_until_gone(session_id, 2.0) == []
    if backend_name == "docker":
        for _ in range(100):
            if not await containers_of(session_id):
                break
            await asyncio.sleep(0.1)
        assert await containers_of(session_id) == []


@pytest.mark.slow
async def test_orphan_sweep_removes_containers_of_dead_owners() -> None:
    """A container whose owner label names a dead process is removed by the sweep."""
    from polyloop.adapters.container import ensure_docker_image

    await ensure_docker_image()
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    import socket

    name = f"polyloop-orphan-test-{os.getpid()}"
    proc = await asyncio.create_subprocess_exec(
        "docker",
        "run",
        "--detach",
        "--rm",
        "--name",
        name,
        "--label",
        f"io.polyloop.owner={socket.gethostname()}:{dead.pid}",
        "--label",
        "io.polyloop.session=orphan-test",
        "--network",
        "none",
        "polyloop-python:local",
        "/usr/bin/python3",
        "-c",
        "import time; time.sleep(120)",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    try:
        removed = await remove_orphan_containers()
        assert name in removed
        assert await containers_of("orphan-test") == []
    finally:
        cleanup = await asyncio.create_subprocess_exec(
            "docker",
            "rm",
            "--force",
            name,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await cleanup.wait()


async def test_missing_bubblewrap_says_what_to_install() -> None:
    """Without bwrap, start fails with BackendUnavailableError saying what to install."""
    executor = ContainerExecutor(BubblewrapBackend(bwrap="bwrap-not-installed-here"))
    with pytest.raises(BackendUnavailableError, match="apt-get install bubblewrap"):
        await executor.start()


async def test_missing_interpreter_in_rootfs_says_so(tmp_path: Path) -> None:
    """A rootfs without the interpreter fails start saying the path does not exist."""
    executor = ContainerExecutor(BubblewrapBackend(rootfs=str(tmp_path)))
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        await executor.start()


async def test_unreachable_docker_engine_says_how_to_start_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no Docker Engine answering, start fails saying how to start dockerd."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    executor = ContainerExecutor(DockerBackend())
    with pytest.raises(BackendUnavailableError, match=r"No Docker Engine answers.*dockerd"):
        await executor.start()


@pytest.mark.slow
async def test_missing_docker_image_says_how_to_build_it() -> None:
    """A missing image fails start saying how to build it."""
    executor = ContainerExecutor(DockerBackend(image="polyloop-no-such-image:missing"))
    with pytest.raises(BackendUnavailableError, match="build-image"):
        await executor.start()


@pytest.mark.slow
async def test_user_rootfs_works_for_bubblewrap(tmp_path: Path) -> None:
    """A root file system built from this machine's Python is a usable bubblewrap image."""
    from polyloop.adapters.container import build_rootfs

    private = build_rootfs(tmp_path / "root")
    with pytest.raises(BackendUnavailableError, match="readable and searchable"):
        await ContainerExecutor(BubblewrapBackend(rootfs=str(private))).start()
    shared = Path(tempfile.mkdtemp(prefix="polyloop-rootfs-test-"))
    try:
        shared.chmod(0o755)  # noqa: ASYNC240
        root = build_rootfs(shared / "root")
        async with ContainerExecutor(BubblewrapBackend(rootfs=str(root))) as executor:
            assert executor.parameters()["image"] == f"rootfs:{root}"
            outcome = await run_code(
                executor, "import os, json\nprint(json.dumps(sorted(os.listdir('/'))))"
            )
    finally:
        shutil.rmtree(shared)
    listing = json.loads(outcome.observation)
    assert "scratch" in listing
    assert "root" not in listing


@pytest.mark.slow
async def test_an_image_without_the_interpreter_reports_the_sandbox_error() -> None:
    """An image lacking the configured interpreter fails start naming it, and leaves no live
    session."""
    from polyloop.adapters.container import ensure_docker_image

    await ensure_docker_image()
    executor = ContainerExecutor(DockerBackend(python="/opt/no-such/python3"))
    with pytest.raises(BackendUnavailableError, match="exited before its interpreter") as caught:
        await executor.start()
    assert "/opt/no-such/python3" in str(caught.value)
    assert not executor.alive
