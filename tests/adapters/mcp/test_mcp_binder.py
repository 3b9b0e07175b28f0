"""McpToolBinder against a real MCP server process (tests/adapters/mcp/_server.py over stdio)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from polyloop.adapters.mcp import (
    ALL_TOOLS,
    McpBindError,
    McpError,
    McpExecutor,
    McpServer,
    McpServerStartError,
    McpToolBinder,
    McpToolNotOffered,
)
from polyloop.errors import ConfigurationError, PolyLoopError
from polyloop.ports import Action, ActionExecutor, ToolCall
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import ActionStatus, ReplayPolicy
from tests.adapters.mcp.conftest import ledger_lines, server_spec

ALL_NAMES = {
    "echo",
    "append",
    "set_flag",
    "fail",
    "die",
    "stall",
    "finish",
    "whoami",
    "big",
    "picture",
    "block",
}


def tool_action(name: str, **arguments: object) -> Action:
    return Action(text=f"CALL {name}", tool_call=ToolCall(name, arguments))


async def test_bind_an_allow_list_and_dispatch_through_the_session(ledger: Path) -> None:
    """Binding an allow-list gives those tools with the server's descriptions and schemas, all
    replay policy never, and an executor that calls them through one session in order."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo", "append", "fail"])
        assert toolset.server == "testsrv"
        assert set(toolset.names()) == {"echo", "append", "fail"}
        echo = toolset.registry.spec_for("echo")
        assert echo is not None
        assert echo.description == "Return the text, prefixed with 'echo:'."
        assert echo.parameters["required"] == ["text"]
        assert echo.parameters["properties"] == {"text": {"title": "Text", "type": "string"}}
        # Nothing was declared safe: every tool is NEVER, whatever the server hints.
        assert {
            name: toolset.registry.spec_for(name).replay_policy  # type: ignore[union-attr]
            for name in toolset.names()
        } == dict.fromkeys(toolset.names(), ReplayPolicy.NEVER)

        executor = toolset.executor()
        assert isinstance(executor, ActionExecutor)
        outcome = await executor.execute(tool_action("echo", text="hi"))
        assert outcome.status is ActionStatus.EXECUTED
        assert outcome.observation == "echo:hi"
        assert outcome.observation_is_synthetic is False

        first = await executor.execute(tool_action("append", line="one"))
        second = await executor.execute(tool_action("append", line="two"))
        assert (first.observation, second.observation) == ("appended #1", "appended #2")
        assert ledger_lines(ledger) == ["append one", "append two"]


async def test_a_tool_error_is_an_executed_action_with_the_error_text(ledger: Path) -> None:
    """A tool that reports an error is an executed action whose observation is the error text, and
    the server serves the next call."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["fail", "echo"])
        executor = toolset.executor()
        outcome = await executor.execute(tool_action("fail", reason="not today"))
        assert outcome.status is ActionStatus.EXECUTED
        assert "refused: not today" in outcome.observation
        # The server is still alive and serves the next call.
        again = await executor.execute(tool_action("echo", text="still here"))
        assert again.observation == "echo:still here"


async def test_invalid_arguments_and_tool_less_actions_are_not_executed(ledger: Path) -> None:
    """Arguments the schema refuses, an unbound tool and a tool-less action are not_executed and
    never reach the server."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["append"])
        executor = toolset.executor()
        rejected = await executor.execute(tool_action("append", lines=3))
        assert rejected.status is ActionStatus.NOT_EXECUTED
        assert "line" in rejected.observation
        unknown = await executor.execute(tool_action("echo", text="not bound"))
        assert unknown.status is ActionStatus.NOT_EXECUTED
        code = await executor.execute(Action(text="print(1)", tool_call=None))
        assert code.status is ActionStatus.NOT_EXECUTED
    assert ledger_lines(ledger) == []


