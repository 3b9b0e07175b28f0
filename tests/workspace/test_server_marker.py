"""tests/kinds.py: a test that reaches a server must say so with the ``server`` marker, so that
``-m "not server"`` leaves out every test that needs one (design record 0063)."""

from __future__ import annotations

import pytest

from tests import kinds
from tests.stores import _postgres


def test_a_test_without_the_marker_that_asks_for_the_server_fails_saying_what_to_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked whether the server is there or not: the URL below is never used."""
    monkeypatch.setenv(_postgres.URL_VARIABLE, "postgresql://nobody@127.0.0.1:1/none")

    with pytest.raises(pytest.fail.Exception) as failed:
        _postgres.server_url()

    assert str(failed.value) == (
        "tests/workspace/test_server_marker.py::"
        "test_a_test_without_the_marker_that_asks_for_the_server_fails_saying_what_to_add "
        "talks to PostgreSQL but is not marked `server`: add @pytest.mark.server (or take one "
        'of the server fixtures, tests/kinds.py), so that -m "not server" leaves it out'
    )


@pytest.mark.server
def test_a_marked_test_gets_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_postgres.URL_VARIABLE, "postgresql://nobody@127.0.0.1:1/none")

    assert _postgres.server_url() == "postgresql://nobody@127.0.0.1:1/none"


def test_outside_a_test_nothing_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child process runs no test of its own: it is not checked (its parent test was)."""
    monkeypatch.setenv(_postgres.URL_VARIABLE, "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setattr(kinds, "_RUNNING", [])

    assert _postgres.server_url() == "postgresql://nobody@127.0.0.1:1/none"
