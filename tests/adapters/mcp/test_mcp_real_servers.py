"""The binder against real MCP servers: the reference time and git servers from PyPI (issue 16,
item 12) and the project's test server, for the output cap, name prefixes and renames, binding
several servers at once, and start-up timing (items 9-11)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from polyloop.adapters.mcp import (
    ALL_TOOLS,
    McpBinding,
    McpServer,
    McpServerStartError,
    McpToolBinder,
)
from polyloop.adapters.tool_calls import ToolCallReplyParser
from polyloop.errors import ConfigurationError
from polyloop.ports import Action, ToolCall
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import NullEventSink, ScriptedModelClient, reply
from polyloop.types import (
    ActionStatus,
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    StopReason,
    SyntheticObservations,
    TextBlock,
)
from tests.adapters.mcp._real_servers import git_server, make_repository, time_server
from tests.adapters.mcp.conftest import server_spec

TEXTS = SyntheticObservations("Rejected.", "Environment failed.", "Model call failed.")


def call(name: str, **arguments: object) -> Action:
    return Action(text=name, tool_call=ToolCall(name, arguments))


def tool_call_text(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# ---------------------------------------------------------------------------
# Item 12: real third-party servers
# ---------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_governed_run_over_the_reference_time_and_git_servers(tmp_path: Path) -> None:
    """mcp-server-time and mcp-server-git, bound into one registry with one call, serve a
    governed run: each tool call reaches the right server and its answer is the observation."""
    repository = make_repository(tmp_path / "repo")
    async with McpToolBinder([time_server(), git_server(repository)], startup_timeout=60) as binder:
        tools = await binder.bind_all(
            [
                McpBinding("time", ["convert_time"], trust_annotations=True),
                McpBinding("git", ["git_status", "git_log"], prefix="repo_", safe=["git_status"]),
            ]
        )
        assert ("convert_time", "repo_git_status", "repo_git_log") == tools.names()
        model = ScriptedModelClient(
            [
                reply(
                    tool_call_text(
                        "convert_time",
                        source_timezone="UTC",
                        time="12:00",
                        target_timezone="Asia/Tokyo",
                    )
                ),
                reply(tool_call_text("repo_git_status", repo_path=str(repository))),
                reply("Done."),
            ]
        )
        request = RunRequest(
            run_id="real-servers",
            budget=Budget(5, 5, 2, 200_000),
            action_executor=tools.executor(),
            tools=tools.registry,
            context=Context((), (Message(Role.USER, (TextBlock("Check the time and repo."),)),)),
            injections={},
            model_binding={},
            model_replay_policy=ReplayPolicy.SAFE,
            observation_template="{observation}",
            tool_section_template="Tools: {tools}",
            cancel_grace_seconds=1.0,
        )
        result = await run(
            AgentDefinition(model, ToolCallReplyParser(), MemoryRunStore(), NullEventSink(), TEXTS),
            request,
        )
        params = tools.executor().parameters()
    assert StopReason.AGENT_FINISHED is result.stop_reason
    converted, status, _ = result.steps
    assert (ActionStatus.EXECUTED, ActionStatus.EXECUTED) == (
        converted.action_status,
        status.action_status,
    )
    assert "21:00" in converted.observation  # noon UTC is 21:00 in Tokyo
    assert "Changes to be committed" in status.observation
    assert "git_status" == params["tool.repo_git_status.server_tool"]
    assert "git" == params["tool.repo_git_status.server"]
    assert params["server.time.server_info"].startswith("mcp-time")


# ---------------------------------------------------------------------------
# Item 9: the output cap
# ---------------------------------------------------------------------------


async def test_a_long_result_is_cut_to_the_cap_and_the_cut_is_counted(ledger: Path) -> None:
    """A 2.5-million-character result becomes at most `max_output_chars` characters, and
    `observation_truncated_chars` says exactly how many were left out."""
    async with McpToolBinder([server_spec(ledger)], max_output_chars=1_000) as binder:
        toolset = await binder.bind("testsrv", ["big"])
        executor = toolset.executor()
        outcome = await executor.execute(call("big", chars=2_517_371))
        assert "1000" == executor.parameters()["server.testsrv.max_output_chars"]
        # The registry's own handler path is capped too (without the count).
        plain = await toolset.registry.executor().execute(call("big", chars=5_000))
    assert len(outcome.observation) <= 1_000
    shown = outcome.observation.index("\n[...")
    assert 2_517_371 - shown == outcome.observation_truncated_chars
    assert f"{outcome.observation_truncated_chars} more characters" in outcome.observation
    assert len(plain.observation) <= 1_000


async def test_non_text_content_is_named_not_shown_and_counts_toward_the_cap(
    ledger: Path,
) -> None:
    """An image block becomes a placeholder with its MIME type and size (its base64 never
    reaches the model), and the cap applies to the whole observation."""
    async with McpToolBinder([server_spec(ledger)], max_output_chars=100) as binder:
        toolset = await binder.bind("testsrv", ["picture"])
        small = await toolset.executor().execute(call("picture", text="A chart."))
        long = await toolset.executor().execute(call("picture", text="y" * 500))
    assert (
        "A chart.\n[image content (image/png, 4008 characters of base64) not shown]"
        == small.observation
    )
    assert 0 == small.observation_truncated_chars
    assert len(long.observation) <= 100
    assert 0 < long.observation_truncated_chars


def test_a_cap_too_small_for_its_marker_is_refused(ledger: Path) -> None:
    """`max_output_chars` below 100 is a configuration error."""
    with pytest.raises(ConfigurationError, match="max_output_chars"):
        McpToolBinder([server_spec(ledger)], max_output_chars=10)


# ---------------------------------------------------------------------------
# Item 10: several servers, one registry
# ---------------------------------------------------------------------------


async def test_two_servers_offering_the_same_name_need_a_prefix(ledger: Path) -> None:
    """Without a prefix the collision is refused naming both servers; with one, each call
    reaches its own server."""
    servers = [server_spec(ledger, name="left"), server_spec(ledger, name="right")]
    async with McpToolBinder(servers) as binder:
        with pytest.raises(ConfigurationError, match=r"'whoami' by \['left', 'right'\]"):
            await binder.bind_all([McpBinding("left", ["whoami"]), McpBinding("right", ["whoami"])])
        tools = await binder.bind_all(
            [McpBinding("left", ["whoami"], prefix="left_"), McpBinding("right", ["whoami"])]
        )
        executor = tools.executor()
        answers = [
            (await executor.execute(call(name))).observation for name in ("left_whoami", "whoami")
        ]
    assert ("left_whoami", "whoami") == tools.names()
    assert ["left", "right"] == answers


async def test_a_rename_changes_only_the_name_the_model_sees(ledger: Path) -> None:
    """`rename` maps a server tool to another name; the call reaches the server under its own
    name, and safe/completes_run keep using the server's names."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind(
            "testsrv",
            ["echo", "finish"],
            rename={"echo": "say"},
            prefix="t_",
            safe=["echo"],
            completes_run=["finish"],
        )
        outcome = await toolset.executor().execute(call("say", text="hi"))
        params = toolset.executor().parameters()
    assert ("say", "t_finish") == toolset.names()
    assert "echo:hi" == outcome.observation
    say, finish = (toolset.registry.spec_for(name) for name in ("say", "t_finish"))
    assert say is not None
    assert finish is not None
    assert (ReplayPolicy.SAFE, True) == (say.replay_policy, finish.completes_run)
    assert ("echo", "finish") == (
        params["tool.say.server_tool"],
        params["tool.t_finish.server_tool"],
    )


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({"prefix": "bad prefix "}, "a prefix may hold only"),
        ({"rename": {"echo": "has space"}}, "not a valid tool name"),
        ({"prefix": "p" * 62}, "not a valid tool name"),
        ({"rename": {"append": "x"}}, "not being bound"),
    ],
)
async def test_prefixes_and_renames_must_give_valid_names(
    ledger: Path, options: dict[str, object], detail: str
) -> None:
    """A prefix or rename producing a name outside `^[A-Za-z0-9_-]{1,64}$`, or renaming a tool
    that is not bound, is refused."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        with pytest.raises(ConfigurationError, match=detail):
            await binder.bind("testsrv", ["echo"], **options)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Item 11: start-up time and the error text
# ---------------------------------------------------------------------------


async def test_a_hung_server_fails_within_its_startup_timeout_and_names_its_command(
    tmp_path: Path,
) -> None:
    """A server that never answers is given up after `startup_timeout` (not 2 s later), and the
    error shows its command without a stray space."""
    script = tmp_path / "mute-server"
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    async with McpToolBinder([McpServer("mute", str(script))], startup_timeout=1.0) as binder:
        started = time.monotonic()
        with pytest.raises(McpServerStartError) as caught:
            await binder.bind("mute", ALL_TOOLS)
        elapsed = time.monotonic() - started
    assert elapsed < 1.8, f"took {elapsed:.2f} s for a 1 s startup_timeout"
    assert f"MCP server 'mute' ({script}) could not be started" in str(caught.value)


async def test_a_missing_command_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A command not found on the server's PATH is an immediate start error naming it."""
    async with McpToolBinder([McpServer("ghost", "no-such-mcp-server-xyz", ["--flag"])]) as b:
        with pytest.raises(McpServerStartError, match="'no-such-mcp-server-xyz' was not found"):
            await b.bind("ghost", ALL_TOOLS)


async def test_all_tools_of_the_git_server_bind_with_their_schemas(tmp_path: Path) -> None:
    """Every tool of the real git server binds, and its input schema is the tool's parameters."""
    repository = make_repository(tmp_path / "repo")
    async with McpToolBinder([git_server(repository)], startup_timeout=60) as binder:
        toolset = await binder.bind("git", ALL_TOOLS)
    assert {"git_status", "git_commit", "git_log", "git_diff"} <= set(toolset.names())
    status = toolset.registry.spec_for("git_status")
    assert status is not None
    assert ["repo_path"] == status.parameters["required"]
