"""A real MCP server (stdio) for the binder's tests, written with the SDK's server API.

Run as a script: ``python _server.py``. Environment:
- ``POLYLOOP_TEST_LEDGER``: file that ``append`` and ``set_flag`` write to (one line per call),
  so a test can count how often a side effect really happened.
- ``POLYLOOP_TEST_MCP_MODE``: ``crash`` (exit at start with a message on stderr), ``hang``
  (never answer the handshake), ``empty`` (offer no tools), ``stubborn`` (ignore SIGTERM, and
  start a grandchild in a session of its own that ignores it too); anything else serves
  normally.
- ``POLYLOOP_TEST_LABEL``: what ``whoami`` answers.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

MODE = os.environ.get("POLYLOOP_TEST_MCP_MODE", "")


def _ledger(entry: str) -> int:
    path = Path(os.environ["POLYLOOP_TEST_LEDGER"])
    with path.open("a", encoding="utf-8") as ledger:
        ledger.write(entry + "\n")
    return len(path.read_text(encoding="utf-8").splitlines())


server: MCPServer = MCPServer("polyloop-test-server", version="1.0")

if MODE != "empty":

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Return the text, prefixed with 'echo:'."""
        return "echo:" + text

    @server.tool()
    def append(line: str) -> str:
        """Append a line to the ledger (a side effect that must not repeat)."""
        return f"appended #{_ledger('append ' + line)}"

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def set_flag(name: str) -> str:
        """Set a named flag (idempotent)."""
        _ledger("set_flag " + name)
        return f"flag {name} set"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the given reason."""
        raise ToolError(f"refused: {reason}")

    @server.tool()
    def die() -> str:
        """Kill the server process (simulates a crashing server)."""
        sys.stderr.write("test server: dying on request\n")
        sys.stderr.flush()
        os._exit(1)

    @server.tool()
    async def stall(seconds: float) -> str:
        """Take this long to answer."""
        import anyio

        await anyio.sleep(seconds)
        return "stalled"

    @server.tool()
    def finish(summary: str) -> str:
        """Declare the task done."""
        return "finished: " + summary

    @server.tool()
    def whoami() -> str:
        """Say which server this is."""
        return os.environ.get("POLYLOOP_TEST_LABEL", "unlabelled")

    @server.tool()
    def big(chars: int) -> str:
        """Return this many characters of text."""
        return "x" * chars

    @server.tool()
    def picture(text: str) -> list[TextContent | ImageContent]:
        """Return a caption and an image (base64 data that must not reach the model)."""
        data = base64.b64encode(b"\x89PNG" + b"\0" * 3000).decode("ascii")
        return [
            TextContent(type="text", text=text),
            ImageContent(type="image", data=data, mime_type="image/png"),
        ]

    @server.tool()
    def block(seconds: float) -> str:
        """Block the whole server (no stdin is read) for this long, like a synchronous query.

        The ledger's ``block`` line says the call has reached the server: a test waits for it,
        not for time."""
        if "POLYLOOP_TEST_LEDGER" in os.environ:
            _ledger("block")
        time.sleep(seconds)
        return "unblocked"


if __name__ == "__main__":
    if MODE == "crash":
        sys.stderr.write("fatal: test server configuration missing\n")
        sys.exit(2)
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen(
            ["sh", "-c", "trap '' TERM; sleep 600"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    server.run()
