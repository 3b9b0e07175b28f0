"""``polyloop reject RUN_ID --reason …``: refuse the action a parked run waits on."""

from __future__ import annotations

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.commands.deciding import Deciding, deciding_options, sha256_option

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
@deciding_options()
def reject(run_id: str, reason: str, prefix: str | None, deciding: Deciding) -> None:
    """Refuse the action run RUN_ID waits on: the step ends not_executed, and the model reads
    the reason when the run is resumed.

    With --agent the run is resumed at once, exiting as `polyloop resume` does. Exit codes:
    10 the run waits on no ask; 11 the pending ask is not the one --step and --sha256 name;
    12 the run is being driven or decided right now; 13 the ask is a question, or the reason
    is empty. Nothing is written on any of them.
    """

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        return await session.reject(
            opened,
            run_id,
            reason=reason,
            step=deciding.step,
            arguments_sha256=digest,
            decided_by=deciding.decided_by,
        )

    deciding.then_resume(run_id, prefix, record)
