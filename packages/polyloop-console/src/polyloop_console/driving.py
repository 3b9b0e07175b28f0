"""Runs continue by themselves: after a decision, the run is resumed under its lease, by the
server right away (``serve --agent``) or by ``polyloop worker``, which polls for decided runs.

Exactly one driver per run is the run lease's job: ``resume_or_park`` takes it before reading
the log, and a :class:`RunLeaseHeldError` means another driver (the server, another worker, a
``polyloop resume``) has the run right now, so this one skips it; the holder carries the
decision out, or, if it dies, the lease expires and the next pass resumes the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from polyloop.asking import RunParked
from polyloop.errors import PolyLoopError, RunLeaseHeldError
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import TailState
from polyloop.session import resume_or_park
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


async def work(
    store: RunStore,
    agent: Agent,
    list_run_ids: Callable[[], Awaitable[Sequence[str]]],
    *,
    poll_seconds: float = 1.0,
    once: bool = False,
) -> None:
    """Poll for decided runs and resume each, until cancelled (or after one pass, ``once``).

    ``list_run_ids`` returns the store's run ids."""
    while True:
        run_ids = await list_run_ids()
        for run_id in await decided_runs(store, run_ids):
            await resume_one(store, agent, run_id)
        if once:
            return
        await asyncio.sleep(poll_seconds)
