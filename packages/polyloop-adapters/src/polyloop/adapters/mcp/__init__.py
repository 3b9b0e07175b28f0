"""A fail-closed tool binder: the tools of MCP servers as a :class:`~polyloop.tools.ToolRegistry`.

Needs the ``mcp`` extra (``pip install 'polyloop-adapters[mcp]'``).

A :class:`McpToolBinder` owns connections to named stdio MCP servers. ``await
binder.bind("files", allow=["read", "write"])`` starts the server if needed, lists its tools
and returns an :class:`McpToolSet`: the allowed tools as a registry (the MCP input schema is the
tool's ``parameters``), and :meth:`McpToolSet.executor` to dispatch through the MCP session.
``await binder.bind_all([McpBinding("files", ALL_TOOLS, prefix="fs_"), McpBinding("git",
["git_status"])])`` binds several servers into one :class:`McpTools` (one registry, one
executor); ``prefix`` and ``rename`` keep two servers' tool names apart.

Output cap
    Each tool result is cut to ``max_output_chars`` (default 50,000): its head, then a line
    saying how many characters are not shown, counted in ``observation_truncated_chars``.
    Non-text blocks (images, audio, binary resources) are never shown: a placeholder names
    their kind, MIME type and size.

Process lifetime
    Each server runs under a small launcher (``_lifeline_launcher.py``, design 0026) that kills it and
    everything it started when the process that started it dies, SIGKILL included, without
    relying on the server reading stdin. Closing the binder is graceful first (stdin closed,
    then SIGTERM), forcible after a bound (SIGKILL).

Failing closed
    Binding never returns an empty or partial tool set. A server that cannot be started,
    initialised or listed raises :class:`McpServerStartError` naming the server (with the tail
    of its stderr); an allowed name the server does not offer raises :class:`McpToolNotOffered`
    naming every missing tool. An empty allow-list is refused: pass :data:`ALL_TOOLS` to bind
    every tool the server offers (and a server offering none is then an error too).

Replay policy
    Every bound tool is :attr:`~polyloop.types.ReplayPolicy.NEVER` unless the binding declares
    it ``safe``. ``trust_annotations=True`` is the documented opt-in that lets the server's own
    hints decide: a tool annotated ``readOnlyHint`` or ``idempotentHint`` becomes ``SAFE``.
    Annotations are hints from the server, so they are ignored unless asked for.

Outcomes
    A tool result flagged ``isError`` (and a JSON-RPC error answered by a live server) is an
    ``EXECUTED`` action whose observation is the error text: the model may correct itself. A
    dead server (its process exited, the connection closed, a call outlived ``call_timeout``)
    is ``ENV_ERROR``: the executor returns it, naming the server, and the run stops with
    ``env_error``. Use :meth:`McpToolSet.executor` (or :class:`McpExecutor`), not
    ``registry.executor()``: the plain registry executor treats every handler failure as an
    executed action, so it would feed a dead server's error back to the model instead.
"""

from __future__ import annotations

try:
    import mcp  # noqa: F401  (checked first, so a missing extra says what to install)
except ImportError as missing:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "polyloop.adapters.mcp needs the official MCP SDK, which is an optional extra: "
        "pip install 'polyloop-adapters[mcp]'."
    ) from missing

from polyloop.adapters.mcp._binder import ALL_TOOLS, AllTools, McpBinding, McpToolBinder
from polyloop.adapters.mcp._errors import (
    McpBindError,
    McpError,
    McpServerStartError,
    McpServerUnavailable,
    McpToolFailed,
    McpToolNotOffered,
)
from polyloop.adapters.mcp._server import McpServer
from polyloop.adapters.mcp._toolsets import McpExecutor, McpTools, McpToolSet

__all__ = [
    "ALL_TOOLS",
    "AllTools",
    "McpBindError",
    "McpBinding",
    "McpError",
    "McpExecutor",
    "McpServer",
    "McpServerStartError",
    "McpServerUnavailable",
    "McpToolBinder",
    "McpToolFailed",
    "McpToolNotOffered",
    "McpToolSet",
    "McpTools",
]
