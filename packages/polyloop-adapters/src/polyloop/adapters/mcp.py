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
    Each server runs under a small launcher (``_lifeline.py``, design 0026) that kills it and
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

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Final, TextIO, cast

try:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp import types as mcp_types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.exceptions import MCPError
except ImportError as missing:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "polyloop.adapters.mcp needs the official MCP SDK, which is an optional extra: "
        "pip install 'polyloop-adapters[mcp]'."
    ) from missing

from polyloop.adapters._lifelines import Lifeline
from polyloop.adapters._output import CappedOutput, cap_output
from polyloop.errors import ConfigurationError, PolyLoopError, ToolCallRejected
from polyloop.ports import Action
from polyloop.tools import RegistryExecutor, Tool, ToolRegistry, ToolSpec
from polyloop.types import ActionOutcome, ActionStatus, ReplayPolicy

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

logger = logging.getLogger("polyloop.adapters.mcp")

_STDERR_TAIL_CHARS: Final = 2000
#: Seconds a server gets between SIGTERM and SIGKILL, from its launcher (design 0026). The
#: MCP SDK waits 2 s after closing stdin, then SIGTERMs the launcher and SIGKILLs it 2 s later.
_SERVER_TERM_GRACE: Final = 1.0
#: Default cap on one tool result, in characters (``max_output_chars``).
DEFAULT_MAX_OUTPUT_CHARS: Final = 50_000
#: What a tool name must look like after a prefix or a rename (what model APIs accept).
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


# ---------------------------------------------------------------------------
# Server description and connection
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class McpServer:
    """How to start one stdio MCP server. ``name`` is how bindings and errors refer to it.

    ``env`` is merged over the MCP SDK's minimal default environment (``HOME``, ``PATH``,
    ``USER`` and a few more; the parent's other variables are *not* inherited). Its values may
    hold credentials and are never reported (only the variable names are). Put secrets in
    ``env``, not in ``args``, which are reported in :meth:`McpExecutor.parameters`. The
    server's stderr is captured; its tail is quoted when the server fails to start.
    """

    name: str
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError("McpServer.name must be a non-empty string.")
        if not isinstance(self.command, str) or not self.command:
            raise ConfigurationError(f"McpServer {self.name!r}: command must be non-empty.")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise ConfigurationError(
                f"McpServer {self.name!r}: args must be a sequence of strings, not one string."
            )
        object.__setattr__(self, "args", tuple(self.args))
        if self.env is not None:
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
                raise ConfigurationError(f"McpServer {self.name!r}: env must map str to str.")
            object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    def command_line(self) -> str:
        """The command as a shell would show it (for messages)."""
        return shlex.join([self.command, *self.args])

    def parameters(self) -> dict[str, str]:
        return {
            "command": self.command,
            "args": json.dumps(list(self.args), ensure_ascii=False),
            "env_names": ",".join(sorted(self.env or {})),
            "cwd": self.cwd or "",
        }


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


class _Connection:
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


def _placeholder(block: object) -> str:
    """A non-text block, named (kind, MIME type, size) instead of shown."""
    kind = getattr(block, "type", type(block).__name__)
    resource = getattr(block, "resource", None)
    mime = getattr(resource if resource is not None else block, "mime_type", None)
    data = getattr(block, "data", None) or getattr(resource, "blob", None)
    details = [mime] if mime else []
    if isinstance(data, str):
        details.append(f"{len(data)} characters of base64")
    uri = getattr(block, "uri", None) or getattr(resource, "uri", None)
    if uri is not None:
        details.append(str(uri))
    inside = f" ({', '.join(details)})" if details else ""
    return f"[{kind} content{inside} not shown]"


