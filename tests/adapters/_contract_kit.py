"""The fixtures handing a chat-completions client to the polyloop-contract ModelClient suite.

A ``contract_kit/conftest.py`` imports the three fixtures and says which client it hands over
with a ``contract_client_kind`` fixture (a kind of :func:`tests.adapters._chat_clients.
open_client`); the clients talk to a fake gateway on loopback, and the failing one to a closed
port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from polyloop.ports import ModelClient
from tests.adapters._chat_clients import open_client
from tests.adapters.gateway._server import FakeGateway, closed_port, serve_in_thread

__all__ = ["gateway_root", "polyloop_model_client", "polyloop_model_client_failing"]


@pytest.fixture(scope="session")
def gateway_root() -> Iterator[str]:
    with serve_in_thread(FakeGateway()) as root:
        yield root


@pytest.fixture
async def polyloop_model_client(
    contract_client_kind: str, gateway_root: str
) -> AsyncIterator[ModelClient]:
    async with open_client(
        contract_client_kind, f"{gateway_root}/ok/v1", temperature=0.0
    ) as client:
        yield client


@pytest.fixture
async def polyloop_model_client_failing(contract_client_kind: str) -> AsyncIterator[ModelClient]:
    async with open_client(contract_client_kind, f"http://127.0.0.1:{closed_port()}/v1") as client:
        yield client
