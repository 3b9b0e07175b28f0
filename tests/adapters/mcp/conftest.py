from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from polyloop.adapters.mcp import McpServer
from tests.adapters._processes import descendants, kill_all

SERVER_SCRIPT = Path(__file__).with_name("_server.py")


def server_spec(ledger: Path, *, name: str = "testsrv", mode: str = "", tag: str = "") -> McpServer:
    """The test server as an McpServer: the real script under this interpreter. ``whoami``
    answers ``name``; ``tag`` marks its processes for :func:`tests.adapters._processes.tagged`."""
    env = {
        "POLYLOOP_TEST_LEDGER": str(ledger),
        "POLYLOOP_TEST_MCP_MODE": mode,
        "POLYLOOP_TEST_LABEL": name,
    }
    if tag:
        env["POLYLOOP_TEST_TAG"] = tag
    return McpServer(name=name, command=sys.executable, args=[str(SERVER_SCRIPT)], env=env)


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Every MCP test must leave no process of its own running once it is over."""
    before = descendants(os.getpid())
    yield
    left = descendants(os.getpid()) - before
    if left:
        kill_all(left)
    assert set() == left, "a test left server processes running"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.txt"
    path.touch()
    return path


def ledger_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()
