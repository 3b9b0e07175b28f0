"""LiteLLMModelClient passes the polyloop-contract ModelClient suite, run exactly as a downstream project
runs it: `pytest <dir> --polyloop-contract` over a conftest providing the fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.contract_run import assert_contract_suite_passes

#: The contract suite in a pytest subprocess against a real loopback server.
pytestmark = pytest.mark.slow


def test_the_model_client_contract_suite_passes() -> None:
    """All six ModelClient rules run against LiteLLMModelClient and pass."""
    assert_contract_suite_passes(Path(__file__).with_name("contract_kit"), "ModelClient", 6)
