"""`polyloop view`: the page of a run holds every step, escapes everything it shows, and works
offline; `view --all` lists the runs and links to each page; a damaged log gives a page of
what can be read and exit 6. (The pages in a real browser: test_view_browser.py.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import html
import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from polyloop import testing
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ModelCallResult, ReplayPolicy, StopReason
from polyloop_console.viewer.command import page_name
from polyloop_console.viewer.pages import FOLD_CHARS, RunPage, run_page, text
from tests.cli._kit import assert_one_line_error, headline, polyloop
from tests.cli.shared.test_damaged_stores import damaged_sqlite  # noqa: F401  (a fixture)
from tests.table_kit import fill, replied

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


def _pictured(value: str) -> str:
    """``value`` with each control character (but tab and newline) as its Unicode picture."""
    return "".join(
        chr(0x2400 + ord(c))
        if ord(c) < 0x20 and c not in "\t\n"
        else "\u2421"
        if c == "\x7f"
        else c
        for c in value
    )


@given(st.text())
def test_text_escapes_everything(value: str) -> None:
    """Any text: no markup character or control character is left; unescaped, it is the text
    with each control character shown as its Unicode picture."""
    shown = text(value)
    assert not re.search(r'[<>"\x00-\x08\x0b-\x1f\x7f]', shown)
    assert _pictured(value) == html.unescape(shown)


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
    episode_alone = polyloop("view", "run-empty", "--episode", "{}", "--store", url, env=env)
    assert_one_line_error(episode_alone, 2)


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


# ---------------------------------------------------------------------------
# Design 0061: the unfinished step, one token total, the step list, the task
# ---------------------------------------------------------------------------

#: Markup in a call's arguments, for the step a run started and did not finish.
HOSTILE_NOTE = "</pre><script>window.__pwned = 6</script>"
#: The snapshot of a run whose replies the line parser reads (a parser polyloop ships).
LINE_PARSER = {
    "model_client.kind": "scripted",
    "decision_parser.kind": "line_protocol",
    "decision_parser.version": "1",
}


def doubt_records(run_id: str, *, finished: bool) -> list[object]:
    """Step 0 done; step 1's reply calls the never tool ``refund`` with markup in its arguments
    and its action intent has no outcome (killed mid-action). ``finished``: resume then stopped
    it with resume_state_unknown. The replies report 1,000 and 234 tokens."""
    done = replied(
        testing.tool_step(run_id, 0, observation="order found"),
        usage={"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1_000},
    )
    doubt = replied(
        testing.tool_step(
            run_id,
            1,
            tool_name="refund",
            arguments={"note": HOSTILE_NOTE, "amount": 5},
            content='CALL refund {"amount": 5, "note": "' + HOSTILE_NOTE + '"}',
            replay_policy=ReplayPolicy.NEVER,
        ),
        usage={"prompt_tokens": 200, "completion_tokens": 34, "total_tokens": 234},
    )
    assert doubt.action_intent is not None
    records: list[object] = [testing.run_started(run_id, LINE_PARSER)]
    records += done.records
    records += [doubt.model_intent, doubt.model_result, doubt.action_intent]
    if finished:
        records.append(testing.run_finished(run_id, [done], StopReason.RESUME_STATE_UNKNOWN))
    return records


def _card(page: str, step: int) -> str:
    start = page.index(f'id="step-{step}"')
    return page[start : page.index("</section>", start)]


def _nav(page: str) -> str:
    return page[page.index('<nav id="steps"') : page.index("</nav>")]


def test_an_action_in_doubt_is_shown_with_its_tool_arguments_reply_and_state(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A step killed inside a never action, then stopped by resume (resume_state_unknown), and
    the same run before resume: the step is in the list under its tool, its card shows the
    reply, the tool, the arguments (escaped), where they come from and the state in words."""
    url = make_store(
        tmp_path / "runs.sqlite",
        doubt_records("stopped", finished=True),
        doubt_records("crashed", finished=False),
    )
    for run_id, words in (
        ("stopped", "The run stopped (resume_state_unknown) with this step unfinished"),
        ("crashed", "so the run stops instead of repeating it"),
    ):
        output = tmp_path / f"{run_id}.html"
        result = polyloop("view", run_id, "--store", url, "-o", str(output), env=env)
        assert 0 == result.code, result.stderr
        page = output.read_text(encoding="utf-8")
        assert 2 == page.count("<script")
        assert "<script>window" not in page
        nav = _nav(page)
        assert 'data-step="1"' in nav
        assert "<b>refund</b>" in nav
        card = _card(page, 1)
        assert "may or may not have run (replay policy never)" in card
        assert words in html.unescape(card)
        assert '<p class="tool">refund</p>' in card
        shown = html.unescape(card)
        assert f'"note": "{HOSTILE_NOTE}"' in shown  # the arguments, pretty-printed
        assert f'CALL refund {{"amount": 5, "note": "{HOSTILE_NOTE}"}}' in shown  # the reply
        assert "read from the reply by the run's decision parser (line_protocol" in shown
        assert "action-1</code> action, replay policy <b>never</b>: no outcome recorded" in card


