"""Fixtures handing GatewayModelClient to the polyloop-contract ModelClient suite.

Only collected as a contract run with ``pytest tests/adapters/gateway/contract_kit
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


@pytest.fixture(scope="session")
def contract_client_kind() -> str:
    return "gateway"
