"""Fixtures handing LiteLLMModelClient to the polyloop-contract ModelClient suite.

Only collected as a contract run with ``pytest tests/adapters/litellm_client/contract_kit
--polyloop-contract`` (``test_contract_kit.py`` does that in a subprocess); without the flag
these fixtures are inert.
"""

from __future__ import annotations

import pytest

from tests.adapters._contract_kit import (
    gateway_root,
    polyloop_model_client,
    polyloop_model_client_failing,
)

__all__ = ["gateway_root", "polyloop_model_client", "polyloop_model_client_failing"]


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
def contract_client_kind() -> str:
    return "litellm"
