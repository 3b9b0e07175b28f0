"""``run_batch`` in one process on a real SQLite store: what each episode's pass does and reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from polyloop.batch import (
    BatchControl,
    BatchTally,
    Episode,
    EpisodeReport,
    EpisodeStatus,
    ResultsFile,
    run_batch,
    run_episodes,
)
from polyloop.errors import ConfigurationError
from polyloop.ports import RunLeasing, RunLog, RunStore
from polyloop.session import run_snapshot
from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import RunStarted
from tests.batch._agents import build, factory
from tests.batch._kit import results
from tests.stores._agent import ledger_effects as read_lines
from tests.stores._helpers import close_store, open_store


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """A durable store: a SQLite file, or a schema on the test PostgreSQL server."""
    opened = open_store(request.param, str(tmp_path))
    try:
        yield opened
    finally:
        await close_store(opened)


def _episodes(tmp_path: Path, count: int, **data: Any) -> list[Episode]:
    base = {"opens": str(tmp_path / "opens"), "calls": str(tmp_path / "calls"), **data}
    return [Episode(f"ep-{index}", {"run_id": f"ep-{index}", **base}) for index in range(count)]


async def _pass(
    store: RunStore,
    episodes: list[Episode],
    concurrency: int = 3,
    reports: dict[str, EpisodeReport] | None = None,
    **options: Any,
) -> tuple[Any, dict[str, EpisodeReport]]:
    """One pass; each report lands in ``reports`` (a new dict if not given) as it is made."""
    reports = {} if reports is None else reports

    def keep(report: EpisodeReport, tally: BatchTally) -> None:
        assert report.run_id not in reports, "an episode was reported twice in one pass"
        reports[report.run_id] = report

    summary = await run_batch(
        episodes, factory, store, concurrency=concurrency, observers=[keep], **options
    )
    return summary, reports


def _closed_every_opened(opens: Path) -> dict[str, list[str]]:
    """Per run_id, how each executor it opened was closed; every open has its close."""
    how: dict[str, list[str]] = {}
    depth: dict[str, int] = {}
    for line in read_lines(str(opens)):
        run_id = line["run_id"]
        if line["event"] == "open":
            depth[run_id] = depth.get(run_id, 0) + 1
        else:
            depth[run_id] -= 1
            how.setdefault(run_id, []).append(line["how"])
    assert {run_id: 0 for run_id in depth} == depth
    return how


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):  # 30 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never came true")


def _most_open_at_once(opens: Path) -> int:
    open_now = most = 0
    for line in read_lines(str(opens)):
        open_now += 1 if line["event"] == "open" else -1
        most = max(most, open_now)
    return most


async def test_new_episodes_run_and_a_second_pass_counts_their_recorded_results(
    store: RunStore, tmp_path: Path
) -> None:
    """A first pass runs every new episode; a second reports each as recorded, calling no model."""
    episodes = _episodes(tmp_path, 6, steps=2)
    summary, first = await _pass(store, episodes)
    assert {f"ep-{i}": "ran" for i in range(6)} == {k: r.status.value for k, r in first.items()}
    assert ({"agent_finished": 6}, 18, True) == (
        dict(summary.by_stop_reason),
        summary.steps,
        summary.complete,
    )
    calls_after_first = len(read_lines(str(tmp_path / "calls")))
    summary, second = await _pass(store, episodes)
    assert {f"ep-{i}": "recorded" for i in range(6)} == {
        k: r.status.value for k, r in second.items()
    }
    assert (calls_after_first, 0, {"agent_finished": 6}) == (
        len(read_lines(str(tmp_path / "calls"))),
        summary.steps,
        dict(summary.by_stop_reason),
    )
    assert ["done after 2 calls"] * 6 == [report.final_answer for report in second.values()]


async def test_a_started_unfinished_episode_is_resumed(store: RunStore, tmp_path: Path) -> None:
    """An episode whose log stops after RunStarted (a crash) is continued by resume to its end."""
    (episode,) = _episodes(tmp_path, 1, steps=3)
    agent = build(episode, store)
    await store.write_run_started(
        RunStarted(episode.run_id, run_snapshot(agent.definition, agent.request))
    )
    summary, reports = await _pass(store, [episode])
    report = reports[episode.run_id]
    assert ("resumed", "agent_finished", 4) == (
        report.status.value,
        report.stop_reason,
        report.steps,
    )
    assert 4 == summary.steps


async def test_a_finished_episode_under_other_parameters_is_that_episodes_error(
    store: RunStore, tmp_path: Path
) -> None:
    """A finished run whose recorded snapshot differs from the factory's now is a snapshot
    mismatch error of that episode alone; the other episodes are counted as usual."""
    episodes = _episodes(tmp_path, 3, variant="a")
    await _pass(store, episodes)
    changed = [*episodes[:2], Episode("ep-2", {**episodes[2].data, "variant": "b"})]
    summary, reports = await _pass(store, changed)
    assert ["recorded", "recorded", "error"] == [reports[e.run_id].status.value for e in changed]
    error = reports["ep-2"].error or ""
    assert error.startswith("SnapshotMismatchError: Run 'ep-2' was started with other parameters")
    assert "request.model_binding.variant: recorded 'a', now 'b'" in error
    assert (1, False) == (summary.count(EpisodeStatus.ERROR), summary.complete)
    assert ["SnapshotMismatchError"] == [e.error.split(":")[0] for e in summary.errors]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("raises", "RuntimeError: the factory cannot build ep-1"),
        ("enter_raises", "OSError: the test sandbox cannot start"),
        ("wrong_run_id", "FactoryError: the factory built run 'ep-1-other' for episode 'ep-1'"),
        ("other_store", "FactoryError: the factory's agent for episode 'ep-1' uses another store"),
        ("not_an_agent", "FactoryError: the factory gave dict for episode 'ep-1'"),
    ],
)
async def test_a_factory_that_fails_is_that_episodes_error(
    store: RunStore, tmp_path: Path, mode: str, expected: str
) -> None:
    """A factory that raises (or builds something unusable) fails its episode; the batch goes on."""
    episodes = _episodes(tmp_path, 3)
    episodes[1] = Episode("ep-1", {**episodes[1].data, "factory": mode})
    _summary, reports = await _pass(store, episodes)
    assert ["ran", "error", "ran"] == [reports[e.run_id].status.value for e in episodes]
    assert (reports["ep-1"].error or "").startswith(expected), reports["ep-1"].error
    assert RunLog() == await store.read_log("ep-1")


@pytest.mark.parametrize("mode", ["plain", "awaitable"])
async def test_a_factory_may_return_the_agent_or_an_awaitable_of_it(
    store: RunStore, tmp_path: Path, mode: str
) -> None:
    """A factory returning an EpisodeAgent, or an awaitable of one, drives its episode too."""
    episodes = _episodes(tmp_path, 2, factory=mode)
    _summary, reports = await _pass(store, episodes)
    assert ["ran", "ran"] == [reports[e.run_id].status.value for e in episodes]


async def test_concurrency_bounds_the_episodes_in_flight(store: RunStore, tmp_path: Path) -> None:
    """With 12 slow episodes and concurrency 3, exactly 3 executors are ever open at once."""
    episodes = _episodes(tmp_path, 12, steps=2, model_sleep=0.02)
    summary, _ = await _pass(store, episodes, concurrency=3)
    assert (12, 3) == (summary.count(EpisodeStatus.RAN), _most_open_at_once(tmp_path / "opens"))


async def test_a_run_held_elsewhere_is_retried_then_skipped(
    store: RunStore, tmp_path: Path
) -> None:
    """While another driver holds one episode's lease, it is tried again until the pass ends,
    then reported skipped; nothing of it ran and its executor, when opened, was closed."""
    episodes = _episodes(tmp_path, 4, steps=2, model_sleep=0.05)
    other = open_store(
        "postgres" if isinstance(store, PostgresRunStore) else "sqlite", str(tmp_path)
    )
    try:
        assert isinstance(other, RunLeasing)
        lease = await other.acquire_run_lease("ep-2")
        try:
            summary, reports = await _pass(store, episodes, concurrency=2)
        finally:
            await lease.release()
    finally:
        await close_store(other)
    skipped = reports["ep-2"]
    assert ("skipped", True) == (skipped.status.value, skipped.attempts >= 2)
    assert (skipped.error or "").startswith("RunLeaseHeldError: Run 'ep-2' is being driven")
    assert (3, ("ep-2",), False) == (
        summary.count(EpisodeStatus.RAN),
        summary.skipped,
        summary.complete,
    )
    assert RunLog() == await store.read_log("ep-2")
    how = _closed_every_opened(tmp_path / "opens")
    assert ["raised RunLeaseHeldError"] == how["ep-2"]
    summary, reports = await _pass(store, episodes)
    assert "ran" == reports["ep-2"].status.value  # free again: the next pass drives it


async def test_executors_are_closed_on_every_path(store: RunStore, tmp_path: Path) -> None:
    """Finished, refused (a snapshot mismatch raised in the block) and cancelled episodes all
    leave their executor closed, each saying how (skipped ones: the lease test)."""
    refused = _episodes(tmp_path, 1, variant="a")
    await _pass(store, refused)
    refused = [Episode("ep-0", {**refused[0].data, "variant": "b"})]
    episodes = [
        *refused,
        Episode(
            "slow",
            {
                "run_id": "slow",
                "opens": str(tmp_path / "opens"),
                "calls": str(tmp_path / "calls"),
                "model_sleep": 30,
            },
        ),
    ]
    control, reports = BatchControl(), dict[str, EpisodeReport]()
    task = asyncio.ensure_future(_pass(store, episodes, 2, reports, control=control))
    # Interrupted once the refused episode is reported and the slow one is in its model call
    # (its run started), whatever the machine's speed.
    await _until(
        lambda: (
            "ep-0" in reports
            and "slow" in {line["run_id"] for line in read_lines(str(tmp_path / "calls"))}
        )
    )
    control.interrupt()
    control.interrupt()
    summary, _ = await task
    assert ("error", "cancelled") == (reports["ep-0"].status.value, reports["slow"].status.value)
    assert (True, True) == (summary.interrupted, summary.cancelled)
    how = _closed_every_opened(tmp_path / "opens")
    assert (["returned", "raised SnapshotMismatchError"], ["cancelled"]) == (
        how["ep-0"],
        how["slow"],
    )
    log = await store.read_log("slow")
    assert log.finished is not None
    assert "cancelled" == log.finished.result.stop_reason.value


async def test_the_first_interrupt_stops_launching_and_lets_episodes_in_flight_finish(
    store: RunStore, tmp_path: Path
) -> None:
    """After one interrupt no episode starts, those in flight finish, the rest is not launched."""
    episodes = _episodes(tmp_path, 10, steps=2, model_sleep=0.1)
    control = BatchControl()
    task = asyncio.ensure_future(_pass(store, episodes, concurrency=2, control=control, total=10))
    await _until(lambda: len(read_lines(str(tmp_path / "opens"))) >= 2)
    control.interrupt()
    summary, _reports = await task
    assert ({"ran": 2}, 8, True, False) == (
        dict(summary.by_status),
        summary.not_launched,
        summary.interrupted,
        summary.cancelled,
    )
    assert ["returned", "returned"] == [
        line["how"] for line in read_lines(str(tmp_path / "opens")) if line["event"] == "close"
    ]


async def test_results_stream_to_a_file_one_line_per_episode(
    store: RunStore, tmp_path: Path
) -> None:
    """Each episode's outcome is a line of the results file, written as it finishes."""
    episodes = _episodes(tmp_path, 3)
    episodes.append(Episode("bad", {"run_id": "bad", "factory": "raises"}))
    seen: list[int] = []

    with ResultsFile(tmp_path / "results.jsonl") as written:

        def lines_so_far(report: EpisodeReport, tally: BatchTally) -> None:
            seen.append(len(read_lines(str(tmp_path / "results.jsonl"))))

        await run_batch(episodes, factory, store, concurrency=1, observers=[written, lines_so_far])
    assert [1, 2, 3, 4] == seen
    lines = results(tmp_path / "results.jsonl")
    assert {"ran": 3, "error": 1} == {
        status: [line["status"] for line in lines.values()].count(status)
        for status in ("ran", "error")
    }
    assert {
        "schema_version": 1,
        "run_id": "ep-0",
        "status": "ran",
        "stop_reason": "agent_finished",
        "steps": 3,
        "final_answer": "done after 2 calls",
        "error": None,
        "attempts": 1,
    } == {
        key: value for key, value in lines["ep-0"].items() if key not in ("wall_seconds", "worker")
    }


async def test_concurrency_must_be_a_positive_int(store: RunStore) -> None:
    """A concurrency of 0 is refused before anything is read."""
    with pytest.raises(ConfigurationError, match="concurrency must be an int >= 1"):
        await run_batch([], factory, store, concurrency=0)


async def test_a_driver_that_raises_fails_only_that_episode() -> None:
    """An exception out of the driver itself (not the run) is that episode's error; the pass
    goes on with the others."""

    async def driver(episode: Episode, attempt: int) -> EpisodeReport:
        if episode.run_id == "b":
            raise RuntimeError("the worker pool broke")
        return EpisodeReport(
            episode.run_id, EpisodeStatus.RAN, stop_reason="agent_finished", steps=1
        )

    episodes = [Episode(run_id, {"run_id": run_id}) for run_id in ("a", "b", "c")]
    summary = await run_episodes(episodes, driver, concurrency=2)
    assert ({"ran": 2, "error": 1}, ("b", "RuntimeError: the worker pool broke")) == (
        dict(summary.by_status),
        (summary.errors[0].run_id, summary.errors[0].error),
    )
