"""A fork's pages (design 0071): its run page names its source and fork step (linked when the
source's page is in the same output), marks the inherited steps and lists the parameters that
differ; a second page sets it beside its source, step by step from the fork step. Real forks
made by the library on a SQLite file; hostile text in the fork's arguments and binding is shown
as text. (In Chromium: test_browser.py; in the console: test_console_pages below.)
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop import testing
from polyloop.ports import RunLog
from polyloop.session import SnapshotDifference
from polyloop.stores.memory import MemoryRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from polyloop_console.viewer.command import page_name
from polyloop_console.viewer.lineage import ComparePage, Lineage, Link, read_lineage
from polyloop_console.viewer.pages import COMPARE_CHARS, RunPage, compare_page, run_page
from tests.cli._kit import polyloop
from tests.console._kit import serve, signed_in
from tests.console.viewer._forks import HOSTILE_NOTE, HOSTILE_VARIANT, forked_store


def _tags(page: str) -> list[str]:
    return re.findall(r"<(/?[A-Za-z][A-Za-z0-9]*)", page)


def _section(page: str, start: str) -> str:
    begin = page.index(start)
    return page[begin : page.index("</section>", begin)]


def _card(page: str, step: int) -> str:
    return _section(page, f'id="step-{step}"')


def _no_markup_from_the_log(page: str, scripts: int) -> None:
    assert scripts == page.count("<script")
    assert "<script>window" not in page
    assert "<img" not in page
    assert "\x1b" not in page


def _view_all(tmp_path: Path, env: dict[str, str]) -> Path:
    url = forked_store(tmp_path / "runs.sqlite")
    directory = tmp_path / "pages"
    result = polyloop("view", "--all", "--store", url, "-o", str(directory), env=env)
    assert 0 == result.code, result.stderr
    return directory


def test_a_fork_s_page_names_its_source_marks_inherited_steps_and_lists_differences(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`view --all`: f-1's page links r-1's page and its side-by-side page; steps 0-1 are
    marked inherited from r-1, step 2 the fork point; the binding that differs is listed, its
    markup shown as text. A run that is no fork has neither section nor side-by-side page."""
    directory = _view_all(tmp_path, env)
    page = (directory / "runs" / page_name("f-1")).read_text(encoding="utf-8")
    _no_markup_from_the_log(page, 2)
    lineage = _section(page, 'id="lineage"')
    assert f'is a fork of <a href="{page_name("r-1")}"><code>r-1</code></a> at step 2' in (
        lineage.replace("../runs/", "")
    )
    assert f'href="../runs/{page_name("r-1")}"' in lineage
    assert (directory / "runs" / page_name("r-1")).is_file()
    assert "<dt>fork of</dt><dd>r-1 at step 2 (steps 0-1 inherited)</dd>" in lineage
    assert "the world as it is" in lineage
    compare = f"../compare/{page_name('f-1')}"
    assert f'<a id="compare-link" href="{compare}">' in lineage
    assert (directory / "runs" / compare).resolve().is_file()
    shown = html.unescape(lineage)
    assert f"<th>request.model_binding.variant</th><td><absent></td><td>{HOSTILE_VARIANT}</td>" in (
        shown
    )
    assert "<th>model_client.steps</th><td>3</td><td>5</td>" in shown
    for k in (0, 1):
        assert "inherited from r-1" in _card(page, k)
    assert 'class="mark fork"' in _card(page, 2)
    assert all("inherited from" not in _card(page, k) for k in range(2, 6))
    nav = page[page.index('<nav id="steps"') : page.index("</nav>")]
    assert 2 == nav.count('inherited"')
    assert nav.index("from step 2: this run's own agent") < nav.index('data-step="2"')
    assert f'"note": "{HOSTILE_NOTE}"'.replace("\x1b", "\\u001b") in html.unescape(_card(page, 3))
    source = (directory / "runs" / page_name("r-1")).read_text(encoding="utf-8")
    assert 'id="lineage"' not in source
    assert 'class="mark inherited"' not in source
    assert ["f-1.", "f-2."] == sorted(p.name[:4] for p in (directory / "compare").iterdir())


