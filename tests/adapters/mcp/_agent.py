"""An agent process for the SIGKILL tests: it binds one MCP server, starts one slow tool call
and waits. Run: ``python _agent.py git|stubborn <repository or ledger> <tag> <ready file>``.

- ``git``: the real mcp-server-git, committing in a repository whose pre-commit hook writes the
  ready file and then sleeps (a grandchild of the server); with ``POLYLOOP_TEST_STUBBORN=1`` the
  server and the hook ignore SIGTERM.
- ``stubborn``: the project's test server in ``stubborn`` mode (it ignores SIGTERM and has
  started a grandchild in a session of its own), blocked in a synchronous call.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from polyloop.adapters.mcp import McpServer, McpToolBinder
from polyloop.ports import Action, ToolCall

HERE = Path(__file__).resolve().parent


def _wait_until_blocked(ledger: Path) -> None:
    """The server writes `block` to the ledger once the request is with it."""
    while "block" not in ledger.read_text(encoding="utf-8").split():
        time.sleep(0.02)


async def main(mode: str, target: str, tag: str, ready: str) -> None:
    env = {"POLYLOOP_TEST_TAG": tag, "POLYLOOP_TEST_READY": ready}
    if mode == "git":
        git = str(Path(sys.executable).parent / "mcp-server-git")
        command, args = git, ["--repository", target]
        if os.environ.get("POLYLOOP_TEST_STUBBORN") == "1":
            command, args = "sh", ["-c", 'trap \'\' TERM; exec "$0" "$@"', git, *args]
        server = McpServer("git", command, args, env=env)
        tool, arguments = "git_commit", {"repo_path": target, "message": "slow"}
    else:
        env |= {"POLYLOOP_TEST_LEDGER": target, "POLYLOOP_TEST_MCP_MODE": "stubborn"}
        server = McpServer("stubborn", sys.executable, [str(HERE / "_server.py")], env=env)
        tool, arguments = "block", {"seconds": 600}
    async with McpToolBinder([server], startup_timeout=60, call_timeout=900) as binder:
        toolset = await binder.bind(server.name, [tool])
        call = asyncio.ensure_future(
            toolset.executor().execute(Action(tool, ToolCall(tool, arguments)))
        )
        if mode != "git":
            await asyncio.to_thread(_wait_until_blocked, Path(target))
            await asyncio.to_thread(Path(ready).write_text, "busy\n")
        await call


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
