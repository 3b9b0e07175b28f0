"""``polyloop batch`` against the real model (issue 37; design 0066): 20 episodes, each a native
tool call by Gemma 3 270M on llama-cpp-python's server and a final answer, then a rerun that
calls the model no more."""

from __future__ import annotations

from pathlib import Path

from polyloop.types import ActionStatus, StopReason
from tests.batch._kit import (
    batch_env,
    episodes_of,
    finish,
    read_logs,
    results,
    start_batch,
    write_episodes,
)
from tests.batch._real_model_agent import CITIES

EPISODES = 20
FACTORY = "tests.batch._real_model_agent:factory"


def _args(episodes: Path, store: Path) -> list[str]:
    return [
        "batch",
        str(episodes),
        "--agent",
        FACTORY,
        "--store",
        f"sqlite://{store}",
        "--concurrency",
        "4",
    ]


def test_a_batch_of_twenty_episodes_on_the_real_model(
    model_server_url: str, tmp_path: Path
) -> None:
    """Every episode runs once and finishes: its first step is the model's native ``weather``
    call, executed; its second the model's answer. A rerun finds them all recorded."""
    env = batch_env(tmp_path / "home")
    episodes = write_episodes(
        tmp_path / "episodes.jsonl",
        [
            {**line, "model_url": model_server_url, "city": CITIES[index % len(CITIES)]}
            for index, line in enumerate(episodes_of(EPISODES, "real"))
        ],
    )
    store = tmp_path / "runs.sqlite"
    first = finish(start_batch(_args(episodes, store), env, tmp_path), timeout=900)
    assert 0 == first.code, (first.stdout, first.stderr)
    by_run = results(tmp_path / "episodes-results.jsonl")
    assert EPISODES == len(by_run)
    assert {"ran"} == {line["status"] for line in by_run.values()}
    assert {StopReason.AGENT_FINISHED.value} == {line["stop_reason"] for line in by_run.values()}

    logs = read_logs(store, by_run)
    for run_id, log in logs.items():
        called, answered = log.steps
        step = called.step
        assert ("weather", ActionStatus.EXECUTED) == (step.tool_name, step.action_status), run_id
        city = step.observation.removeprefix("Sunny and 21 degrees in ").removesuffix(".")
        assert city in CITIES, (run_id, step.observation)
        assert answered.step.tool_name is None
        assert 2 == len(log.model_results)
        assert all(result.reply is not None for result in log.model_results)

    again = finish(start_batch(_args(episodes, store), env, tmp_path), timeout=300)
    assert 0 == again.code, (again.stdout, again.stderr)
    rerun = results(tmp_path / "episodes-results.jsonl")
    assert {"recorded"} == {line["status"] for line in rerun.values()}
    assert logs == read_logs(store, by_run)