def test_the_side_by_side_page_pairs_each_step_from_the_fork_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """f-1 beside r-1 from step 2: step 2 the same decision in both, step 3 a different one
    (r-1's final answer, f-1's pay with the hostile note, as text), steps 4-5 f-1's only, then
    how each run stopped; every step links to its run's card; no script at all."""
    directory = _view_all(tmp_path, env)
    page = (directory / "compare" / page_name("f-1")).read_text(encoding="utf-8")
    _no_markup_from_the_log(page, 0)
    assert "script-src" not in page  # default-src 'none': no script may run
    rows = re.findall(r'<tr id="pair-(\d+)" class="(\w+)"', page)
    assert [("2", "same"), ("3", "differs"), ("4", "one"), ("5", "one")] == rows
    row = {k: _row(page, k) for k in ("2", "3", "4", "5", "stop")}
    assert "same decision" in row["2"]
    assert 2 == row["2"].count("tool call look")
    assert f'href="../runs/{page_name("r-1")}#step-3">step 3</a>' in row["3"]
    assert f'href="../runs/{page_name("f-1")}#step-3">step 3</a>' in row["3"]
    source_cell, fork_cell = re.findall(r"<td class=\"\w+\">.*?</td>", row["3"], re.DOTALL)
    assert "final answer" in source_cell
    assert "tool call pay" in fork_cell
    assert HOSTILE_NOTE.replace("\x1b", "\\u001b") in html.unescape(fork_cell)
    assert "no step 4: stopped (agent_finished) after step 3" in row["4"]
    assert "fork only" in row["5"]
    assert "agent_finished</b> after 4 steps" in row["stop"]
    assert "agent_finished</b> after 6 steps" in row["stop"]
    assert "done after 3 calls" in row["stop"]
    assert "done after 5 calls" in row["stop"]
    assert "Steps 0–1 are the source's" in page
    assert f'href="../runs/{page_name("f-1")}"' in page
    assert 'href="../index.html"' in page


def _row(page: str, k: str) -> str:
    begin = page.index(f'<tr id="pair-{k}"')
    return page[begin : page.index("</tr>", begin)]


def test_a_fork_of_a_fork_names_the_chain(tmp_path: Path, env: dict[str, str]) -> None:
    """f-2 (a fork of f-1 at 4, itself a fork of r-1 at 2): the chain names both, each linked;
    steps 0-3 are inherited from f-1 (its own copy of r-1's 0-1 included); its side-by-side
    page is beside f-1 from step 4."""
    directory = _view_all(tmp_path, env)
    page = (directory / "runs" / page_name("f-2")).read_text(encoding="utf-8")
    _no_markup_from_the_log(page, 2)
    chain = _section(page, 'id="lineage"')
    chain = chain[: chain.index("</ol>")]
    f1 = f'<a href="../runs/{page_name("f-1")}"><code>f-1</code></a>'
    r1 = f'<a href="../runs/{page_name("r-1")}"><code>r-1</code></a>'
    assert [f"this run is a fork of {f1} at step 4", f"{f1} is a fork of {r1} at step 2"] == (
        re.findall(r"<li>(.*?)</li>", chain)
    )
    assert all("inherited from f-1" in _card(page, k) for k in range(4))
    assert "inherited from" not in _card(page, 4)
    compare = (directory / "compare" / page_name("f-2")).read_text(encoding="utf-8")
    assert ["4", "5", "6"] == re.findall(r'<tr id="pair-(\d+)"', compare)
    assert "Steps 0–3 are the source's" in compare
    assert f"<code>f-2</code> is a fork of {f1} at step 4" in compare


def test_view_of_one_fork_writes_its_side_by_side_page_beside_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`view f-1 -o DIR/f.html` writes DIR/f.compare.html too, linked from f.html and linking
    back; r-1's page is not written, so r-1 is named without a link. A run that is no fork
    gets one page."""
    url = forked_store(tmp_path / "runs.sqlite")
    output = tmp_path / "out" / "f.html"
    result = polyloop("view", "f-1", "--store", url, "-o", str(output), "--json", env=env)
    assert 0 == result.code, result.stderr
    document = result.json()
    compare = tmp_path / "out" / "f.compare.html"
    assert str(compare) == document["compare"]
    page = output.read_text(encoding="utf-8")
    assert '<a id="compare-link" href="f.compare.html">' in page
    assert "is a fork of <code>r-1</code> at step 2" in page
    assert '<a href="f.html"><code>f-1</code></a>' in compare.read_text(encoding="utf-8")
    text = polyloop("view", "f-1", "--store", url, "-o", str(output), env=env)
    assert f"and {compare} (beside its source from the fork step)" in text.stdout
    plain = tmp_path / "plain" / "r.html"
    plain_result = polyloop("view", "r-1", "--store", url, "-o", str(plain), "--json", env=env)
    assert 0 == plain_result.code, plain_result.stderr
    assert "compare" not in plain_result.json()
    assert ["r.html"] == [p.name for p in plain.parent.iterdir()]


async def test_a_source_not_in_the_store_is_named_without_link_or_differences(
    tmp_path: Path,
) -> None:
    """The fork's log read from a store that lacks its source: the source is named, said not
    to be in the store, with no link, no differences and no side-by-side link."""
    forked_store(tmp_path / "runs.sqlite")
    async with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        log = await store.read_log("f-2")
    lineage = await read_lineage(MemoryRunStore(), log, lambda run_id: f"{run_id}.html")
    assert lineage is not None
    assert (Link("f-1", 4, None, "not in this store"),) == lineage.chain
    assert lineage.source is None
    page = run_page(RunPage("f-2", log, "memory://", lineage=lineage))
    section = _section(page, 'id="lineage"')
    assert "is a fork of <code>f-1</code> at step 4" in section
    assert "(not in this store)" in section
    assert "The source run is not in this store" in section
    assert "compare-link" not in section


def _fork_logs(observation: str, variant: str) -> tuple[RunLog, RunLog]:
    """A source ``s`` of three tool steps and a fork ``f`` at step 1 of two, then an answer;
    the fork's step 1 observes ``observation``."""
    source_steps = [testing.tool_step("s", k, observation=f"seen {k}") for k in range(3)]
    fork_steps = [
        testing.tool_step("f", 0, observation="seen 0"),
        testing.tool_step("f", 1, observation=observation),
        testing.final_step("f", 2, "done"),
    ]
    started = dataclasses.replace(
        testing.run_started("f", {"request.model_binding.variant": variant}),
        forked_from_run_id="s",
        forked_at_step=1,
    )
    source: list[object] = [testing.run_started("s")]
    for step in source_steps:
        source += step.records
    source.append(testing.run_finished("s", source_steps, StopReason.STEP_BUDGET))
    fork: list[object] = [started]
    for step in fork_steps:
        fork += step.records
    fork.append(testing.run_finished("f", fork_steps, StopReason.AGENT_FINISHED))
    return (
        testing.run_log_from(source),  # type: ignore[arg-type]
        testing.run_log_from(fork),  # type: ignore[arg-type]
    )