def test_a_parked_run_shows_what_waits_for_a_person_and_since_when(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Runs parked by the real loop on an approval and on a question (markup in it): the
    waiting step is listed under its tool, its card says what it waits for since the ask's
    time, with the tool and the arguments of the ask, escaped."""
    from polyloop.asking import RunParked
    from polyloop.session import run_or_park
    from tests.asking_kit import definition, gated_request
    from tests.loop_kit import Effects

    path = tmp_path / "runs.sqlite"
    scripts = {
        "approval": ["CALL read {}", 'CALL refund {"amount": 7}'],
        "question": ['CALL ask_user {"question": "' + HOSTILE_NOTE + '"}'],
    }

    async def park() -> dict[str, RunParked]:
        parked = {}
        async with SqliteRunStore(path) as store:
            for run_id, script in scripts.items():
                request = gated_request(run_id, Effects())
                outcome = await run_or_park(definition(script, store), request)
                assert isinstance(outcome, RunParked), outcome
                parked[run_id] = outcome
        return parked

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        parked = thread.submit(asyncio.run, park()).result()
    for run_id, (tool, step, words, argument) in {
        "approval": ("refund", 1, "waiting for approval since", '"amount": 7'),
        "question": ("ask_user", 0, "waiting for an answer since", f'"question": "{HOSTILE_NOTE}"'),
    }.items():
        output = tmp_path / f"{run_id}.html"
        result = polyloop("view", run_id, "--store", f"sqlite://{path}", "-o", str(output), env=env)
        assert 0 == result.code, result.stderr
        page = output.read_text(encoding="utf-8")
        assert 2 == page.count("<script")
        card = html.unescape(_card(page, step))
        ask = parked[run_id].ask
        assert f"{words} {ask.asked_at}" in card
        assert f'<p class="tool">{tool}</p>' in card
        assert argument in card
        assert "the ask of this step" in card
        assert ask.arguments_sha256 in card
        assert f"decide it naming --step {step}" in card  # design 0059
        assert f"<b>{tool}</b>" in _nav(page)
        assert "announced, never completed" not in page
        assert "<dt>status word</dt><dd>waiting_approval</dd>" in page


def test_both_pages_count_every_reply_s_tokens(tmp_path: Path, env: dict[str, str]) -> None:
    """One rule: the run page's total and the list's are every recorded reply's tokens, the
    unfinished step's reply included (1,000 + 234)."""
    url = make_store(tmp_path / "runs.sqlite", doubt_records("stopped", finished=True))
    directory = tmp_path / "pages"
    assert 0 == polyloop("view", "--all", "--store", url, "-o", str(directory), env=env).code
    index = (directory / "index.html").read_text(encoding="utf-8")
    page = (directory / "runs" / page_name("stopped")).read_text(encoding="utf-8")
    assert '<td class="num" data-sort="1234">1,234</td>' in index
    summary = page[page.index('<section class="summary">') : page.index("</section>")]
    assert "<dt>tokens</dt><dd>1,234 (completion_tokens=134 prompt_tokens=1,100 " in summary


def test_the_step_list_names_each_tool_with_its_arguments_and_the_panel_is_closed(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The list reads the tool and an argument preview (not "tool call lookup"), the code's
    text, the answer; the parameter snapshot is a closed fold."""
    url = make_store(tmp_path / "runs.sqlite", kit=True)
    output = tmp_path / "page.html"
    assert 0 == polyloop("view", "run-finished", "--store", url, "-o", str(output), env=env).code
    page = output.read_text(encoding="utf-8")
    nav = _nav(page)
    assert "tool call" not in nav
    assert '<b>lookup</b> <span class="args">{&quot;id&quot;:7}</span>' in nav
    assert '<b>code</b> <span class="args">print(' in nav
    assert "<b>final</b>" in nav
    assert '<details id="parameters" aria-label="parameter snapshot"><summary>' in page
    assert "<aside" not in page


def test_the_task_is_said_missing_without_an_agent_and_rebuilt_with_one(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Without --agent the page says the log does not record the prompt; with the demo's
    agent the goal and the messages are shown, checked against each step's recorded prompt
    size; an agent whose request is not the run's is said not to match."""
    demo = polyloop("demo", "--approval", "--json", env=env, timeout=120)
    assert 0 == demo.code, demo.stderr
    document = demo.json()
    url, run_id = document["store"], document["run_id"]
    agent = ("--agent", document["agent"], "--episode", json.dumps(document["episode"]))
    bare = tmp_path / "bare.html"
    assert 0 == polyloop("view", run_id, "--store", url, "-o", str(bare), env=env).code
    assert "The log does not record the prompt" in bare.read_text(encoding="utf-8")
    rebuilt = tmp_path / "rebuilt.html"
    result = polyloop("view", run_id, "--store", url, "-o", str(rebuilt), *agent, env=env)
    assert 0 == result.code, result.stderr
    page = html.unescape(rebuilt.read_text(encoding="utf-8"))
    task = page[
        page.index('<section class="task"') : page.index("</section>", page.index("<h2>Task"))
    ]
    assert "Ticket #5531" in task
    assert "matches the prompt size recorded by each of the 1 steps" in task
    assert "The log does not record the prompt" not in page
    step_0 = page[page.index('id="step-0"') : page.index("</section>", page.index('id="step-0"'))]
    assert "as the model saw it in the next call" in step_0
    assert "Tool result: {" in step_0  # the observation as the template wrapped it
    directory = tmp_path / "all"
    every = polyloop("view", "--all", "--store", url, "-o", str(directory), *agent, env=env)
    assert 0 == every.code, every.stderr
    assert "Ticket #5531" in (directory / "index.html").read_text(encoding="utf-8")
    other = make_store(tmp_path / "other.sqlite", hostile_records("hostile", 10))
    wrong = tmp_path / "wrong.html"
    result = polyloop("view", "hostile", "--store", other, "-o", str(wrong), *agent, env=env)
    assert 0 == result.code, result.stderr
    assert "it does NOT match the run: step 0 recorded 100 prompt characters" in (
        html.unescape(wrong.read_text(encoding="utf-8"))
    )


def _tags(page: str) -> list[str]:
    return re.findall(r"<(/?[A-Za-z][A-Za-z0-9]*)", page)


@settings(max_examples=60, deadline=None)
@given(note=st.text(max_size=200), thinking=st.text(max_size=200), finished=st.booleans())
def test_any_text_of_an_unfinished_step_adds_no_markup(
    note: str, thinking: str, finished: bool
) -> None:
    """Any text in the unfinished step's arguments, reply and thinking: the page's markup is
    the same tag for tag as with plain text there, and the card shows the text itself."""

    def page_of(note: str, thinking: str) -> str:
        records = doubt_records("r", finished=finished)
        content = "CALL refund " + json.dumps({"note": note}, ensure_ascii=False)
        records = [
            dataclasses.replace(
                record,
                reply=dataclasses.replace(record.reply, content=content, thinking=thinking),
            )
            if isinstance(record, ModelCallResult) and record.result_id == "model-1"
            else record
            for record in records
        ]
        log = testing.run_log_from(records)  # type: ignore[arg-type]
        return run_page(RunPage("r", log, "memory://"))

    plain = page_of("x", "t" if thinking else "")
    page = page_of(note, thinking)
    assert _tags(plain) == _tags(page)
    card = html.unescape(_card(page, 1))
    assert _pictured(json.dumps({"note": note}, indent=2, ensure_ascii=False)) in card


def dated_run(run_id: str, started_at: str | None) -> list[object]:
    """A one-step finished run whose RunStarted carries ``started_at`` (``None``: a log
    written before the loop recorded start times)."""
    step = testing.final_step(run_id, 0, "done")
    started = dataclasses.replace(testing.run_started(run_id), started_at=started_at)
    return [started, *step.records, testing.run_finished(run_id, [step], StopReason.AGENT_FINISHED)]


#: Start times in recorded order, with what the list shows and the instant each sorts by.
DATED = {
    "late": "2026-12-07T04:05:06+00:00",
    "early": "2026-12-06T23:59:59+00:00",
    # Written with an offset by some other writer: sorts by its instant, 2026-12-07T03:00:00Z.
    "offset": "2026-12-07T05:00:00+02:00",
}


def _started_cells(index: str) -> dict[str, tuple[str, str]]:
    """Each row's run id → (the started cell's sort key, its text)."""
    rows = re.findall(
        r'<tr data-ending="[^"]*"><td data-sort="([^"]*)">.*?</td>'
        r'<td class="[^"]*" data-sort="([^"]*)">([^<]*)</td>',
        index,
    )
    return {run_id: (sort, shown) for run_id, sort, shown in rows}


def test_the_runs_page_lists_start_times_sorting_by_the_instant_and_dash_for_old_logs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A run with RunStarted.started_at shows it in the list and its page; a log written
    before the field existed reads as None and shows "—", sorting first."""
    records = [dated_run(run_id, at) for run_id, at in DATED.items()]
    url = make_store(tmp_path / "runs.sqlite", *records, dated_run("old", None))
    directory = tmp_path / "pages"
    assert 0 == polyloop("view", "--all", "--store", url, "-o", str(directory), env=env).code
    index = (directory / "index.html").read_text(encoding="utf-8")
    assert '<th data-kind="number" title="When the run started (UTC)' in index
    cells = _started_cells(index)
    assert {run_id: cells[run_id][1] for run_id in (*DATED, "old")} == {**DATED, "old": "—"}
    by_instant = sorted(cells, key=lambda run_id: int(cells[run_id][0]))
    assert ["old", "early", "offset", "late"] == by_instant
    late = (directory / "runs" / page_name("late")).read_text(encoding="utf-8")
    assert f"<dt>started</dt><dd>{DATED['late']}</dd>" in late
    old = (directory / "runs" / page_name("old")).read_text(encoding="utf-8")
    assert "<dt>started</dt><dd>— (the log predates start times)</dd>" in old


def test_runs_and_show_give_the_start_time(tmp_path: Path, env: dict[str, str]) -> None:
    """`runs --json` and `show --json` carry started_at (null for an old log); `show` prints it."""
    url = make_store(
        tmp_path / "runs.sqlite", dated_run("late", DATED["late"]), dated_run("old", None)
    )
    rows = json.loads(polyloop("runs", "--store", url, "--json", env=env).stdout)["runs"]
    assert {"late": DATED["late"], "old": None} == {
        row["run_id"]: row["started_at"] for row in rows
    }
    shown = json.loads(polyloop("show", "late", "--store", url, "--json", env=env).stdout)
    assert DATED["late"] == shown["started_at"]
    text_lines = polyloop("show", "late", "--store", url, env=env).stdout.splitlines()
    assert any(line.split() == ["started", DATED["late"]] for line in text_lines)
    old_lines = polyloop("show", "old", "--store", url, env=env).stdout.splitlines()
    assert not any(line.startswith("started") for line in old_lines)


async def test_view_writes_the_default_page_its_help_names(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`view RUN_ID` without -o writes ./RUN_ID.html, as its help says; a run id with other
    characters gets its safe characters and a digest (never a path outside the directory)."""
    sqlite_path = tmp_path / "runs.sqlite"
    async with SqliteRunStore(sqlite_path) as store:
        for run_id in ("nightly-7.2", "../x y"):
            step = testing.final_step(run_id, 0, "done")
            finished = testing.run_finished(run_id, [step], StopReason.AGENT_FINISHED)
            await testing.write_records(
                store, [testing.run_started(run_id), *step.records, finished]
            )
    helped = polyloop("view", "--help", env=env)
    assert "default ./RUN_ID.html" in " ".join(helped.stdout.split())
    work = tmp_path / "work"
    work.mkdir()
    store = ("--store", f"sqlite://{sqlite_path}")
    for run_id, name in (("nightly-7.2", "nightly-7.2.html"), ("../x y", page_name("../x y"))):
        result = polyloop("view", run_id, *store, env=env, cwd=work)
        assert 0 == result.code, result.stderr
        assert f"wrote {name} " in result.stdout
        assert [name] == [path.name for path in work.iterdir() if path.name == name]
    assert 2 == len(list(work.iterdir()))
