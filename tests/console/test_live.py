"""The live run page and the worker woken by the store (design 0069), with real parts: a real
``polyloop serve`` and ``polyloop worker``, a SQLite file and the PostgreSQL cluster of
``POLYLOOP_TEST_POSTGRES_URL``, Debian's chromium.

- a run parked on its ask is open in the browser; the test approves it and drives it on from
  another process's store object: the page shows the new step without a reload (waiting for
  the DOM, never for time), a fold left open stays open; on SQLite (markers polled) and on
  PostgreSQL (notifications);
- the run's event stream refuses a request without a session (403) and sends ``changed`` at
  once to one whose page is out of date;
- three workers polling only every 10 minutes carry out a decision within the test's deadline
  on PostgreSQL (only the store's notification can have woken them), and the run lease lets
  exactly one of them drive: one refund.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser

from polyloop.asking import RunParked
from polyloop.ports import RunLog, RunStore
from polyloop.session import approve, run_or_park
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop_console.driving import Agent, resume_one
from tests.cli._kit import POLYLOOP, clean_env
from tests.cli.shared.test_postgres_store import with_schema
from tests.console._agents import ONE_REFUND, build
from tests.console._kit import (
    AGENT,
    DEADLINE,
    csrf_of,
    episode,
    ledger_lines,
    serve,
    signed_in,
    wait_for,
)
from tests.console.test_browser import Tab, _sign_in
from tests.stores._postgres import drop_schemas, server_url

pytestmark = pytest.mark.slow

RUN = "live-run"


def _in_thread(coroutine):  # type: ignore[no-untyped-def]
    """Run ``coroutine`` on a loop of its own (playwright's sync API runs a loop here)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _store(url: str) -> RunStore:
    if url.startswith("sqlite:"):
        return SqliteRunStore(url.removeprefix("sqlite:"))
    schema = url.rsplit("schema=", 1)[1]
    return PostgresRunStore(server_url(), schema=schema)


async def _park(url: str, ledger: Path) -> RunParked:
    store = _store(url)
    try:
        outcome = await run_or_park(*build(RUN, store, str(ledger), ONE_REFUND))
    finally:
        await store.aclose()  # type: ignore[attr-defined]
    assert isinstance(outcome, RunParked), outcome
    return outcome


async def _approve_and_go_on(url: str, parked: RunParked, ledger: Path) -> str:
    store = _store(url)
    try:
        await approve(
            store,
            RUN,
            step=parked.ask.step,
            arguments_sha256=parked.ask.arguments_sha256,
            decided_by="tester",
        )
        return await resume_one(store, Agent(AGENT, episode(ledger, ONE_REFUND)), RUN)
    finally:
        await store.aclose()  # type: ignore[attr-defined]


async def _read(url: str) -> RunLog:
    store = _store(url)
    try:
        return await store.read_log(RUN)
    finally:
        await store.aclose()  # type: ignore[attr-defined]


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = f"plt_live_{secrets.token_hex(4)}"
    try:
        yield with_schema(server_url(), name)
    finally:
        drop_schemas([name])


def _watch_a_step_land(browser: Browser, tmp_path: Path, url: str) -> None:
    ledger = tmp_path / "ledger"
    parked = _in_thread(_park(url, ledger))
    served = serve(tmp_path / "home", url)
    try:
        assert served.token is not None
        tab = Tab(browser.new_page())
        _sign_in(tab, served, served.token)
        tab.page.goto(f"{served.base}/runs/{RUN}", wait_until="load")
        tab.page.wait_for_selector("html[data-live=connected]")
        assert 0 == tab.page.locator("section#step-1").count()
        assert "approval" in tab.page.locator("section#step-0").inner_text()
        tab.page.locator("#parameters > summary").click()
        assert tab.page.locator("#parameters").evaluate("d => d.open")

        assert "finished" == _in_thread(_approve_and_go_on(url, parked, ledger))

        # The new step, written by another process's store object, shows up without a reload.
        tab.page.wait_for_selector("section#step-1", timeout=DEADLINE * 1000)
        tab.page.wait_for_function(
            "() => document.body.innerText.includes('task_completed')", timeout=DEADLINE * 1000
        )
        assert tab.page.locator("#parameters").evaluate("d => d.open")
        assert int(tab.page.evaluate("document.documentElement.dataset.liveSwaps")) >= 1
        assert ["refund:80", "submit"] == ledger_lines(ledger)
        assert [] == tab.errors
        tab.page.close()
    finally:
        served.stop()


def test_a_step_appears_on_the_open_page_without_reload_on_sqlite(
    browser: Browser, tmp_path: Path
) -> None:
    _watch_a_step_land(browser, tmp_path, f"sqlite:{tmp_path / 'runs.sqlite'}")


@pytest.mark.server
def test_a_step_appears_on_the_open_page_without_reload_on_postgres(
    browser: Browser, tmp_path: Path, pg_url: str
) -> None:
    _watch_a_step_land(browser, tmp_path, pg_url)


def test_the_event_stream_needs_a_session_and_tells_a_stale_page_at_once(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'runs.sqlite'}"
    _in_thread(_park(url, tmp_path / "ledger"))
    served = serve(tmp_path / "home", url)
    try:
        with httpx.Client(base_url=served.base, timeout=30) as stranger:
            refused = stranger.get(f"/live/{RUN}?since=x")
            assert 403 == refused.status_code
            assert "event-stream" not in refused.headers.get("content-type", "")
            stranger.cookies.set("polyloop_session", "forged-session-id")
            assert 403 == stranger.get(f"/live/{RUN}").status_code
        with signed_in(served) as client:
            answer = client.get(f"/runs/{RUN}")
            page, policy = answer.text, answer.headers["content-security-policy"]
            assert 'id="polyloop-live"' in page
            # The console's header policy is the page's only one: the script and its requests
            # from the console, the viewer's inline scripts by digest, nothing else.
            assert "http-equiv" not in page
            assert "script-src 'self' 'sha256-" in policy
            assert "connect-src 'self'" in policy
            assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";")[0]
            script = client.get("/static/live.js")
            assert "javascript" in script.headers["content-type"]
            assert "EventSource" in script.text
            with client.stream("GET", f"/live/{RUN}?since=stale") as stream:
                assert 200 == stream.status_code
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.iter_lines()
                assert "event: changed" == next(line for line in lines if line.startswith("event"))
                # Signing out ends the stream (at its next ping at the latest).
                csrf = csrf_of(client.get("/").text)
                assert 303 == client.post("/logout", data={"csrf": csrf}).status_code
                assert [] == [line for line in lines if line.startswith("event")]
    finally:
        served.stop()


