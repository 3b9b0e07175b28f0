"""Runs continue by themselves: after a decision, the run is resumed under its lease, by the
server right away (``serve --agent``) or by ``polyloop worker``, which polls for decided runs.

Exactly one driver per run is the run lease's job: ``resume_or_park`` takes it before reading
the log, and a :class:`RunLeaseHeldError` means another driver (the server, another worker, a
``polyloop resume``) has the run right now, so this one skips it; the holder carries the
decision out, or, if it dies, the lease expires and the next pass resumes the run.

A worker reads a run's log only when its change marker moved since the last read, or when it
is a decided run it could not carry on (design 0069); on a store that notifies writes
(PostgreSQL) it listens, and a write wakes it for just the runs written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from polyloop.asking import RunParked
from polyloop.errors import PolyLoopError, RunLeaseHeldError
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import TailState
from polyloop.session import resume_or_park
from polyloop.watching import (
    ChangeMarking,
    ChangeNotifying,
    supports_change_marking,
    supports_change_notifying,
)
from polyloop_cli.rendering.inspection import plan_report
from polyloop_cli.rendering.redaction import scrub_error
from polyloop_cli.shared.agents import opened_agent
from polyloop_cli.shared.errors import CliError

__all__ = ["Agent", "Outcome", "decided_runs", "resume_one", "work"]

LOG = logging.getLogger("polyloop.console")


@dataclass(frozen=True, slots=True)
class Agent:
    """How to build a run's agent: ``MODULE:FACTORY`` and the ``--episode`` JSON (or ``None``)."""

    spec: str
    episode_json: str | None = None


#: How one resume ended: ``finished``, ``parked``, ``busy`` (another driver holds the run) or
#: ``failed``.
Outcome = str


def waits_to_go_on(log: RunLog) -> bool:
    """A person decided in this run, it waits on no ask and it has not finished: the
    decision is not carried out yet (``ask_decided``), or its driver died after (a crash,
    which resume settles by the recovery table)."""
    if log.started is None or log.finished is not None or not log.answers:
        return False
    try:
        state = plan_report(log).plan.state
    except PolyLoopError:
        return False  # a corrupt log is for a person to look at, not for a worker to drive
    return state is not TailState.ASK_PENDING


async def decided_runs(store: RunStore, run_ids: Iterable[str]) -> list[str]:
    """The runs among ``run_ids`` that wait to carry a recorded decision out."""
    found = []
    for run_id in run_ids:
        try:
            log = await store.read_log(run_id)
        except PolyLoopError:
            continue
        if waits_to_go_on(log):
            found.append(run_id)
    return found


async def resume_one(store: RunStore, agent: Agent, run_id: str) -> Outcome:
    """Resume ``run_id`` with ``agent`` under its lease; never raises for the run's own
    failures (they are logged: a worker goes on with the next run)."""
    try:
        async with opened_agent(agent.spec, agent.episode_json, run_id, store) as built:
            outcome = await resume_or_park(built.definition, built.request)
    except RunLeaseHeldError:
        LOG.info("resume skipped run_id=%r: another driver holds its lease", run_id)
        return "busy"
    except Exception as error:
        # Whatever the run's own agent raised: logged (scrubbed), and the next run goes on.
        text = error.line if isinstance(error, CliError) else f"{type(error).__name__}: {error}"
        LOG.warning("resume failed run_id=%r: %s", run_id, scrub_error(" ".join(text.split())))
        return "failed"
    if isinstance(outcome, RunParked):
        LOG.info("resumed run_id=%r: parked again at step %d", run_id, outcome.ask.step)
        return "parked"
    LOG.info("resumed run_id=%r: finished (%s)", run_id, outcome.stop_reason.value)
    return "finished"


