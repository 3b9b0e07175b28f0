"""``polyloop answer RUN_ID "…"``: answer the question a parked run asks the user."""

from __future__ import annotations

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.commands.deciding import Deciding, deciding_options

__all__ = ["answer"]


@click.command()
@click.argument("run_id")
@click.argument("text")
@deciding_options()
def answer(run_id: str, text: str, deciding: Deciding) -> None:
    """Answer the question run RUN_ID asks; TEXT becomes that step's observation.

    With --agent the run is resumed at once, exiting as `polyloop resume` does. Exit codes:
    10 the run waits on no ask; 11 it waits on another ask than the one of --step; 12 the
    run is being driven or decided right now;
    13 the ask is an approval (use approve, reject or edit). Nothing is written on any of them.
    """

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        return await session.answer(
            opened, run_id, text, step=deciding.step, decided_by=deciding.decided_by
        )

    deciding.then_resume(run_id, None, record)
