"""One pass over a batch: bounded concurrency, held leases tried again, stopping and cancelling.

``concurrency`` slots each take the next episode, drive it, report it, and take the next one;
episodes are read from the source only as slots free up, so a pass holds no more than the
episodes in flight (plus those waiting for a lease). An episode whose run's lease is held
elsewhere goes back in a queue and is tried again every few seconds while other work goes on;
once nothing else is left, each gets one last try and, still held, is reported ``skipped``.

:class:`BatchControl` stops a pass from outside (a signal handler, another task): the first
:meth:`~BatchControl.interrupt` stops launching and lets in-flight episodes finish, the second
cancels them — ``run``/``resume`` then record ``cancelled``, a final stop reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from polyloop.batch.driving import EpisodeDriver, describe_error
from polyloop.batch.episodes import Episode
from polyloop.batch.reports import EpisodeReport, EpisodeStatus
from polyloop.batch.summary import BatchSummary, BatchTally
from polyloop.errors import ConfigurationError

__all__ = ["BatchControl", "ReportObserver", "run_episodes"]

#: Called with each report as it is made, and the counts including it.
ReportObserver = Callable[[EpisodeReport, BatchTally], None]

#: Pauses before trying a held episode again: the first, and the longest.
FIRST_RETRY_PAUSE = 0.25
LONGEST_RETRY_PAUSE = 4.0


class BatchControl:
    """Stops a pass: first stop launching, then cancel what is in flight.

    Call its methods from the pass's event loop (``loop.add_signal_handler`` does; from another
    thread use ``loop.call_soon_threadsafe``).
    """

    def __init__(self) -> None:
        self.stopping = False
        self.cancelling = False
        self._passes: list[_Pass] = []

    def interrupt(self) -> None:
        """The first call stops launching; the second cancels the episodes in flight."""
        if self.stopping:
            self.cancel_in_flight()
        else:
            self.stop_launching()

    def stop_launching(self) -> None:
        self.stopping = True
        for each in self._passes:
            each.wake()

    def cancel_in_flight(self) -> None:
        self.stopping = self.cancelling = True
        for each in self._passes:
            each.cancel_in_flight()


@dataclass(slots=True)
class _Work:
    episode: Episode
    attempts: int = 1
    #: Seconds spent on earlier tries.
    spent: float = 0.0
    #: When it may be tried again (monotonic), while it waits for a lease.
    due: float = 0.0
    final: bool = False
    last: EpisodeReport | None = None


def _pause(attempts: int) -> float:
    return float(min(LONGEST_RETRY_PAUSE, FIRST_RETRY_PAUSE * 2.0 ** (attempts - 1)))


class _Pass:
    def __init__(
        self,
        source: Iterator[Episode],
        driver: EpisodeDriver,
        control: BatchControl,
        tally: BatchTally,
        observers: Sequence[ReportObserver],
    ) -> None:
        self.source = source
        self.exhausted = False
        self.driver = driver
        self.control = control
        self.tally = tally
        self.observers = observers
        self.held: list[_Work] = []
        #: Tries in flight that are not last tries: while any runs, held episodes wait.
        self.busy = 0
        self.in_flight: set[asyncio.Future[EpisodeReport]] = set()
        self.changed = asyncio.Event()

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def cancel_in_flight(self) -> None:
        for task in self.in_flight:
            task.cancel()
        self.wake()

    async def slot(self) -> None:
        while (work := await self.next_work()) is not None:
            await self.attempt(work)

    async def next_work(self) -> _Work | None:
        while True:
            if self.control.stopping:
                return None
            if not self.exhausted:
                episode = next(self.source, None)
                if episode is not None:
                    self.tally.launched += 1
                    return _Work(episode)
                self.exhausted = True
            if not self.held:
                return None
            if self.busy == 0:  # nothing else left: the last try
                work = self.held.pop(0)
                work.final = True
                return work
            soonest = min(self.held, key=lambda each: each.due)
            wait = soonest.due - time.monotonic()
            if wait <= 0:
                self.held.remove(soonest)
                return soonest
            changed = self.changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), wait)

    async def attempt(self, work: _Work) -> None:
        counted = not work.final
        self.busy += counted
        task = asyncio.ensure_future(self.driver(work.episode, work.attempts))
        self.in_flight.add(task)
        try:
            report = await task
        except asyncio.CancelledError:
            if not (self.control.cancelling and task.cancelled()):
                raise
            report = EpisodeReport(
                work.episode.run_id,
                EpisodeStatus.CANCELLED,
                error="cancelled by the batch while in flight (second interrupt)",
            )
        except Exception as error:  # a driver's own failure is still this episode's alone
            report = EpisodeReport(
                work.episode.run_id, EpisodeStatus.ERROR, error=describe_error(error)
            )
        finally:
            self.busy -= counted
            self.in_flight.discard(task)
            self.wake()
        report = dataclasses.replace(  # a driver may count tries of its own (a lost worker)
            report,
            attempts=work.attempts - 1 + report.attempts,
            wall_seconds=work.spent + report.wall_seconds,
        )
        if report.status is EpisodeStatus.SKIPPED and not work.final and not self.control.stopping:
            work.spent = report.wall_seconds
            work.due = time.monotonic() + _pause(work.attempts)
            work.attempts += 1
            work.last = report
            self.held.append(work)
            return
        self.emit(report)

    def emit(self, report: EpisodeReport) -> None:
        self.tally.add(report)
        for observer in self.observers:
            observer(report, self.tally)

    def leftovers(self) -> None:
        """Held episodes the pass stopped before trying again: skipped, as last found."""
        for work in self.held:
            assert work.last is not None
            self.emit(work.last)
        self.held.clear()


async def run_episodes(
    episodes: Iterable[Episode],
    driver: EpisodeDriver,
    *,
    concurrency: int,
    total: int | None = None,
    observers: Sequence[ReportObserver] = (),
    control: BatchControl | None = None,
) -> BatchSummary:
    """One pass of ``driver`` over ``episodes``, at most ``concurrency`` at a time."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}.")
    control = control if control is not None else BatchControl()
    tally = BatchTally(total=total)
    one = _Pass(iter(episodes), driver, control, tally, observers)
    control._passes.append(one)
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(one.slot())
        one.leftovers()
    finally:
        control._passes.remove(one)
    tally.interrupted = control.stopping
    tally.cancelled = control.cancelling
    return tally.summary()
