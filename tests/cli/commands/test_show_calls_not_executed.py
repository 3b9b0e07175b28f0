"""`polyloop show` marks a step whose reply carried tool calls it did not execute, in the table,
in `--json` and in `--full` (issue 25, item 2; design 0045)."""

from __future__ import annotations

from pathlib import Path

from polyloop.adapters.tool_calls import ReplyToolCall, ToolCallReplyParser, render_tool_calls
from polyloop.session import run
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import reply
from tests.cli._kit import polyloop
from tests.loop_kit import Effects, make_definition, make_request, replies, scenario_tools

PARALLEL = render_tool_calls(
    "", [ReplyToolCall("read", {}), ReplyToolCall("write", {"path": "t.txt"})]
)


async def test_show_marks_the_step_and_names_the_calls(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """The table's status says how many calls were not executed and the action names them;
    `--json` lists the names and `--full` the field itself."""
    definition = make_definition(
        [reply(PARALLEL), reply("Done.")], sqlite_store, parser=ToolCallReplyParser()
    )
    await run(definition, make_request("par", tools=scenario_tools(Effects())))
    url = f"sqlite://{sqlite_path}"
    text = polyloop("show", "par", "--store", url, env=env)
    assert 0 == text.code, text.stderr
    assert "executed +1 not executed" in text.stdout
    assert "[not executed: write]" in text.stdout
    rows = polyloop("show", "par", "--store", url, "--json", env=env).json()["steps"]
    assert [["write"], None] == [row.get("calls_not_executed") for row in rows]
    full = polyloop("show", "par", "--store", url, "--json", "--full", env=env).json()["steps"]
    assert [{"tool_name": "write", "tool_arguments": '{"path":"t.txt"}'}] == full[0][
        "calls_not_executed"
    ]
    assert [] == full[1]["calls_not_executed"]


async def test_brackets_in_a_step_are_shown_as_text_not_read_as_markup(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """An observation holding `[Errno 2]` or `[/]` is shown as it is (the table once read
    cells as rich markup: the first vanished, the second made `show` fail)."""
    definition = make_definition(replies("CALL noop {}", "FINAL: [/] done"), sqlite_store)
    tools = scenario_tools(Effects())
    await run(definition, make_request("brackets", tools=tools))
    text = polyloop("show", "brackets", "--store", f"sqlite://{sqlite_path}", env=env)
    assert 0 == text.code, text.stderr
    assert "[/] done" in text.stdout