async def test_a_dead_server_is_an_environment_failure_from_then_on(ledger: Path) -> None:
    """After the server dies every call is env_error naming it, and binding it again fails loudly."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["die", "echo"])
        executor = toolset.executor()
        outcome = await executor.execute(tool_action("die"))
        assert outcome.status is ActionStatus.ENV_ERROR
        assert "'testsrv'" in outcome.observation
        after = await executor.execute(tool_action("echo", text="anyone?"))
        assert after.status is ActionStatus.ENV_ERROR
        # A later bind on the dead server fails loudly instead of returning stale tools.
        with pytest.raises(McpServerStartError, match="testsrv"):
            await binder.bind("testsrv", allow=["echo"])


async def test_a_call_outliving_call_timeout_is_an_environment_failure(ledger: Path) -> None:
    """A call that outlives call_timeout is env_error saying how long it waited."""
    async with McpToolBinder([server_spec(ledger)], call_timeout=0.5) as binder:
        toolset = await binder.bind("testsrv", allow=["stall"])
        outcome = await toolset.executor().execute(tool_action("stall", seconds=30))
    assert outcome.status is ActionStatus.ENV_ERROR
    assert "did not answer within 0.5 s" in outcome.observation


async def test_cancelling_a_tool_call_passes_through(ledger: Path) -> None:
    """Cancelling a tool call in flight raises CancelledError, and the session serves the next call."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["stall", "echo"])
        executor = toolset.executor()
        task = asyncio.ensure_future(executor.execute(tool_action("stall", seconds=30)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The session survives a cancelled call.
        outcome = await executor.execute(tool_action("echo", text="after"))
        assert outcome.observation == "echo:after"


async def test_a_closed_binder_stops_its_servers(ledger: Path) -> None:
    """After the binder is closed its executors answer env_error and bind is refused."""
    binder = McpToolBinder([server_spec(ledger)])
    toolset = await binder.bind("testsrv", allow=["echo"])
    executor = toolset.executor()
    await binder.aclose()
    outcome = await executor.execute(tool_action("echo", text="x"))
    assert outcome.status is ActionStatus.ENV_ERROR
    with pytest.raises(McpBindError, match="closed"):
        await binder.bind("testsrv", allow=["echo"])


# ---------------------------------------------------------------------------
# Failing closed at bind time
# ---------------------------------------------------------------------------


async def test_a_server_that_crashes_at_start_is_an_error_naming_it(ledger: Path) -> None:
    """A server that crashes at start raises McpServerStartError naming it and quoting its stderr."""
    async with McpToolBinder([server_spec(ledger, name="crashy", mode="crash")]) as binder:
        with pytest.raises(McpServerStartError) as caught:
            await binder.bind("crashy", allow=["echo"])
    error = caught.value
    assert isinstance(error, PolyLoopError)
    assert error.server == "crashy"
    assert "'crashy'" in str(error)
    assert "fatal: test server configuration missing" in str(error)


async def test_a_command_that_does_not_exist_is_an_error_naming_the_server(tmp_path: Path) -> None:
    """A server command that does not exist raises McpServerStartError naming the server."""
    missing = McpServer(name="ghost", command=str(tmp_path / "no-such-server"))
    async with McpToolBinder([missing]) as binder:
        with pytest.raises(McpServerStartError, match="'ghost'"):
            await binder.bind("ghost", allow=ALL_TOOLS)


async def test_a_server_that_never_answers_times_out_at_start(ledger: Path) -> None:
    """A server that never answers the handshake fails start after startup_timeout, naming it."""
    spec = server_spec(ledger, name="mute", mode="hang")
    async with McpToolBinder([spec], startup_timeout=1.0) as binder:
        with pytest.raises(McpServerStartError, match=r"'mute'.*within 1 s"):
            await binder.bind("mute", allow=["echo"])


async def test_an_allowed_name_the_server_lacks_is_an_error_naming_it(ledger: Path) -> None:
    """Allowing names the server does not offer raises McpToolNotOffered listing them; the
    connection still binds a correct list."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        with pytest.raises(McpToolNotOffered) as caught:
            await binder.bind("testsrv", allow=["echo", "delete_everything", "rm"])
        assert caught.value.missing == ("delete_everything", "rm")
        assert "'testsrv'" in str(caught.value)
        assert "delete_everything" in str(caught.value)
        # The same connection still binds a correct allow-list afterwards.
        toolset = await binder.bind("testsrv", allow=["echo"])
        assert toolset.names() == ("echo",)


async def test_empty_allow_list_is_refused_and_all_tools_must_be_explicit(ledger: Path) -> None:
    """An empty or string allow-list is refused; every tool needs ALL_TOOLS."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        with pytest.raises(ConfigurationError, match="ALL_TOOLS"):
            await binder.bind("testsrv", allow=[])
        with pytest.raises(ConfigurationError, match="collection of tool names"):
            await binder.bind("testsrv", allow="echo")
        everything = await binder.bind("testsrv", allow=ALL_TOOLS)
        assert set(everything.names()) == ALL_NAMES


async def test_all_tools_of_a_server_offering_none_is_an_error(ledger: Path) -> None:
    """ALL_TOOLS of a server offering no tools raises McpToolNotOffered."""
    async with McpToolBinder([server_spec(ledger, name="bare", mode="empty")]) as binder:
        with pytest.raises(McpToolNotOffered, match="offers no tools"):
            await binder.bind("bare", allow=ALL_TOOLS)


async def test_an_unconfigured_server_name_is_an_error(ledger: Path) -> None:
    """Binding a server name that was not configured raises McpBindError naming it."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        with pytest.raises(McpBindError, match="'other'") as caught:
            await binder.bind("other", allow=["echo"])
    assert isinstance(caught.value, McpError)


# ---------------------------------------------------------------------------
# Replay policy and completion
# ---------------------------------------------------------------------------


async def test_replay_policy_is_never_unless_declared_or_annotations_are_trusted(
    ledger: Path,
) -> None:
    """Tools are never-replayed unless declared safe or, with trust_annotations, hinted read-only or
    idempotent; completes_run marks the completing tool."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        names = ["echo", "append", "set_flag", "finish"]

        def policies(registry: ToolRegistry) -> dict[str, ReplayPolicy]:
            return {n: registry.spec_for(n).replay_policy for n in names}  # type: ignore[union-attr]

        default = await binder.bind("testsrv", allow=names)
        assert set(policies(default.registry).values()) == {ReplayPolicy.NEVER}

        declared = await binder.bind("testsrv", allow=names, safe=["append"])
        assert policies(declared.registry)["append"] is ReplayPolicy.SAFE
        assert policies(declared.registry)["echo"] is ReplayPolicy.NEVER

        trusted = await binder.bind("testsrv", allow=names, trust_annotations=True)
        assert policies(trusted.registry) == {
            "echo": ReplayPolicy.SAFE,  # readOnlyHint
            "append": ReplayPolicy.NEVER,  # no hint
            "set_flag": ReplayPolicy.SAFE,  # idempotentHint
            "finish": ReplayPolicy.NEVER,
        }

        completing = await binder.bind("testsrv", allow=names, completes_run=["finish"])
        finish = completing.registry.spec_for("finish")
        assert finish is not None
        assert finish.completes_run is True

        with pytest.raises(ConfigurationError, match="not being bound"):
            await binder.bind("testsrv", allow=["echo"], safe=["append"])


# ---------------------------------------------------------------------------
# Executor and registries
# ---------------------------------------------------------------------------


async def test_executor_follows_a_restricted_registry_and_refuses_foreign_tools(
    ledger: Path,
) -> None:
    """An executor over a restricted registry refuses tools outside it, and one over a registry with
    a non-MCP tool is refused."""
    async with McpToolBinder([server_spec(ledger)]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo", "append"])
        phase = toolset.registry.restrict_to(["echo"])
        executor = toolset.executor(phase)
        assert executor.registry is phase
        outcome = await executor.execute(tool_action("append", line="outside the phase"))
        assert outcome.status is ActionStatus.NOT_EXECUTED

        local = Tool(ToolSpec("local", "a python tool", {"type": "object"}), lambda _: "x")
        mixed = ToolRegistry([*toolset.tools, local])
        with pytest.raises(ConfigurationError, match="local"):
            McpExecutor(mixed, [toolset])
    assert ledger_lines(ledger) == []


async def test_parameters_name_servers_and_tools_but_never_env_values(ledger: Path) -> None:
    """parameters() name the servers, tools, spec digests and environment variable names, never
    their values."""
    secret = "tok-0d7e-SECRET"
    spec = McpServer(
        name="testsrv",
        command=sys.executable,
        args=[str(Path(__file__).with_name("_server.py"))],
        env={"POLYLOOP_TEST_LEDGER": str(ledger), "API_TOKEN": secret},
    )
    async with McpToolBinder([spec]) as binder:
        toolset = await binder.bind("testsrv", allow=["echo", "append"])
        params = toolset.executor().parameters()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    assert params["kind"] == "mcp"
    assert params["tools"] == "echo,append"
    assert params["tool.echo.server"] == "testsrv"
    assert len(params["tool.echo.spec_sha256"]) == 64
    assert params["server.testsrv.command"] == sys.executable
    assert params["server.testsrv.env_names"] == "API_TOKEN,POLYLOOP_TEST_LEDGER"
    assert params["server.testsrv.server_info"] == "polyloop-test-server 1.0"
    assert secret not in repr(params)
    assert secret not in repr(spec)
