"""A governed run whose tools come from two MCP servers, bound through fail-closed allow-lists
into one registry.

    uv run python examples/mcp_example.py

Needs the MCP extra (``pip install 'polyloop-adapters[mcp]'``). Both MCP servers are this very
file started with ``--serve`` (written with the MCP SDK's server API), so they offer the same
tool names: the second one is bound with a prefix. The model is scripted.
"""

import asyncio
import sys

from polyloop.adapters.mcp import McpBinding, McpServer, McpToolBinder
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink, ScriptedModelClient, reply
from polyloop.types import Budget, Context, Message, ReplayPolicy, Role, SyntheticObservations
from polyloop.types import TextBlock as Text


def serve() -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server: MCPServer = MCPServer("notes", version="1")
    notes: list[str] = []

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def count_notes() -> str:
        """How many notes are stored."""
        return str(len(notes))

    @server.tool()
    def add_note(text: str) -> str:
        """Store a note."""
        notes.append(text)
        return f"stored note {len(notes)}"

    @server.tool()
    def delete_all() -> str:
        """Delete every note (not allowed in this run)."""
        notes.clear()
        return "deleted"

    server.run()


async def main() -> None:
    notes = McpServer("notes", command=sys.executable, args=[__file__, "--serve"])
    archive = McpServer("archive", command=sys.executable, args=[__file__, "--serve"])
    async with McpToolBinder([notes, archive], max_output_chars=10_000) as binder:
        # Only the listed tools are bound; a missing name would raise McpToolNotOffered.
        # add_note is declared safe to repeat on resume; everything else stays NEVER. Both
        # servers offer count_notes: the archive's is bound as archive_count_notes.
        toolset = await binder.bind_all(
            [
                McpBinding("notes", ["add_note", "count_notes"], safe=["add_note"]),
                McpBinding("archive", ["count_notes"], prefix="archive_"),
            ]
        )
        model = ScriptedModelClient(
            [
                reply('CALL add_note {"text": "buy milk"}'),
                reply("CALL count_notes {}"),
                reply("FINAL: 1 note"),
            ]
        )
        texts = SyntheticObservations("Call rejected.", "Environment failed.", "Model call failed.")
        definition = AgentDefinition(
            model, LineDecisionParser(), MemoryRunStore(), NullEventSink(), texts
        )
        request = RunRequest(
            run_id="mcp-example-1",
            budget=Budget(max_steps=5, max_actions=5, max_consecutive_parse_failures=2, max_prompt_chars=20_000),
            action_executor=toolset.executor(),  # not registry.executor(): it maps a dead server to env_error
            tools=toolset.registry,
            context=Context((Message(Role.SYSTEM, (Text("Use the tools."),)),), (Message(Role.USER, (Text("Note: buy milk"),)),)),
            injections={},
            model_binding={},
            model_replay_policy=ReplayPolicy.SAFE,
            observation_template="Result: {observation}",
            tool_section_template="Tools: {tools}",
            cancel_grace_seconds=1.0,
        )  # fmt: skip
        result = await run(definition, request)
    for step in result.steps:
        print(step.step_idx, step.action, "->", step.observation)
    print(result.stop_reason.value, result.final_answer)  # agent_finished 1 note


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve()
    else:
        asyncio.run(main())
