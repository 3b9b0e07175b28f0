"""The chain of follow-up runs a run continues (design 0052), for ``show``.

A follow-up run's ``RunStarted`` names the run it follows; walking those links back gives the
conversation's earlier turns. The walk stops, without failing the command, at a run the store
does not have or cannot read, and at a loop (a hand-edited link).
"""

from __future__ import annotations

from polyloop.ports import RunLog, RunStore
from polyloop_cli.shared.stores import StoreUrl, read_run

__all__ = ["MAX_TURNS_SHOWN", "earlier_turns"]

#: How many earlier turns ``show`` walks back at most.
MAX_TURNS_SHOWN = 1_000


async def earlier_turns(store: RunStore, url: StoreUrl, log: RunLog) -> tuple[str, ...]:
    """The ids of the runs before ``log``'s run in its conversation, the first run first."""
    turns: list[str] = []
    follows = None if log.started is None else log.started.follows_run_id
    seen = set() if log.started is None else {log.started.run_id}
    while follows is not None and follows not in seen and len(turns) < MAX_TURNS_SHOWN:
        turns.append(follows)
        seen.add(follows)
        read = await read_run(store, url, follows)
        started = read.log.started
        follows = None if read.damage is not None or started is None else started.follows_run_id
    return tuple(reversed(turns))
