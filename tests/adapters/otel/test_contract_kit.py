"""OpenTelemetryEventSink passes the polyloop-contract EventSink suite, run exactly as a
downstream project runs it: `pytest <dir> --polyloop-contract` over a conftest providing the
fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.contract_run import assert_contract_suite_passes

#: The contract suite in a pytest subprocess.
pytestmark = pytest.mark.slow


def test_the_event_sink_contract_suite_passes() -> None:
    """All six EventSink rules run against OpenTelemetryEventSink and pass."""
    assert_contract_suite_passes(Path(__file__).with_name("contract_kit"), "EventSink", 6)
