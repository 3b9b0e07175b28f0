"""``polyloop edit RUN_ID --arguments JSON``: approve the pending tool call with other
arguments, validated against the tool's schema in the run's own agent."""

from __future__ import annotations

from collections.abc import Mapping

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.commands.deciding import (
    Deciding,
    agent_option_words,
    decide,
    deciding_options,
    report_decision,
    sha256_option,
)
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.agents import opened_agent
from polyloop_cli.shared.command_kit import run_coroutine
from polyloop_cli.shared.errors import json_object_option

__all__ = ["edit"]


def _arguments(text: str) -> Mapping[str, object]:
    advice = """give the call's arguments as a JSON object, e.g. '{"amount": 40}'."""
    return json_object_option(text, "--arguments", advice, " (the call's arguments)")


@click.command()
@click.argument("run_id")
@click.option(
    "--arguments",
    "arguments_json",
    required=True,
    metavar="JSON",
    help="The arguments to approve instead, a JSON object; the tool's schema must accept it.",
)
@sha256_option
@deciding_options(agent_required=True)
def edit(run_id: str, arguments_json: str, prefix: str | None, deciding: Deciding) -> None:
    """Approve the tool call run RUN_ID waits on, with other arguments. They are checked
    against the tool's schema in the run's agent (--agent), like any call.

    Exit codes: 10 the run waits on no ask; 11 the pending ask is not the one --step and
    --sha256 name, or the agent's tool schema is not the one asked about; 12 the run is being driven or
    decided right now; 13 the schema refuses the arguments, or the ask is a question or a
    tool-less action; 22 the factory cannot be loaded. Nothing is written on any of them.
    """
    choice, agent = deciding.choice, deciding.agent
    assert agent is not None  # --agent is required for edit
    arguments = _arguments(arguments_json)

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        async with opened_agent(agent, deciding.episode_json, run_id, opened) as built:
            return await session.edit(
                opened,
                run_id,
                arguments,
                tools=built.request.tools,
                step=deciding.step,
                arguments_sha256=digest,
                decided_by=deciding.decided_by,
            )

    ask, answered, _ = run_coroutine(decide(choice, run_id, prefix, record, step=deciding.step))
    given = agent_option_words(agent, deciding.episode_json)
    report_decision(Output(as_json=deciding.as_json), choice, ask, answered, agent=given)
