"""The progress of ``polyloop batch`` on stderr: a live display on a terminal, plain lines when
piped (one each time another twentieth of the episodes is done), nothing with ``--json``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from polyloop.batch import BatchTally, EpisodeReport, EpisodesFile
from polyloop_cli.rendering.render import Output

__all__ = ["progress_line", "progress_observer"]

Observer = Callable[[EpisodeReport, BatchTally], None]

#: Plain progress: a line each time this fraction of the episodes more is done.
PLAIN_STEP = 0.05
#: The live display is redrawn at most this often (seconds), and at least this often.
REDRAW_SECONDS = 0.25


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _counts(tally: BatchTally) -> str:
    reasons = "  ".join(f"{reason} {n}" for reason, n in sorted(tally.by_stop_reason.items()))
    troubles = "  ".join(
        f"{status} {tally.by_status[status]}"
        for status in ("error", "skipped", "cancelled", "parked")
        if tally.by_status[status]
    )
    return "  ".join(part for part in (reasons, troubles) if part) or "-"


def progress_line(tally: BatchTally) -> str:
    """``120/2000 done; agent_finished 118  error 2; 35.1 steps/s; ETA 4:10``."""
    total = "?" if tally.total is None else str(tally.total)
    return (
        f"{tally.done}/{total} done; {_counts(tally)}; {tally.steps_per_second:.1f} steps/s; "
        f"ETA {_duration(tally.eta_seconds)}"
    )


class _Live:
    def __init__(self, live: Live, tally: BatchTally) -> None:
        self.live = live
        self.tally = tally
        self.drawn = 0.0

    def render(self) -> Group:
        tally = self.tally
        total = tally.total or max(tally.launched, 1)
        head = Table.grid(padding=(0, 1))
        head.add_row(
            Text("batch", style="bold"),
            ProgressBar(total=total, completed=tally.done, width=30),
            Text(f"{tally.done}/{total}"),
            Text(f"{tally.steps_per_second:.1f} steps/s"),
            Text(f"elapsed {_duration(tally.wall_seconds)}"),
            Text(f"ETA {_duration(tally.eta_seconds)}"),
        )
        return Group(head, Text(_counts(tally)))

    def redraw(self) -> None:
        self.drawn = time.monotonic()
        self.live.update(self.render(), refresh=True)

    def __call__(self, report: EpisodeReport, tally: BatchTally) -> None:
        self.tally = tally
        if time.monotonic() - self.drawn >= REDRAW_SECONDS:
            self.redraw()


class _Plain:
    def __init__(self, output: Output, total: int) -> None:
        self.output = output
        self.every = max(1, round(total * PLAIN_STEP))

    def __call__(self, report: EpisodeReport, tally: BatchTally) -> None:
        if tally.done % self.every == 0 or tally.done == tally.total:
            self.output.err.print(
                f"polyloop batch: {progress_line(tally)}", markup=False, highlight=False
            )


def _nothing(report: EpisodeReport, tally: BatchTally) -> None:
    return None


@contextlib.asynccontextmanager
async def progress_observer(output: Output, episodes: EpisodesFile) -> AsyncIterator[Observer]:
    """The observer that shows the pass's progress, for as long as the block lasts."""
    if output.as_json:
        yield _nothing
        return
    if not output.err.is_terminal:
        yield _Plain(output, episodes.count)
        return
    with Live(console=output.err, auto_refresh=False, transient=False) as live:
        shown = _Live(live, BatchTally(total=episodes.count))
        shown.redraw()

        async def tick() -> None:
            while True:
                await asyncio.sleep(REDRAW_SECONDS * 2)
                shown.redraw()

        ticker = asyncio.ensure_future(tick())
        try:
            yield shown
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            shown.redraw()
