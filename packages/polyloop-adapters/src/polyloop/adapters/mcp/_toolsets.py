"""What binding returns — the tools of one server (`McpToolSet`) or of several (`McpTools`) — and
the executor that dispatches their calls through the servers' sessions (`McpExecutor`)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from polyloop.adapters.mcp._connection import Connection as _Connection
from polyloop.adapters.mcp._errors import McpServerUnavailable, McpToolFailed
from polyloop.adapters.mcp._handler import McpHandler as _McpHandler
from polyloop.errors import ConfigurationError, ToolCallRejected
from polyloop.ports import Action
from polyloop.tools import RegistryExecutor, Tool, ToolRegistry, ToolSpec
from polyloop.types import ActionOutcome, ActionStatus

logger = logging.getLogger("polyloop.adapters.mcp")

__all__ = ["McpExecutor", "McpToolSet", "McpTools"]


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


class McpExecutor(RegistryExecutor):
    """Executes tool actions through the MCP sessions of one or more :class:`McpToolSet`.

    It is a :class:`~polyloop.tools.RegistryExecutor`, so ``RunRequest`` checks that it was made
    for the very registry the request carries. Every tool of that registry must come from one of
    the given tool sets (checked here, by handler identity).
    """

    __slots__ = ("_handlers",)

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