@pytest.mark.server
def test_workers_are_woken_by_the_notification_on_postgres_and_one_drives(
    tmp_path: Path, pg_url: str
) -> None:
    ledger = tmp_path / "ledger"
    parked = _in_thread(_park(pg_url, ledger))
    home = tmp_path / "home"
    home.mkdir()
    workers = []
    for index in range(3):
        with (home / f"worker-{index}.err").open("wb") as stderr:
            workers.append(
                subprocess.Popen(
                    [
                        POLYLOOP,
                        "worker",
                        "--store",
                        pg_url,
                        "--agent",
                        AGENT,
                        "--episode",
                        episode(ledger, ONE_REFUND),
                        "--poll",
                        "600",
                    ],
                    cwd=Path(__file__).resolve().parents[2],
                    env=clean_env(home),
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            )
    try:
        # Each listens, then its first pass reads the parked run (no decision yet); then it
        # only waits (its next pass is 600 s away).
        for index in range(3):
            wait_for(
                lambda index=index: "worker pass:" in (home / f"worker-{index}.err").read_text(),
                f"worker {index}'s first pass",
            )
        assert 3 == _listening(pg_url)

        async def decide() -> None:
            store = _store(pg_url)
            try:
                await approve(
                    store,
                    RUN,
                    step=parked.ask.step,
                    arguments_sha256=parked.ask.arguments_sha256,
                    decided_by="tester",
                )
            finally:
                await store.aclose()  # type: ignore[attr-defined]

        _in_thread(decide())
        # They poll every 600 s: finishing within the deadline is the notification's work.
        wait_for(lambda: _in_thread(_read(pg_url)).finished is not None, "the run to finish")
        # All three were woken; the run lease let exactly one drive: one refund, one submit.
        assert ["refund:80", "submit"] == ledger_lines(ledger)
        assert [None, None, None] == [worker.poll() for worker in workers]
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)


def _listening(url: str) -> int:
    """How many sessions listen on the channel of the store ``url`` names
    (``pg_stat_activity`` shows a listener's connection with its ``LISTEN``)."""
    import psycopg

    from polyloop.stores.postgres._schema import notify_channel

    channel = notify_channel(url.rsplit("schema=", 1)[1])
    with psycopg.connect(server_url(), autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'polyloop listener'"
            " AND query = 'LISTEN \"' || %s || '\"'",
            (channel,),
        ).fetchone()
    return int(row[0]) if row else 0
