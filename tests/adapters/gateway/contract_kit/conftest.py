"""Fixtures handing GatewayModelClient to the polyloop-contract ModelClient suite.

Only collected as a contract run with ``pytest tests/adapters/gateway/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.ports import ModelClient
from tests.adapters.gateway._server import FakeGateway, closed_port, serve_in_thread


@pytest.fixture(scope="session")
def gateway_root() -> Iterator[str]:
    with serve_in_thread(FakeGateway()) as root:
        yield root


@pytest.fixture
async def polyloop_model_client(gateway_root: str) -> AsyncIterator[ModelClient]:
    async with GatewayModelClient(
        f"{gateway_root}/ok/v1", "contract-model", api_key="sk-contract-key", temperature=0.0
    ) as client:
        yield client


@pytest.fixture
async def polyloop_model_client_failing() -> AsyncIterator[ModelClient]:
    async with GatewayModelClient(f"http://127.0.0.1:{closed_port()}/v1", "m") as client:
        yield client
