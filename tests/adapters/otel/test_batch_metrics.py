"""BatchMetrics as a real batch pass's report observer: episodes by outcome and status, steps,
steps per second — read back from the SDK's in-memory metric reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from polyloop.adapters.otel import BatchMetrics
from polyloop.batch import BatchTally, Episode, EpisodeReport, EpisodeStatus, run_batch
from polyloop.stores.sqlite import SqliteRunStore
from tests.adapters.otel._agent import measurements
from tests.batch._agents import factory


async def test_a_batch_pass_is_measured_by_outcome_with_its_steps_and_rate(
    tmp_path: Path,
) -> None:
    """Three episodes that finish count as done (with their stop reason), one whose factory
    raises as failed, one skipped (its run held elsewhere) as parked; the steps of the episodes
    run are counted and the rate is observed."""
    reader = InMemoryMetricReader()
    observer = BatchMetrics(MeterProvider(metric_readers=[reader]), batch="nightly")
    episodes = [Episode(f"ep-{k}", {"run_id": f"ep-{k}", "steps": 2}) for k in range(3)]
    episodes.append(Episode("ep-bad", {"run_id": "ep-bad", "factory": "raises"}))
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    try:
        summary = await run_batch(episodes, factory, store, concurrency=2, observers=[observer])
    finally:
        store.close()
    tally = BatchTally()
    tally.steps, tally.started_at = 6, tally.started_at - 2.0
    observer(EpisodeReport("ep-held", EpisodeStatus.SKIPPED), tally)

    measured = measurements(reader)
    episodes_by = {
        (str(a["polyloop.batch.outcome"]), str(a["polyloop.batch.status"])): v
        for a, v in measured["polyloop.batch.episodes"]
    }
    assert {("done", "ran"): 3.0, ("failed", "error"): 1.0, ("parked", "skipped"): 1.0} == (
        episodes_by
    )
    done = [
        a for a, _ in measured["polyloop.batch.episodes"] if a["polyloop.batch.outcome"] == "done"
    ]
    assert [
        {
            "polyloop.batch.name": "nightly",
            "polyloop.batch.outcome": "done",
            "polyloop.batch.status": "ran",
            "polyloop.stop_reason": "agent_finished",
        }
    ] == done
    assert [({"polyloop.batch.name": "nightly"}, float(summary.steps))] == measured[
        "polyloop.batch.steps"
    ]
    ((attributes, rate),) = measured["polyloop.batch.steps_per_second"]
    assert {"polyloop.batch.name": "nightly"} == attributes
    assert 6 / 2.5 < rate <= 6 / 2.0


def test_the_batch_name_is_checked() -> None:
    """An empty name is refused with a message saying what it is for."""
    with pytest.raises(ValueError, match="naming the pass"):
        BatchMetrics(batch="")


def test_two_batches_on_one_provider_are_both_observed() -> None:
    """Each batch's rate is its own gauge point, named after it."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    tally = BatchTally()
    tally.steps, tally.started_at = 10, tally.started_at - 10.0
    for name in ("one", "two"):
        BatchMetrics(provider, batch=name)(
            EpisodeReport(f"{name}-0", EpisodeStatus.RAN, steps=3), tally
        )
    rates = measurements(reader)["polyloop.batch.steps_per_second"]
    assert ["one", "two"] == sorted(str(a["polyloop.batch.name"]) for a, _ in rates)
    steps = measurements(reader)["polyloop.batch.steps"]
    assert [("one", 3.0), ("two", 3.0)] == sorted(
        (str(a["polyloop.batch.name"]), v) for a, v in steps
    )
