"""Counting a pass as it goes (:class:`BatchTally`) and what it comes to (:class:`BatchSummary`).

Both stay the same size however many episodes pass through: counts, plus the first
:data:`LISTED` errors and skipped run_ids (the results file has every one).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polyloop.batch.reports import EpisodeReport, EpisodeStatus, ModelUsage

__all__ = ["LISTED", "BatchSummary", "BatchTally", "EpisodeError"]

#: How many errors (and skipped run_ids) a summary lists by name.
LISTED = 20


@dataclass(frozen=True, slots=True)
class EpisodeError:
    """One episode's error, as the summary lists it."""

    run_id: str
    error: str


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """The end of a pass: what the episodes came to, and how fast."""

    #: Episodes in the batch (``None`` when the source did not say).
    total: int | None
    #: Episodes reported (every status).
    done: int
    by_status: Mapping[str, int]
    #: Finished episodes (ran, resumed, recorded) by their run's stop reason.
    by_stop_reason: Mapping[str, int]
    #: The first :data:`LISTED` errors.
    errors: tuple[EpisodeError, ...]
    #: The first :data:`LISTED` skipped run_ids.
    skipped: tuple[str, ...]
    #: Episodes never started because the batch was stopped first.
    not_launched: int
    #: Steps of the runs driven in this pass (a resumed run counts all its steps).
    steps: int
    wall_seconds: float
    #: Whether the batch was stopped early (first interrupt), and whether in-flight episodes
    #: were cancelled (second interrupt).
    interrupted: bool = False
    cancelled: bool = False
    #: The first :data:`LISTED` parked run_ids (they wait for a person; design 0053).
    parked: tuple[str, ...] = ()
    #: The model calls of this pass: requests, retries, tokens (design 0065).
    model_usage: ModelUsage = field(default_factory=ModelUsage)

    def count(self, status: EpisodeStatus) -> int:
        return self.by_status.get(status.value, 0)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def complete(self) -> bool:
        """Every episode finished: none failed, was skipped, cancelled or parked, none left
        out."""
        return (
            not self.interrupted
            and self.not_launched == 0
            and all(
                self.count(status) == 0
                for status in (
                    EpisodeStatus.ERROR,
                    EpisodeStatus.SKIPPED,
                    EpisodeStatus.CANCELLED,
                    EpisodeStatus.PARKED,
                )
            )
        )

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "total": self.total,
            "done": self.done,
            "by_status": {status.value: self.count(status) for status in EpisodeStatus},
            "by_stop_reason": dict(sorted(self.by_stop_reason.items())),
            "errors": [{"run_id": item.run_id, "error": item.error} for item in self.errors],
            "error_count": self.count(EpisodeStatus.ERROR),
            "skipped": list(self.skipped),
            "skipped_count": self.count(EpisodeStatus.SKIPPED),
            "parked": list(self.parked),
            "parked_count": self.count(EpisodeStatus.PARKED),
            "not_launched": self.not_launched,
            "steps": self.steps,
            "wall_seconds": round(self.wall_seconds, 3),
            "steps_per_second": round(self.steps_per_second, 3),
            "interrupted": self.interrupted,
            "cancelled": self.cancelled,
            "complete": self.complete,
            "model_usage": self.model_usage.to_json_dict(),
        }


@dataclass(slots=True)
class BatchTally:
    """Running counts of a pass; observers read it after each report."""

    total: int | None = None
    launched: int = 0
    done: int = 0
    steps: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    by_stop_reason: Counter[str] = field(default_factory=Counter)
    errors: list[EpisodeError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    interrupted: bool = False
    cancelled: bool = False
    model_usage: ModelUsage = field(default_factory=ModelUsage)

    def add(self, report: EpisodeReport) -> None:
        self.done += 1
        if report.model_usage is not None:
            self.model_usage = self.model_usage + report.model_usage
        self.by_status[report.status.value] += 1
        if report.status.finished and report.stop_reason is not None:
            self.by_stop_reason[report.stop_reason] += 1
        if report.status in (EpisodeStatus.RAN, EpisodeStatus.RESUMED):
            self.steps += report.steps or 0
        if report.status is EpisodeStatus.ERROR and len(self.errors) < LISTED:
            self.errors.append(EpisodeError(report.run_id, report.error or ""))
        if report.status is EpisodeStatus.SKIPPED and len(self.skipped) < LISTED:
            self.skipped.append(report.run_id)
        if report.status is EpisodeStatus.PARKED and len(self.parked) < LISTED:
            self.parked.append(report.run_id)

    @property
    def wall_seconds(self) -> float:
        return time.monotonic() - self.started_at

    @property
    def steps_per_second(self) -> float:
        wall = self.wall_seconds
        return self.steps / wall if wall > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Time left at the pace so far, when the total is known and something is done."""
        if self.total is None or self.done == 0:
            return None
        return self.wall_seconds / self.done * max(0, self.total - self.done)

    def summary(self) -> BatchSummary:
        launched_total = self.total if self.total is not None else self.launched
        return BatchSummary(
            total=self.total,
            done=self.done,
            by_status=dict(self.by_status),
            by_stop_reason=dict(self.by_stop_reason),
            errors=tuple(self.errors),
            skipped=tuple(self.skipped),
            not_launched=max(0, launched_total - self.launched),
            steps=self.steps,
            wall_seconds=self.wall_seconds,
            interrupted=self.interrupted,
            cancelled=self.cancelled,
            parked=tuple(self.parked),
            model_usage=self.model_usage,
        )
