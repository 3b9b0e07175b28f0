"""``polyloop reject RUN_ID --reason …``: refuse the action a parked run waits on."""

from __future__ import annotations

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.agents import resume_options
from polyloop_cli.command_kit import json_option, store_choice, store_option
from polyloop_cli.deciding import by_option, decide_then_resume, sha256_option

__all__ = ["reject"]


@click.command()
@click.argument("run_id")
@click.option(
    "--reason",
    required=True,
    metavar="TEXT",
    help="Why not. The model reads it as the step's observation, to choose what to do next.",
)
@sha256_option
@by_option
@resume_options
@store_option
@json_option
def reject(
    run_id: str,
    reason: str,
    prefix: str | None,
    decided_by: str,
    agent: str | None,
    episode_json: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Refuse the action run RUN_ID waits on: the step ends not_executed, and the model reads
    the reason when the run is resumed.

    With --agent the run is resumed at once, exiting as `polyloop resume` does. Exit codes:
    10 the run waits on no ask; 11 the pending ask is not the one --sha256 names;
    12 the run is being driven or decided right now; 13 the ask is a question, or the reason
    is empty. Nothing is written on any of them.
    """
    choice = store_choice(store)

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        return await session.reject(
            opened, run_id, reason=reason, arguments_sha256=digest, decided_by=decided_by
        )

    decide_then_resume(choice, run_id, prefix, record, as_json, agent, episode_json)
