"""MCP server processes never outlive their agent (issue 20): an agent busy in a slow tool call
is SIGKILLed, and within 2 s no process it started — server, hook, grandchild — is left, even
when they ignore SIGTERM. Closing a binder normally is graceful first, forcible after a bound.

Every process of a test carries a unique ``POLYLOOP_TEST_TAG`` in its environment, which all
their descendants inherit wherever they get re-parented; /proc finds them by it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from polyloop.adapters.mcp import McpToolBinder
from polyloop.ports import Action, ToolCall
from polyloop.types import ActionStatus
from tests.adapters._processes import kill_all, tagged, wait_until_none
from tests.adapters.mcp._real_servers import make_repository
from tests.adapters.mcp.conftest import server_spec

pytestmark = pytest.mark.crash

AGENT = Path(__file__).with_name("_agent.py")


def slow_hook(repository: Path, *, ignore_term: bool) -> None:
    hook = repository / ".git" / "hooks" / "pre-commit"
    trap = "trap '' TERM\n" if ignore_term else ""
    hook.write_text(f'#!/bin/sh\n{trap}echo busy > "$POLYLOOP_TEST_READY"\nsleep 600\n')
    hook.chmod(0o755)


def kill_busy_agent(mode: str, target: Path, tmp_path: Path, **env: str) -> set[int]:
    """Start the agent, wait until its tool call is busy, SIGKILL it; return what is still
    running 2 s later."""
    tag = uuid.uuid4().hex
    ready = tmp_path / "ready"
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), mode, str(target), tag, str(ready)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert agent.poll() is None, agent.communicate()[1].decode()
            assert time.monotonic() < deadline, "the tool call never became busy"
            time.sleep(0.05)
        busy = tagged(tag)
        assert len(busy) >= 3, f"expected launcher, server and its child busy, found {busy}"
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        left = wait_until_none(tag, 2.0)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        assert agent.stderr is not None
        agent.stderr.close()
    kill_all(left)
    return left


@pytest.mark.slow
def test_a_killed_agent_takes_the_busy_git_server_and_its_hook_along(tmp_path: Path) -> None:
    """The real mcp-server-git, blocked in a commit whose hook sleeps: SIGKILL of the agent
    leaves no server, hook or sleep process after 2 s."""
    repository = make_repository(tmp_path / "repo")
    slow_hook(repository, ignore_term=False)
    assert set() == kill_busy_agent("git", repository, tmp_path)


@pytest.mark.slow
def test_a_killed_agent_takes_a_server_ignoring_sigterm_along(tmp_path: Path) -> None:
    """The same with the git server and its hook both ignoring SIGTERM."""
    repository = make_repository(tmp_path / "repo")
    slow_hook(repository, ignore_term=True)
    assert set() == kill_busy_agent("git", repository, tmp_path, POLYLOOP_TEST_STUBBORN="1")


@pytest.mark.slow
def test_a_killed_agent_takes_a_stubborn_server_and_its_detached_grandchild_along(
    tmp_path: Path,
) -> None:
    """A server that ignores SIGTERM, blocks its whole event loop (it reads no stdin) and has
    started a grandchild in a session of its own: nothing of it survives the agent by 2 s."""
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    assert set() == kill_busy_agent("stubborn", ledger, tmp_path)


@pytest.mark.slow
async def test_closing_the_binder_stops_a_busy_stubborn_server_within_a_bound(
    tmp_path: Path,
) -> None:
    """`aclose` on a server blocked in a call and ignoring SIGTERM: stdin is closed, then
    SIGTERM, then SIGKILL of the server and its detached grandchild, in a few seconds."""
    tag = uuid.uuid4().hex
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    binder = McpToolBinder([server_spec(ledger, mode="stubborn", tag=tag)])
    toolset = await binder.bind("testsrv", ["block"])
    call = asyncio.ensure_future(
        toolset.executor().execute(Action("block", ToolCall("block", {"seconds": 600})))
    )
    # The server writes `block` to the ledger once the request is with it.
    while "block" not in ledger.read_text(encoding="utf-8").split():
        assert not call.done(), call.result()
        await asyncio.sleep(0.02)
    started = time.monotonic()
    await binder.aclose()
    elapsed = time.monotonic() - started
    outcome = await call
    left = tagged(tag)
    kill_all(left)
    assert set() == left
    assert elapsed < 5.0, f"closing took {elapsed:.1f} s"
    assert ActionStatus.ENV_ERROR is outcome.status
