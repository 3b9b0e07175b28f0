"""The environment for a pytest run that a test starts itself, when the test runs under xdist.

pytest-xdist tells its workers what they are through environment variables, and a child process
inherits them: a child pytest then takes itself for a worker. syrupy, for one, keeps its report
("2 snapshots generated") for a controller that does not exist. A test's own pytest run is a
run of its own, so these variables are left out of its environment.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["XDIST_VARIABLES", "outside_xdist"]

XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def outside_xdist(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` without the variables that make a process an xdist worker."""
    return {key: value for key, value in environment.items() if key not in XDIST_VARIABLES}
