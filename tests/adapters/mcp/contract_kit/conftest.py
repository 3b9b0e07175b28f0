"""Fixtures handing McpExecutor to the polyloop-contract ActionExecutor suite.

Only collected as a contract run with ``pytest tests/adapters/mcp/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polyloop.adapters.mcp import McpToolBinder
from polyloop.ports import Action, ActionExecutor, ToolCall
from tests.adapters.mcp.conftest import server_spec


@pytest.fixture
async def polyloop_action_executor(tmp_path: Path) -> AsyncIterator[ActionExecutor]:
    async with McpToolBinder([server_spec(tmp_path / "ledger.txt")]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo"])
        yield toolset.executor()


@pytest.fixture
def polyloop_action() -> Action:
    return Action(text='CALL echo {"text": "hi"}', tool_call=ToolCall("echo", {"text": "hi"}))


@pytest.fixture
async def polyloop_action_executor_failing(tmp_path: Path) -> ActionExecutor:
    """Bound to a server that has since been stopped: its environment is gone."""
    async with McpToolBinder([server_spec(tmp_path / "ledger.txt")]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo"])
    return toolset.executor()
