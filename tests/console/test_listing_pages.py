"""The inbox and the runs page over real HTTP on a store of many runs (design 0070): the inbox
counts every pending ask and pages them, oldest first; the runs page filters by status, tool
and binding together and pages by run id. The same pages on SQLite and PostgreSQL (answered
from the stores' indexes) and on a jsonl store (answered by reading every log)."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from polyloop.ports import RunStore
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import write_records
from polyloop_console.app import PAGE_SIZE
from tests.cli.shared.test_postgres_store import with_schema
from tests.console._kit import serve, signed_in
from tests.stores._helpers import close_store
from tests.stores._postgres import drop_schemas, server_url
from tests.stores.test_run_overviews import TIMES, Plan, records_of

pytestmark = [pytest.mark.slow]

WAITING = PAGE_SIZE + 12
#: run id → plan: WAITING parked runs (three teams, two tools), and finished and unfinished ones.
RUNS = {
    **{
        f"w-{index:03d}": Plan(
            ("refund",) if index % 4 == 0 else ("lookup",),
            (("team", ("red", "blue", "green")[index % 3]),),
            "m",
            TIMES[0],
            0,
            "ask",
            TIMES[index % 3],
        )
        for index in range(WAITING)
    },
    **{
        f"f-{index:02d}": Plan(("refund",), (("team", "red"),), "m", None, 0, "finished", "")
        for index in range(5)
    },
    **{
        f"u-{index:02d}": Plan(("refund",), (("team", "red"),), "m", None, 0, "none", "")
        for index in range(3)
    },
}


async def _fill(store: RunStore) -> None:
    for run_id, plan in RUNS.items():
        await write_records(store, records_of(run_id, plan))


@pytest.fixture(params=["sqlite", "jsonl", pytest.param("postgres", marks=pytest.mark.server)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind: str = request.param
    if kind == "postgres":
        name = f"plt_listing_{secrets.token_hex(4)}"
        opened: RunStore = PostgresRunStore(server_url(), schema=name)
        url = with_schema(server_url(), name)
    elif kind == "sqlite":
        opened = SqliteRunStore(tmp_path / "runs.sqlite")
        url = f"sqlite:{tmp_path / 'runs.sqlite'}"
    else:
        opened = JsonlRunStore(tmp_path / "runs")
        url = f"jsonl:{tmp_path / 'runs'}"

    async def fill() -> None:
        try:
            await _fill(opened)
        finally:
            await close_store(opened)

    asyncio.run(fill())
    try:
        yield url
    finally:
        if kind == "postgres":
            drop_schemas([name])


def _asks(page: str) -> list[str]:
    return re.findall(r'<section class="ask" id="ask-\d+" data-run="([^"]+)"', page)


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr><td><a href="/runs/[^"]+">([^<]+)</a>', page)


def _next(page: str) -> str | None:
    found = re.search(r'<a id="next" href="([^"]+)"', page)
    return None if found is None else found.group(1).replace("&amp;", "&")


def test_the_inbox_counts_and_pages_the_asks_and_the_runs_page_filters(
    store_url: str, tmp_path: Path
) -> None:
    served = serve(tmp_path / "home", store_url)
    try:
        with signed_in(served) as client:
            first = client.get("/").text
            assert f"Waiting for a person ({WAITING})" in first
            assert PAGE_SIZE == len(_asks(first))
            following = _next(first)
            assert following is not None
            second = client.get(following).text
            assert _next(second) is None
            shown = _asks(first) + _asks(second)
            # Every ask once, oldest first (then by run id).
            expected = sorted(
                (plan.asked_at, run_id) for run_id, plan in RUNS.items() if plan.ending == "ask"
            )
            assert [run_id for _, run_id in expected] == shown

            def walk(params: dict[str, str]) -> list[str]:
                page = client.get("/runs", params=params).text
                seen = _rows(page)
                link = _next(page)
                while link is not None:
                    page = client.get(link).text
                    seen += _rows(page)
                    link = _next(page)
                return seen

            assert sorted(RUNS) == walk({})
            red_refunds = walk({"tool": "refund", "binding": "team=red"})
            assert (
                sorted(
                    run_id
                    for run_id, plan in RUNS.items()
                    if "refund" in plan.tools and ("team", "red") in plan.binding
                )
                == red_refunds
            )
            assert [run_id for run_id in red_refunds if run_id.startswith("w-")] == walk(
                {"tool": "refund", "binding": "team=red", "status": "waiting_approval"}
            )
            assert [f"f-{index:02d}" for index in range(5)] == walk({"status": "finished"})
            assert ["u-01"] == walk({"q": "u-01", "status": "unfinished"})
            assert [] == walk({"q": "u-01", "status": "finished"})
            # A filter the page cannot apply says so, and lists what it shows instead.
            odd = client.get("/runs", params={"status": "done", "binding": "team"}).text
            assert "No status &#39;done&#39;: one of finished," in odd
            assert "The binding filter &#39;team&#39; is not KEY=VALUE" in odd
            assert sorted(RUNS)[:PAGE_SIZE] == _rows(odd)
            assert "not KEY=VALUE" in client.get("/runs", params={"binding": "=red"}).text
            assert 'class="notice' not in client.get("/runs", params={"status": ""}).text
    finally:
        served.stop()
