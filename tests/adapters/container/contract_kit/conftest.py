"""Fixtures handing ContainerExecutor (both backends) to the polyloop-contract ActionExecutor suite.

Only collected as a contract run with ``pytest tests/adapters/container/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from polyloop.adapters.container import (
    BubblewrapBackend,
    ContainerExecutor,
    DockerBackend,
    SandboxBackend,
    ensure_docker_image,
)
from polyloop.errors import PolyLoopError
from polyloop.ports import Action, ActionExecutor


@pytest.fixture(params=["bubblewrap", "docker"])
async def sandbox_backend(request: pytest.FixtureRequest) -> SandboxBackend:
    if request.param == "docker":
        await ensure_docker_image()
        return DockerBackend()
    return BubblewrapBackend()


@pytest.fixture
async def polyloop_action_executor(
    sandbox_backend: SandboxBackend,
) -> AsyncIterator[ActionExecutor]:
    async with ContainerExecutor(sandbox_backend, time_limit_seconds=20) as executor:
        yield executor


@pytest.fixture
def polyloop_action() -> Action:
    return Action(text="print(6 * 7)", tool_call=None)


@pytest.fixture
async def polyloop_action_executor_failing(
    sandbox_backend: SandboxBackend,
) -> AsyncIterator[ActionExecutor]:
    """A session whose interpreter has died: every later action must fail loudly."""
    async with ContainerExecutor(sandbox_backend, time_limit_seconds=20) as executor:
        # The action that kills the interpreter is itself reported as a dead session.
        with contextlib.suppress(PolyLoopError):
            await executor.execute(Action(text="import os; os._exit(3)", tool_call=None))
        yield executor
