"""The third-party MCP servers the tests run (pinned in the root pyproject's dev group), and a
scratch git repository for the git server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from polyloop.adapters.mcp import McpServer

BIN = Path(sys.executable).parent


def installed(name: str) -> str:
    """The path of a server's console script; fails (never skips) when it is missing."""
    path = BIN / name
    assert path.exists(), (
        f"{name} is not installed next to {sys.executable}; run `uv sync --all-packages "
        "--frozen` (it is a pinned dev dependency in the root pyproject.toml)."
    )
    return str(path)


def time_server(name: str = "time", **options: object) -> McpServer:
    return McpServer(
        name,
        installed("mcp-server-time"),
        ["--local-timezone", "UTC"],
        **options,  # type: ignore[arg-type]
    )


def git_server(repository: Path, name: str = "git", **options: object) -> McpServer:
    return McpServer(
        name,
        installed("mcp-server-git"),
        ["--repository", str(repository)],
        **options,  # type: ignore[arg-type]
    )


def make_repository(path: Path) -> Path:
    """A git repository with one commit and one staged change."""
    git = shutil.which("git")
    assert git is not None, "git is needed by mcp-server-git (apt-get install git)"
    path.mkdir()

    def run(*args: str) -> None:
        subprocess.run([git, *args], cwd=path, check=True, capture_output=True)

    run("init", "-q", "-b", "main")
    run("config", "user.email", "tests@polyloop.invalid")
    run("config", "user.name", "PolyLoop tests")
    (path / "notes.txt").write_text("first\n")
    run("add", "notes.txt")
    run("commit", "-q", "-m", "first note")
    (path / "notes.txt").write_text("first\nsecond\n")
    run("add", "notes.txt")
    return path
