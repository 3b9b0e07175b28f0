"""Fixtures handing OpenAIModelClient to the polyloop-contract ModelClient suite.

Only collected as a contract run with ``pytest tests/adapters/openai_client/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from polyloop.ports import ModelClient
from tests.adapters._chat_clients import open_client
from tests.adapters.gateway._server import FakeGateway, closed_port, serve_in_thread


@pytest.fixture(scope="session")
def gateway_root() -> Iterator[str]:
    with serve_in_thread(FakeGateway()) as root:
        yield root


@pytest.fixture
async def polyloop_model_client(gateway_root: str) -> AsyncIterator[ModelClient]:
    async with open_client("openai", f"{gateway_root}/ok/v1", temperature=0.0) as client:
        yield client


@pytest.fixture
async def polyloop_model_client_failing() -> AsyncIterator[ModelClient]:
    async with open_client("openai", f"http://127.0.0.1:{closed_port()}/v1") as client:
        yield client
