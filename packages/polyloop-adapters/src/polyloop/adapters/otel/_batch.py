"""Metrics of a ``polyloop batch`` pass, for a dashboard to watch (design 0049).

:class:`BatchMetrics` is a report observer of :func:`polyloop.batch.run_batch` (and of the Ray
runner): it is called with each episode's report and the pass's running tally. It reads them by
their fields only, so this package does not depend on ``polyloop-batch``.
"""

from __future__ import annotations

from typing import Protocol

from opentelemetry import metrics

from polyloop.adapters.otel import _names as n
from polyloop.adapters.otel._counts import Key, key, shared_counts

__all__ = ["BatchMetrics"]

#: Episode status (``EpisodeStatus`` values) → the outcome a dashboard groups by.
_OUTCOMES = {
    "ran": "done",
    "resumed": "done",
    "recorded": "done",
    "error": "failed",
    "cancelled": "failed",
    "skipped": "parked",
}


class _Report(Protocol):
    @property
    def status(self) -> str: ...  # EpisodeStatus, a StrEnum
    @property
    def steps(self) -> int | None: ...
    @property
    def stop_reason(self) -> str | None: ...


class _Tally(Protocol):
    @property
    def steps_per_second(self) -> float: ...


class BatchMetrics:
    """Counts episodes by outcome (``done``: ran, resumed or recorded; ``failed``: error or
    cancelled; ``parked``: skipped because another driver held the run) and status, the steps
    the pass drove, and observes the pass's steps per second.

    Pass it among ``observers=`` of ``run_batch``; ``batch`` names the pass in every
    measurement (``polyloop.batch.name``), so one dashboard can tell batches apart.
    """

    __slots__ = ("_episodes", "_key", "_name", "_rate", "_steps")

    def __init__(
        self, meter_provider: metrics.MeterProvider | None = None, *, batch: str = "batch"
    ) -> None:
        if not isinstance(batch, str) or not batch:
            raise ValueError(f"batch must be a non-empty string naming the pass, got {batch!r}.")
        counts = shared_counts(meter_provider)
        self._name = batch
        self._key: Key = (("polyloop.batch.name", batch),)
        self._episodes = counts.counter(
            n.BATCH_EPISODES_METRIC,
            "{episode}",
            "Episodes of a batch pass, by outcome (done, failed, parked) and status.",
        )
        self._steps = counts.counter(
            n.BATCH_STEPS_METRIC, "{step}", "Steps of the episodes a batch pass ran or resumed."
        )
        self._rate = counts.gauge(
            n.BATCH_STEP_RATE_METRIC, "{step}/s", "Steps per second of the batch pass so far."
        )

    def __call__(self, report: _Report, tally: _Tally) -> None:
        status = str(report.status)
        attributes: dict[str, str] = {
            "polyloop.batch.name": self._name,
            n.EPISODE_OUTCOME: _OUTCOMES.get(status, "failed"),
            "polyloop.batch.status": status,
        }
        if report.stop_reason is not None:
            attributes[n.STOP_REASON] = report.stop_reason
        episodes = key(attributes)
        self._episodes[episodes] = self._episodes.get(episodes, 0) + 1
        if status in ("ran", "resumed") and report.steps:
            self._steps[self._key] = self._steps.get(self._key, 0) + report.steps
        self._rate[self._key] = tally.steps_per_second
