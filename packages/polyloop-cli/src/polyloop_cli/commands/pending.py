"""``polyloop pending``: every run of a store that waits for a person, and what it waits on.

Reads only (no lease is taken): an ask listed here can be decided by the time it is read; the
deciding commands check the step and digest they are given against the ask they find (designs
0053, 0059).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from polyloop.asking import UserAsked
from polyloop.recovery import pending_ask
from polyloop_cli.demo.approval import known_agent
from polyloop_cli.rendering.asks import ask_block, ask_json
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import (
    StoreChoice,
    json_option,
    run_coroutine,
    store_choice,
    store_option,
    untrusted_listing,
)
from polyloop_cli.shared.stores import list_run_ids, open_store, read_run

__all__ = ["pending"]


@dataclass(frozen=True, slots=True)
class _Found:
    asks: list[UserAsked]
    #: Runs the store cannot read, and how many runs it lists.
    damaged: list[str]
    total: int
    #: Run files that cannot be read at all.
    unreadable: list[str]
    #: The ``--agent``/``--episode`` words that continue a run, by run id, where known.
    agents: dict[str, tuple[str, ...]]


async def _collect(choice: StoreChoice) -> _Found:
    asks: list[UserAsked] = []
    damaged: list[str] = []
    agents: dict[str, tuple[str, ...]] = {}
    async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
        listing = await list_run_ids(opened, choice.url)
        for run_id in listing.run_ids:
            read = await read_run(opened, choice.url, run_id)
            if read.damage is not None:
                damaged.append(run_id)
                continue
            ask = pending_ask(read.log)
            if ask is not None:
                asks.append(ask)
                words = known_agent(read.log, choice.url)
                if words is not None:
                    agents[run_id] = words
    return _Found(asks, damaged, len(listing.run_ids), list(listing.unreadable), agents)


@click.command()
@store_option
@json_option
def pending(store: str | None, as_json: bool) -> None:
    """List the runs that wait for a person: what each asks, and how to decide it.

    Arguments are shown as JSON folded to 80 columns, with the first 12 hex digits of their
    SHA-256: `approve`, `reject` and `edit` take them as --sha256, so a decision is refused
    (exit 11) when the ask is no longer the one shown. Each ask is named by its step, which
    every deciding command requires as --step: a decision never answers another ask.
    """
    output = Output(as_json=as_json)
    choice = store_choice(store)
    found = run_coroutine(_collect(choice))
    asks = found.asks
    if as_json:
        document: dict[str, Any] = {
            "store": str(choice.url),
            "pending": [ask_json(ask) for ask in asks],
            "damaged": found.damaged,
            "unreadable": found.unreadable,
        }
        output.json(document)
    elif not asks:
        output.line(f"No run in {choice.url} waits for a person.")
    else:
        output.line(f"{len(asks)} run(s) in {choice.url} wait for a person:")
    for ask in [] if as_json else asks:
        output.line()
        ask_block(output, ask, choice.option, found.agents.get(ask.run_id))
    if found.damaged or found.unreadable:
        raise untrusted_listing(choice, found.damaged, found.total, found.unreadable)
