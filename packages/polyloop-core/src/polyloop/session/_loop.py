"""The governed loop (being written)."""

from __future__ import annotations

from polyloop.session._definition import AgentDefinition, RunRequest
from polyloop.types import RunResult


async def run(definition: AgentDefinition, request: RunRequest) -> RunResult:
    raise NotImplementedError("run: the loop lands with issue 3")


async def resume(definition: AgentDefinition, request: RunRequest) -> RunResult:
    raise NotImplementedError("resume: the loop lands with issue 3")
