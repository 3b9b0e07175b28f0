"""One running MCP server: its launcher, stdio transport and session, owned by a background
task (so any task can use and close it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TextIO, cast

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError

from polyloop.adapters._lifeline_host import Lifeline
from polyloop.adapters.mcp._errors import (
    McpError,
    McpServerStartError,
    McpServerUnavailable,
    McpToolFailed,
)
from polyloop.adapters.mcp._results import result_text as _result_text
from polyloop.adapters.mcp._server import McpServer

logger = logging.getLogger("polyloop.adapters.mcp")

_STDERR_TAIL_CHARS: Final = 2000
#: Seconds a server gets between SIGTERM and SIGKILL, from its launcher (design 0026). The
#: MCP SDK waits 2 s after closing stdin, then SIGTERMs the launcher and SIGKILLs it 2 s later.
_SERVER_TERM_GRACE: Final = 1.0

__all__ = ["Connection"]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in error.exceptions:
            found += _leaves(inner)
        return found
    return [error]


def _describe(error: BaseException) -> str:
    parts = [f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(error)]
    return "; ".join(parts) or type(error).__name__


class Connection:
    """One running server: a background task owns the stdio transport and the MCP session, so
    the connection can be used from any task and closed from any task."""

    def __init__(
        self,
        spec: McpServer,
        *,
        startup_timeout: float,
        call_timeout: float,
        max_output_chars: int,
    ) -> None:
        self.spec = spec
        self._startup_timeout = startup_timeout
        self._call_timeout = call_timeout
        self.max_output_chars = max_output_chars
        # The server runs under a launcher that kills it (and what it started) when this
        # process dies, however it dies (design 0026).
        self._lifeline = Lifeline.new(_SERVER_TERM_GRACE)
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[list[mcp_types.Tool]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._errlog: TextIO | None = None
        self.dead_reason: str | None = None
        self.server_info = ""
        self.tools: list[mcp_types.Tool] = []

    def stderr_tail(self) -> str:
        log = self._errlog
        if log is None or log.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            log.flush()
            size = os.fstat(log.fileno()).st_size
            start = max(0, size - _STDERR_TAIL_CHARS)
            data = os.pread(log.fileno(), _STDERR_TAIL_CHARS, start)
            return data.decode("utf-8", "replace").strip()
        return ""

    def _environment(self) -> dict[str, str]:
        return get_default_environment() | dict(self.spec.env or {})

    def _check_command(self) -> None:
        """Refuse at once a command that cannot be found (the launcher would only say so on
        its stderr)."""
        command = self.spec.command
        if os.sep in command:
            path = Path(self.spec.cwd or ".") / command
            found = path.is_file() and os.access(path, os.X_OK)
        else:
            found = shutil.which(command, path=self._environment().get("PATH")) is not None
        if not found:
            raise McpServerStartError(
                f"MCP server {self.spec.name!r} could not be started ({self.spec.command_line()})"
                f": the command {command!r} was not found or is not executable"
                f"{'' if os.sep in command else ' on its PATH'}. No tools were bound.",
                server=self.spec.name,
            )

    async def start(self) -> list[mcp_types.Tool]:
        self._check_command()
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        # Owned by the connection and closed in close(); the server's stderr goes here so a
        # start failure can quote it.
        self._errlog = cast(TextIO, tempfile.TemporaryFile("w+", encoding="utf-8"))  # noqa: SIM115
        self._task = loop.create_task(self._serve(), name=f"mcp-server-{self.spec.name}")
        try:
            self.tools = await self._ready
        except BaseException:
            await self.close()
            raise
        return self.tools

    async def _serve(self) -> None:
        assert self._ready is not None
        assert self._errlog is not None
        command, args = self._lifeline.command(self.spec.command, self.spec.args)
        params = StdioServerParameters(
            command=command,
            args=args,
            env=dict(self.spec.env) if self.spec.env is not None else None,
            cwd=self.spec.cwd,
        )
        try:
            async with (
                stdio_client(params, errlog=self._errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                try:
                    with anyio.fail_after(self._startup_timeout):
                        initialized = await session.initialize()
                        tools = await _list_all_tools(session)
                except BaseException:
                    # A server that failed to start gets no graceful shutdown: otherwise the
                    # SDK's stdin grace would add 2 s to startup_timeout.
                    self._lifeline.signal()
                    raise
                info = initialized.server_info
                self.server_info = f"{info.name} {info.version}".strip()
                self._session = session
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as error:  # reported through the future, or marks the server dead
            if not self._ready.done():
                self._ready.set_exception(self._start_error(error))
            elif not self._stop.is_set():
                self.dead_reason = _describe(error)
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            self._session = None
            if self.dead_reason is None and not self._stop.is_set():
                self.dead_reason = "the connection to the server ended"

    def _start_error(self, error: BaseException) -> McpServerStartError:
        if any(isinstance(leaf, TimeoutError) for leaf in _leaves(error)):
            what = f"did not initialise and list its tools within {self._startup_timeout:g} s"
        else:
            what = f"failed: {_describe(error)}"
        tail = self.stderr_tail()
        return McpServerStartError(
            f"MCP server {self.spec.name!r} ({self.spec.command_line()}) "
            f"could not be started and listed: {what}."
            + (f"\nIts stderr ended with:\n{tail}" if tail else "")
            + "\nNo tools were bound. Check the command and run it by hand to see why.",
            server=self.spec.name,
        )

    def _unavailable(self, detail: str) -> McpServerUnavailable:
        return McpServerUnavailable(
            f"MCP server {self.spec.name!r} is unavailable: {detail}. Its tools cannot run; "
            "start a new binder (and resume the run) once the server is fixed.",
            server=self.spec.name,
        )

    async def call_tool(self, name: str, arguments: Mapping[str, object]) -> str:
        """The tool's text result. Raises :class:`McpToolFailed` or :class:`McpServerUnavailable`."""
        session = self._session
        if session is None or self.dead_reason is not None:
            raise self._unavailable(self.dead_reason or "it is not running")
        failure: McpError | None = None
        try:
            result = await session.call_tool(
                name, dict(arguments), read_timeout_seconds=self._call_timeout
            )
        except MCPError as error:
            if error.code == mcp_types.CONNECTION_CLOSED:
                self.dead_reason = f"the connection closed during a call of {name!r}"
                failure = self._unavailable(self.dead_reason)
            elif error.code == mcp_types.REQUEST_TIMEOUT:
                failure = self._unavailable(
                    f"tool {name!r} did not answer within {self._call_timeout:g} s "
                    "(its effect is unknown)"
                )
            else:
                failure = McpToolFailed(
                    f"MCP error {error.code}: {error.message}", server=self.spec.name
                )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as error:
            self.dead_reason = f"{type(error).__name__} during a call of {name!r}"
            failure = self._unavailable(self.dead_reason)
        if failure is not None:
            raise failure
        text = _result_text(result)
        if result.is_error:
            raise McpToolFailed(text or f"tool {name!r} reported an error", server=self.spec.name)
        return text

    async def close(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            if self._ready is not None and not self._ready.done():
                task.cancel()  # still starting: nothing to shut down gracefully
            # Waited for, never awaited directly: its outcome was already reported through
            # the ready future or dead_reason, and our own cancellation must stay ours.
            await asyncio.wait({task})
            if not task.cancelled():
                task.exception()
        if self._errlog is not None:
            self._errlog.close()


async def _list_all_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(10_000):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise RuntimeError("tools/list pagination did not end after 10000 pages")
