"""The console in a real headless browser: Debian's ``chromium`` driven by playwright's Python
package (``executable_path``, no browser download), as the viewer's tests do. Fails, never
skips, when chromium is missing.

- `polyloop demo --approval`, then `polyloop serve --agent …` on the demo's default store:
  sign in with the form, click approve; the server resumes the run, the refund runs exactly
  once (the ledger) and the run finishes; no page raised a console error (a CSP violation
  would be one);
- a page left open while the run moved on to a new ask, alike but for its step, cannot decide
  that new ask: its approval names the old step and is not taken, and the page says who
  decided and what the run waits on now.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page

from polyloop.recovery import pending_ask
from polyloop.stores.sqlite import SqliteRunStore
from polyloop_cli.demo.task import read_ledger
from tests.cli._kit import clean_env, polyloop
from tests.console._agents import TWO_REFUNDS
from tests.console._kit import AGENT, Served, episode, ledger_lines, park, serve, wait_for

pytestmark = pytest.mark.slow


class Tab:
    """A browser page with every console error and uncaught exception it raised."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"{message.type}: {message.text}")


def _sign_in(tab: Tab, served: Served, token: str) -> None:
    tab.page.goto(f"{served.base}/", wait_until="load")
    assert tab.page.url.endswith("/login")
    tab.page.fill("#token", token)
    tab.page.click("#sign-in")
    tab.page.wait_for_selector("#person")


async def _read(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    async with SqliteRunStore(store) as opened:
        return await opened.read_log(run_id)


def _log(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    """The run's log, read in a thread of its own (playwright's sync API runs a loop here)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _read(store, run_id)).result()


def test_approve_in_the_browser_runs_the_refund_once_and_the_run_finishes(
    browser: Browser, tmp_path: Path
) -> None:
    env = clean_env(tmp_path / "home")
    demo = polyloop("demo", "--approval", "--json", env=env, timeout=120)
    assert 0 == demo.code, demo.stderr
    document = demo.json()
    run_id, ledger = document["run_id"], Path(document["ledger"])
    home = Path(env["POLYLOOP_HOME"])
    served = serve(
        home, None, "--agent", document["agent"], "--episode", json.dumps(document["episode"])
    )
    try:
        assert served.token is not None
        tab = Tab(browser.new_page())
        _sign_in(tab, served, served.token)
        section = tab.page.locator(f'section[data-run="{run_id}"]')
        assert "issue_refund" in section.inner_text()
        assert '"order_id": "A-1042"' in section.locator("pre.arguments").inner_text()
        section.locator("button.approve").click()
        tab.page.wait_for_selector(".notice.done")

        def finished() -> bool:
            log = _log(home / "demo.sqlite", run_id)
            return log.finished is not None

        wait_for(finished, "the run to finish")
        refunds = [e for e in read_ledger(ledger, run_id) if e["tool"] == "issue_refund"]
        assert 1 == len(refunds)
        log = _log(home / "demo.sqlite", run_id)
        assert "task_completed" == log.finished.result.stop_reason.value
        assert ["operator"] == [answer.decided_by for answer in log.answers]
        tab.page.goto(f"{served.base}/", wait_until="load")
        assert tab.page.locator("#empty").is_visible()
        tab.page.goto(f"{served.base}/runs", wait_until="load")
        assert "finished" in tab.page.locator("#runs").inner_text()
        tab.page.click(f'#runs a:text("{run_id}")')
        tab.page.wait_for_load_state("load")
        assert run_id in tab.page.title()
        assert [] == tab.errors
        tab.page.close()
    finally:
        served.stop()
    assert "resumed run_id=" in served.audit()


def test_a_page_left_open_cannot_decide_the_next_ask(browser: Browser, tmp_path: Path) -> None:
    home, ledger = tmp_path / "home", tmp_path / "ledger"
    store = home / "runs.sqlite"
    home.mkdir()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, park(store, "r-twice", ledger, TWO_REFUNDS)).result()
    served = serve(home, store, "--agent", AGENT, "--episode", episode(ledger, TWO_REFUNDS))
    try:
        assert served.token is not None
        context = browser.new_context()
        left_open, fresh = Tab(context.new_page()), Tab(context.new_page())
        _sign_in(left_open, served, served.token)
        fresh.page.goto(f"{served.base}/", wait_until="load")
        assert 'data-step="0"' in left_open.page.content()
        fresh.page.locator('section[data-run="r-twice"] button.approve').click()
        fresh.page.wait_for_selector(".notice.done")

        def parked_again() -> bool:
            ask = pending_ask(_log(store, "r-twice"))
            return ask is not None and ask.step == 1

        wait_for(parked_again, "the run to ask again at step 1")
        assert ["refund:80"] == ledger_lines(ledger)
        # The page still shows step 0's form, with the very arguments step 1 asks about.
        left_open.page.locator('section[data-run="r-twice"] button.approve').click()
        left_open.page.wait_for_selector(".notice.stale")
        said = left_open.page.locator("main").inner_text()
        assert "Not taken, nothing was written" in said
        assert "already decided: approve by operator" in said
        assert "now waits on the ask of step 1" in said
        log = _log(store, "r-twice")
        assert [0] == [answer.step for answer in log.answers]
        assert pending_ask(log) is not None
        assert ["refund:80"] == ledger_lines(ledger)
        assert [] == left_open.errors + fresh.errors
        context.close()
    finally:
        served.stop()
