"""`polyloop view`'s pages in a real headless browser: Debian's ``chromium`` driven by
playwright's Python package (``executable_path``; no browser is downloaded). The test fails,
never skips, when chromium is missing: ``.ci/install-system`` installs it.

- the page of a run killed with SIGKILL and resumed (`polyloop demo`) loads with no console
  error, shows each step, and marks the action resume executed again; a screenshot is kept
  (its path printed);
- hostile content (HTML, script tags, ANSI escapes, a 1 MB line) is shown as text, never run;
- keyboard navigation; the store-wide list filters and links to each page;
- a 1,000-step run with 20,000-character observations loads and shows every step (its load
  time is measured by bench/view_bench.py, not here);
- a fork's page marks its inherited steps and opens its side-by-side page, which shows both
  runs' steps from the fork step (design 0071).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page

from polyloop import testing
from polyloop.types import StopReason
from polyloop_console.viewer.command import page_name
from tests.cli._kit import polyloop
from tests.console.viewer._forks import forked_store
from tests.console.viewer.test_command import (
    DATED,
    HOSTILE_NOTE,
    dated_run,
    doubt_records,
    hostile_records,
    make_store,
)


class Opened:
    """A page loaded from disk, with every console error and uncaught exception it raised."""

    def __init__(self, browser: Browser, path: Path) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1366, "height": 768})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.goto(path.as_uri(), wait_until="load")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"{message.type}: {message.text}")


def _view(env: dict[str, str], url: str, run_id: str, output: Path) -> Path:
    result = polyloop("view", run_id, "--store", url, "-o", str(output), env=env)
    assert 0 == result.code, result.stderr
    return output


@pytest.mark.crash
@pytest.mark.slow
def test_a_crashed_and_resumed_run_loads_cleanly_and_marks_the_replay(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """The demo's run A (killed inside the safe lookup_order, resumed): no console error,
    every step shown, step 0 marked as replayed on resume, no other; a screenshot is kept."""
    demo = polyloop("demo", "--json", env=env, timeout=120)
    assert 0 == demo.code, demo.stderr
    document = demo.json()
    run_a = document["runs"][0]
    assert "lookup_order" == run_a["killed_in"]
    url = document["store"]
    opened = Opened(browser, _view(env, url, run_a["run_id"], tmp_path / "a.html"))
    page = opened.page
    steps = page.locator("main section.step")
    assert 3 == steps.count()
    for k in range(3):
        assert page.locator(f"#step-{k}").is_visible()
    marks = [steps.nth(k).locator(".mark.replay").count() for k in range(3)]
    assert [1, 0, 0] == marks
    assert "replayed on resume: action" == page.locator("#step-0 .mark.replay").inner_text()
    assert "made again by resume" in page.locator("#step-0 ul.intents").inner_text()
    assert "task_completed" in page.locator("section.summary").inner_text()
    screenshot = tmp_path / "crashed-and-resumed.png"
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"screenshot of the crashed-and-resumed run's page: {screenshot}")
    assert screenshot.stat().st_size > 10_000
    assert [] == opened.errors
    assert all(request.startswith("file://") for request in opened.requests), opened.requests

    run_b = document["runs"][1]
    stopped = Opened(browser, _view(env, url, run_b["run_id"], tmp_path / "b.html"))
    pending = stopped.page.locator("section.pending").inner_text()
    assert "the action may or may not have run (replay policy never)" in pending
    assert "issue_refund" in pending
    assert '"order_id": "A-1042"' in pending
    assert "not executed again by resume" in pending
    assert "issue_refund" in stopped.page.locator('nav#steps a[data-step="1"]').inner_text()
    assert "resume_state_unknown" in stopped.page.locator("section.summary").inner_text()
    assert [] == stopped.errors


def test_hostile_content_is_shown_as_text(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """HTML, script tags, an img onerror, ANSI escapes and a 1 MB line: none runs, each is
    shown as its characters, the 1 MB line whole once its fold is opened."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile"))
    opened = Opened(browser, _view(env, url, "hostile", tmp_path / "hostile.html"))
    page = opened.page
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert 0 == page.locator("main img, main b.injected, aside script, main script").count()
    reply = page.locator("#step-0 pre.reply").inner_text()
    assert "</pre><script>window.__pwned = 1</script><img src=x" in reply
    observation = page.locator("#step-0 pre.observation").inner_text()
    assert "\u241b[31mred\u241b[0m <b>bold</b> & </script><script>" in observation
    assert not page.locator("#parameters table").is_visible(), "closed until asked for"
    page.locator("#parameters summary").click()
    parameters = page.locator("#parameters").inner_text()
    assert "<script>window.__pwned=4</script>" in parameters
    answer = page.locator("section.summary").inner_text()
    assert "<script>window.__pwned=5</script>" in answer
    fold = page.locator("#step-1 details.fold")
    assert "show all 1,000,000 characters" in fold.locator("summary").inner_text()
    fold.locator("summary").click()
    full = page.locator("#step-1 details.fold pre")
    assert 1_000_000 == full.evaluate("element => element.textContent.length")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert [] == opened.errors


