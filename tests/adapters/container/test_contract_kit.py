"""ContainerExecutor passes the polyloop-contract ActionExecutor suite on both backends, run
exactly as a downstream project runs it: `pytest <dir> --polyloop-contract`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.contract_run import assert_contract_suite_passes

#: The contract suite in a pytest subprocess against real sandboxes.
pytestmark = pytest.mark.slow


def test_the_action_executor_contract_suite_passes() -> None:
    """Every ActionExecutor rule runs against a real sandbox session, on each backend, and passes."""
    assert_contract_suite_passes(Path(__file__).with_name("contract_kit"), "ActionExecutor", 10)