def _result_text(result: mcp_types.CallToolResult) -> str:
    """The result as one text: text blocks (and embedded text resources) as they are, any other
    block as a placeholder naming it, structured content as JSON when there is nothing else."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            parts.append(block.resource.text)
        else:
            parts.append(_placeholder(block))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False)
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# Tool sets and the executor
# ---------------------------------------------------------------------------


class _McpHandler:
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


def _spec_digest(spec: ToolSpec) -> str:
    payload = json.dumps(
        {"description": spec.description, "parameters": _plain(spec.parameters)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _plain(value: object) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, eq=False)
class McpToolSet:
    """The tools bound from one server: a registry plus the handlers behind it."""

    server: str
    #: The bound tools, in the server's order.
    tools: tuple[Tool, ...]
    #: The same tools as a registry (pass it as ``RunRequest.tools``).
    registry: ToolRegistry

    def names(self) -> tuple[str, ...]:
        return self.registry.names()

    def executor(self, registry: ToolRegistry | None = None) -> McpExecutor:
        """The executor for ``registry`` (default: :attr:`registry`); pass the very registry
        that goes into ``RunRequest.tools``, e.g. ``toolset.registry.restrict_to([...])``."""
        return McpExecutor(self.registry if registry is None else registry, [self])


@dataclass(frozen=True, slots=True, eq=False)
class McpTools:
    """The tools of several servers in one registry (what :meth:`McpToolBinder.bind_all`
    returns): pass :attr:`registry` as ``RunRequest.tools`` and :meth:`executor` as its
    executor."""

    #: The tool sets, one per binding, in the order given.
    toolsets: tuple[McpToolSet, ...]
    #: Every bound tool, of every server, as one registry.
    registry: ToolRegistry

    @classmethod
    def combine(cls, toolsets: Iterable[McpToolSet]) -> McpTools:
        """One registry of the given tool sets; two tools of the same name are refused, naming
        the servers that offer it."""
        sets = tuple(toolsets)
        owners: dict[str, list[str]] = {}
        for toolset in sets:
            for name in toolset.names():
                owners.setdefault(name, []).append(toolset.server)
        clashes = {name: servers for name, servers in owners.items() if len(servers) > 1}
        if clashes:
            listed = "; ".join(
                f"{name!r} by {servers}" for name, servers in sorted(clashes.items())
            )
            raise ConfigurationError(
                f"MCP tool names collide: {listed}. Give one of the servers a prefix "
                "(McpBinding(..., prefix='files_')) or rename the tool."
            )
        registry = ToolRegistry([tool for toolset in sets for tool in toolset.tools])
        return cls(toolsets=sets, registry=registry)

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(tool for toolset in self.toolsets for tool in toolset.tools)

    def names(self) -> tuple[str, ...]:
        return self.registry.names()

    def executor(self, registry: ToolRegistry | None = None) -> McpExecutor:
        """The executor for ``registry`` (default: :attr:`registry`, or a ``restrict_to`` of it)."""
        return McpExecutor(self.registry if registry is None else registry, self.toolsets)


class McpExecutor(RegistryExecutor):
    """Executes tool actions through the MCP sessions of one or more :class:`McpToolSet`.

    It is a :class:`~polyloop.tools.RegistryExecutor`, so ``RunRequest`` checks that it was made
    for the very registry the request carries. Every tool of that registry must come from one of
    the given tool sets (checked here, by handler identity).
    """

    __slots__ = ("_handlers", "_toolsets")

    def __init__(self, registry: ToolRegistry, toolsets: Iterable[McpToolSet]) -> None:
        super().__init__(registry)
        sets = tuple(toolsets)
        handlers: dict[str, _McpHandler] = {}
        for toolset in sets:
            for tool in toolset.tools:
                if isinstance(tool.handler, _McpHandler):
                    handlers.setdefault(tool.spec.name, tool.handler)
        unknown = [name for name in registry.names() if name not in handlers]
        if unknown:
            raise ConfigurationError(
                f"McpExecutor: tools {unknown} of the registry were not bound by the given MCP "
                f"tool sets ({[s.server for s in sets]}); build the registry from those sets."
            )
        self._handlers: Mapping[str, _McpHandler] = MappingProxyType(
            {name: handlers[name] for name in registry.names()}
        )
        self._toolsets = sets

    async def execute(self, action: Action) -> ActionOutcome:
        call = action.tool_call
        if call is None:
            return _outcome(
                ActionStatus.NOT_EXECUTED,
                "This agent acts only through tool calls; no tool was called.",
                synthetic=True,
            )
        try:
            self.registry.validate(call)
        except ToolCallRejected as rejected:
            return _outcome(ActionStatus.NOT_EXECUTED, str(rejected), synthetic=True)
        handler = self._handlers[call.name]
        try:
            capped = await handler.call_capped(call.arguments)
        except McpToolFailed as failed:
            # Its text was capped too; an error message is not worth counting precisely.
            return _outcome(ActionStatus.EXECUTED, str(failed), synthetic=False)
        except McpServerUnavailable as unavailable:
            logger.warning("polyloop: %s", unavailable)
            return _outcome(ActionStatus.ENV_ERROR, str(unavailable), synthetic=True)
        return _outcome(
            ActionStatus.EXECUTED, capped.text, synthetic=False, truncated=capped.cut_chars
        )

    def parameters(self) -> Mapping[str, str]:
        """Per tool its server, its name there when renamed, and a digest of its spec; per
        server how it is started (never ``env`` values), what it reported itself to be and its
        output cap. Synchronous, no I/O."""
        params: dict[str, str] = {
            "kind": "mcp",
            "tools": ",".join(self.registry.names()),
        }
        servers: dict[str, _Connection] = {}
        for name, handler in self._handlers.items():
            spec = self.registry.spec_for(name)
            assert spec is not None
            params[f"tool.{name}.server"] = handler.connection.spec.name
            if handler.tool_name != name:
                params[f"tool.{name}.server_tool"] = handler.tool_name
            params[f"tool.{name}.spec_sha256"] = _spec_digest(spec)
            servers.setdefault(handler.connection.spec.name, handler.connection)
        for server_name, connection in sorted(servers.items()):
            for key, value in connection.spec.parameters().items():
                params[f"server.{server_name}.{key}"] = value
            params[f"server.{server_name}.server_info"] = connection.server_info
            params[f"server.{server_name}.max_output_chars"] = str(connection.max_output_chars)
        return params


def _outcome(
    status: ActionStatus, observation: str, *, synthetic: bool, truncated: int = 0
) -> ActionOutcome:
    return ActionOutcome(
        status=status,
        observation=observation,
        observation_is_synthetic=synthetic,
        env_reported_completion=False,
        observation_truncated_chars=truncated,
    )


# ---------------------------------------------------------------------------
# The binder
# ---------------------------------------------------------------------------


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