def test_keyboard_moves_through_the_steps(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """j/k next and previous, G last, g first; o opens the current step's folds; p opens and
    closes the parameter snapshot (closed at first); the step list follows."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile", 5_000))
    opened = Opened(browser, _view(env, url, "hostile", tmp_path / "keys.html"))
    page = opened.page
    keys = page.keyboard
    keys.press("j")
    assert "#step-0" == page.evaluate("location.hash")
    keys.press("j")
    assert "#step-1" == page.evaluate("location.hash")
    assert "1" == page.locator("nav#steps a.current").get_attribute("data-step")
    keys.press("o")
    assert page.locator("#step-1 details.fold").evaluate("element => element.open")
    keys.press("G")
    assert "#step-2" == page.evaluate("location.hash")
    keys.press("k")
    assert "#step-1" == page.evaluate("location.hash")
    keys.press("g")
    assert "#step-0" == page.evaluate("location.hash")
    assert not page.locator("#parameters table").is_visible()
    keys.press("p")
    assert page.locator("#parameters table").is_visible()
    keys.press("p")
    assert not page.locator("#parameters table").is_visible()
    page.locator('nav#steps a[data-step="2"]').click()
    assert "#step-2" == page.evaluate("location.hash")
    assert [] == opened.errors


def test_the_list_of_runs_filters_and_links_to_each_page(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """`view --all`: typing filters the rows, the ending menu too; a run's link opens its page,
    whose "all runs" link comes back."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile", 10), kit=True)
    directory = tmp_path / "pages"
    result = polyloop("view", "--all", "--store", url, "-o", str(directory), env=env)
    assert 0 == result.code, result.stderr
    opened = Opened(browser, directory / "index.html")
    page = opened.page
    rows = page.locator("#runs tbody tr")
    assert 4 == rows.count()
    page.keyboard.press("/")
    page.keyboard.type("unfinished")
    assert ["run-unfinished"] == [
        rows.nth(i).locator("td").first.inner_text()
        for i in range(rows.count())
        if rows.nth(i).is_visible()
    ]
    assert "1 of 4 runs" == page.locator("#count").inner_text()
    page.locator("#filter").fill("")
    page.locator("#ending").select_option("agent_finished")
    visible = [rows.nth(i) for i in range(rows.count()) if rows.nth(i).is_visible()]
    assert {"hostile", "run-finished"} == {row.locator("td").first.inner_text() for row in visible}
    page.locator(f'a[href="runs/{page_name("hostile")}"]').click()
    page.wait_for_load_state("load")
    assert page.url.endswith(page_name("hostile"))
    assert 3 == page.locator("main section.step").count()
    page.locator("a.back").click()
    page.wait_for_load_state("load")
    assert page.url.endswith("index.html")
    assert [] == opened.errors