@dataclass(slots=True)
class _Looked:
    """What a worker knows from its passes (design 0069)."""

    #: Each run's change marker when its log was last read.
    markers: dict[str, str] = field(default_factory=dict)
    #: Decided runs it could not carry on (another driver had them, or they failed): looked
    #: at again on every pass, changed or not (a dead driver's lease expires without a write).
    again: set[str] = field(default_factory=set)
    #: Runs the store said were written since the last look.
    notified: set[str] = field(default_factory=set)
    #: Logs read and passes made so far (for tests and benchmarks).
    reads: int = 0
    passes: int = 0


async def _changed(
    store: RunStore, looked: _Looked, list_run_ids: Callable[[], Awaitable[Sequence[str]]]
) -> list[str]:
    """The runs to read this pass: with change markers, those whose marker moved since
    their last read (and the ones to try again); without, every run."""
    looked.passes += 1
    if not supports_change_marking(store):
        return list(await list_run_ids())
    assert isinstance(store, ChangeMarking)
    markers = await store.change_markers()
    changed = [run_id for run_id, m in markers.items() if looked.markers.get(run_id) != m]
    changed += sorted(looked.again.difference(changed))
    LOG.info("worker pass: %d of %d runs changed or to try again", len(changed), len(markers))
    return changed


async def _go_on(store: RunStore, agent: Agent, looked: _Looked, run_ids: Iterable[str]) -> None:
    marking = supports_change_marking(store)
    for run_id in run_ids:
        try:
            # The marker before the read: a write after it makes the next pass read again.
            if marking:
                assert isinstance(store, ChangeMarking)
                marker = await store.change_marker(run_id)
            log = await store.read_log(run_id)
        except PolyLoopError:
            continue
        looked.reads += 1
        if marking:
            looked.markers[run_id] = marker
        if not waits_to_go_on(log):
            looked.again.discard(run_id)
            continue
        outcome = await resume_one(store, agent, run_id)
        if outcome in ("busy", "failed"):
            looked.again.add(run_id)
        else:
            looked.again.discard(run_id)


async def _listen(
    store: RunStore, looked: _Looked, wake: asyncio.Event, listening: asyncio.Event
) -> None:
    """Note each run the store says was written, and wake the worker; after the listener
    breaks, a whole pass (writes may have been missed), then listen anew."""
    assert isinstance(store, ChangeNotifying)
    while True:
        try:
            async with store.watch_changes() as written:
                listening.set()
                async for run_id in written:
                    looked.notified.add(run_id)
                    wake.set()
        except PolyLoopError as error:
            LOG.warning("worker: listening for writes stopped (%s); listening anew", error)
        looked.markers.clear()
        wake.set()
        await asyncio.sleep(1.0)


async def work(
    store: RunStore,
    agent: Agent,
    list_run_ids: Callable[[], Awaitable[Sequence[str]]],
    *,
    poll_seconds: float = 1.0,
    once: bool = False,
    looked: _Looked | None = None,
) -> None:
    """Resume each decided run, until cancelled (or after one pass, ``once``).

    Every ``poll_seconds`` a pass reads the runs whose change marker moved since their last
    read (every run, on a store without markers). On a store that notifies writes (PostgreSQL),
    a write wakes the worker at once, and it reads just the runs written. ``list_run_ids``
    returns the store's run ids."""
    looked = looked if looked is not None else _Looked()
    wake = asyncio.Event()
    listener: asyncio.Task[None] | None = None
    if not once and supports_change_notifying(store):
        listening = asyncio.Event()
        listener = asyncio.create_task(_listen(store, looked, wake, listening))
        # Listening before the first pass: a write after it is noticed, one before it read.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening.wait(), max(poll_seconds, 5.0))
    try:
        await _go_on(store, agent, looked, await _changed(store, looked, list_run_ids))
        while not once:
            try:
                await asyncio.wait_for(wake.wait(), poll_seconds)
            except TimeoutError:
                await _go_on(store, agent, looked, await _changed(store, looked, list_run_ids))
                continue
            wake.clear()
            notified, looked.notified = looked.notified, set()
            await _go_on(store, agent, looked, sorted(notified | looked.again))
    finally:
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
