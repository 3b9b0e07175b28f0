"""Governed runs (polyloop.session) through RetryingModelClient over the openai client and a
loopback server scripted to fail: every call's requests and retries are in the durable log,
a reply's and a failed call's alike, and `polyloop show` sums them."""

from __future__ import annotations

from pathlib import Path

from polyloop.adapters.retry import RetryingModelClient, RetryPolicy
from polyloop.session import AgentDefinition, run
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.types import REQUESTS_USAGE_KEY, RETRIES_USAGE_KEY, StopReason
from tests.adapters._chat_clients import API_KEY, open_client
from tests.adapters.gateway._server import serve_in_thread
from tests.adapters.retry._flaky import Fail, FlakyServer
from tests.cli._kit import clean_env, polyloop
from tests.loop_kit import SYNTHETIC, make_request

POLICY = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)


async def _run(root: str, key: str, store: SqliteRunStore, run_id: str) -> StopReason:
    async with open_client("openai", f"{root}/{key}/v1") as client:
        definition = AgentDefinition(
            RetryingModelClient(client, POLICY),
            LineDecisionParser(),
            store,
            NullEventSink(),
            SYNTHETIC,
        )
        result = await run(definition, make_request(run_id))
    return result.stop_reason


async def test_requests_and_retries_are_recorded_for_replies_and_failures(tmp_path: Path) -> None:
    server = FlakyServer()
    server.failures["recovers"] = [Fail(429, retry_after=0.05), Fail(503)]
    server.always["down"] = Fail(503)
    path = tmp_path / "runs.sqlite"
    with serve_in_thread(server) as root:  # type: ignore[arg-type]
        async with SqliteRunStore(path) as store:
            assert await _run(root, "recovers", store, "recovers") is StopReason.AGENT_FINISHED
            assert await _run(root, "down", store, "down") is StopReason.LLM_ERROR
        async with SqliteRunStore(path) as store:  # read back from the file
            recovered = await store.read_log("recovers")
            failed = await store.read_log("down")

    (answered,) = recovered.model_results
    assert answered.reply is not None
    assert answered.reply.usage is not None
    assert answered.reply.usage[REQUESTS_USAGE_KEY] == 3
    assert answered.reply.usage[RETRIES_USAGE_KEY] == 2
    assert answered.reply.usage["total_tokens"] == 25
    (broken,) = failed.model_results
    assert broken.reply is None
    assert broken.failure is not None
    assert broken.failure.startswith("ModelCallRetriesError: ")
    assert "last failure: GatewayStatusError" in broken.failure
    assert "HTTP 503" in broken.failure
    assert API_KEY not in broken.failure
    assert dict(broken.failure_usage or {}) == {REQUESTS_USAGE_KEY: 3, RETRIES_USAGE_KEY: 2}
    assert server.count("down") == 3

    env = clean_env(tmp_path / "home")
    for run_id, line in (
        ("recovers", "model requests 3 for 1 calls (2 retries)"),
        ("down", "model requests 3 for 1 calls (2 retries)"),
    ):
        shown = polyloop("show", run_id, "--store", f"sqlite://{path}", env=env)
        assert shown.code == 0, shown.stderr
        rows = [" ".join(row.split()) for row in shown.stdout.splitlines()]
        assert line in rows
        # The counts are not tokens: the token line holds only the provider's.
        assert not any(row.startswith("token usage") and "polyloop." in row for row in rows)
    document = polyloop("show", "down", "--store", f"sqlite://{path}", "--json", env=env).json()
    assert document["model_requests"] == {"calls": 1, "requests": 3, "retries": 2}
