"""The registry handler behind each bound tool: one call through its server's session, capped."""

from __future__ import annotations

from collections.abc import Mapping

from polyloop.adapters._output import CappedOutput, cap_output
from polyloop.adapters.mcp._connection import Connection as _Connection
from polyloop.adapters.mcp._errors import McpToolFailed

__all__ = ["McpHandler"]


class McpHandler:
    """A registry handler dispatching one tool (by its name on the server) through its
    server's session; results longer than the server's ``max_output_chars`` are cut."""

    __slots__ = ("_connection", "tool_name")

    def __init__(self, connection: _Connection, tool_name: str) -> None:
        self._connection = connection
        self.tool_name = tool_name

    @property
    def connection(self) -> _Connection:
        return self._connection

    def cap(self, text: str) -> CappedOutput:
        return cap_output(text, 0, "", self._connection.max_output_chars)

    async def call_capped(self, arguments: Mapping[str, object]) -> CappedOutput:
        """The capped result. Raises :class:`McpToolFailed` (its text capped too) or
        :class:`McpServerUnavailable`."""
        try:
            text = await self._connection.call_tool(self.tool_name, arguments)
        except McpToolFailed as failed:
            raise McpToolFailed(self.cap(str(failed)).text, server=failed.server) from None
        return self.cap(text)

    async def __call__(self, arguments: Mapping[str, object]) -> str:
        return (await self.call_capped(arguments)).text
