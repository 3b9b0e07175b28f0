"""The tests that run alone (the `serial` marker), after the parallel run: see scripts/test.sh.

``scripts/test.sh`` runs the suite on every core (pytest-xdist) with ``--test-group=parallel``,
then these with ``--test-group=serial`` in one process (``-p no:xdist``). Without the option
every test runs, as before; the ``serial`` marker is there for ``-m`` too.

They are the tests whose verdict depends on time or on processes racing: SIGKILLed processes,
racing drivers and lease holders, bounds on how long something takes (cancellation grace, a
blocked event loop, server shutdowns), the sandboxes (time limits, process counts), the Ray
cluster (one per machine: its dashboard has a fixed port) and the Phoenix server (about a
minute to start: once per run, not once per worker). Beside other tests on a loaded 2-core
machine they would measure the other tests. Nothing about them is weakened: they run as
before, only alone. Design record 0042.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["GROUPS", "SERIAL", "add_option", "mark_and_select"]

TESTS = Path(__file__).resolve().parent

#: Directories and modules, relative to tests/.
SERIAL = (
    "adapters/container",
    "adapters/gateway/test_gateway_streaming.py",
    "adapters/gateway/test_real_model.py",
    "adapters/mcp/test_mcp_process_lifetime.py",
    "adapters/mcp/test_mcp_real_servers.py",
    "adapters/otel/test_batch_command.py",
    "adapters/otel/test_phoenix.py",
    "adapters/otel/test_shutdown.py",
    "batch",
    "cli/demo/test_demo.py",
    "console/test_browser.py",
    "console/test_driving.py",
    "console/viewer/test_browser.py",
    "console/test_live.py",
    "core/session/test_cancellation.py",
    "core/session/test_fork.py",
    "core/session/test_run_leases.py",
    "stores/postgres/test_postgres_lease.py",
    "stores/postgres/test_postgres_server.py",
    "stores/test_event_loop.py",
    "stores/test_gated_sigkill.py",
    "stores/test_idle_wait.py",
    "stores/test_lease_races.py",
    "stores/test_processes.py",
    "stores/test_record_copying_sigkill.py",
    "stores/test_sigkill.py",
)

_PATHS = tuple(TESTS / entry for entry in SERIAL)
GROUPS = ("parallel", "serial")


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--test-group",
        choices=GROUPS,
        default=None,
        help="run only the tests that may run in parallel, or only those that run alone "
        "(tests/serial_group.py); default: all",
    )


def _is_serial(item: pytest.Item) -> bool:
    return any(item.path == where or where in item.path.parents for where in _PATHS)


def mark_and_select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests under :data:`SERIAL` ``serial``; keep only ``--test-group``'s, if given."""
    group = config.getoption("--test-group")
    kept, deselected = [], []
    for item in items:
        serial = _is_serial(item)
        if serial:
            item.add_marker(pytest.mark.serial)
        if group is None or serial == (group == "serial"):
            kept.append(item)
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
