"""The MCP binder's errors: one base naming the server, and what failed."""

from __future__ import annotations

from collections.abc import Sequence

from polyloop.errors import PolyLoopError

__all__ = [
    "McpBindError",
    "McpError",
    "McpServerStartError",
    "McpServerUnavailable",
    "McpToolFailed",
    "McpToolNotOffered",
]

# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class McpError(PolyLoopError):
    """Base of the MCP binder's errors. ``server`` names the MCP server concerned."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class McpBindError(McpError):
    """Binding failed; no tool set was produced."""


class McpServerStartError(McpBindError):
    """The server could not be started, initialised or asked for its tools."""


class McpToolNotOffered(McpBindError):
    """The allow-list names tools the server does not offer (``missing``)."""

    def __init__(self, message: str, *, server: str, missing: Sequence[str]) -> None:
        super().__init__(message, server=server)
        self.missing = tuple(missing)


class McpServerUnavailable(McpError):
    """The server died or stopped answering: an environment failure, not a tool error."""


class McpToolFailed(McpError):
    """The server answered a call with an error (``isError``, or a JSON-RPC error).

    Raised by the registry handlers; :class:`McpExecutor` turns it into an executed action.
    """
