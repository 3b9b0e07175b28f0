"""``polyloop approve RUN_ID``: let the action a parked run waits on go ahead."""

from __future__ import annotations

import click

from polyloop import session
from polyloop.asking import UserAsked
from polyloop.ports import RunStore
from polyloop_cli.commands.deciding import Deciding, by_option, deciding_options, sha256_option

#: ``by_option`` is named here too, where the deciding commands first found it.
__all__ = ["approve", "by_option"]


@click.command()
@click.argument("run_id")
@sha256_option
@deciding_options()
def approve(run_id: str, prefix: str | None, deciding: Deciding) -> None:
    """Approve the action run RUN_ID waits on; resuming the run then carries it out (at once
    with --agent, exiting as `polyloop resume` does).

    Exit codes: 10 the run waits on no ask (none made, already decided, finished); 11 the
    pending ask is not the one --step and --sha256 name; 12 the run is being driven or decided
    right now; 13 the ask is a question (use `polyloop answer`). Nothing is written on any of them.
    """

    async def record(opened: RunStore, run_id: str, ask: UserAsked | None, digest: str) -> object:
        return await session.approve(
            opened,
            run_id,
            step=deciding.step,
            arguments_sha256=digest,
            decided_by=deciding.decided_by,
        )

    deciding.then_resume(run_id, prefix, record)
