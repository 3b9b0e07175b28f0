"""``polyloop.listing``'s values: a query names only status words it knows and a usable page
size, and says what to give instead (design 0070). Pages of real stores are checked against
reading every log in ``tests/stores/test_run_overviews.py``."""

from __future__ import annotations

import pytest

from polyloop.errors import ConfigurationError
from polyloop.listing import (
    OVERVIEW_STATUSES,
    OverviewQuery,
    RunOverview,
    select_overviews,
    select_pending,
)


def test_a_query_refuses_an_unknown_status_or_page_size_and_says_what_fits() -> None:
    with pytest.raises(
        ConfigurationError, match="finished, waiting_approval, unfinished, incomplete_fork, corrupt"
    ):
        OverviewQuery(status="running")
    for limit in (0, -1, True, 2.5):
        with pytest.raises(ConfigurationError, match="limit must be an int >= 1"):
            OverviewQuery(limit=limit)  # type: ignore[arg-type]
    assert "" == OverviewQuery().status


def test_selection_filters_then_pages_in_order() -> None:
    lines = [
        RunOverview("b", "finished", tools=("refund",), binding=(("team", "red"),)),
        RunOverview("a", "waiting_approval", tools=("refund",), asked_at="2", ask_step=0),
        RunOverview("c", "waiting_approval", tools=("lookup",), asked_at="1", ask_step=3),
        RunOverview("ab", "corrupt"),
    ]
    assert ["a", "ab"] == [o.run_id for o in select_overviews(lines, OverviewQuery(limit=2))]
    assert ["b"] == [
        o.run_id
        for o in select_overviews(
            lines, OverviewQuery(tool="refund", binding=("team", "red"), after="a")
        )
    ]
    assert ["ab"] == [
        o.run_id for o in select_overviews(lines, OverviewQuery(run_id_contains="ab"))
    ]
    assert ["c", "a"] == [o.run_id for o in select_pending(lines)]
    assert ["a"] == [o.run_id for o in select_pending(lines, ("1", "c"))]
    assert set(OVERVIEW_STATUSES) == {
        "finished",
        "waiting_approval",
        "unfinished",
        "incomplete_fork",
        "corrupt",
    }
