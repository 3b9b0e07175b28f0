"""``polyloop verify RUN_ID`` / ``--all``: validate run logs, naming the first bad record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from polyloop.ports import RunLog
from polyloop_cli.rendering.inspection import corruption
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import (
    json_option,
    run_coroutine,
    run_not_found,
    store_choice,
    store_option,
)
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.stores import list_run_ids, open_store, read_run

__all__ = ["verify"]


@click.command()
@click.argument("run_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Verify every run in the store.")
@store_option
@json_option
def verify(run_id: str | None, check_all: bool, store: str | None, as_json: bool) -> None:
    """Validate run logs; exits non-zero on corruption, naming the record."""
    if (run_id is None) == (not check_all):
        raise click.UsageError("give either a RUN_ID or --all (not both, not neither).")
    output = Output(as_json=as_json)
    choice = store_choice(store)

    async def check() -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            if run_id is not None:
                ids: Sequence[str] = (run_id,)
            else:
                listing = await list_run_ids(opened, choice.url)
                ids = listing.run_ids
                for unreadable in listing.unreadable:
                    results.append({"run_id": None, "ok": False, "problem": unreadable})
            for current in ids:
                read = await read_run(opened, choice.url, current)
                if read.damage is not None:
                    results.append({"run_id": current, "ok": False, "problem": read.damage})
                    continue
                if read.log == RunLog() and run_id is not None:
                    raise run_not_found(choice, current)
                problem = corruption(read.log, current)
                results.append({"run_id": current, "ok": problem is None, "problem": problem})
        return results

    results = run_coroutine(check())
    bad = [result for result in results if not result["ok"]]
    if as_json:
        output.json({"store": str(choice.url), "ok": not bad, "runs": results})
    else:
        for result in results:
            if result["ok"]:
                output.line(f"ok       {result['run_id']}", style="green")
            else:
                name = result["run_id"] if result["run_id"] is not None else "(unreadable file)"
                output.line(f"CORRUPT  {name}: {result['problem']}", style="bold red")
        if not results:
            output.line(f"No runs in {choice.url}.")
    if bad:
        first = bad[0]
        name = "a run file" if first["run_id"] is None else f"run {shown_id(first['run_id'])}"
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"{len(bad)} of {len(results)} run logs are corrupt; the first is {name}: back up "
            "the store before you repair or remove it.",
            detail=first["problem"],
        )
