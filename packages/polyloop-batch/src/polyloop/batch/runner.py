"""``run_batch``: one pass over a batch of episodes in this process."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from polyloop.batch.agents import EpisodeFactory
from polyloop.batch.driving import LocalEpisodeDriver
from polyloop.batch.episodes import Episode
from polyloop.batch.passes import BatchControl, ReportObserver, run_episodes
from polyloop.batch.summary import BatchSummary
from polyloop.ports import RunStore

__all__ = ["run_batch"]


async def run_batch(
    episodes: Iterable[Episode],
    factory: EpisodeFactory,
    store: RunStore,
    *,
    concurrency: int,
    total: int | None = None,
    observers: Sequence[ReportObserver] = (),
    control: BatchControl | None = None,
) -> BatchSummary:
    """Drive every episode once, at most ``concurrency`` at a time, on ``store``.

    New episodes are started, unfinished ones resumed, finished ones counted by their recorded
    result when their parameter snapshot still matches; an episode whose run another driver
    holds is tried again until the pass ends, then skipped. An episode's error is its own: the
    pass goes on. Each report goes to every observer as it is made (``ResultsFile``, a progress
    display); the summary is returned. Running the same batch again continues where this pass
    stopped. ``total`` (the number of episodes, when known) is for the progress display.
    """
    return await run_episodes(
        episodes,
        LocalEpisodeDriver(factory, store),
        concurrency=concurrency,
        total=total,
        observers=observers,
        control=control,
    )
