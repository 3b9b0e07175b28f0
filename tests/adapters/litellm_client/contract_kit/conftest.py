"""Fixtures handing LiteLLMModelClient to the polyloop-contract ModelClient suite.

Only collected as a contract run with ``pytest tests/adapters/litellm_client/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from polyloop.ports import ModelClient
from tests.adapters._chat_clients import open_client
from tests.adapters.gateway._server import FakeGateway, closed_port, serve_in_thread


def pytest_configure(config: pytest.Config) -> None:
    # Cancelled before it sends anything (the rule cancels at the first suspension), LiteLLM
    # drops a coroutine it built for the request without awaiting it; Python warns about that
    # when it is collected. The call itself ends cancelled, which is what the rule checks.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Exception ignored in. <coroutine object OpenAIChatCompletion.acompletion"
        ":pytest.PytestUnraisableExceptionWarning",
    )
    config.addinivalue_line(
        "filterwarnings",
        "ignore:coroutine 'OpenAIChatCompletion.acompletion' was never awaited:RuntimeWarning",
    )


@pytest.fixture(scope="session")
def gateway_root() -> Iterator[str]:
    with serve_in_thread(FakeGateway()) as root:
        yield root


@pytest.fixture
async def polyloop_model_client(gateway_root: str) -> AsyncIterator[ModelClient]:
    async with open_client("litellm", f"{gateway_root}/ok/v1", temperature=0.0) as client:
        yield client


@pytest.fixture
async def polyloop_model_client_failing() -> AsyncIterator[ModelClient]:
    async with open_client("litellm", f"http://127.0.0.1:{closed_port()}/v1") as client:
        yield client