def test_the_unfinished_step_is_shown_whole_and_its_markup_never_runs(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """A run killed inside a never action whose reply and arguments hold a script tag: the
    step is in the list, j reaches it, its reply and arguments are shown as text, nothing
    runs."""
    url = make_store(tmp_path / "runs.sqlite", doubt_records("crashed", finished=False))
    opened = Opened(browser, _view(env, url, "crashed", tmp_path / "crashed.html"))
    page = opened.page
    assert 2 == page.locator("nav#steps a").count()
    page.keyboard.press("G")
    assert "#step-1" == page.evaluate("location.hash")
    card = page.locator("#step-1")
    assert "may or may not have run" in card.locator(".state").inner_text()
    assert HOSTILE_NOTE in card.locator("pre.reply").inner_text()
    assert f'"note": "{HOSTILE_NOTE}"' in card.locator("pre.args").inner_text()
    assert "refund" == card.locator("p.tool").inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert 0 == page.locator("main script").count()
    assert [] == opened.errors


def test_the_list_of_runs_sorts_by_a_column(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """Clicking a heading sorts the rows by it (numbers as numbers), again reverses; the
    list shows each run's status word and duration."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile", 10), kit=True)
    directory = tmp_path / "pages"
    assert 0 == polyloop("view", "--all", "--store", url, "-o", str(directory), env=env).code
    opened = Opened(browser, directory / "index.html")
    page = opened.page

    def column(name: str) -> list[str]:
        index = page.locator("#runs thead th").all_inner_texts().index(name)
        return [
            row.locator("td").nth(index).inner_text()
            for row in page.locator("#runs tbody tr").all()
        ]

    page.locator("#runs thead th button", has_text="steps").click()
    assert ["0", "2", "3", "4"] == column("steps")
    page.locator("#runs thead th button", has_text="steps").click()
    assert ["4", "3", "2", "0"] == column("steps")
    assert "descending" == page.locator("#runs thead th", has_text="steps").get_attribute(
        "aria-sort"
    )
    page.locator("#runs thead th button", has_text="run").first.click()
    assert ["hostile", "run-empty", "run-finished", "run-unfinished"] == column("run")
    words = dict(zip(column("run"), column("status word"), strict=True))
    assert {"run-unfinished": "running", "run-finished": "succeeded"}.items() <= words.items()
    assert all(cell.endswith("ms") for cell in column("duration"))
    assert [] == opened.errors


def test_the_list_of_runs_sorts_by_start_time(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """Clicking "started" orders the runs by the instant each started (a time written with an
    offset by its UTC instant), a log without a start time ("—") first; again reverses."""
    records = [dated_run(run_id, at) for run_id, at in DATED.items()]
    url = make_store(tmp_path / "runs.sqlite", *records, dated_run("old", None))
    directory = tmp_path / "pages"
    assert 0 == polyloop("view", "--all", "--store", url, "-o", str(directory), env=env).code
    opened = Opened(browser, directory / "index.html")
    page = opened.page

    def runs() -> list[str]:
        return [
            row.locator("td").first.inner_text() for row in page.locator("#runs tbody tr").all()
        ]

    page.locator("#runs thead th button", has_text="started").click()
    assert ["old", "early", "offset", "late"] == runs()
    page.locator("#runs thead th button", has_text="started").click()
    assert ["late", "offset", "early", "old"] == runs()
    assert [] == opened.errors


def long_run(run_id: str, steps: int = 1_000, observation_chars: int = 20_000) -> list[object]:
    """A finished run of ``steps`` tool steps, each observation ``observation_chars`` long."""
    writes = [
        testing.tool_step(
            run_id, k, observation=(f"{k:04d} " + "lorem ipsum " * 2_000)[:observation_chars]
        )
        for k in range(steps)
    ]
    records: list[object] = [testing.run_started(run_id)]
    for step in writes:
        records += step.records
    records.append(testing.run_finished(run_id, writes, StopReason.STEP_BUDGET))
    return records


@pytest.mark.slow
def test_a_thousand_steps_of_long_observations_load_whole(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """1,000 steps of 20,000-character observations: every step is in the page and listed, the
    last fold opens to its full text, no console error."""
    url = make_store(tmp_path / "runs.sqlite", long_run("long"))
    opened = Opened(browser, _view(env, url, "long", tmp_path / "long.html"))
    page = opened.page
    assert 1_000 == page.locator("main section.step").count()
    assert 1_000 == page.locator("nav#steps a").count()
    page.keyboard.press("G")
    assert "#step-999" == page.evaluate("location.hash")
    page.keyboard.press("o")
    length = page.locator("#step-999 details.fold pre").evaluate("e => e.textContent.length")
    assert 20_000 == length
    assert [] == opened.errors


def test_a_fork_beside_its_source_shows_both_runs_steps_from_the_fork_step(
    browser: Browser, tmp_path: Path, env: dict[str, str]
) -> None:
    """`view --all` of a run, its fork at step 2 and a fork of that fork: from the fork's page,
    the link opens the side-by-side page, whose rows are steps 2 to 5, the source's steps 2-3
    beside the fork's 2-5 (the hostile note shown as text, nothing run), each step linking to
    its card on its run's page; the inherited steps are marked on the fork's page; a
    screenshot is kept (its path printed)."""
    url = forked_store(tmp_path / "runs.sqlite")
    directory = tmp_path / "pages"
    assert 0 == polyloop("view", "--all", "--store", url, "-o", str(directory), env=env).code
    opened = Opened(browser, directory / "runs" / page_name("f-1"))
    page = opened.page
    marks = [page.locator(f"#step-{k} .mark.inherited").count() for k in range(6)]
    assert [1, 1, 0, 0, 0, 0] == marks
    assert "r-1 at step 2 (steps 0-1 inherited)" in page.locator("#lineage").inner_text()
    page.locator("#compare-link").click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"compare/{page_name('f-1')}")
    rows = page.locator("#side-by-side tbody tr[id^=pair-]")
    assert ["pair-2", "pair-3", "pair-4", "pair-5", "pair-stop"] == [
        rows.nth(i).get_attribute("id") for i in range(rows.count())
    ]

    def cell(k: int, side: str) -> str:
        index = 1 if side == "source" else 2
        return page.locator(f"#pair-{k} > :nth-child({index + 1})").inner_text()

    for k in (2, 3):
        assert cell(k, "source").startswith(f"step {k}: ")
    for k in (2, 3, 4, 5):
        assert cell(k, "fork").startswith(f"step {k}: ")
    assert "tool call look" in cell(2, "source")
    assert "tool call look" in cell(2, "fork")
    assert "final answer" in cell(3, "source")
    assert "tool call pay" in cell(3, "fork")
    assert "</pre><script>window.__pwned = 1</script>" in cell(3, "fork")
    assert "no step 4" in cell(4, "source")
    assert "final answer" in cell(5, "fork")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert 0 == page.locator("main script, main img").count()
    screenshot = tmp_path / "fork-beside-source.png"
    page.set_viewport_size({"width": 1366, "height": 1700})
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"screenshot of the side-by-side page: {screenshot}")
    assert screenshot.stat().st_size > 10_000
    page.locator("#pair-3 > :nth-child(2) a").click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"runs/{page_name('r-1')}#step-3")
    assert "#step-3" == page.evaluate("location.hash")
    assert [] == opened.errors
    assert all(request.startswith("file://") for request in opened.requests), opened.requests
