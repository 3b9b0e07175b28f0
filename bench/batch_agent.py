"""The agent of ``bench/batch_bench.py``: ``batch_agent:factory`` (imported by Ray workers too).

The same agent as ``stores_bench.py`` (a scripted model calling the ``noop`` tool until its last
step), with an optional fixed model latency: episode data ``{"steps": 10, "latency": 0.02}``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from polyloop.batch import Episode, EpisodeAgent
from polyloop.ports import ModelCall, RunStore
from polyloop.session import AgentDefinition
from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import ModelReply
from stores_bench import FINAL, TOOL_CALL, setup  # the stores benchmark's agent


class SlowNoopCaller:
    """``noop`` until the last step, each call taking ``latency`` seconds (a real model's wait)."""

    def __init__(self, steps: int, latency: float) -> None:
        self._last, self._latency = steps - 1, latency

    async def call(self, call: ModelCall) -> ModelReply:
        if self._latency:
            await asyncio.sleep(self._latency)
        return FINAL if call.call_index >= self._last else TOOL_CALL

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "noop_caller", "steps": str(self._last + 1), "latency": repr(self._latency)}


def agent(store: RunStore, run_id: str, steps: int, latency: float) -> EpisodeAgent:
    definition, request = setup(store, steps, run_id)
    if latency:
        definition = AgentDefinition(
            SlowNoopCaller(steps, latency),
            definition.decision_parser,
            store,
            definition.event_sink,
            definition.synthetic_observations,
        )
    return EpisodeAgent(definition, request)


def factory(episode: Episode, store: RunStore) -> EpisodeAgent:
    data = episode.data
    return agent(store, episode.run_id, int(data["steps"]), float(data.get("latency", 0)))


@dataclass(frozen=True)
class PostgresOpener:
    """Opens the benchmark's PostgreSQL store in a worker (picklable)."""

    url: str
    schema: str

    def __call__(self) -> PostgresRunStore:
        return PostgresRunStore(self.url, schema=self.schema)
