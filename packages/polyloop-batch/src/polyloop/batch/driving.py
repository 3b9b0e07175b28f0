"""Driving one episode in this process: start it, continue it, or count its recorded result.

The decision is the library's own, made under the run's lease: ``run_or_park`` starts a new
run and refuses (writing nothing) one that already has a log; ``resume_or_park`` then continues
an unfinished run by the recovery table (a parked one once its ask is decided; until then it
reports ``PARKED`` again), or returns a finished run's recorded result — calling no seam but
``parameters()`` — only when its recorded parameter snapshot equals the one built now.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeAlias

from polyloop.asking import RunParked
from polyloop.batch.agents import EpisodeAgent, EpisodeFactory, open_agent
from polyloop.batch.episodes import Episode
from polyloop.batch.reports import EpisodeReport, EpisodeStatus, ModelUsage
from polyloop.errors import RunAlreadyStartedError, RunLeaseHeldError
from polyloop.ports import ModelCall, ModelClient, RunLeasing, RunStore
from polyloop.session import fork, resume_or_park, run_or_park
from polyloop.types import REQUESTS_USAGE_KEY, RETRIES_USAGE_KEY, ModelReply, RunResult

__all__ = ["EpisodeDriver", "LocalEpisodeDriver", "describe_error", "this_worker"]

#: Drives one try of an episode (the second argument counts tries from 1) and reports it.
EpisodeDriver: TypeAlias = Callable[[Episode, int], Awaitable[EpisodeReport]]


def this_worker() -> str:
    """``<pid>@<host>``: the process that drove an episode, as the results file names it."""
    return f"{os.getpid()}@{socket.gethostname()}"


def describe_error(error: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, as the results file and the summary show an error."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class LocalEpisodeDriver:
    """Drives episodes with ``factory``'s agents on ``store``, in this process's event loop.

    A try that finds the run's lease held elsewhere reports ``SKIPPED`` (the pass decides
    whether to try again); anything else raised is the episode's ``ERROR``. Cancellation is
    passed on, after the factory's context is left.
    """

    def __init__(self, factory: EpisodeFactory, store: RunStore) -> None:
        self.factory = factory
        self.store = store
        self.worker = this_worker()

    async def __call__(self, episode: Episode, attempt: int) -> EpisodeReport:
        started = time.monotonic()
        try:
            if attempt > 1 and isinstance(self.store, RunLeasing):
                # A retry looks first, so a still-held run opens no executor for nothing.
                holder = await self.store.run_lease_holder(episode.run_id)
                if holder is not None:
                    raise RunLeaseHeldError.held_by(episode.run_id, holder)
            async with open_agent(self.factory, episode, self.store) as agent:
                counter = _CountingModelClient(agent.definition.model_client)
                status, result = await _drive(agent, episode, counter)
        except RunLeaseHeldError as held:
            return self._report(episode, EpisodeStatus.SKIPPED, started, describe_error(held))
        except Exception as error:
            return self._report(episode, EpisodeStatus.ERROR, started, describe_error(error))
        wall = time.monotonic() - started
        usage = counter.usage
        if isinstance(result, RunParked):
            return EpisodeReport.of_parked(
                result, wall_seconds=wall, worker=self.worker, model_usage=usage
            )
        return EpisodeReport.of_result(
            status, result, wall_seconds=wall, worker=self.worker, model_usage=usage
        )

    def _report(
        self, episode: Episode, status: EpisodeStatus, started: float, error: str
    ) -> EpisodeReport:
        return EpisodeReport(
            episode.run_id,
            status,
            error=error,
            wall_seconds=time.monotonic() - started,
            worker=self.worker,
        )


class _CountingModelClient:
    """The episode's model client, counting the calls this pass makes (design 0065): requests
    and retries as a retrying client reports them (on the reply's usage, or the error's), and
    tokens. ``parameters()`` is the client's own, so the run's snapshot does not change."""

    def __init__(self, client: ModelClient) -> None:
        self._client = client
        self.usage = ModelUsage()

    def parameters(self) -> Mapping[str, str]:
        return self._client.parameters()

    async def call(self, call: ModelCall) -> ModelReply:
        try:
            reply = await self._client.call(call)
        except Exception as error:
            self._count(getattr(error, "usage", None))
            raise
        self._count(reply.usage if isinstance(reply, ModelReply) else None)
        return reply

    def _count(self, usage: object) -> None:
        counts = usage if isinstance(usage, Mapping) else {}
        requests, retries = counts.get(REQUESTS_USAGE_KEY, 1), counts.get(RETRIES_USAGE_KEY, 0)
        tokens = counts.get("total_tokens")
        if not isinstance(tokens, int):
            tokens = sum(
                value
                for key, value in counts.items()
                if key in ("prompt_tokens", "completion_tokens") and isinstance(value, int)
            )
        self.usage = self.usage + ModelUsage(
            1,
            requests if isinstance(requests, int) else 1,
            retries if isinstance(retries, int) else 0,
            tokens,
            bool(counts),
        )


async def _drive(
    agent: EpisodeAgent, episode: Episode, model_client: ModelClient
) -> tuple[EpisodeStatus, RunResult | RunParked]:
    """``run_or_park`` (``fork`` for an episode naming a fork point), else ``resume_or_park``:
    an ungated episode is driven exactly as by ``run``/``resume``; a gated one may park, which
    a rerun continues after the decision. A fork whose copy a crash cut short is completed by
    ``fork`` itself on the next pass. ``model_client`` stands in for the definition's (it
    counts the calls, design 0065)."""
    definition = dataclasses.replace(agent.definition, model_client=model_client)
    request = agent.request
    point = episode.fork_point
    try:
        if point is None:
            return EpisodeStatus.RAN, await run_or_park(definition, request)
        forked = await fork(
            definition,
            request,
            source_run_id=point.source_run_id,
            at_step=point.at_step,
            in_doubt_observation=point.in_doubt_observation,
        )
        return EpisodeStatus.RAN, forked
    except RunAlreadyStartedError:
        pass
    # Only to name what resume did; resume itself decides under the lease.
    log = await definition.store.read_log(request.run_id)
    status = EpisodeStatus.RECORDED if log.finished is not None else EpisodeStatus.RESUMED
    return status, await resume_or_park(definition, request)
