"""`McpToolBinder`: binds the allowed tools of named stdio MCP servers, failing closed."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Final

from polyloop.adapters.mcp._connection import Connection as _Connection
from polyloop.adapters.mcp._errors import McpBindError, McpServerStartError, McpToolNotOffered
from polyloop.adapters.mcp._handler import McpHandler as _McpHandler
from polyloop.adapters.mcp._server import McpServer
from polyloop.adapters.mcp._toolsets import McpTools, McpToolSet
from polyloop.errors import ConfigurationError
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ReplayPolicy

logger = logging.getLogger("polyloop.adapters.mcp")

#: Default cap on one tool result, in characters (``max_output_chars``).
DEFAULT_MAX_OUTPUT_CHARS: Final = 50_000
#: What a tool name must look like after a prefix or a rename (what model APIs accept).
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_MAX_OUTPUT_CHARS",
    "TOOL_NAME",
    "AllTools",
    "McpBinding",
    "McpToolBinder",
]


class AllTools:
    """The type of :data:`ALL_TOOLS`."""

    _instance: AllTools | None = None

    def __new__(cls) -> AllTools:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ALL_TOOLS"


#: Pass as ``allow`` to bind every tool a server offers. An empty allow-list is refused.
ALL_TOOLS: Final = AllTools()


def _names(owner: str, value: Collection[str]) -> frozenset[str]:
    if isinstance(value, str) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(
            f"{owner} takes a collection of tool names, got {value!r}; write [{value!r}]."
        )
    return frozenset(value)


@dataclass(frozen=True, slots=True)
class McpBinding:
    """How to bind the tools of one server (the arguments of :meth:`McpToolBinder.bind`).

    ``allow``, ``safe``, ``completes_run`` and the keys of ``rename`` are the server's own tool
    names. ``prefix`` is put before every bound name, ``rename`` maps a server name to the name
    the model sees instead (the prefix is not added to a renamed tool); a name changed either
    way must match ``^[A-Za-z0-9_-]{1,64}$``. Tool calls reach the server under its own name.
    """

    server: str
    allow: Collection[str] | AllTools
    safe: Collection[str] = ()
    trust_annotations: bool = False
    completes_run: Collection[str] = ()
    prefix: str = ""
    rename: Mapping[str, str] = field(default_factory=dict)

    def exposed_name(self, name: str) -> str:
        return self.rename.get(name) or self.prefix + name


class McpToolBinder:
    """Binds tools of named stdio MCP servers; owns their processes.

    Use as an async context manager (or call :meth:`aclose`): leaving it stops every server it
    started — gracefully first (stdin closed; then SIGTERM), forcibly after a bound (SIGKILL of
    the server and of everything it started, a few seconds at most). A server also dies with
    the process that started it, however that process dies (design 0026; Linux fully, see the
    README for other platforms). A server is started on its first :meth:`bind` and reused by
    later ones. ``startup_timeout`` bounds starting, initialising and listing a server;
    ``call_timeout`` bounds each tool call (a call past it is an environment failure: its
    effect is unknown); ``max_output_chars`` caps each tool result (text, placeholders of
    non-text content and structured content alike), the cut counted in
    ``observation_truncated_chars``.
    """

    def __init__(
        self,
        servers: Iterable[McpServer],
        *,
        startup_timeout: float = 30.0,
        call_timeout: float = 300.0,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        by_name: dict[str, McpServer] = {}
        for server in servers:
            if not isinstance(server, McpServer):
                raise ConfigurationError(
                    f"McpToolBinder takes McpServer objects, got {type(server).__name__}."
                )
            if server.name in by_name:
                raise ConfigurationError(f"Two MCP servers are named {server.name!r}.")
            by_name[server.name] = server
        for label, number in (("startup_timeout", startup_timeout), ("call_timeout", call_timeout)):
            if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
                raise ConfigurationError(f"McpToolBinder {label} must be > 0, got {number!r}.")
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int):
            raise ConfigurationError(
                f"McpToolBinder max_output_chars must be an int, got {max_output_chars!r}."
            )
        if max_output_chars < 100:
            raise ConfigurationError(
                f"McpToolBinder max_output_chars must be >= 100, got {max_output_chars}: the "
                "marker saying how much was cut needs room."
            )
        self._servers: Final = MappingProxyType(by_name)
        self._startup_timeout = float(startup_timeout)
        self._call_timeout = float(call_timeout)
        self._max_output_chars = max_output_chars
        self._connections: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"McpToolBinder(servers={list(self._servers)!r})"

    async def __aenter__(self) -> McpToolBinder:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every server this binder started (all at once). Tool calls afterwards are env
        failures."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(connection.close() for connection in connections))

    async def _connection(self, server: str) -> _Connection:
        if self._closed:
            raise McpBindError(
                f"McpToolBinder is closed; cannot bind tools of {server!r}.", server=server
            )
        spec = self._servers.get(server)
        if spec is None:
            raise McpBindError(
                f"No MCP server named {server!r} is configured in this binder; configured: "
                f"{sorted(self._servers)}.",
                server=server,
            )
        connection = self._connections.get(server)
        if connection is not None:
            if connection.dead_reason is not None:
                raise McpServerStartError(
                    f"MCP server {server!r} has died ({connection.dead_reason}); no tools were "
                    "bound. Use a new binder to start it again.",
                    server=server,
                )
            return connection
        connection = _Connection(
            spec,
            startup_timeout=self._startup_timeout,
            call_timeout=self._call_timeout,
            max_output_chars=self._max_output_chars,
        )
        try:
            await connection.start()
        except McpServerStartError:
            raise
        except OSError as error:
            raise McpServerStartError(
                f"MCP server {server!r} could not be started ({spec.command_line()}): "
                f"{type(error).__name__}: {error}. No tools were bound.",
                server=server,
            ) from error
        self._connections[server] = connection
        return connection

    async def bind(
        self,
        server: str,
        allow: Collection[str] | AllTools,
        *,
        safe: Collection[str] = (),
        trust_annotations: bool = False,
        completes_run: Collection[str] = (),
        prefix: str = "",
        rename: Mapping[str, str] | None = None,
    ) -> McpToolSet:
        """Bind the ``allow``-listed tools of ``server`` (``ALL_TOOLS`` for every tool).

        ``safe`` names tools declared safe to execute again on resume (``ReplayPolicy.SAFE``);
        every other tool is ``NEVER``, unless ``trust_annotations`` lets the server's
        ``readOnlyHint``/``idempotentHint`` make it ``SAFE``. ``completes_run`` names tools
        whose successful execution completes the run. ``prefix`` and ``rename`` change the
        names the model sees (see :class:`McpBinding`). Raises :class:`McpBindError`
        subclasses; never returns an empty tool set.
        """
        return await self._bind(
            McpBinding(
                server,
                allow,
                safe=safe,
                trust_annotations=trust_annotations,
                completes_run=completes_run,
                prefix=prefix,
                rename=dict(rename or {}),
            )
        )

    async def bind_all(self, bindings: Iterable[McpBinding]) -> McpTools:
        """Bind several servers into one registry and one executor, each binding as
        :meth:`bind` does. Two servers offering the same name need a ``prefix`` or ``rename``
        on one of them; the error says which names collide where."""
        chosen = list(bindings)
        if not chosen:
            raise ConfigurationError("bind_all() got no bindings; it would bind nothing.")
        toolsets = [await self._bind(binding) for binding in chosen]
        return McpTools.combine(toolsets)

    async def _bind(self, binding: McpBinding) -> McpToolSet:
        server = binding.server
        if isinstance(binding.allow, AllTools):
            wanted: frozenset[str] | None = None
        else:
            wanted = _names("bind(allow=...)", binding.allow)
            if not wanted:
                raise ConfigurationError(
                    f"bind({server!r}) got an empty allow-list; it would bind nothing. Name the "
                    "tools, or pass ALL_TOOLS to bind every tool the server offers."
                )
        safe_names = _names("bind(safe=...)", binding.safe)
        completing = _names("bind(completes_run=...)", binding.completes_run)
        renamed = _names("bind(rename=...)", binding.rename.keys())
        if not isinstance(binding.prefix, str) or not re.fullmatch(
            r"[A-Za-z0-9_-]*", binding.prefix
        ):
            raise ConfigurationError(
                f"bind({server!r}, prefix={binding.prefix!r}): a prefix may hold only letters, "
                "digits, '_' and '-'."
            )
        async with self._lock:
            connection = await self._connection(server)
        offered = {tool.name: tool for tool in connection.tools}
        if wanted is not None:
            missing = sorted(wanted - offered.keys())
            if missing:
                raise McpToolNotOffered(
                    f"MCP server {server!r} does not offer the allowed tools {missing}; it offers "
                    f"{sorted(offered)}. No tools were bound: fix the allow-list or the server.",
                    server=server,
                    missing=missing,
                )
        chosen = [t for t in connection.tools if wanted is None or t.name in wanted]
        if not chosen:
            raise McpToolNotOffered(
                f"MCP server {server!r} offers no tools, so ALL_TOOLS bound nothing; an empty "
                "tool set is refused (it would read as 'no tools' rather than 'tools failed').",
                server=server,
                missing=[],
            )
        chosen_names = {tool.name for tool in chosen}
        for label, names in (
            ("safe", safe_names),
            ("completes_run", completing),
            ("rename", renamed),
        ):
            stray = sorted(names - chosen_names)
            if stray:
                raise ConfigurationError(
                    f"bind({server!r}, {label}=...) names tools that are not being bound: "
                    f"{stray}; bound: {sorted(chosen_names)}."
                )
        tools: list[Tool] = []
        for tool in chosen:
            exposed = binding.exposed_name(tool.name)
            if exposed != tool.name and not TOOL_NAME.fullmatch(exposed):
                raise ConfigurationError(
                    f"bind({server!r}): tool {tool.name!r} would be named {exposed!r}, which is "
                    "not a valid tool name (1-64 letters, digits, '_' or '-'); pick another "
                    "prefix or rename."
                )
            hints = tool.annotations
            hinted_safe = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)
            policy = (
                ReplayPolicy.SAFE
                if tool.name in safe_names or (binding.trust_annotations and hinted_safe)
                else ReplayPolicy.NEVER
            )
            try:
                spec = ToolSpec(
                    name=exposed,
                    description=tool.description or "",
                    parameters=dict(tool.input_schema),
                    replay_policy=policy,
                    completes_run=tool.name in completing,
                )
                tools.append(Tool(spec, _McpHandler(connection, tool.name)))
            except ConfigurationError as error:
                raise McpBindError(
                    f"MCP server {server!r}: tool {tool.name!r} cannot be bound: {error}",
                    server=server,
                ) from None
        try:
            registry = ToolRegistry(tools)
        except ConfigurationError as error:
            raise McpBindError(
                f"MCP server {server!r}: its tools cannot form a registry: {error}", server=server
            ) from None
        return McpToolSet(server=server, tools=tuple(tools), registry=registry)
