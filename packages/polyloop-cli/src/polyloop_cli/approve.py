"""``polyloop approve RUN_ID``: let the action a parked run waits on go ahead."""

from __future__ import annotations

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.agents import resume_options
from polyloop_cli.command_kit import json_option, store_choice, store_option
from polyloop_cli.deciding import by_option, decide_then_resume, sha256_option

#: ``by_option`` is named here too, where the deciding commands first found it.
__all__ = ["approve", "by_option"]


@click.command()
@click.argument("run_id")
@sha256_option
@by_option
@resume_options
@store_option
@json_option
def approve(
    run_id: str,
    prefix: str | None,
    decided_by: str,
    agent: str | None,
    episode_json: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Approve the action run RUN_ID waits on; resuming the run then carries it out (at once
    with --agent, exiting as `polyloop resume` does).

    Exit codes: 10 the run waits on no ask (none made, already decided, finished); 11 the
    pending ask is not the one --sha256 names; 12 the run is being driven or decided right
    now; 13 the ask is a question (use `polyloop answer`). Nothing is written on any of them.
    """
    choice = store_choice(store)

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        return await session.approve(opened, run_id, arguments_sha256=digest, decided_by=decided_by)

    decide_then_resume(choice, run_id, prefix, record, as_json, agent, episode_json)
