"""pytest entry point (``pytest11``) of the PolyLoop contract kit."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("polyloop-contract")
    group.addoption(
        "--polyloop-contract",
        action="store_true",
        default=False,
        help="Run the PolyLoop contract suites against the implementations your fixtures provide.",
    )
