from __future__ import annotations

import sys
from pathlib import Path

import pytest

from polyloop.adapters.mcp import McpServer

SERVER_SCRIPT = Path(__file__).with_name("_server.py")


def server_spec(ledger: Path, *, name: str = "testsrv", mode: str = "") -> McpServer:
    """The test server as an McpServer: the real script under this interpreter."""
    return McpServer(
        name=name,
        command=sys.executable,
        args=[str(SERVER_SCRIPT)],
        env={"POLYLOOP_TEST_LEDGER": str(ledger), "POLYLOOP_TEST_MCP_MODE": mode},
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.txt"
    path.touch()
    return path


def ledger_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()
