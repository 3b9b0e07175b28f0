"""An in-process RunStore: for tests, examples and short-lived harness runs.

Nothing survives the process. Records are immutable values (frozen dataclasses whose mappings
are private read-only copies), so the store keeps the objects it is given and hands the same
objects back: there is nothing a caller could mutate through them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from polyloop.errors import RunAlreadyStartedError
from polyloop.ports import RunLog
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted

__all__ = ["MemoryRunStore"]


@dataclass(slots=True)
class _Log:
    started: RunStarted | None = None
    intents: list[Intent] = field(default_factory=list)
    model_results: list[ModelCallResult] = field(default_factory=list)
    steps: list[StepCompleted] = field(default_factory=list)
    finished: RunFinished | None = None


class MemoryRunStore:
    """Run logs of many runs in a dict keyed by run_id. Safe across tasks and threads."""

    __slots__ = ("_lock", "_logs")

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}
        self._lock = threading.Lock()

    def _log(self, run_id: str) -> _Log:
        log = self._logs.get(run_id)
        if log is None:
            log = self._logs[run_id] = _Log()
        return log

    async def write_run_started(self, record: RunStarted) -> None:
        with self._lock:
            log = self._log(record.run_id)
            if log.started is not None:
                raise RunAlreadyStartedError(
                    f"Run {record.run_id!r} already has a RunStarted record; a run is started "
                    "once. Use resume() to continue it, or pick a new run_id."
                )
            log.started = record

    async def write_intent(self, record: Intent) -> None:
        with self._lock:
            self._log(record.run_id).intents.append(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        with self._lock:
            self._log(record.run_id).model_results.append(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        with self._lock:
            self._log(record.run_id).steps.append(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        with self._lock:
            log = self._log(record.run_id)
            if log.finished is not None:
                raise RunAlreadyStartedError(
                    f"Run {record.run_id!r} already has a RunFinished record; a finished run "
                    "cannot be finished again (its recorded result stands)."
                )
            log.finished = record

    async def read_log(self, run_id: str) -> RunLog:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                return RunLog()
            return RunLog(
                started=log.started,
                intents=tuple(log.intents),
                model_results=tuple(log.model_results),
                steps=tuple(log.steps),
                finished=log.finished,
            )

    def run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one record, in first-write order."""
        with self._lock:
            return tuple(self._logs)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "memory"}
