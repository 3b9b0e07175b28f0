"""``polyloop runs``: every run of a store, with its steps, status and model."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from polyloop_cli.rendering.inspection import run_summary
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Column, Fit, Output, status_text
from polyloop_cli.shared.command_kit import (
    json_option,
    run_coroutine,
    status_detail,
    store_choice,
    store_option,
    untrusted_listing,
)
from polyloop_cli.shared.stores import lease_holder, list_run_ids, open_store, read_run

__all__ = ["runs"]


@click.command()
@store_option
@json_option
def runs(store: str | None, as_json: bool) -> None:
    """List the runs in a store: id, steps, stop reason, "running", "waiting_approval",
    "unfinished" or "incomplete_fork". --json rows carry seed 002's status word too (run_status)."""
    output = Output(as_json=as_json)
    choice = store_choice(store)
    url = choice.url

    async def collect() -> tuple[list[dict[str, Any]], Sequence[str]]:
        rows: list[dict[str, Any]] = []
        async with open_store(url, missing_advice=choice.missing_advice) as opened:
            listing = await list_run_ids(opened, url)
            for run_id in listing.run_ids:
                read = await read_run(opened, url, run_id)
                finished = read.damage is not None or read.log.finished is not None
                holder = None if finished else await lease_holder(opened, url, run_id)
                rows.append(run_summary(run_id, read.log, read.damage, holder))
        return rows, listing.unreadable

    rows, unreadable = run_coroutine(collect())
    if as_json:
        output.json({"store": str(url), "runs": rows, "unreadable": list(unreadable)})
    elif not rows:
        output.line(f"No runs in {url}. `{suggest('demo')}` makes some.")
    else:
        # A follow-up run (design 0052) names the run it continues; the column only appears
        # when some run is one.
        follows = any(row["follows_run_id"] is not None for row in rows)
        output.table(
            (
                Column("RUN ID"),
                Column("STEPS"),
                Column("STATUS"),
                Column("MODEL", Fit.TRUNCATE),
                *((Column("FOLLOWS"),) if follows else ()),
            ),
            [
                (
                    row["run_id"],
                    "" if row["steps"] is None else row["steps"],
                    status_text(
                        row["status"], row["stop_reason"], status_detail(row) or row["tail"]
                    ),
                    row["model"],
                    *((row["follows_run_id"] or "",) if follows else ()),
                )
                for row in rows
            ],
            title=f"Runs in {url}",
        )
        output.line(_host_statuses(rows), style="dim")
    for problem in unreadable:
        output.line(f"unreadable run file: {problem}", style="red")
    bad = [row["run_id"] for row in rows if row["status"] == "corrupt"]
    if bad or unreadable:
        raise untrusted_listing(choice, bad, len(rows), unreadable)


def _host_statuses(rows: Sequence[dict[str, Any]]) -> str:
    """``Host status (run_status): succeeded 2, waiting_approval 1``: seed 002's words, counted
    (a corrupt log has none)."""
    counts = Counter(row["run_status"] for row in rows if row["run_status"] is not None)
    words = ", ".join(f"{status} {counts[status]}" for status in sorted(counts))
    return f"Host status (run_status): {words or 'none readable'}."
