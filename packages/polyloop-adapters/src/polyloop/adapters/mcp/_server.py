"""How to start one stdio MCP server (`McpServer`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from polyloop.errors import ConfigurationError

__all__ = ["McpServer"]


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
