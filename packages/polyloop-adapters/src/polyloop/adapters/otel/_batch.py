"""Metrics of a ``polyloop batch`` pass, for a dashboard to watch (design 0049).

:class:`BatchMetrics` is a report observer of :func:`polyloop.batch.run_batch` (and of the Ray
runner): it is called with each episode's report and the pass's running tally. It reads them by
their fields only, so this package does not depend on ``polyloop-batch``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from polyloop.adapters.otel import _names as n

__all__ = ["BatchMetrics"]

_SCOPE = "polyloop.adapters.otel"
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

    __slots__ = ("_attributes", "_episodes", "_rate", "_steps")

    def __init__(
        self, meter_provider: metrics.MeterProvider | None = None, *, batch: str = "batch"
    ) -> None:
        if not isinstance(batch, str) or not batch:
            raise ValueError(f"batch must be a non-empty string naming the pass, got {batch!r}.")
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._attributes = {"polyloop.batch.name": batch}
        self._episodes = meter.create_counter(
            n.BATCH_EPISODES_METRIC,
            unit="{episode}",
            description="Episodes of a batch pass, by outcome (done, failed, parked) and status.",
        )
        self._steps = meter.create_counter(
            n.BATCH_STEPS_METRIC,
            unit="{step}",
            description="Steps of the episodes a batch pass ran or resumed.",
        )
        self._rate: float | None = None
        meter.create_observable_gauge(
            n.BATCH_STEP_RATE_METRIC,
            callbacks=[self._observe_rate],
            unit="{step}/s",
            description="Steps per second of the batch pass so far.",
        )

    def __call__(self, report: _Report, tally: _Tally) -> None:
        status = str(report.status)
        attributes = {
            **self._attributes,
            n.EPISODE_OUTCOME: _OUTCOMES.get(status, "failed"),
            "polyloop.batch.status": status,
        }
        if report.stop_reason is not None:
            attributes[n.STOP_REASON] = report.stop_reason
        self._episodes.add(1, attributes)
        if status in ("ran", "resumed") and report.steps:
            self._steps.add(report.steps, self._attributes)
        self._rate = tally.steps_per_second

    def _observe_rate(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._rate is None:
            return ()
        return (Observation(self._rate, self._attributes),)
