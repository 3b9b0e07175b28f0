"""`polyloop view`: the page of a run holds every step, escapes everything it shows, and works
offline; `view --all` lists the runs and links to each page; a damaged log gives a page of
what can be read and exit 6. (The pages in a real browser: test_view_browser.py.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from polyloop import testing
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from polyloop_cli.view import page_name
from polyloop_cli.view_page import FOLD_CHARS, text
from tests.cli._kit import assert_one_line_error, headline, polyloop
from tests.cli.test_damaged_stores import damaged_sqlite  # noqa: F401  (a fixture)
from tests.table_kit import fill

HOSTILE_REPLY = (
    'CALL lookup {"q": "</pre><script>window.__pwned = 1</script><img src=x '
    'onerror=\\"window.__pwned = 2\\">"}'
)
HOSTILE_OBSERVATION = "\x1b[31mred\x1b[0m <b>bold</b> & </script><script>window.__pwned=3</script>"


def hostile_records(run_id: str, long_line_chars: int = 1_000_000) -> list[object]:
    """A run whose reply, tool arguments and observations are HTML, script, ANSI and a 1 MB
    line; its snapshot has markup too."""
    snapshot = {"model_client.kind": "<script>window.__pwned=4</script>"}
    steps = [
        testing.tool_step(
            run_id,
            0,
            content=HOSTILE_REPLY,
            arguments={"q": "</pre><script>window.__pwned = 1</script>"},
            observation=HOSTILE_OBSERVATION,
        ),
        testing.tool_step(run_id, 1, observation="x" * long_line_chars),
        testing.final_step(run_id, 2, "<script>window.__pwned=5</script>"),
    ]
    records: list[object] = [testing.run_started(run_id, snapshot)]
    for step in steps:
        records += step.records
    records.append(
        testing.run_finished(
            run_id,
            steps,
            StopReason.AGENT_FINISHED,
            final_answer="<script>window.__pwned=5</script>",
        )
    )
    return records


def make_store(path: Path, *record_lists: list[object], kit: bool = False) -> str:
    async def make() -> None:
        async with SqliteRunStore(path) as store:
            if kit:
                await fill(store)
            for records in record_lists:
                await testing.write_records(store, records)  # type: ignore[arg-type]

    # In a thread of its own: playwright's sync API keeps an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, make()).result()
    return f"sqlite://{path}"


@given(st.text())
def test_text_escapes_everything(value: str) -> None:
    """Any text: no markup character or control character is left; unescaped, it is the text
    with each control character shown as its Unicode picture."""
    shown = text(value)
    assert not re.search(r'[<>"\x00-\x08\x0b-\x1f\x7f]', shown)
    pictured = "".join(
        chr(0x2400 + ord(c))
        if ord(c) < 0x20 and c not in "\t\n"
        else "\u2421"
        if c == "\x7f"
        else c
        for c in value
    )
    assert pictured == html.unescape(shown)


def test_the_page_has_every_step_and_no_markup_from_the_log(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Hostile reply, arguments, observation, answer and snapshot: the page's only scripts are
    its own, nothing is fetched, and the 1 MB line is folded with its full length said."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile"))
    output = tmp_path / "page.html"
    result = polyloop("view", "hostile", "--store", url, "-o", str(output), env=env)
    assert 0 == result.code, result.stderr
    page = output.read_text(encoding="utf-8")
    assert 2 == page.count("<script")  # the full-texts JSON block and the page's own script
    assert "<script>window" not in page
    assert "<img" not in page
    assert "</pre><script" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert "\x1b" not in page
    assert "\u241b[31mred" in page
    assert all(f'id="step-{k}"' in page for k in range(3))
    assert "show all 1,000,000 characters" in page
    markup, full_texts = page.split('id="full-texts">')
    assert f">{'x' * FOLD_CHARS}…<" in markup
    assert "x" * (FOLD_CHARS + 1) not in markup, "the markup holds the preview only"
    assert "x" * 1_000_000 in full_texts
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "default-src 'none'" in page


def test_view_all_lists_every_run_and_links_each_page(tmp_path: Path, env: dict[str, str]) -> None:
    """`view --all -o DIR`: DIR/index.html has a row per run linking to DIR/runs/<page>."""
    url = make_store(tmp_path / "runs.sqlite", hostile_records("hostile", 10), kit=True)
    directory = tmp_path / "pages"
    result = polyloop("view", "--all", "--store", url, "-o", str(directory), env=env)
    assert 0 == result.code, result.stderr
    index = (directory / "index.html").read_text(encoding="utf-8")
    for run_id in ("hostile", "run-finished", "run-unfinished", "run-empty"):
        link = f"runs/{page_name(run_id)}"
        assert f'href="{link}"' in index
        assert (directory / link).is_file()
        assert 'href="../index.html"' in (directory / link).read_text(encoding="utf-8")
    assert "unfinished" in index
    assert "agent_finished" in index


def test_an_unknown_run_is_exit_5(tmp_path: Path, env: dict[str, str]) -> None:
    """A run the store does not hold: one line naming it and how to list the runs; no file."""
    url = make_store(tmp_path / "runs.sqlite", kit=True)
    output = tmp_path / "page.html"
    result = polyloop("view", "nope", "--store", url, "-o", str(output), env=env)
    assert_one_line_error(result, 5)
    assert headline(result).startswith("no run 'nope' in the sqlite store")
    assert not output.exists()


def test_run_id_or_all(tmp_path: Path, env: dict[str, str]) -> None:
    """Neither or both of RUN_ID and --all: a usage error."""
    url = make_store(tmp_path / "runs.sqlite", kit=True)
    assert_one_line_error(polyloop("view", "--store", url, env=env), 2)
    assert_one_line_error(polyloop("view", "run-empty", "--all", "--store", url, env=env), 2)


def test_a_damaged_run_gives_a_page_of_what_can_be_read(
    damaged_sqlite: tuple[str, set[str]],  # noqa: F811
    tmp_path: Path,
    env: dict[str, str],
) -> None:
    """A run the store cannot read: its page shows the readable steps and names the unreadable
    records; exit 6, one line. --all: every page written, exit 6."""
    url, bad = damaged_sqlite
    run_id = sorted(bad)[0]
    output = tmp_path / "page.html"
    result = polyloop("view", run_id, "--store", url, "-o", str(output), env=env)
    assert_one_line_error(result, 6)
    assert headline(result).startswith(f"the log of run {run_id!r} is damaged")
    page = output.read_text(encoding="utf-8")
    assert "Damaged log." in page
    every = polyloop("view", "--all", "--store", url, "-o", str(tmp_path / "all"), env=env)
    assert_one_line_error(every, 6)
    assert 40 == len(list((tmp_path / "all" / "runs").iterdir()))
