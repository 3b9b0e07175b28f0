"""The test harness's PostgreSQL schema prefix: one per pytest process that sweeps.

Under xdist both workers inherited the controller's prefix, so the worker that finished first
swept (dropped) the schemas a test in the other worker was still using: the crash test on
postgres then resumed into an empty, re-created schema (RunNotFoundError).
"""

from __future__ import annotations

import pytest

from tests.stores import _postgres


def test_an_xdist_worker_takes_a_prefix_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_postgres.PREFIX_VARIABLE, "plt_1_abcdef")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    mine = _postgres.claim_session_prefix()
    assert mine != "plt_1_abcdef"
    assert mine.endswith("_gw1")
    assert _postgres.claim_session_prefix() == mine  # claimed once, kept
    assert _postgres.session_prefix() == mine  # what child processes inherit


def test_a_process_outside_xdist_keeps_the_inherited_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_postgres.PREFIX_VARIABLE, "plt_1_abcdef")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert _postgres.claim_session_prefix() == "plt_1_abcdef"