def _pages(observation: str, variant: str) -> tuple[str, str]:
    source, fork = _fork_logs(observation, variant)
    difference = SnapshotDifference("request.model_binding.variant", None, variant)
    lineage = Lineage(
        "s",
        1,
        (Link("s", 1, "s.html"),),
        (("fork of", "s at step 1 (steps 0-0 inherited)"),),
        (difference,),
        source,
    )
    run = run_page(RunPage("f", fork, "memory://", lineage=lineage, compare_href="f.compare.html"))
    side = compare_page(ComparePage("f", fork, source, lineage, "memory://", "f.html"))
    return run, side


@settings(max_examples=60, deadline=None)
@given(observation=st.text(max_size=COMPARE_CHARS + 50), variant=st.text(max_size=100))
def test_any_text_of_a_fork_adds_no_markup_to_its_pages(observation: str, variant: str) -> None:
    """Any text as the fork's observation and as a parameter that differs: both pages' markup
    is tag for tag that of plain text there, and the text is shown (its first COMPARE_CHARS
    characters beside the source), control characters as their pictures."""
    plain_run, plain_side = _pages("x", "v")
    run, side = _pages(observation, variant)
    assert _tags(plain_run) == _tags(run)
    assert _tags(plain_side) == _tags(side)

    def pictured(value: str) -> str:
        return "".join(
            chr(0x2400 + ord(c))
            if ord(c) < 0x20 and c not in "\t\n"
            else "\u2421"
            if c == "\x7f"
            else c
            for c in value
        )

    assert f"<td>{pictured(variant)}</td>" in html.unescape(run)
    assert f"<td>{pictured(variant)}</td>" in html.unescape(side)
    shown = pictured(observation[:COMPARE_CHARS])
    assert f'<pre class="observation">{shown}</pre>' in html.unescape(side)


@pytest.mark.slow
def test_console_pages(tmp_path: Path) -> None:
    """`polyloop serve`: f-1's run page links r-1's and its side-by-side page, which is served
    with the viewer's policy (no script: script-src 'none') and links back; a run that is no
    fork has no side-by-side page (404, saying so)."""
    url = forked_store(tmp_path / "runs.sqlite")
    served = serve(tmp_path / "home", url)
    try:
        with signed_in(served) as client:
            run = client.get("/runs/f-1")
            assert 200 == run.status_code
            assert '<a href="/runs/r-1"><code>r-1</code></a>' in run.text
            assert '<a id="compare-link" href="/compare/f-1">' in run.text
            side = client.get("/compare/f-1")
            assert 200 == side.status_code, side.text
            assert "script-src 'none'" in side.headers["content-security-policy"]
            assert ["2", "3", "4", "5"] == re.findall(r'<tr id="pair-(\d+)"', side.text)
            assert '<a href="/runs/f-1#step-3">step 3</a>' in side.text
            assert "<script" not in side.text
            assert HOSTILE_VARIANT not in side.text
            assert 404 == client.get("/compare/r-1").status_code
            assert "is not a fork" in client.get("/compare/r-1").text
            assert 404 == client.get("/compare/nope").status_code
        assert 303 == _anonymous(served.base, "/compare/f-1")
    finally:
        served.stop()


def _anonymous(base: str, path: str) -> int:
    import httpx

    return httpx.get(f"{base}{path}", follow_redirects=False).status_code


def test_the_json_block_of_a_fork_page_parses(tmp_path: Path, env: dict[str, str]) -> None:
    """The full-texts block of a fork's page is JSON (nothing the lineage added broke it)."""
    directory = _view_all(tmp_path, env)
    page = (directory / "runs" / page_name("f-2")).read_text(encoding="utf-8")
    block = page.split('id="full-texts">')[1].split("</script>")[0]
    assert isinstance(json.loads(block), list)
