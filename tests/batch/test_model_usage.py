"""A batch's model usage (design 0065): each episode's calls, requests, retries and tokens in
its results line and summed in the summary, through a retrying client and one limiter shared by
every episode, against a loopback server that fails each episode's first request."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from polyloop.adapters.gateway import GatewayModelClient
from polyloop.adapters.retry import RateLimiter, RetryingModelClient, RetryPolicy
from polyloop.batch import Episode, EpisodeAgent, ModelUsage, ResultsFile, run_batch
from polyloop.ports import RunStore
from polyloop.session import AgentDefinition
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.types import StopReason
from tests.adapters.gateway._server import serve_in_thread
from tests.adapters.retry._flaky import Fail, FlakyServer
from tests.batch._kit import batch_args, batch_env, episodes_of, write_episodes
from tests.cli._kit import polyloop
from tests.loop_kit import SYNTHETIC, make_request

EPISODES = 12


@pytest.fixture(scope="module")
def flaky() -> Iterator[tuple[FlakyServer, str]]:
    server = FlakyServer()
    with serve_in_thread(server) as root:  # type: ignore[arg-type]
        yield server, root


def _factory(root: str, limiter: RateLimiter):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def factory(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
        url = f"{root}/{episode.run_id}/v1"
        async with GatewayModelClient(url, "m", api_key="sk-batch") as client:
            model = RetryingModelClient(
                client, RetryPolicy(initial_delay=0.01, max_delay=0.05), limiter=limiter
            )
            definition = AgentDefinition(
                model, LineDecisionParser(), store, NullEventSink(), SYNTHETIC
            )
            yield EpisodeAgent(definition, make_request(episode.run_id))

    return factory


async def test_the_batch_counts_requests_retries_and_tokens(
    flaky: tuple[FlakyServer, str], tmp_path: Path
) -> None:
    server, root = flaky
    limiter = RateLimiter(max_in_flight=3, requests_per_minute=6000)
    episodes = [Episode(f"usage-{i}", {"run_id": f"usage-{i}"}) for i in range(EPISODES)]
    for episode in episodes:
        server.failures[episode.run_id] = [Fail(503)]
    results = tmp_path / "results.jsonl"
    async with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        with ResultsFile(results) as written:
            summary = await run_batch(
                episodes,
                _factory(root, limiter),
                store,
                concurrency=6,
                observers=[written],
            )
    assert summary.by_stop_reason == {StopReason.AGENT_FINISHED.value: EPISODES}
    assert summary.model_usage == ModelUsage(
        calls=EPISODES, requests=2 * EPISODES, retries=EPISODES, tokens=25 * EPISODES, reported=True
    )
    assert summary.to_json_dict()["model_usage"] == {
        "calls": EPISODES,
        "requests": 2 * EPISODES,
        "retries": EPISODES,
        "tokens": 25 * EPISODES,
    }
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert {line["run_id"]: line["model_usage"] for line in lines} == {
        episode.run_id: {"calls": 1, "requests": 2, "retries": 1, "tokens": 25}
        for episode in episodes
    }
    assert limiter.most_in_flight <= 3


def test_the_batch_command_reports_the_model_calls(tmp_path: Path) -> None:
    """`polyloop batch` prints the pass's model calls, requests and retries, and `--json` has
    them; the scripted test agent reports no usage, so each call is one request."""
    env = batch_env(tmp_path / "home")
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(3, steps=2))
    shown = polyloop(*batch_args(episodes, tmp_path / "a.sqlite"), env=env, cwd=tmp_path)
    assert shown.code == 0, shown.stderr
    assert "  model: 9 calls, 9 requests (0 retries)" in shown.stdout.splitlines()
    again = polyloop(
        *batch_args(episodes, tmp_path / "b.sqlite"), "--json", env=env, cwd=tmp_path
    ).json()
    assert again["model_usage"] == {"calls": 9, "requests": 9, "retries": 0, "tokens": 0}
