"""The kinds of test, as markers (design record 0058): ``-m property``, ``-m "not server"``...

Three kinds are facts a test states about itself, so they are derived here and cannot be
forgotten: ``property`` (a hypothesis ``@given`` test), ``snapshot`` (it takes syrupy's
``snapshot`` fixture) and ``server`` (it takes the fixture of a PostgreSQL store, the Ray cluster,
Phoenix, the real model's server or the browser, or it runs on the ``postgres`` store kind). The
others (``crash``, ``race``, ``slow``, and ``server`` for a module that talks to PostgreSQL
throughout) are written in the test module, as a module-level ``pytestmark`` or on the test;
tests/README.md says which.
"""

from __future__ import annotations

import hypothesis
import pytest

__all__ = ["SERVER_FIXTURES", "mark_derived", "require_server_marker", "running"]

#: Fixtures that stand for a server or a browser outside the test process.
SERVER_FIXTURES = frozenset(
    {"postgres_stores", "ray_cluster", "phoenix_url", "browser", "model_server_url"}
)

#: The store kind (tests/stores/_helpers.py) that needs the PostgreSQL server.
_SERVER_STORE_KIND = "postgres"


def _runs_on_a_server(item: pytest.Item) -> bool:
    if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    return any(
        isinstance(value, str) and value == _SERVER_STORE_KIND for value in callspec.params.values()
    )


def mark_derived(items: list[pytest.Item]) -> None:
    """Add the ``property``, ``snapshot`` and ``server`` markers each test's own shape implies."""
    for item in items:
        function = getattr(item, "obj", None)
        if function is not None and hypothesis.is_hypothesis_test(function):
            item.add_marker(pytest.mark.property)
        if "snapshot" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.snapshot)
        if _runs_on_a_server(item):
            item.add_marker(pytest.mark.server)


#: The test this process is running, if any (set by tests/conftest.py before each test).
_RUNNING: list[pytest.Item] = []


def running(item: pytest.Item | None) -> None:
    """Remember ``item`` as the test being run (``None``: between tests)."""
    _RUNNING[:] = [] if item is None else [item]


def require_server_marker(server: str) -> None:
    """Fail the running test if it reaches ``server`` without the ``server`` marker: with it,
    ``-m "not server"`` leaves the test out and needs no server (a child process, which runs no
    test of its own, is not checked)."""
    if _RUNNING and _RUNNING[0].get_closest_marker("server") is None:
        pytest.fail(
            f"{_RUNNING[0].nodeid} talks to {server} but is not marked `server`: add "
            "@pytest.mark.server (or take one of the server fixtures, tests/kinds.py), so that "
            '-m "not server" leaves it out',
            pytrace=False,
        )
