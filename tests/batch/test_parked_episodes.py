"""A batch whose episodes wait for a person (issue 24): a parked episode is reported as parked,
not as an error, the others keep going, and a rerun after the decisions continues it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from polyloop import session
from polyloop.asking import RunParked
from polyloop.batch import BatchTally, Episode, EpisodeReport, EpisodeStatus, ResultsFile, run_batch
from polyloop.ports import RunStore
from polyloop.recovery import pending_ask
from polyloop.types import ActionStatus
from tests.batch._agents import factory
from tests.batch._kit import (
    batch_args,
    batch_env,
    episodes_of,
    results,
    write_episodes,
)
from tests.batch._ray_cluster import RayCluster
from tests.cli._kit import polyloop
from tests.stores._agent import ledger_effects as read_lines
from tests.stores._helpers import close_store, open_store


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    opened = open_store(request.param, str(tmp_path))
    try:
        yield opened
    finally:
        await close_store(opened)


def _episodes(tmp_path: Path) -> list[Episode]:
    """Two gated episodes (``pay`` waits for approval) and two that are not."""
    ledger = str(tmp_path / "ledger")
    rows = [
        *({"run_id": f"gated-{i}", "gated": True, "ledger": ledger} for i in range(2)),
        *({"run_id": f"plain-{i}", "ledger": ledger} for i in range(2)),
    ]
    return [Episode(row["run_id"], row) for row in rows]


async def _pass(
    store: RunStore, episodes: list[Episode], results_path: Path
) -> tuple[Any, dict[str, EpisodeReport]]:
    reports: dict[str, EpisodeReport] = {}

    def keep(report: EpisodeReport, tally: BatchTally) -> None:
        reports[report.run_id] = report

    with ResultsFile(results_path) as sink:
        summary = await run_batch(episodes, factory, store, concurrency=3, observers=[keep, sink])
    return summary, reports


def _pays(tmp_path: Path) -> list[str]:
    return [
        line["run_id"] for line in read_lines(str(tmp_path / "ledger")) if line["tool"] == "pay"
    ]


async def test_parked_episodes_are_reported_as_parked_and_the_others_finish(
    store: RunStore, tmp_path: Path
) -> None:
    """Pass 1: the gated episodes park (status parked, no error, their ask in the results),
    the plain ones run to the end; no gated pay ran; the summary counts two parked."""
    summary, reports = await _pass(store, _episodes(tmp_path), tmp_path / "results.jsonl")
    statuses = {run_id: report.status for run_id, report in reports.items()}
    assert {
        "gated-0": EpisodeStatus.PARKED,
        "gated-1": EpisodeStatus.PARKED,
        "plain-0": EpisodeStatus.RAN,
        "plain-1": EpisodeStatus.RAN,
    } == statuses
    assert (2, ("gated-0", "gated-1"), False) == (
        summary.count(EpisodeStatus.PARKED),
        tuple(sorted(summary.parked)),
        summary.complete,
    )
    assert (2, [], 0) == (
        summary.to_json_dict()["parked_count"],
        list(summary.errors),
        summary.count(EpisodeStatus.ERROR),
    )
    assert ["plain-0", "plain-1"] == sorted(_pays(tmp_path))
    line = results(tmp_path / "results.jsonl")["gated-0"]
    assert ("parked", None, None, 1) == (
        line["status"],
        line["error"],
        line["stop_reason"],
        line["steps"],
    )
    assert {"step": 1, "kind": "approval", "tool_name": "pay"} == {
        key: line["pending_ask"][key] for key in ("step", "kind", "tool_name")
    }
    assert "pending_ask" not in results(tmp_path / "results.jsonl")["plain-0"]


async def test_a_rerun_without_decisions_parks_again_and_writes_nothing(
    store: RunStore, tmp_path: Path
) -> None:
    """A second pass before anyone decided reports the gated episodes parked again, their logs
    unchanged."""
    episodes = _episodes(tmp_path)
    await _pass(store, episodes, tmp_path / "first.jsonl")
    before = await store.read_log("gated-0")
    summary, reports = await _pass(store, episodes, tmp_path / "second.jsonl")
    assert EpisodeStatus.PARKED == reports["gated-0"].status
    assert EpisodeStatus.RECORDED == reports["plain-0"].status
    assert before == await store.read_log("gated-0")
    assert 2 == summary.count(EpisodeStatus.PARKED)


async def test_a_rerun_after_the_decisions_continues_the_parked_episodes(
    store: RunStore, tmp_path: Path
) -> None:
    """Approve one, reject the other: the next pass resumes both to the end; the approved pay
    ran once, the rejected one never, and the batch is complete."""
    episodes = _episodes(tmp_path)
    await _pass(store, episodes, tmp_path / "first.jsonl")
    for run_id, decide in (("gated-0", "approve"), ("gated-1", "reject")):
        ask = pending_ask(await store.read_log(run_id))
        assert ask is not None
        if decide == "approve":
            await session.approve(
                store, run_id, step=ask.step, arguments_sha256=ask.arguments_sha256
            )
        else:
            await session.reject(
                store,
                run_id,
                reason="not this month",
                step=ask.step,
                arguments_sha256=ask.arguments_sha256,
            )
    summary, reports = await _pass(store, episodes, tmp_path / "second.jsonl")
    assert (EpisodeStatus.RESUMED, EpisodeStatus.RESUMED, "agent_finished") == (
        reports["gated-0"].status,
        reports["gated-1"].status,
        reports["gated-0"].stop_reason,
    )
    assert summary.complete
    assert ["gated-0", "plain-0", "plain-1"] == sorted(_pays(tmp_path))
    rejected = (await store.read_log("gated-1")).steps[1].step
    assert (ActionStatus.NOT_EXECUTED, True) == (
        rejected.action_status,
        "not this month" in rejected.observation,
    )


async def test_a_parked_report_survives_pickling() -> None:
    """A worker (Ray) sends its report home pickled: the parked report and its ask survive."""
    import pickle

    from polyloop.asking import AskKind, UserAsked

    ask = UserAsked(
        "r", 1, AskKind.APPROVAL, "CALL pay {}", "pay", "{}", "a" * 64, None, None, None, None, "t"
    )
    report = EpisodeReport.of_parked(RunParked("r", 1, ask), wall_seconds=0.5, worker="w")
    assert report == pickle.loads(pickle.dumps(report))


def test_the_command_exits_24_naming_the_parked_and_a_rerun_continues(tmp_path: Path) -> None:
    """`polyloop batch` ends with exit 24 (only parked episodes left) and says how to go on;
    `polyloop approve` then a rerun completes the batch (exit 0)."""
    rows = [*episodes_of(1, prefix="gated", gated=True), *episodes_of(2, prefix="plain")]
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store = tmp_path / "runs.sqlite"
    env = batch_env(tmp_path / "home")
    first = polyloop(*batch_args(episodes, store, "--json"), env=env, cwd=tmp_path)
    assert 24 == first.code, first.stderr
    assert "wait for a person" in first.stderr
    assert "pending" in first.stderr
    document = first.json()
    assert (1, ["gated-0000"], 2) == (
        document["parked_count"],
        document["parked"],
        document["by_status"]["ran"],
    )
    # The results line names the ask waited on: its step is what the decision names.
    step = str(results(tmp_path / "eps-results.jsonl")["gated-0000"]["pending_ask"]["step"])
    approved = polyloop(
        "approve", "gated-0000", "--step", step, "--store", f"sqlite://{store}", env=env
    )
    assert 0 == approved.code, approved.stderr
    again = polyloop(*batch_args(episodes, store), env=env, cwd=tmp_path)
    assert 0 == again.code, again.stderr
    lines = results(tmp_path / "eps-results.jsonl")
    assert ("resumed", "agent_finished") == (
        lines["gated-0000"]["status"],
        lines["gated-0000"]["stop_reason"],
    )


@pytest.mark.slow
def test_on_ray_a_parked_episode_is_parked_and_a_rerun_continues_it(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """`batch --ray`: the gated episode parks on a worker and is reported parked (exit 24), the
    others finish; after `polyloop approve` a second --ray pass resumes it to the end, its pay
    run once."""
    ledger = str(tmp_path / "ledger")
    rows = [
        *episodes_of(1, prefix="gated", gated=True, ledger=ledger),
        *episodes_of(3, prefix="plain", ledger=ledger),
    ]
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store = tmp_path / "runs.sqlite"
    env = ray_cluster.environment()
    env.update({k: v for k, v in batch_env(tmp_path / "home").items() if k.startswith("POLYLOOP_")})
    args = [*batch_args(episodes, store), "--ray", ray_cluster.address]
    first = polyloop(*args, env=env, cwd=tmp_path, timeout=300)
    assert 24 == first.code, first.stderr
    lines = results(tmp_path / "eps-results.jsonl")
    assert ("parked", {"ran"}) == (
        lines["gated-0000"]["status"],
        {lines[f"plain-{i:04d}"]["status"] for i in range(3)},
    )
    step = str(lines["gated-0000"]["pending_ask"]["step"])
    approved = polyloop(
        "approve", "gated-0000", "--step", step, "--store", f"sqlite://{store}", env=env
    )
    assert 0 == approved.code, approved.stderr
    again = polyloop(*args, env=env, cwd=tmp_path, timeout=300)
    assert 0 == again.code, again.stderr
    assert "resumed" == results(tmp_path / "eps-results.jsonl")["gated-0000"]["status"]
    assert 1 == _pays(tmp_path).count("gated-0000")
