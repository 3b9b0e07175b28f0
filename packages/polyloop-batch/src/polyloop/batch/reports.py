"""What became of one episode in a pass: :class:`EpisodeReport`, one JSON line of the results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from polyloop.asking import RunParked
from polyloop.types import RunResult

__all__ = ["RESULTS_SCHEMA_VERSION", "EpisodeReport", "EpisodeStatus", "ModelUsage"]

#: ``schema_version`` of a results line; a reader should refuse a version it does not know.
RESULTS_SCHEMA_VERSION = 1


class EpisodeStatus(StrEnum):
    """How an episode's pass ended. The values are the strings of the results file."""

    #: Started in this pass (``run``) and driven to a stop reason.
    RAN = "ran"
    #: Found started but unfinished, continued (``resume``) to a stop reason.
    RESUMED = "resumed"
    #: Already finished under the same parameter snapshot: its recorded result counts; nothing
    #: was called.
    RECORDED = "recorded"
    #: Anything raised — a snapshot mismatch, a factory that failed, a seam or store error.
    ERROR = "error"
    #: Another driver held its run's lease on every try until the pass ended.
    SKIPPED = "skipped"
    #: In flight when the batch was cancelled (second Ctrl-C); the loop records ``cancelled``
    #: when it can, and a rerun treats the run by what its log says.
    CANCELLED = "cancelled"
    #: Its run waits for a person (an approval or a question, design 0037): not an error, not
    #: finished. Decide it (``polyloop pending``), then a rerun continues it.
    PARKED = "parked"

    @property
    def finished(self) -> bool:
        """Whether the episode has a stop reason (its result counts)."""
        return self in (EpisodeStatus.RAN, EpisodeStatus.RESUMED, EpisodeStatus.RECORDED)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The model calls an episode made in this pass: the calls, the requests they took, how many
    of those were retries, and tokens (``total_tokens``, else prompt + completion) — design
    0065. ``reported``: the client reported usage or counts (else only calls are known)."""

    calls: int = 0
    requests: int = 0
    retries: int = 0
    tokens: int = 0
    reported: bool = False

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            self.calls + other.calls,
            self.requests + other.requests,
            self.retries + other.retries,
            self.tokens + other.tokens,
            self.reported or other.reported,
        )

    def to_json_dict(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "requests": self.requests,
            "retries": self.retries,
            "tokens": self.tokens,
        }


@dataclass(frozen=True, slots=True)
class EpisodeReport:
    """One episode's outcome in this pass. Picklable, so a worker can send it home."""

    run_id: str
    status: EpisodeStatus
    #: The run's stop reason (``StopReason`` value) when the status is finished, else ``None``.
    stop_reason: str | None = None
    #: Steps of the run's result (all of them, earlier passes' included), when finished.
    steps: int | None = None
    final_answer: str | None = None
    #: ``"<ExceptionType>: <message>"`` of an error; why it was skipped or cancelled.
    error: str | None = None
    #: Seconds this pass spent on the episode (every try together).
    wall_seconds: float = 0.0
    #: How many times it was tried in this pass (lease held, worker lost).
    attempts: int = 1
    #: ``<pid>@<host>`` of the process that drove it last.
    worker: str | None = None
    #: ``PARKED`` only: what the run waits on (step, kind, tool_name, arguments_sha256,
    #: asked_at); written to the results line only when set.
    pending_ask: Mapping[str, object] | None = None
    #: The model calls made in this pass (``None``: not counted, e.g. a driver of your own);
    #: written to the results line only when the client reported usage or counts.
    model_usage: ModelUsage | None = None

    @classmethod
    def of_result(
        cls,
        status: EpisodeStatus,
        result: RunResult,
        *,
        wall_seconds: float,
        worker: str,
        model_usage: ModelUsage | None = None,
    ) -> EpisodeReport:
        return cls(
            run_id=result.run_id,
            status=status,
            stop_reason=result.stop_reason.value,
            steps=len(result.steps),
            final_answer=result.final_answer,
            wall_seconds=wall_seconds,
            worker=worker,
            model_usage=model_usage,
        )

    @classmethod
    def of_parked(
        cls,
        parked: RunParked,
        *,
        wall_seconds: float,
        worker: str,
        model_usage: ModelUsage | None = None,
    ) -> EpisodeReport:
        ask = parked.ask
        return cls(
            run_id=parked.run_id,
            status=EpisodeStatus.PARKED,
            steps=parked.steps_done,
            wall_seconds=wall_seconds,
            worker=worker,
            model_usage=model_usage,
            pending_ask={
                "step": ask.step,
                "kind": ask.kind.value,
                "tool_name": ask.tool_name,
                "arguments_sha256": ask.arguments_sha256,
                "asked_at": ask.asked_at,
            },
        )

    def to_json(self) -> str:
        """The results-file line (without its newline), keys in a fixed order. ASCII: a lone
        surrogate in a final answer stays a valid escape instead of breaking the file."""
        document: dict[str, Any] = {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "run_id": self.run_id,
            "status": self.status.value,
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "final_answer": self.final_answer,
            "error": self.error,
            "wall_seconds": round(self.wall_seconds, 6),
            "attempts": self.attempts,
            "worker": self.worker,
        }
        if self.pending_ask is not None:
            document["pending_ask"] = dict(self.pending_ask)
        if self.model_usage is not None and self.model_usage.reported:
            document["model_usage"] = self.model_usage.to_json_dict()
        return json.dumps(document, separators=(",", ":"))
